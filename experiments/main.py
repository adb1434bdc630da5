r"""Runs one experiment from a config file into a workdir.

    python -m experiments.main --config=configs/mnist_logreg.py \
        --workdir=runs/laq --config.algo=laq --config.bits=3

`--config=FILE.py:ARG` passes ARG to the file's get_config (e.g.
`configs/mnist_logreg.py:algo=lag,quick`); `--config.FIELD=VALUE` overrides any
field. See experiments/run/train.py for what the workdir receives.

Restarting: with `--config.checkpoint_every=N` the run saves checkpoints; the
same command in the same workdir continues from the last one. A workdir that
holds another config's results is refused unless `--overwrite`.

Several processes (hosts): give every process `--coordinator_address`,
`--num_processes` and its `--process_id` (or $LAQ_JAX_COORDINATOR,
$LAQ_JAX_NUM_PROCESSES, $LAQ_JAX_PROCESS_ID); process 0 writes the files.

Exit status: 0 done; 1 a config, data or workdir error (one line naming
what is wrong); 3 the run diverged (loss NaN/inf; the workdir holds every
iteration up to it and summary.json says "diverged": true).
"""

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from experiments.run import cli

EXIT_DIVERGED = 3

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the results.')
flags.DEFINE_bool('overwrite', False, 'Replace the results of another config '
                  'in --workdir (default: refuse), or start this config over '
                  'instead of resuming from its checkpoints.')
flags.DEFINE_string('coordinator_address', None, "Multi-process runs: process "
                    "0's 'host:port' (default $LAQ_JAX_COORDINATOR).")
flags.DEFINE_integer('num_processes', None, 'Multi-process runs: how many '
                     'processes (default $LAQ_JAX_NUM_PROCESSES).')
flags.DEFINE_integer('process_id', None, "Multi-process runs: this process's "
                     'index, 0..num_processes-1 (default $LAQ_JAX_PROCESS_ID).')
config_flags.DEFINE_config_file(
    'config', None, 'A configs/*.py file, optionally with :ARG.',
    lock_config=True)
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from experiments.run import progress  # pylint: disable=g-import-not-at-top
  progress.quiet_start()  # before JAX probes its backends
  # Before any JAX work: joining a multi-process run must come first.
  from laq_jax import distributed  # pylint: disable=g-import-not-at-top
  try:
    distributed.maybe_initialize(FLAGS.coordinator_address,
                                 FLAGS.num_processes, FLAGS.process_id)
  except ValueError as e:
    sys.exit(f'error: {e}')
  import jax  # pylint: disable=g-import-not-at-top
  # Precision is set once, here: float64 configs need x64; float32 configs
  # stay float32 (every array carries its dtype).
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()  # float64 on, the persistent compilation cache
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from experiments.run import config, outputs, train  # pylint: disable=g-import-not-at-top
  from laq_jax import checkpoint, data  # pylint: disable=g-import-not-at-top
  try:
    summary = train.train_and_evaluate(FLAGS.config, FLAGS.workdir,
                                       overwrite=FLAGS.overwrite)
  except (config.ConfigError, data.DataError, outputs.WorkdirError,
          checkpoint.CheckpointError) as e:
    sys.exit(f'error: {e}')
  if summary['diverged']:
    if distributed.is_writer():  # train logged it; this is the last line
      print(f'error: {summary["diverged_message"]}', file=sys.stderr)
    sys.exit(EXIT_DIVERGED)


if __name__ == '__main__':
  cli.run(main)
