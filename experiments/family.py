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
crossover bandwidths (`experiments.studies.family.family_time`, replayed
from the sweeps' per-worker bits); the settings of each. A point that
diverged (`laq_jax.metrics.diverged_at`: a logged loss NaN/inf or above 10x
f(theta^0)) is named with its iteration and left out of every ranking and
figure; the report is written whichever points diverged. The study's code is
experiments/studies/family/ (study.py runs it).

Sweeps already finished in WORKDIR with the same config are kept; run the
same command after an interruption. `--network_iters` and
`--network_images` set the network's budget.
"""

import sys

from absl import app
from absl import flags

from experiments.run import cli
from experiments.run import progress as progress_lib
from experiments.studies.family import study as family_study

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the sweeps and REPORT.md.')
flags.DEFINE_bool('quick', False, '6,000 images and short runs: minutes.')
flags.DEFINE_bool('tiny', False, '600 images, 30 iterations: seconds (a '
                  'smoke test of the whole pipeline).')
flags.DEFINE_integer('network_iters', None, 'Iterations of the network\'s '
                     'full-batch sweep (default: 8,000 with a GPU/TPU, 500 '
                     'on a CPU; the minibatch sweep runs the paper\'s '
                     f'{family_study.NETWORK_MINIBATCH_ITERS:,}).',
                     lower_bound=1)
flags.DEFINE_integer('network_images', None, 'Training images of the '
                     'network\'s sweeps (0 or the default: all 60,000, the '
                     'report\'s own command says 0; a subset of 6,000 makes '
                     'a minibatch of 500 nearly a full shard, where SLAQ '
                     'stops uploading).', lower_bound=0)
flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md.')
flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md and its figures '
                    'here (e.g. docs/compressors).')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  progress_lib.quiet_start()
  import jax  # pylint: disable=g-import-not-at-top
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()  # float64 on, the persistent compilation cache
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  budget = 'tiny' if FLAGS.tiny else 'quick' if FLAGS.quick else 'full'
  from experiments.run import outputs as outputs_lib  # pylint: disable=g-import-not-at-top
  try:
    workdir = outputs_lib.usable_workdir(FLAGS.workdir)
  except outputs_lib.WorkdirError as e:
    sys.exit(f'error: {e}')
  failed = family_study.run(
      workdir, budget=budget,
      network_iters=FLAGS.network_iters, network_images=FLAGS.network_images,
      report_only=FLAGS.report_only, copy_to=FLAGS.copy_to)
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  cli.run(main)
