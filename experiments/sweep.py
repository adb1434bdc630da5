r"""Runs a grid of hyperparameters / algorithms as one compiled program.

    python -m experiments.sweep --config=configs/sweep_bits_xi.py \
        --workdir=runs/sweep
    python -m experiments.sweep --config=configs/sweep_bits_xi.py:quick \
        --workdir=runs/sweep_quick

The grid is `config.sweep` ({key: [values]}, see `laq_jax.sweep.GRID_KEYS`);
every other field is a run config's (configs/default.py), the value of every
key the grid does not vary. `config.sweep_batch_size` grid points run per
compiled call (0: all at once); every batch reuses the one program.

The workdir receives:
  config.json                  the resolved config;
  results.csv                  one row per grid point: `point`, every
                               grid key (algo, step_size, bits, xi,
                               err_weight, threshold_offset, max_staleness,
                               l2, seed, ..., and the dotted
                               parameters of the parts the points use:
                               qsgd.levels, rand_p.keep_prob, ...), then the
                               figures of `laq_jax.metrics.summarize`:
                               iterations, total_uploads, total_bits,
                               final_loss, final_residual,
                               final_test_accuracy, fstar, target_residual,
                               target_iteration, target_uploads, target_bits
                               (the exact residual), paper_reference,
                               paper_final_residual, paper_target_iteration,
                               paper_target_uploads, paper_target_bits (the
                               paper's residual, from the smallest average
                               loss any point with the same objective
                               reached), last_grad_norm_sq, diverged,
                               diverged_at (a diverged point's figures
                               count its iterations 0..diverged_at);
  curves.npz                   [G, T] loss, grad_norm_sq, cum_uploads,
                               cum_bits, [G] final_loss, paper_reference,
                               [G, T, M] uploads (when small), and one [G]
                               array per grid key; test_accuracy [G, E]
                               after every eval_every iterations (at
                               test_accuracy_steps [E]; kept over a resume;
                               NaN in multi-process sweeps);
  sweep.json                   grid size, batches, f*, timings, compiles;
  heatmap_bits_to_target.png   bits to the target residual over bits x xi
                               (the final residual when some point misses
                               the target; the title says so);
  pareto.png                   test accuracy and final residual against total
                               bits, the Pareto front marked.
  tensorboard/NNN_KEY=VALUE,.../
                               TensorBoard events of each grid point
                               (experiments/run/events.py), written when the
                               sweep finishes;
  checkpoints/                 with config.checkpoint_every > 0: orbax
                               checkpoints (laq_jax/devices/checkpoint.py).
Every file is written whole or not at all (temporary file, then rename;
event files excepted).
One point of the sweep reproduces `experiments.main` run on
`experiments.run.config.point_config(config, point)`.

Restarting the same command in the same workdir resumes from the last
checkpoint; a workdir holding another config's results is refused unless
`--overwrite`. A diverging grid point does not stop the sweep: it is marked
in results.csv and the launcher still exits 0 (with a warning).
"""

import sys

from absl import app
from absl import flags
from ml_collections import config_flags

from experiments.run import cli

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the results.')
flags.DEFINE_bool('overwrite', False, 'Replace the results of another '
                  'config in --workdir (default: refuse), or start this '
                  'sweep over instead of resuming from its checkpoints.')
config_flags.DEFINE_config_file(
    'config', None, 'A sweep config file (configs/sweep_*.py), optionally '
    'with :ARG.', lock_config=True)
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from experiments.run import progress  # pylint: disable=g-import-not-at-top
  progress.quiet_start()  # before JAX probes its backends
  # Joins a multi-process run when $LAQ_JAX_COORDINATOR etc. are set
  # (`laq_jax.distributed`); process 0 writes the files.
  from laq_jax import distributed  # pylint: disable=g-import-not-at-top
  try:
    distributed.maybe_initialize()
  except ValueError as e:
    sys.exit(f'error: {e}')
  import jax  # pylint: disable=g-import-not-at-top
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()  # float64 on, the persistent compilation cache
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from experiments.run import config, grid, outputs  # pylint: disable=g-import-not-at-top
  from laq_jax import checkpoint, data  # pylint: disable=g-import-not-at-top
  try:
    grid.sweep_and_evaluate(FLAGS.config, FLAGS.workdir,
                            overwrite=FLAGS.overwrite)
  except (config.ConfigError, data.DataError, outputs.WorkdirError,
          checkpoint.CheckpointError) as e:
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  cli.run(main)
