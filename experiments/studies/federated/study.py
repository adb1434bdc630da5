"""The federated study's runs and report (what `python -m experiments.federated`
does; see experiments/federated.py).

    failed = run(workdir, ['logreg'], list(SWEEPS), budget='quick')

Sweeps already finished in WORKDIR with the same config are kept.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

from absl import logging

from experiments.studies.federated import report as report_lib
from experiments.studies.federated.sweeps import (CPU_MLP_ITERS, SWEEPS,
                                                  run_problem)


def run(workdir: pathlib.Path, problems: Sequence[str],
        sweeps: Sequence[str], *, budget: str = 'full',
        mlp_iters: int | None = None, report_only: bool = False,
        copy_to: str | None = None) -> list[str]:
  """Runs the problems' sweeps not yet done in `workdir`, then writes
  REPORT.md (and copies it to `copy_to`); returns the sweeps that failed.
  The arguments are the launcher's flags (experiments/federated.py);
  `budget` is 'full', 'quick' or 'tiny'; the network's iterations default
  by the machine (the config's with a GPU/TPU, CPU_MLP_ITERS on a CPU)."""
  import jax  # pylint: disable=g-import-not-at-top
  accelerator = jax.default_backend() != 'cpu'
  mlp_iters = mlp_iters or (None if accelerator else CPU_MLP_ITERS)
  failed = []
  if not report_only:
    for problem in problems:
      failed += run_problem(problem, workdir, budget,
                            [s for s in SWEEPS if s in sweeps],
                            mlp_iters)
  command = (f'python -m experiments.federated --workdir {workdir}'
             + (f' --{budget}' if budget != 'full' else '')
             + (f' --problems={",".join(problems)}'
                if list(problems) != ['logreg', 'mlp'] else '')
             + (f' --sweeps={",".join(sweeps)}'
                if len(sweeps) != len(SWEEPS) else '')
             + (f' --mlp_iters={mlp_iters}'
                if mlp_iters and budget == 'full' else ''))
  report_lib.report(workdir, list(problems), budget, command, mlp_iters)
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  results_data.publish(workdir, 'federated', command)
  logging.info('report: %s', workdir / report_lib.REPORT)
  if copy_to:
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    outputs.copy_report(workdir, pathlib.Path(copy_to))
  return failed
