r"""Finished runs replayed on modeled networks: simulated seconds, post hoc.

    python -m experiments.timeline --workdirs runs/quick_rows/logreg/{gd,laq} \
        --networks datacenter,cross_silo,mobile --out runs/timeline \
        [--set up_bps=5e6,down_bps=2e7]

Reads each run's bits.npy (the bits every worker uploaded at every step),
its metrics.csv (the broadcast's bits) and config, and times every round
with `laq_jax.network.replay` on each network (docs/algorithm.md, "Time on a
modeled network"): no training again. A full-precision eager preset (gd,
sgd) is also timed on a ring all-reduce. Writes into --out: timeline.csv
and timeline.md (per run and network: total_time_s, the time to the run's
target, target_time_s, and the winner per network in bold) and
loss_vs_time_NETWORK.png (every run's loss or residual against simulated
seconds). The replay is `experiments.run.replay`.
"""

import pathlib

from absl import app
from absl import flags

from experiments.run import cli
from experiments.run import replay

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The launcher's flags (defined when it runs, not on import: --workdirs
  is also experiments.compare's, and both modules import in one process)."""
  flags.DEFINE_list('workdirs', None, 'Finished run folders.')
  flags.DEFINE_list('networks', ['datacenter', 'cross_silo', 'mobile'],
                    'Network profiles (laq_jax.network.PROFILES).')
  flags.DEFINE_list('set', [], 'Overrides of every profile\'s fields, '
                    'FIELD=VALUE (e.g. up_bps=5e6).')
  flags.DEFINE_string('out', None, 'Folder for the table and figures.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from experiments.run import progress  # pylint: disable=g-import-not-at-top
  progress.quiet_start()  # before JAX probes its backends
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_enable_x64', True)  # the times in float64
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  if not FLAGS.workdirs or not FLAGS.out:
    raise app.UsageError('--workdirs and --out are required')
  try:
    rows = replay.timeline(FLAGS.workdirs, FLAGS.networks,
                           replay.parse_overrides(FLAGS.set))
  except (replay.TimelineError, ValueError, FileNotFoundError) as e:
    raise SystemExit(f'error: {e}') from None
  replay.write(rows, pathlib.Path(FLAGS.out))
  print(replay.table(rows))


if __name__ == '__main__':
  define_flags()
  cli.run(main)
