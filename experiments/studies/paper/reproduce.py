"""The paper's experiments run, cross-checked and reported (what
`python -m experiments.reproduce` does; see experiments/reproduce.py for the
files WORKDIR receives).

    failed = reproduce(workdir, budget='quick')  # runs what is missing, reports

Per experiment of `configs/paper.py`, its algorithms run as a grid axis of
ONE compiled program (`experiments.run.grid.sweep_and_evaluate`), all in
this one process; an experiment whose results are in WORKDIR (reproduce.json
written last, with the same config) is not run again.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Any, Sequence

from absl import app
from absl import logging

from configs import paper
from experiments.run import grid
from experiments.run import outputs
from experiments.run import progress as progress_lib
from experiments.run import results_data
from experiments.run import roofline
from experiments.run import train
from experiments.studies.paper import paper_results as results_lib
from experiments.studies.paper import report as report_lib


def hardware() -> dict[str, Any]:
  """The machine and software the experiment runs on."""
  import jax  # pylint: disable=g-import-not-at-top
  import jaxlib  # pylint: disable=g-import-not-at-top
  cpu = platform.processor() or platform.machine()
  try:
    for line in pathlib.Path('/proc/cpuinfo').read_text().splitlines():
      if line.startswith('model name'):
        cpu = line.split(':', 1)[1].strip()
        break
  except OSError:
    pass
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:
    cores = os.cpu_count()
  return {
      'cpu': cpu, 'cores_available': cores, 'cpu_count': os.cpu_count(),
      'load_average_at_start': (list(os.getloadavg())
                                if hasattr(os, 'getloadavg') else None),
      'platform': platform.platform(), 'python': platform.python_version(),
      'jax': jax.__version__, 'jaxlib': jaxlib.__version__,
      'backend': jax.default_backend(),
      'devices': [str(d) for d in jax.devices()],
  }


def run_experiment(experiment: paper.Experiment, workdir: pathlib.Path,
                   budget: str) -> None:
  """Runs one experiment (one compiled program over its algorithms) in this
  process; reproduce.json is written last."""
  out = workdir / experiment.name
  info = {'experiment': experiment.name, 'budget': budget,
          'started_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
          'hardware': hardware(),
          # the machine's matmul rate and read bandwidth, measured now, for
          # the report's floor on this experiment's wall time
          'roofline': roofline.measure()}
  start = time.perf_counter()
  config = paper.sweep_config(experiment)
  try:
    old = json.loads((out / 'config.json').read_text())
  except (OSError, ValueError):
    old = None
  # The folder is reproduce's own: results of an earlier config of this
  # experiment (another budget, older code) are replaced, not refused.
  stale = old is not None and old != outputs.as_json(config.to_dict())
  if stale:
    logging.warning('%s: replacing the results of an earlier config in %s',
                    experiment.name, out)
  grid.sweep_and_evaluate(config, out, overwrite=stale)
  info['wall_time_s'] = round(time.perf_counter() - start, 1)
  info['finished_utc'] = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
  outputs.write_json(out / results_lib.INFO, info)


def run_all(selected: Sequence[paper.Experiment], workdir: pathlib.Path,
            budget: str) -> list[str]:
  """Runs the experiments not yet done, in this process (each its own
  compiled program); returns the names that failed."""
  failed = []
  with progress_lib.Progress('experiments', len(selected),
                             unit='experiment') as progress:
    for done, experiment in enumerate(selected, start=1):
      if results_lib.is_done(experiment, workdir):
        logging.info('%s: results already in %s, not run again',
                     experiment.name, workdir / experiment.name)
      else:
        logging.info('%s: running %s on %s', experiment.name,
                     ', '.join(experiment.algos), experiment.config)
        try:
          run_experiment(experiment, workdir, budget)
        except Exception:  # pylint: disable=broad-except
          logging.exception('%s failed; its results are missing from the '
                            'report', experiment.name)
          failed.append(experiment.name)
      progress.update(done, f'{experiment.name} '
                      f'{"failed" if experiment.name in failed else "done"}')
  return failed


def crosscheck_layout(experiment: paper.Experiment) -> dict[str, Any]:
  """Where this machine runs `experiment`'s devices cross-check
  (`paper_results.devices_layout` of this process's devices)."""
  import jax  # pylint: disable=g-import-not-at-top
  workers = paper.run_config(experiment, experiment.lazy).num_workers
  return results_lib.devices_layout(
      jax.default_backend(),
      [(d.platform, d.device_kind) for d in jax.devices()], workers)


def run_crosscheck(experiment: paper.Experiment, workdir: pathlib.Path
                   ) -> list[str]:
  """Runs the lazy row of `experiment` alone and on devices; returns the
  names that failed. Runs already in WORKDIR/crosscheck with the same config
  (and, on devices, the same devices) are kept.

  The single run goes through `experiments.run.train` in this process. The
  devices run splits the workers over this machine's accelerators when it
  has them (`crosscheck_layout`), in this process; else over forced CPU
  devices in a subprocess of `experiments.main` (XLA_FLAGS only works before
  JAX starts). It records where it ran in DEVICES_FILE.
  """
  failed = []
  arg = ','.join(a for a in (f'algo={experiment.lazy}', experiment.arg) if a)
  layout = crosscheck_layout(experiment)
  for name, (_, workers_on) in results_lib.CROSSCHECK_RUNS.items():
    out = workdir / results_lib.CROSSCHECK / name
    config = results_lib.crosscheck_config(experiment, name)
    try:
      done = (outputs.same_config(
          json.loads((out / 'config.json').read_text()), config)
              and (out / 'summary.json').is_file()
              and (workers_on == 'vmap'
                   or results_lib.devices_of(out) == layout))
    except (OSError, ValueError):
      done = False
    if done:
      logging.info('cross-check %s: results already in %s', name, out)
      continue
    logging.info('cross-check %s: %s', name,
                 results_lib.CROSSCHECK_RUNS[name][0] if workers_on == 'vmap'
                 else results_lib.devices_words(layout))
    if workers_on == 'vmap' or layout['platform'] != 'cpu':
      ok = run_here(experiment, out, workers_on)
    else:
      env = dict(os.environ, JAX_PLATFORMS='cpu',
                 XLA_FLAGS='--xla_force_host_platform_device_count='
                           f'{layout["count"]}')
      command = [sys.executable, '-m', 'experiments.main',
                 f'--config=configs/{experiment.config}.py:{arg}',
                 f'--config.workers_on={workers_on}', f'--workdir={out}',
                 '--overwrite', '--alsologtostderr']
      ok = not subprocess.run(command, check=False, env=env).returncode
    if not ok:
      failed.append(f'{results_lib.CROSSCHECK}/{name}')
    elif workers_on != 'vmap':
      (out / results_lib.DEVICES_FILE).write_text(json.dumps(layout) + '\n')
  return failed


def run_here(experiment: paper.Experiment, out: pathlib.Path,
             workers_on: str) -> bool:
  """Runs the lazy row of `experiment` in this process (`experiments.run.
  train`) with its workers `workers_on` ('vmap', or 'devices': over all of
  this process's devices) into `out`; whether it finished."""
  config = paper.run_config(experiment, experiment.lazy)
  config.workers_on = workers_on
  try:
    train.train_and_evaluate(config, out, overwrite=True)
  except Exception:  # pylint: disable=broad-except
    logging.exception('cross-check %s failed', out.name)
    return False
  return True


def run_authors(experiment: paper.Experiment, workdir: pathlib.Path
                ) -> list[str]:
  """Runs the lazy row of `experiment` with `authors_code` on (in this
  process, `experiments.run.train`) unless it is there; returns what failed."""
  if results_lib.authors_run(experiment, workdir) is not None:
    logging.info('%s with authors_code: results already there',
                 experiment.name)
    return []
  out = workdir / results_lib.AUTHORS / experiment.name
  logging.info('%s: %s with authors_code (the authors\' scripts)',
               experiment.name, experiment.lazy)
  try:
    train.train_and_evaluate(results_lib.authors_config(experiment), out,
                             overwrite=True)
  except Exception:  # pylint: disable=broad-except
    logging.exception('%s with authors_code failed', experiment.name)
    return [f'{results_lib.AUTHORS}/{experiment.name}']
  return []


def run_lasg(workdir: pathlib.Path, budget: str) -> list[str]:
  """Runs configs/lasg.py's `network` sweep (LASG and CADA beside sgd and
  slaq at the minibatch network's settings; `network,quick` or
  `network,tiny` at those budgets)
  into WORKDIR/lasg_network unless it is there; returns what failed."""
  if results_lib.lasg_sweep(workdir, budget) is not None:
    logging.info('%s: results already there', results_lib.LASG)
    return []
  logging.info('%s: LASG and CADA beside sgd and slaq (configs/lasg.py)',
               results_lib.LASG)
  try:
    grid.sweep_and_evaluate(results_lib.lasg_config(budget),
                            workdir / results_lib.LASG, overwrite=True)
  except Exception:  # pylint: disable=broad-except
    logging.exception('%s failed', results_lib.LASG)
    return [results_lib.LASG]
  return []


def select(only: Sequence[str] | None, budget: str, mlp_iters: int
           ) -> list[paper.Experiment]:
  """configs/paper.py's experiments, or those named in `only`."""
  everything = paper.experiments(budget, mlp_iters)
  if not only:
    return list(everything)
  names = [e.name for e in everything]
  unknown = [n for n in only if n not in names]
  if unknown:
    raise app.UsageError(f'--only={",".join(only)}: unknown experiment(s) '
                         f'{", ".join(unknown)}; allowed: {", ".join(names)}')
  return [e for e in everything if e.name in only]


def mlp_iterations(workdir: pathlib.Path, report_only: bool,
                   mlp_iters: int | None = None) -> int:
  """The full-batch MLP's budget: `mlp_iters` (--mlp_iters); else, rewriting
  a report, the budget of the results there; else by the machine (the
  authors' 8,000 iterations with a GPU/TPU, paper.MLP_CPU_ITERS on a CPU)."""
  if mlp_iters:
    return mlp_iters
  if report_only:
    try:
      return int(json.loads((workdir / 'mlp' / 'config.json').read_text())
                 ['num_iters'])
    except (OSError, ValueError, KeyError):
      pass
  import jax  # pylint: disable=g-import-not-at-top
  return paper.mlp_budget(jax.default_backend() != 'cpu')



def command_flags(workdir: pathlib.Path, budget: str,
                  only: Sequence[str] | None, mlp_iters: int | None
                  ) -> list[str]:
  """The launcher's flags that redo this report's runs."""
  return ([f'--workdir {workdir}'] + ([f'--{budget}'] if budget != 'full'
                                      else [])
          + ([f'--only={",".join(only)}'] if only else [])
          + ([f'--mlp_iters={mlp_iters}'] if mlp_iters and budget == 'full'
             else []))


def reproduce(workdir: pathlib.Path, *, budget: str = 'full',
              only: Sequence[str] | None = None, report_only: bool = False,
              copy_to: str | None = None, mlp_iters: int | None = None,
              crosscheck: bool = True, authors_code: bool = True,
              lasg: bool = True) -> list[str]:
  """Runs the experiments not yet done in `workdir` (with the cross-check,
  the authors_code rows and, beside the minibatch network, LASG and CADA),
  then writes REPORT.md (and copies it to
  `copy_to`); returns the names of what failed. The arguments are the
  launcher's flags (experiments/reproduce.py).

  Raises:
    app.UsageError: `only` names an unknown experiment.
  """
  mlp_iters = mlp_iterations(workdir, report_only, mlp_iters)
  selected = select(only, budget, mlp_iters)
  failed = []
  if not report_only:
    failed = run_all(selected, workdir, budget)
    check = next((e for e in selected
                  if e.name == results_lib.CROSSCHECK_EXPERIMENT), None)
    if check is not None and crosscheck:
      failed += run_crosscheck(check, workdir)
    if authors_code:
      for e in selected:
        if (e.name in results_lib.AUTHORS_EXPERIMENTS
            and results_lib.is_done(e, workdir)):
          failed += run_authors(e, workdir)
    if lasg and any(e.name == results_lib.LASG_EXPERIMENT
                    and results_lib.is_done(e, workdir) for e in selected):
      failed += run_lasg(workdir, budget)
  report_lib.report(paper.experiments(budget, mlp_iters), workdir, budget)
  results_data.publish(workdir, 'paper', 'python -m experiments.reproduce ' +
                       ' '.join(command_flags(workdir, budget, only,
                                              mlp_iters)),
                       extra=results_data.wall_times(workdir))
  logging.info('report: %s', workdir / report_lib.REPORT)
  if copy_to:
    copied = outputs.copy_report(workdir, pathlib.Path(copy_to))
    logging.info('copied %d files to %s', len(copied), copy_to)
  return failed
