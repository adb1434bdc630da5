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
                               hyperparameter (algo, step_size, bits, xi,
                               err_weight, threshold_offset, max_staleness,
                               l2, seed), then the figures of
                               `laq_jax.metrics.summarize`: iterations,
                               total_uploads, total_bits, final_loss,
                               final_residual, final_test_accuracy, fstar,
                               target_residual, target_iteration,
                               target_uploads, target_bits, diverged,
                               diverged_at (a diverged point's figures
                               count its iterations 0..diverged_at);
  curves.npz                   [G, T] loss, uploads, bits, cum_uploads,
                               cum_bits, [G] final_loss, [G, T, M] sent (when
                               small), and one [G] array per hyperparameter;
  sweep.json                   grid size, batches, f*, timings, compiles;
  heatmap_bits_to_target.png   bits to the target residual over bits x xi
                               (the final residual when some point misses
                               the target; the title says so);
  pareto.png                   test accuracy and final residual against total
                               bits, the Pareto front marked.
  checkpoints/                 with config.checkpoint_every > 0: orbax
                               checkpoints (laq_jax/checkpoint.py).
Every file is written whole or not at all (temporary file, then rename).
One point of the sweep reproduces `experiments.main` run on
`laq_jax.sweep.point_config(config, point)`.

Restarting the same command in the same workdir resumes from the last
checkpoint; a workdir holding another config's results is refused unless
`--overwrite`. A diverging grid point does not stop the sweep: it is marked
in results.csv and the launcher still exits 0 (with a warning).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import pathlib
import sys
import time
from typing import Any

from absl import app
from absl import flags
from absl import logging
import numpy as np

FLAGS = flags.FLAGS
if __name__ == '__main__':
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string('workdir', None, 'Folder for the results.')
  flags.DEFINE_bool('overwrite', False, 'Replace the results of another '
                    'config in --workdir (default: refuse), or start this '
                    'sweep over instead of resuming from its checkpoints.')
  config_flags.DEFINE_config_file(
      'config', None, 'A sweep config file (configs/sweep_*.py), optionally '
      'with :ARG.', lock_config=True)
  flags.mark_flags_as_required(['config', 'workdir'])

HEATMAP_FIGURE = 'heatmap_bits_to_target.png'
PARETO_FIGURE = 'pareto.png'
SWEEP_FILES = ('config.json', 'results.csv', 'curves.npz', 'sweep.json',
               HEATMAP_FIGURE, PARETO_FIGURE)


def results_csv(rows: list[dict[str, Any]]) -> str:
  """The text of results.csv: a header, then one line per grid point."""
  from experiments import train  # pylint: disable=g-import-not-at-top
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(list(rows[0]))
  for row in rows:
    writer.writerow([train._cell(v) for v in row.values()])  # pylint: disable=protected-access
  return out.getvalue()


def read_results(path) -> list[dict[str, str]]:
  """results.csv as a list of {column: text} (empty text: no value)."""
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def _write_npz(path, arrays: dict[str, np.ndarray]) -> None:
  from experiments import train  # pylint: disable=g-import-not-at-top
  buffer = io.BytesIO()
  np.savez_compressed(buffer, **arrays)
  train.atomic_write(path, buffer.getvalue())


class _Progress:
  """The per-chunk callback of `run_sweep`: a progress line."""

  def __init__(self, num_points: int, num_steps: int,
               fstar: float | None):
    self.num_points = num_points
    self.num_steps = num_steps
    self.fstar = fstar
    self.start = time.perf_counter()
    self.point_steps = 0

  def __call__(self, p):
    from experiments import train  # pylint: disable=g-import-not-at-top
    chunk = p.trace.loss.shape[1]
    self.point_steps += chunk * len(p.point_indices)
    elapsed = time.perf_counter() - self.start
    total = self.num_points * self.num_steps
    rate = self.point_steps / max(elapsed, 1e-9)
    eta = (total - self.point_steps) / max(rate, 1e-9)
    last = p.trace.loss[:, -1]
    last = last[np.isfinite(last)]
    if not last.size:
      best = 'every point of the batch diverged'
    elif self.fstar is not None:
      best = f'best residual {np.min(last - self.fstar):.3e}'
    else:
      best = f'best loss {np.min(last):.6g}'
    uploads = p.trace.sent_M.sum(axis=(1, 2))
    logging.info(
        'batch %d/%d (points %d-%d) | step %d/%d | %.1f point-it/s (incl. '
        'compile) | ETA %s | %s | uploads this chunk %d..%d of %d',
        p.batch + 1, p.num_batches, p.point_indices[0], p.point_indices[-1],
        p.steps_done, p.num_steps, rate, train._duration(eta), best,  # pylint: disable=protected-access
        int(uploads.min()), int(uploads.max()),
        chunk * p.trace.sent_M.shape[-1])


def _compile_count(built) -> int | None:
  import laq_jax  # pylint: disable=g-import-not-at-top
  fn = built.run_chunk_fn
  compiled = laq_jax.run_chunk if fn is None else getattr(fn, 'compiled',
                                                           None)
  size = getattr(compiled, '_cache_size', None)
  return size() if size else None


def resolve_fstars(config, built, points) -> dict[float, dict[str, Any]]:
  """f* (via `experiments.train.resolve_fstar`) for each l2 of the grid."""
  from experiments import train  # pylint: disable=g-import-not-at-top
  from laq_jax import build as build_lib  # pylint: disable=g-import-not-at-top
  from laq_jax import sweep as sweep_lib  # pylint: disable=g-import-not-at-top
  out = {}
  for point in points:
    if point['l2'] in out:
      continue
    run_config = sweep_lib.point_config(config, point)
    for_l2 = dataclasses.replace(
        built, objective_key=build_lib.objective_key(run_config))
    out[point['l2']] = train.resolve_fstar(run_config, for_l2)
  return out


def sweep_and_evaluate(config, workdir: str | os.PathLike, *,
                       overwrite: bool = False) -> list[dict[str, Any]]:
  """Runs every grid point of `config` and writes the results into `workdir`.

  With `config.checkpoint_every` = C > 0 the sweep saves checkpoints (orbax,
  workdir/checkpoints) every C iterations of a batch and after each batch;
  the same config in the same workdir resumes from the last one and ends
  bit-identical to a sweep that never stopped. A grid point whose loss
  becomes NaN/inf is marked in results.csv (`diverged`, `diverged_at`, its
  figures cut at that iteration, as `experiments.train` does for a run);
  the other points finish.

  Args:
    config: a sweep config (see `laq_jax.sweep.points_from_config`).
    workdir: output folder (created).
    overwrite: replace another config's results in `workdir` (otherwise
      refused), or start this sweep over instead of resuming it.

  Returns:
    The rows of results.csv (dicts, numbers as numbers).

  Raises:
    laq_jax.build.ConfigError: a field or grid value is not allowed.
    laq_jax.data.DataError: the data are missing or corrupt.
    experiments.train.WorkdirError: `workdir` holds another config's results.
  """
  from experiments import train  # pylint: disable=g-import-not-at-top
  from laq_jax import build as build_lib  # pylint: disable=g-import-not-at-top
  from laq_jax import sweep as sweep_lib  # pylint: disable=g-import-not-at-top

  wall_start = time.perf_counter()
  points = sweep_lib.points_from_config(config)
  train.quiet_orbax()
  workdir = pathlib.Path(workdir)
  config_dict = train.config_to_dict(config)
  train.prepare_workdir(workdir, config_dict, overwrite=overwrite,
                        files=SWEEP_FILES)
  built = build_lib.build(sweep_lib.point_config(config, points[0]))
  train.write_json(workdir / 'config.json', config_dict)
  varying = sweep_lib.varying_keys(points)
  batch_size = config.sweep_batch_size or len(points)
  num_batches = len(sweep_lib.batches(len(points), batch_size))
  logging.info('sweep of %d points (%s) on %s, model %s (P=%d), M=%d, %s, '
               '%d iterations; %d batch(es) of %d points, workers on %s',
               len(points), ', '.join(
                   f'{k} x{len({p[k] for p in points})}' for k in varying)
               or 'a single point', config.dataset, config.model,
               built.num_params, config.num_workers, config.precision,
               config.num_iters, num_batches, min(batch_size, len(points)),
               config.workers_on)
  if ('seed' in varying and config.model == 'logreg'
      and not built.spec.stochastic):
    logging.warning('seed varies, but logistic regression starts at zero and '
                    'full-batch gradients draw nothing at random: the points '
                    'differing only in seed are identical runs')

  ckpt, resumed_from = None, None
  if config.checkpoint_every:
    from laq_jax import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
    ckpt = checkpoint_lib.Checkpointer(
        workdir / train.CHECKPOINT_DIR, checkpoint_lib.fingerprint(
            config_dict))
    resumed_from = ckpt.latest_step()
    if resumed_from is not None:
      logging.info('resuming from the checkpoint at step %d (batch %d, '
                   'iteration %d of %d) in %s', resumed_from,
                   resumed_from // config.num_iters + 1,
                   resumed_from % config.num_iters, config.num_iters,
                   ckpt.directory)
  fstars = resolve_fstars(config, built, points)
  fstar_G = [fstars[p['l2']]['fstar'] for p in points]
  progress = _Progress(len(points), config.num_iters,
                       fstar_G[0] if len(fstars) == 1 else None)
  compiles_before = _compile_count(built)
  run_start = time.perf_counter()
  progress.start = run_start
  result = sweep_lib.run_sweep(
      built.spec, built.data, points, config.num_iters,
      batch_size=config.sweep_batch_size or None,
      chunk_size=config.eval_every, callback=progress,
      run_chunk_fn=built.run_chunk_fn, checkpointer=ckpt,
      checkpoint_every=config.checkpoint_every,
      authors_code=bool(config.authors_code))
  if ckpt is not None:
    ckpt.close()
  run_seconds = time.perf_counter() - run_start
  compiles_after = _compile_count(built)

  accuracy_G = sweep_lib.accuracies(built.problem, result.theta_GxP,
                                    built.test_x, built.test_y)
  rows = sweep_lib.summarize(result, fstar=fstar_G,
                             target=config.target_residual,
                             test_accuracy=accuracy_G)
  train.atomic_write(workdir / 'results.csv', results_csv(rows))
  _write_npz(workdir / 'curves.npz', sweep_lib.curve_arrays(result))
  try:
    train.save_figure(sweep_lib.heatmap_figure(rows),
                      workdir / HEATMAP_FIGURE)
  except ValueError as e:  # too many panels: the results are still written
    logging.warning('no %s: %s', HEATMAP_FIGURE, e)
  train.save_figure(sweep_lib.pareto_figure(rows), workdir / PARETO_FIGURE)

  diverged = [r for r in rows if r['diverged']]
  if diverged:
    logging.warning(
        '%d of %d grid points diverged (loss NaN/inf), marked in results.csv '
        '(diverged, diverged_at); the others finished: %s', len(diverged),
        len(rows), '; '.join(
            f'point {r["point"]} ('
            + ', '.join(f'{k}={r[k]}' for k in varying)
            + f') at k={r["diverged_at"]}' for r in diverged))
  reached = sum(r['target_iteration'] is not None for r in rows)
  info = {
      'num_points': len(points),
      'varying': varying,
      'batch_size': min(batch_size, len(points)),
      'num_batches': num_batches,
      'num_iters': config.num_iters,
      'chunk_size': config.eval_every,
      'model': config.model,
      'dataset': config.dataset,
      'num_params': built.num_params,
      'num_workers': config.num_workers,
      'precision': config.precision,
      'workers_on': config.workers_on,
      'test_set': built.test_set,
      'fstar': [{'l2': l2, **v} for l2, v in fstars.items()],
      'target_residual': config.target_residual,
      'points_reaching_target': reached,
      'points_diverged': [r['point'] for r in diverged],
      'resumed_from_step': resumed_from,
      'heatmap_shows': sweep_lib.heatmap_quantity(rows),
      'run_time_s': round(run_seconds, 3),
      'point_iterations_per_s': round(
          len(points) * config.num_iters / max(run_seconds, 1e-9), 1),
      'programs_compiled': (None if compiles_before is None else
                            compiles_after - compiles_before),
      'wall_time_s': round(time.perf_counter() - wall_start, 3),
  }
  train.write_json(workdir / 'sweep.json', info)
  logging.info('done in %s: %d points x %d iterations (run %.1f s, %s '
               'program(s) compiled); %d of %d points reached residual %g; '
               'results in %s', train._duration(info['wall_time_s']),  # pylint: disable=protected-access
               len(points), config.num_iters, run_seconds,
               info['programs_compiled'], reached, len(points),
               config.target_residual, workdir)
  return rows


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from experiments import train  # pylint: disable=g-import-not-at-top
  from laq_jax import build, checkpoint, data  # pylint: disable=g-import-not-at-top
  try:
    sweep_and_evaluate(FLAGS.config, FLAGS.workdir, overwrite=FLAGS.overwrite)
  except (build.ConfigError, data.DataError, train.WorkdirError,
          checkpoint.CheckpointError) as e:
    logging.error('%s', e)
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  app.run(main)
