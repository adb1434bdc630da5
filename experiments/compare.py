r"""Overlays finished runs in the paper's figures and tabulates them.

    python -m experiments.compare --workdirs runs/quick/{gd,qgd,lag,laq} \
        --out runs/quick/compare

writes into --out: table.md (the paper's table: iterations, uploads, bits,
test accuracy, and the iterations / uploads / bits at which each run first
reached its target residual), comparison.json (the same rows),
loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png (all runs
overlaid: residuals when every run has f*, else losses) and
upload_raster_LABEL.png per run (`experiments.run.comparison`).
"""

import pathlib

from absl import app
from absl import flags

from experiments.run import cli
from experiments.run import comparison

FLAGS = flags.FLAGS
flags.DEFINE_list('workdirs', None, 'Finished run folders (space- or '
                  'comma-separated).')
flags.DEFINE_string('out', None, 'Folder for the table and figures.')
flags.DEFINE_list('labels', None, 'Legend labels, one per workdir (default: '
                  'the algorithm, or the folder name when algorithms repeat).')


def main(argv):
  # Space-separated workdirs arrive as extra arguments after the first.
  extra = [a for a in argv[1:] if not a.startswith('-')]
  workdirs = list(FLAGS.workdirs or []) + extra
  if not workdirs or not FLAGS.out:
    raise app.UsageError('give --workdirs DIR [DIR ...] and --out DIR')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  try:
    comparison.compare(workdirs, FLAGS.out, FLAGS.labels)
  except (FileNotFoundError, ValueError) as e:  # (WorkdirError included)
    cli.fail(e)
  print((pathlib.Path(FLAGS.out) / 'table.md').read_text())


if __name__ == '__main__':
  cli.run(main)
