"""The federated study's runs and report (what `python -m experiments.federated`
does; see experiments/federated.py).

    failed = run(workdir, ['logreg'], list(SWEEPS), budget='quick')

Sweeps already finished in WORKDIR with the same config are kept.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

from absl import logging

from experiments.studies.federated import mcmahan
from experiments.studies.federated import report as report_lib
from experiments.studies.federated import sweeps as sweeps_lib
from experiments.studies.federated.sweeps import CPU_MLP_ITERS, SWEEPS


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
  report_lib.report(workdir, list(problems), budget, command, mlp_iters,
                    mcmahan_section=mcmahan.section)
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  results_data.publish(workdir, 'federated', command)
  logging.info('report: %s', workdir / report_lib.REPORT)
  if copy_to:
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    outputs.copy_report(workdir, pathlib.Path(copy_to))
  return failed


def run_problem(problem: str, workdir: pathlib.Path, budget: str,
                sweeps=SWEEPS, mlp_iters: int | None = None) -> list[str]:
  """Runs the problem's sweeps not yet done; returns those that failed."""
  from experiments.run import grid  # pylint: disable=g-import-not-at-top
  failed = []
  deadline = 0.0
  for sweep in sweeps:
    out = workdir / problem / sweep
    if sweep == 'slaq_bits' and problem != 'mlp':
      continue
    if sweep == 'deadline':
      try:
        deadline = sweeps_lib.deadline_from(
            sweeps_lib.load_sweep(workdir / problem / 'main'))
      except sweeps_lib.FederatedError as e:
        logging.error('%s/deadline not run: %s', problem, e)
        failed.append(f'{problem}/deadline')
        continue
    if sweep == 'mcmahan':  # one sweep per (split, setting)
      todo = [(f'{sweep}/{name}', config, out / name) for name, config
              in mcmahan.setting_configs(problem, budget)]
    else:
      todo = [(sweep, sweeps_lib.sweep_config(problem, sweep, budget,
                                              deadline, mlp_iters), out)]
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    for name, config, folder in todo:
      if outputs.sweep_done(config, folder):
        logging.info('%s/%s: results already there, not run again',
                     problem, name)
        continue
      logging.info('%s/%s%s', problem, name,
                   f' (deadline_s={deadline:.4g})' if sweep == 'deadline'
                   else '')
      try:
        grid.sweep_and_evaluate(config, folder, overwrite=True)
      except Exception:  # pylint: disable=broad-except
        logging.exception('%s/%s failed', problem, name)
        failed.append(f'{problem}/{name}')
  return failed
