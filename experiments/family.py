r"""Every preset of the family on the paper's two problems, and a report.

    python -m experiments.family --workdir runs/family --copy_to docs/compressors
    python -m experiments.family --workdir runs/family_quick --quick   # minutes

Four sweeps (`configs/sweep_compressors.py`), each one compiled program:
the full-batch presets and the minibatch presets, on logistic regression
(full MNIST; the full-batch ones to the convex target 1e-6 in float64) and on
the 200-ReLU network (a fixed budget, float32). WORKDIR receives, per
problem, `logreg/full`, `logreg/minibatch`, `mlp/full`, `mlp/minibatch`
(the files of `experiments.sweep`), a bits-against-quality figure with its
Pareto front, and REPORT.md: every preset's uploads, uplink and downlink
bits, test accuracy, and iterations and bits to the target (convex) or the
loss at the budget; which methods beat LAQ (SLAQ for the minibatch ones)
where, computed from the numbers; the settings of each.

Sweeps already finished in WORKDIR with the same config are kept; run the
same command after an interruption. `--network_iters` sets the network's
full-batch budget (default: 8,000 with a GPU/TPU, 500 on a CPU).
"""

from __future__ import annotations

import json
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the sweeps and REPORT.md.')
flags.DEFINE_bool('quick', False, '6,000 images and short runs: minutes.')
flags.DEFINE_bool('tiny', False, '600 images, 30 iterations: seconds (a '
                  'smoke test of the whole pipeline).')
flags.DEFINE_integer('network_iters', None, 'Iterations of the network\'s '
                     'full-batch presets (default: 8,000 with a GPU/TPU, '
                     '500 on a CPU).')
flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md.')
flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md and its figures '
                    'here (e.g. docs/compressors).')
flags.mark_flags_as_required(['workdir'])

CPU_NETWORK_ITERS = 500


def studies(budget: str, network_iters: int):
  """The two problems, each with its full-batch and minibatch sweep.

  Args:
    budget: 'full', 'quick' or 'tiny' (sweep_compressors.py's variants).
    network_iters: the network's full-batch iterations at the full budget.
  """
  from experiments.family_report import Study  # pylint: disable=g-import-not-at-top
  extra = '' if budget == 'full' else f',{budget}'
  network = f',num_iters={network_iters}' if budget == 'full' else ''
  return (
      Study('logreg', 'Logistic regression (convex)',
            {'full': (f'full{extra}', 'full'),
             'minibatch': (f'minibatch{extra}', 'minibatch')}, convex=True),
      Study('mlp', 'The 200-ReLU network (nonconvex)',
            {'full': (f'full,mlp{extra}{network}', 'full'),
             'minibatch': (f'minibatch,mlp{extra}', 'minibatch')},
            convex=False),
  )


def run_study(study, workdir: pathlib.Path) -> list[str]:
  """Runs the study's sweeps not yet done; returns those that failed."""
  from configs import sweep_compressors  # pylint: disable=g-import-not-at-top
  from experiments import config as config_lib  # pylint: disable=g-import-not-at-top
  from experiments import grid  # pylint: disable=g-import-not-at-top
  from experiments import paper_results  # pylint: disable=g-import-not-at-top
  failed = []
  for arg, folder in study.sweeps.values():
    config = sweep_compressors.get_config(arg)
    out = workdir / study.name / folder
    wanted = paper_results.as_json(config_lib.to_dict(config))
    try:
      done = (paper_results.same_config(
          json.loads((out / 'config.json').read_text()), wanted)
              and (out / 'sweep.json').is_file())
    except (OSError, ValueError):
      done = False
    if done:
      logging.info('%s/%s: results already there, not run again',
                   study.name, folder)
      continue
    logging.info('%s/%s: configs/sweep_compressors.py:%s', study.name,
                 folder, arg)
    try:
      grid.sweep_and_evaluate(config, out, overwrite=True)
    except Exception:  # pylint: disable=broad-except
      logging.exception('%s/%s failed', study.name, folder)
      failed.append(f'{study.name}/{folder}')
  return failed


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_enable_x64', True)  # float32 sweeps stay float32
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from experiments import family_report  # pylint: disable=g-import-not-at-top
  workdir = pathlib.Path(FLAGS.workdir)
  network_iters = FLAGS.network_iters or (
      8000 if jax.default_backend() != 'cpu' else CPU_NETWORK_ITERS)
  budget = 'tiny' if FLAGS.tiny else 'quick' if FLAGS.quick else 'full'
  selected = studies(budget, network_iters)
  failed = []
  if not FLAGS.report_only:
    for study in selected:
      failed += run_study(study, workdir)
  command = (f'python -m experiments.family --workdir {workdir}'
             + (f' --{budget}' if budget != 'full' else
                f' --network_iters={network_iters}'))
  family_report.report(selected, workdir, budget != 'full', command)
  logging.info('report: %s', workdir / family_report.REPORT)
  if FLAGS.copy_to:
    from experiments import report as paper_report  # pylint: disable=g-import-not-at-top
    paper_report.copy_report(workdir, pathlib.Path(FLAGS.copy_to))
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  app.run(main)
