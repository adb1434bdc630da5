r"""How long a run or sweep takes, here and on a GPU, before running it.

    python -m experiments.predict --config=configs/fmnist_cnn.py
    python -m experiments.predict --config=configs/shakespeare_lstm.py:quick \
        --config.num_iters=100

Builds the config's first point (loads the data, compiles nothing) and
prints, for its grid (a run config is a grid of one point):
  here   this machine's floor (its matmul rate and read bandwidth, measured
         now in about two seconds) times the wall / floor measured for
         that kind of program on a CPU (`experiments.run.predict`,
         docs/benchmarks.md);
  h200   one NVIDIA H200 from its datasheet: the FLOPs at 40% of peak, the
         passes over the features at 60% of its bandwidth, and a fixed cost
         per kernel (`experiments.run.predict.H200`): an estimate, not a
         measurement (no such run has been timed yet).
Both count each point's gradients per step (K for local work, two for
LASG's and CADA's pairs) and the test accuracy's forward passes; neither
counts compiling, loading or f*.
"""

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from experiments.run import cli

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
    'config', None, 'A run or sweep config file, optionally with :ARG.',
    lock_config=True)
flags.DEFINE_list('devices', ['here', 'h200'],
                  'Where to predict: here (this machine), h200.')
flags.mark_flags_as_required(['config'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from experiments.run import progress  # pylint: disable=g-import-not-at-top
  progress.quiet_start()
  from experiments.run import predict as predict_lib  # pylint: disable=g-import-not-at-top
  unknown = [d for d in FLAGS.devices
             if d != 'here' and d not in predict_lib.DEVICES]
  if unknown or not FLAGS.devices:
    raise app.UsageError(f'--devices={",".join(FLAGS.devices)}: each must be '
                         f'one of here, {", ".join(predict_lib.DEVICES)}')
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()
  from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
  from laq_jax import data  # pylint: disable=g-import-not-at-top
  try:
    for device, _, words in predict_lib.predictions(FLAGS.config,
                                                    FLAGS.devices):
      print(f'{device}: {words}')
  except (config_lib.ConfigError, data.DataError) as e:
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  cli.run(main)
