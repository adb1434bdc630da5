"""A sweep from a config into a workdir: the sweep launcher's body.

    rows = sweep_and_evaluate(config, workdir)

See `experiments/sweep.py` for the files a workdir receives. Every grid point
runs in one compiled program (in batches of `config.sweep_batch_size`
points); one point of the sweep reproduces `experiments.run.train` on
`experiments.run.config.point_config(config, point)`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Any

from absl import logging
import jax
import numpy as np

import laq_jax
from experiments.run import build as build_lib
from experiments.run import config as config_lib
from experiments.run import events as events_lib
from experiments.run import fstar as fstar_lib
from experiments.run import outputs
from experiments.run import predict as predict_lib
from experiments.run import progress as progress_lib
from experiments.run import startup
from laq_jax import distributed
from laq_jax import metrics
from laq_jax import plotting
from laq_jax import privatizers
from laq_jax import sweep as sweep_lib
from laq_jax import sweep_metrics

HEATMAP_FIGURE = 'heatmap_bits_to_target.png'
PARETO_FIGURE = 'pareto.png'
SWEEP_FILES = ('config.json', 'results.csv', 'curves.npz', 'sweep.json',
               HEATMAP_FIGURE, PARETO_FIGURE)


def _progress_note(fstar: float | None):
  """The note of a sweep's progress line after a chunk of a batch."""
  def note(p) -> str:
    loss = np.asarray(p.trace.loss, np.float64)
    # each point's last logged loss (NaN: not logged, RunSpec.loss_every)
    logged = ~np.isnan(loss)
    last = np.asarray([row[ok][-1] for row, ok in zip(loss, logged)
                       if ok.any()])
    if not logged.any():
      best = 'no iteration of this chunk logged the loss'
    elif not np.isfinite(last).any():
      best = 'every point of the batch diverged'
    elif fstar is not None:
      best = f'best residual {np.nanmin(last - fstar):.3e}'
    else:
      best = f'best loss {np.nanmin(last):.6g}'
    uploads = p.trace.sent_M.sum(axis=(1, 2))
    chunk = p.trace.loss.shape[1]
    return (f'batch {p.batch + 1}/{p.num_batches} (points '
            f'{p.point_indices[0]}-{p.point_indices[-1]}) | {best} | '
            f'uploads this chunk {int(uploads.min())}..{int(uploads.max())} '
            f'of {chunk * p.trace.sent_M.shape[-1]}')
  return note


def privacy_columns(rows: list[dict], points: list[dict],
                    participants_GxTxM, num_workers: int) -> None:
  """Where a point privatizes (its preset's privacy slot), every row gains
  `epsilon` and `delta`: what its releases spent (`privatizers.accounting`,
  at its part's parameters; local mode after the most rounds any one of
  its clients took part in), None for the others; no columns where no
  point privatizes."""
  algos = [laq_jax.get_algorithm(r['algo']) for r in rows]
  if all(a.privacy == 'off' for a in algos):
    return
  for g, (row, point, algo) in enumerate(zip(rows, points, algos)):
    row['epsilon'] = row['delta'] = None
    if algo.privacy == 'off':
      continue
    part = privatizers.REGISTRY.get(algo.privacy)
    prefix = algo.privacy + '.'
    defaults = part.defaults()
    # (a point's value overrides the preset's where it differs from the
    # default, as make_hyper reads them)
    params = {**defaults,
              **{k[len(prefix):]: v for k, v in algo.params
                 if k.startswith(prefix)},
              **{k[len(prefix):]: v for k, v in point.items()
                 if k.startswith(prefix)
                 and v != defaults.get(k[len(prefix):])}}
    count = (int(np.max(np.sum(participants_GxTxM[g], axis=0)))
             if participants_GxTxM is not None else int(row['iterations']))
    spent = privatizers.accounting(
        algo.privacy, params, rounds=int(row['iterations']),
        num_clients=num_workers,
        participation=float(point.get('participation', 1.0)),
        clients_per_round=int(point.get('clients_per_round', 0)),
        participations=count)
    row['epsilon'], row['delta'] = spent.get('epsilon'), spent.get('delta')


def _compile_count(built) -> int | None:
  fn = built.run_chunk_fn
  compiled = laq_jax.run_chunk if fn is None else getattr(fn, 'compiled',
                                                           None)
  size = getattr(compiled, '_cache_size', None)
  return size() if size else None


def sweep_and_evaluate(config, workdir: str | os.PathLike, *,
                       overwrite: bool = False) -> list[dict[str, Any]]:
  """Runs every grid point of `config` and writes the results into `workdir`.

  With `config.checkpoint_every` = C > 0 the sweep saves checkpoints (orbax,
  workdir/checkpoints) every C iterations of a batch and after each batch;
  the same config in the same workdir resumes from the last one and ends
  bit-identical to a sweep that never stopped. A grid point whose loss
  becomes NaN/inf is marked in results.csv (`diverged`, `diverged_at`, its
  figures cut at that iteration, as `experiments.run.train` does for a run);
  the other points finish. Only process 0 of a multi-process run writes.

  Args:
    config: a sweep config (see `experiments.run.config.points_from_config`).
    workdir: output folder (created).
    overwrite: replace another config's results in `workdir` (otherwise
      refused), or start this sweep over instead of resuming it.

  Returns:
    The rows of results.csv (dicts, numbers as numbers).

  Raises:
    experiments.run.config.ConfigError: a field or grid value is not allowed.
    laq_jax.data.DataError: the data are missing or corrupt.
    experiments.run.outputs.WorkdirError: `workdir` holds another config's
      results.
  """
  wall_start = time.perf_counter()
  points = config_lib.points_from_config(config)
  config = config_lib.with_slots_in_algo(config)  # (the points' names)
  progress_lib.quiet_start()
  workdir = outputs.usable_workdir(workdir)
  config_dict = config_lib.to_dict(config)
  outputs.prepare_workdir(workdir, config_dict, overwrite=overwrite,
                          files=SWEEP_FILES)
  built = build_lib.build(config_lib.point_config(config, points[0]),
                          validated=True)  # (every point, above)
  writer = distributed.is_writer()
  if writer:
    outputs.write_json(workdir / 'config.json', config_dict)
  varying = sweep_lib.varying_keys(points)
  batch_size = config.sweep_batch_size or len(points)
  num_batches = len(sweep_lib.batches(len(points), batch_size))
  progress_lib.info(
      'sweep of %d points (%s) on %s, model %s (P=%d), M=%d, %s, %d '
      'iterations; %d batch(es) of %d points, workers on %s', len(points),
      ', '.join(f'{k} x{len({p[k] for p in points})}' for k in varying)
      or 'a single point', config.dataset, config.model, built.num_params,
      config.num_workers, config.precision, config.num_iters, num_batches,
      min(batch_size, len(points)), config.workers_on)
  if writer:  # the cost before it starts (experiments.run.predict)
    try:
      progress_lib.info('%s', predict_lib.predict(
          built, points, config.num_iters, config_lib.grid_axis(config),
          num_evals=-(-config.num_iters // config.eval_every))[1])
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('no prediction: %s', e)
  if ('seed' in varying and config.model == 'logreg'
      and not built.spec.stochastic and writer):
    logging.warning('seed varies, but logistic regression starts at zero and '
                    'full-batch gradients draw nothing at random: the points '
                    'differing only in seed are identical runs')

  ckpt, resumed_from = None, None
  if config.checkpoint_every:
    from laq_jax import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
    ckpt = checkpoint_lib.Checkpointer(
        workdir / outputs.CHECKPOINT_DIR,
        checkpoint_lib.fingerprint(config_dict),
        code=build_lib.model_code(built),
        also=outputs.legacy_fingerprints(config_dict))
    resumed_from = ckpt.latest_step()
    if resumed_from is not None:
      progress_lib.info(
          'resuming from the checkpoint at step %d (batch %d, iteration %d '
          'of %d) in %s', resumed_from, resumed_from // config.num_iters + 1,
          resumed_from % config.num_iters, config.num_iters, ckpt.directory)
  fstars = fstar_lib.resolve_fstars(config, built, points)
  fstar_G = [fstars[p['l2']]['fstar'] for p in points]
  sweep_spec = dataclasses.replace(built.spec,
                                   grid_axis=config_lib.grid_axis(config))
  per_call = config.sweep_batch_size or None  # (batch_size is the points')
  # A resumed sweep counts what its checkpoint holds as done (its finished
  # batches and the running one's iterations): not in the rate or the ETA.
  initial = 0
  if resumed_from is not None:
    sizes = sweep_lib.batch_sizes(sweep_spec, points, per_call)
    batch, iteration = divmod(resumed_from, config.num_iters)
    initial = (sum(sizes[:batch]) * config.num_iters
               + (sizes[batch] if batch < len(sizes) else 0) * iteration)
  progress = progress_lib.Progress('point-steps',
                                   len(points) * config.num_iters,
                                   unit='point-it', initial=initial)
  note = _progress_note(fstar_G[0] if len(fstars) == 1 else None)
  steps_done = [initial]
  # Test accuracy of every point after every chunk (eval_every iterations;
  # NaN in multi-process sweeps, which evaluate the final parameters only).
  num_evals = -(-config.num_iters // config.eval_every)
  accuracy_curve = np.full((len(points), num_evals), np.nan)
  accuracy_steps = np.minimum(
      np.arange(1, num_evals + 1) * config.eval_every, config.num_iters)
  # Kept beside the checkpoints after every chunk, so a resumed sweep has
  # the evaluations of the chunks it does not run again.
  accuracy_file = (workdir / outputs.CHECKPOINT_DIR / 'test_accuracy.npy'
                   if ckpt is not None else None)
  if resumed_from is not None and accuracy_file.is_file():
    saved = np.load(accuracy_file)
    if saved.shape == accuracy_curve.shape:
      accuracy_curve[:] = saved

  def on_chunk(p):
    steps_done[0] += p.trace.loss.shape[1] * len(p.point_indices)
    progress.update(steps_done[0], note(p))
    keep = len(p.point_indices)
    theta = p.state.theta_P
    if isinstance(theta, jax.Array) and not theta.is_fully_addressable:
      return  # (multi-process: the final accuracy only)
    column = int(np.searchsorted(accuracy_steps, p.steps_done))
    if column < num_evals and accuracy_steps[column] == p.steps_done:
      accuracy_curve[p.point_indices, column] = sweep_lib.accuracies(
          built.problem, np.asarray(theta)[:keep], built.test_x,
          built.test_y)
      if accuracy_file is not None and writer:
        outputs.write_npy(accuracy_file, accuracy_curve)

  compiles_before = _compile_count(built)
  compile_start = startup.compile_seconds()
  run_start = time.perf_counter()
  progress.restart_clock()
  try:
    result = sweep_lib.run_sweep(
        sweep_spec, built.data, points, config.num_iters,
        batch_size=per_call,
        chunk_size=config.eval_every, callback=on_chunk,
        run_chunk_fn=built.run_chunk_fn, checkpointer=ckpt,
        checkpoint_every=config.checkpoint_every,
        authors_code=bool(config.authors_code), donate=True)
  except BaseException:
    if ckpt is not None:  # orbax's threads end before the process does
      ckpt.close(quiet=True)
    raise
  finally:
    progress.close()
  if ckpt is not None:
    ckpt.close()
  run_seconds = time.perf_counter() - run_start
  compile_seconds = startup.compile_seconds() - compile_start
  compiles_after = _compile_count(built)

  # The last chunk's evaluation is the final one: no work after it.
  accuracy_G = (accuracy_curve[:, -1] if np.all(np.isfinite(
      accuracy_curve[:, -1])) else sweep_lib.accuracies(
          built.problem, result.theta_GxP, built.test_x, built.test_y))
  rows = sweep_metrics.summarize_sweep(result, fstar=fstar_G,
                                 target=config.target_residual,
                                 test_accuracy=accuracy_G)
  shard = (built.host_data.x_MxNxD.shape[1]
           if built.host_data.count_M is None
           else built.host_data.sample_counts())
  for row in rows:  # F_m of the point's kind of gradient (every worker's;
    # the mean over clients of unequal sizes)
    row['flops_per_worker_step'] = float(np.mean(laq_jax.flops_per_worker_step(
        dataclasses.replace(built.spec, stochastic=laq_jax.get_algorithm(
            row['algo']).stochastic), shard)))
  privacy_columns(rows, points, (result.extra or {}).get('participants_M'),
                  config.num_workers)
  diverged = [r for r in rows if r['diverged']]
  reached = sum(r['target_iteration'] is not None for r in rows)
  info = {
      'num_points': len(points),
      'varying': varying,
      # the features' layout the fast gradient read (laq_jax.layouts)
      'layout': ('bf16_split' if built.data.xq_MxNxD is not None else
                 'transposed' if built.data.xt_MxDxN is not None else
                 'plain'),
      # how each kind of point ran: 'map' or 'vmap' ('auto' resolved)
      'grid_axes': {
          ('minibatch' if stochastic else 'full_batch'):
              laq_jax.spec.resolve_grid_axis(dataclasses.replace(
                  built.spec, stochastic=stochastic,
                  grid_axis=config_lib.grid_axis(config)))
          for stochastic in sorted({laq_jax.get_algorithm(
              p['algo']).stochastic for p in points})},
      'batch_size': min(batch_size, len(points)),
      'num_batches': num_batches,
      'num_iters': config.num_iters,
      'chunk_size': config.eval_every,
      'model': config.model,
      'dataset': config.dataset,
      'train_subset': config.train_subset,
      'num_train': int(built.host_data.sample_counts().sum()),
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
      'heatmap_shows': plotting.heatmap_quantity(rows),
      'run_time_s': round(run_seconds, 3),
      # (of run_time_s: tracing, lowering, compiling or loading programs)
      'compile_time_s': round(compile_seconds, 3),
      'point_iterations_per_s': round(
          len(points) * config.num_iters / max(run_seconds, 1e-9), 1),
      'programs_compiled': (None if compiles_before is None else
                            compiles_after - compiles_before),
      'wall_time_s': round(time.perf_counter() - wall_start, 3),
  }
  if not writer:
    return rows
  events_lib.write_sweep(workdir / events_lib.TENSORBOARD_DIR, points,
                         varying, result, fstar_G, accuracy_G, config_dict)
  _write_files(workdir, result, rows, info,
               {'test_accuracy': accuracy_curve,
                'test_accuracy_steps': accuracy_steps})
  if diverged:
    logging.warning(
        '%d of %d grid points diverged (loss NaN/inf or above %gx f(theta^0)), '
        'marked in results.csv '
        '(diverged, diverged_at); the others finished: %s', len(diverged),
        len(rows), metrics.DIVERGENCE_FACTOR, '; '.join(
            f'point {r["point"]} ('
            + ', '.join(f'{k}={r[k]}' for k in varying)
            + f') at k={r["diverged_at"]}' for r in diverged))
  logging.info('done in %s: %d points x %d iterations (run %.1f s, %s '
               'program(s) compiled); %d of %d points reached residual %g; '
               'results in %s', progress_lib.duration(info['wall_time_s']),
               len(points), config.num_iters, run_seconds,
               info['programs_compiled'], reached, len(points),
               config.target_residual, workdir)
  return rows


def _write_files(workdir: pathlib.Path, result, rows, info,
                 extra_curves=None) -> None:
  """results.csv, curves.npz, the figures, and sweep.json last."""
  outputs.atomic_write(workdir / 'results.csv', outputs.results_csv(rows))
  outputs.write_npz(workdir / 'curves.npz',
                    {**sweep_metrics.curve_arrays(result),
                     **(extra_curves or {})})
  try:
    outputs.save_figure(plotting.heatmap_figure(rows),
                        workdir / HEATMAP_FIGURE)
  except ValueError as e:  # too many panels: the results are still written
    logging.warning('no %s: %s', HEATMAP_FIGURE, e)
  outputs.save_figure(plotting.pareto_figure(rows), workdir / PARETO_FIGURE)
  outputs.write_json(workdir / 'sweep.json', info)
