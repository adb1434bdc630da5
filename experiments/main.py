r"""Runs one experiment from a config file into a workdir.

    python -m experiments.main --config=configs/mnist_logreg.py \
        --workdir=runs/laq --config.algo=laq --config.bits=3

`--config=FILE.py:ARG` passes ARG to the file's get_config (e.g.
`configs/mnist_logreg.py:algo=lag,quick`); `--config.FIELD=VALUE` overrides any
field. See experiments/train.py for what the workdir receives.
"""

import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the results.')
config_flags.DEFINE_config_file(
    'config', None, 'A configs/*.py file, optionally with :ARG.',
    lock_config=True)
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from experiments import train  # pylint: disable=g-import-not-at-top
  from laq_jax import build, data  # pylint: disable=g-import-not-at-top
  try:
    train.train_and_evaluate(FLAGS.config, FLAGS.workdir)
  except (build.ConfigError, data.DataError) as e:
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  app.run(main)
