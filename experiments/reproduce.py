r"""Reproduces the LAQ paper's experiments with one command, and reports.

    python -m experiments.reproduce --workdir runs/paper            # hours
    python -m experiments.reproduce --workdir runs/paper_quick --quick
    python -m experiments.reproduce --workdir runs/paper_tiny --tiny  # tests'

The experiments are `configs/paper.py`'s: per experiment, its algorithms
(gd/qgd/lag/laq or sgd/qsgd/ssgd/slaq) run as a grid axis of ONE compiled
program (`experiments.run.grid.sweep_and_evaluate`), all experiments in this
one process (precision is set once: x64 on, float32 experiments stay
float32); the study's code is experiments/studies/paper/ (reproduce.py runs,
report.py writes the report). WORKDIR receives, per experiment NAME:
  NAME/config.json, results.csv, curves.npz, sweep.json
                            (experiments.run.grid)
  NAME/reproduce.json       hardware, software, wall time of the experiment
  NAME/loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png
                            the algorithms overlaid: the exact residual
                            f - f* when f* is known, else the paper's
                            residual (average loss minus the smallest)
  NAME/grad_norm_vs_*.png   the squared gradient norm (the network's figures)
  NAME/upload_raster_ALGO.png   who uploaded when, for laq / slaq
  authors_code/NAME         the minibatch experiments' slaq row run alone
                            with authors_code=True (the authors' scripts'
                            history window, blocks, no forced k = 0
                            upload, b*p bits), set beside the table
  lasg_network              LASG (WK1, WK2, PS, with and without LAQ's
                            quantizer) and CADA beside sgd and slaq at the
                            minibatch network's settings, one program
                            (configs/lasg.py's `network` sweep; --nolasg
                            skips it)
  crosscheck/single, crosscheck/devices   the convex LAQ row run alone
                            (experiments.run.train) and with its workers split
                            over devices: this machine's accelerators when
                            their number divides the workers (one GPU: all
                            on it, a mesh of one device), else 2 forced CPU
                            devices (experiments.main in a subprocess); its
                            devices.json says which. Both compared step by
                            step with the grid program's row
and WORKDIR/REPORT.md: the paper-style tables, the figures, the claims of the
paper checked against the numbers, the cross-check, hardware, wall times and
the command that redoes each row. A point that diverged (a logged loss NaN/inf
or above 10x f(theta^0), `laq_jax.metrics.diverged_at`) does not stop the
report: it is named with the iteration in its tables, the summary and the
figures' legends, and left out of every comparison and claim.

Resuming: an experiment whose results are in WORKDIR (reproduce.json written
last, with the same config) is not run again; run the same command after an
interruption and only the missing experiments run. `--only=NAME,...` runs a
subset; `--report_only` just rewrites REPORT.md from what is there (missing
experiments are listed as missing). `--copy_to=docs/paper` copies REPORT.md
and its figures there.
"""

import sys

from absl import app
from absl import flags

from experiments.run import cli
from experiments.run import progress as progress_lib
from experiments.studies.paper import reproduce as reproduce_lib

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the results and REPORT.md.')
flags.DEFINE_bool('quick', False, 'Reduced budget (6,000 images, fewer '
                  'iterations, looser target): minutes on a 2-core CPU.')
flags.DEFINE_bool('tiny', False, 'The test suite\'s budget (600 images, 30 '
                  'iterations, 200 for the convex run): checks the pipeline '
                  'and the report, not the paper; about a minute on a 2-core '
                  'CPU.')
flags.DEFINE_list('only', None, 'Run only these experiments (default: all '
                  'of configs/paper.py).')
flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md '
                  'from the results in --workdir.')
flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md and its figures '
                    'into this folder (e.g. docs/paper).')
flags.DEFINE_integer('mlp_iters', None, 'Iterations of the full-batch MLP '
                     "(default: the authors' 8,000 with a GPU/TPU, 1,000 on "
                     'a CPU-only machine; with --report_only, those of the '
                     'results in --workdir).', lower_bound=1)
flags.DEFINE_bool('crosscheck', True, 'Also run the convex LAQ row alone '
                  'and on devices (the accelerators, else 2 CPU devices) and '
                  'compare it with the grid program step by step.')
flags.DEFINE_bool('authors_code', True, 'Also run the minibatch '
                  'experiments\' lazy row (slaq) with authors_code=True, the '
                  'authors\' scripts (AUTHORS_EXPERIMENTS), for the '
                  'report\'s comparison.')
flags.DEFINE_bool('lasg', True, 'Also run LASG and CADA beside sgd and slaq '
                  'at the minibatch network\'s settings (configs/lasg.py\'s '
                  '`network` sweep, `network,quick` with --quick, '
                  '`network,tiny` with --tiny) into '
                  'WORKDIR/lasg_network, for the report\'s comparison and '
                  'claims.')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if FLAGS.quick and FLAGS.tiny:
    raise app.UsageError('--quick and --tiny: choose one budget')
  budget = 'tiny' if FLAGS.tiny else 'quick' if FLAGS.quick else 'full'
  progress_lib.quiet_start()
  import jax  # pylint: disable=g-import-not-at-top
  # Precision is set once, here: the float64 experiments need x64, the
  # float32 ones stay float32 (every array carries its dtype), so every
  # experiment runs in this one process.
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()  # float64 on, the persistent compilation cache
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from experiments.run import outputs as outputs_lib  # pylint: disable=g-import-not-at-top
  try:
    workdir = outputs_lib.usable_workdir(FLAGS.workdir)
  except outputs_lib.WorkdirError as e:
    sys.exit(f'error: {e}')
  failed = reproduce_lib.reproduce(
      workdir, budget=budget, only=FLAGS.only,
      report_only=FLAGS.report_only, copy_to=FLAGS.copy_to,
      mlp_iters=FLAGS.mlp_iters, crosscheck=FLAGS.crosscheck,
      authors_code=FLAGS.authors_code, lasg=FLAGS.lasg)
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  cli.run(main)
