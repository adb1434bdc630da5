r"""Every preset of the family on the paper's two problems, and a report.

    python -m experiments.family --workdir runs/family --copy_to docs/compressors
    python -m experiments.family --workdir runs/family_quick --quick   # minutes

Four sweeps (`configs/sweep_compressors.py`), each one compiled program:
the full-batch presets and the minibatch presets, on logistic regression
(full MNIST; the full-batch ones to the convex target 1e-6 in float64) and on
the 200-ReLU network (a fixed budget, float32, all 60,000 images; the
full-batch presets 8,000 iterations with a GPU/TPU, 500 on a CPU-only
machine, which the report states; the minibatch presets the paper's 1,500). WORKDIR
receives, per
problem, `logreg/full`, `logreg/minibatch`, `mlp/full`, `mlp/minibatch`
(the files of `experiments.sweep`), a bits-against-quality figure with its
Pareto front, and REPORT.md: every preset's uploads, uplink and downlink
bits, test accuracy, and iterations and bits to the target (convex) or the
loss at the budget; which methods beat LAQ (SLAQ for the minibatch ones)
where, computed from the numbers; every preset's simulated time to target on
each network profile, a time-to-target-against-bandwidth figure and its
crossover bandwidths (`experiments.studies.family.family_time`, replayed from the sweeps'
per-worker bits); the settings of each.

Sweeps already finished in WORKDIR with the same config are kept; run the
same command after an interruption. `--network_iters` and
`--network_images` set the network's budget.
"""

from __future__ import annotations

import json
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging

from experiments.run import cli
from experiments.run import progress as progress_lib

FLAGS = flags.FLAGS
NETWORK_MINIBATCH_ITERS = 1500  # the paper's SLAQ budget
flags.DEFINE_string('workdir', None, 'Folder for the sweeps and REPORT.md.')
flags.DEFINE_bool('quick', False, '6,000 images and short runs: minutes.')
flags.DEFINE_bool('tiny', False, '600 images, 30 iterations: seconds (a '
                  'smoke test of the whole pipeline).')
flags.DEFINE_integer('network_iters', None, 'Iterations of the network\'s '
                     'full-batch sweep (default: 8,000 with a GPU/TPU, 500 '
                     'on a CPU; the minibatch sweep runs the paper\'s '
                     f'{NETWORK_MINIBATCH_ITERS:,}).', lower_bound=1)
flags.DEFINE_integer('network_images', None, 'Training images of the '
                     'network\'s sweeps (default: all 60,000; a subset of '
                     '6,000 makes a minibatch of 500 nearly a full shard, '
                     'where SLAQ stops uploading).', lower_bound=1)
flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md.')
flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md and its figures '
                    'here (e.g. docs/compressors).')
flags.mark_flags_as_required(['workdir'])

CPU_NETWORK_ITERS = 500
CPU_NETWORK_IMAGES = 0  # all 60,000 (6,000 made SLAQ's batch a full shard)


def studies(budget: str, network_iters: int, network_images: int):
  """The two problems, each with its full-batch and minibatch sweep.

  Args:
    budget: 'full' (the paper's budgets on logistic regression; the network
      at `network_iters` full-batch iterations on `network_images`), 'quick'
      (6,000 images, short runs) or 'tiny' (seconds).
    network_iters: the network's full-batch iterations at the full budget.
    network_images: the network's training images at the full budget.
  """
  from experiments.studies.family.family_report import Study  # pylint: disable=g-import-not-at-top
  if budget == 'full':
    subset = f',train_subset={network_images}' if network_images else ''
    args = ('full', 'minibatch', f'full,mlp,num_iters={network_iters}{subset}',
            f'minibatch,mlp,num_iters={NETWORK_MINIBATCH_ITERS}{subset}')
  elif budget == 'quick':
    args = ('full,quick,num_iters=1000', 'minibatch,quick', 'full,mlp,quick',
            'minibatch,mlp,quick')
  else:
    args = ('full,tiny', 'minibatch,tiny', 'full,mlp,tiny',
            'minibatch,mlp,tiny')
  return (
      Study('logreg', 'Logistic regression (convex)',
            {'full': (args[0], 'full'), 'minibatch': (args[1], 'minibatch')},
            convex=True),
      Study('mlp', 'The 200-ReLU network (nonconvex)',
            {'full': (args[2], 'full'), 'minibatch': (args[3], 'minibatch')},
            convex=False),
  )


def run_study(study, workdir: pathlib.Path) -> list[str]:
  """Runs the study's sweeps not yet done; returns those that failed."""
  from configs import sweep_compressors  # pylint: disable=g-import-not-at-top
  from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
  from experiments.run import grid  # pylint: disable=g-import-not-at-top
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  failed = []
  for arg, folder in study.sweeps.values():
    config = sweep_compressors.get_config(arg)
    out = workdir / study.name / folder
    wanted = outputs.as_json(config_lib.to_dict(config))
    try:
      done = (outputs.same_config(
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
  progress_lib.quiet_start()
  import jax  # pylint: disable=g-import-not-at-top
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()  # float64 on, the persistent compilation cache
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from experiments.studies.family import family_report  # pylint: disable=g-import-not-at-top
  workdir = pathlib.Path(FLAGS.workdir)
  accelerator = jax.default_backend() != 'cpu'
  network_iters = FLAGS.network_iters or (8000 if accelerator
                                          else CPU_NETWORK_ITERS)
  network_images = (FLAGS.network_images if FLAGS.network_images is not None
                    else 0 if accelerator else CPU_NETWORK_IMAGES)
  budget = 'tiny' if FLAGS.tiny else 'quick' if FLAGS.quick else 'full'
  selected = studies(budget, network_iters, network_images)
  failed = []
  if not FLAGS.report_only:
    with progress_lib.Progress('problems', len(selected),
                               unit='problem') as progress:
      for done, study in enumerate(selected, start=1):
        failed += run_study(study, workdir)
        progress.update(done, f'{study.name} done')
  command = (f'python -m experiments.family --workdir {workdir}'
             + (f' --{budget}' if budget != 'full' else
                f' --network_iters={network_iters} '
                f'--network_images={network_images}'))
  notes = []
  if budget == 'full' and (network_iters < 8000 or network_images):
    notes.append(
        f'**The network at a reduced budget**: '
        f'{network_iters:,} iterations'
        + (f' on the first {network_images:,} training images'
           if network_images else '')
        + ' (the paper: 8,000 iterations on all 60,000), what a CPU '
        'affords for 17 presets; logistic regression at the paper\'s '
        'budgets. `--network_iters` and `--network_images` set it.')
  family_report.report(selected, workdir, budget != 'full', command, notes)
  logging.info('report: %s', workdir / family_report.REPORT)
  if FLAGS.copy_to:
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    outputs.copy_report(workdir, pathlib.Path(FLAGS.copy_to))
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  cli.run(main)
