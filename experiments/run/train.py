"""One run from a config into a workdir: the launcher's body, notebook-callable.

    summary = train_and_evaluate(config, workdir)

writes into `workdir`:
  config.json      the resolved config;
  metrics.csv      one row per iteration k: step, loss = f(theta^k), residual
                   (loss - f*, empty without f*), paper_residual (loss / M
                   minus the smallest such value of the run, the authors'
                   residual), grad_norm_sq (||sum_m g_m||^2 at theta^k),
                   uploads, bits (uplink) and bits_down (the broadcast
                   after it, all workers) of step k, cum_uploads, cum_bits,
                   cum_bits_down (through step k), test_accuracy of theta^k
                   (at evaluation steps, empty elsewhere), time_s (T[k],
                   the simulated seconds of round k on config.network,
                   laq_jax.network), cum_time_s (through step k), slowest
                   (the worker that set T[k]);
  uploads.npy      bool [T, M], who uploaded at each step;
  bits.npy         int64 [T, M], the bits each worker uploaded at each step
                   (what `laq_jax.network.replay` times on any network);
  slowdown.npy     float64 [T, M], the stragglers' compute factors s[k, m]
                   (only for a network with stragglers);
  participants.npy bool [T, M], who took part in each round (every worker
                   without partial participation; participation_raster.png
                   with it);
  summary.json     totals, final loss / accuracy of theta^T, f* and how it was
                   computed, the iteration / uploads / bits at which each
                   residual (exact: target_*; the paper's: paper_target_*)
                   first reached config.target_residual (or null), the
                   network (every field, the profile's name),
                   flops_per_worker_step, total_time_s, target_time_s and
                   paper_target_time_s (simulated seconds);
  loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png,
  loss_vs_total_bits.png (uplink + downlink), loss_vs_time.png (simulated
  seconds; the residual with f*, else the loss), grad_norm_vs_iterations.png,
  grad_norm_vs_uploads.png, grad_norm_vs_bits.png, upload_raster.png;
  tensorboard/     TensorBoard events (loss, residual, uploads, bits up and
                   down, test accuracy; experiments/run/events.py), written
                   after every chunk: `tensorboard --logdir runs/`;
  checkpoints/     with config.checkpoint_every > 0: orbax checkpoints (the
                   full LoopState and the metrics so far, see
                   laq_jax/checkpoint.py), the last few kept.
Every file but the event files is written whole or not at all (temporary
file, then rename), and
only by process 0 of a multi-process run (checkpoints are written by all
processes together, as orbax requires).

The scan runs in chunks of `config.eval_every` iterations (each chunk one
compiled program); after each chunk a progress line is logged, the test
accuracy evaluated, and, every `config.checkpoint_every` iterations, a
checkpoint saved.

Reliability:
  * resume: run the same config into the same workdir again (e.g. after the
    process was killed) and it continues from the last checkpoint; the
    files come out bit-identical to those of a run that never stopped.
  * another config's results in the workdir are refused (WorkdirError)
    unless overwrite=True (`--overwrite`), which deletes them first.
  * divergence: a NaN/inf loss stops the run after that chunk; metrics.csv
    keeps iterations 0..k (k the first non-finite one, its loss written as
    nan/inf), summary.json gets "diverged": true, "diverged_at": k and the
    message. The launcher then exits with status 3.
"""

from __future__ import annotations

import math
import os
import pathlib
import time
from typing import Any, NamedTuple

from absl import logging
import numpy as np

import laq_jax
from experiments.run import build as build_lib
from experiments.run import config as config_lib
from experiments.run import events as events_lib
from experiments.run import fstar as fstar_lib
from experiments.run import outputs
from experiments.run import progress as progress_lib
from experiments.run.progress import info
from laq_jax import checkpoint as checkpoint_lib
from laq_jax import distributed
from laq_jax import metrics
from laq_jax import network as network_lib
from laq_jax import plotting
from laq_jax.record import Record


def full_objective(built: build_lib.Built, theta_P) -> float:
  """f(theta) on all shards, from the process's own copy of the data.

  `built.host_data`, not `built.data`: over a mesh of several processes the
  placed shards cannot be read back whole by one process.
  """
  return float(laq_jax.objective(built.problem, np.asarray(theta_P),
                                 built.host_data, built.hyper.l2))


class _Record:
  """What a run has produced so far: its record and test accuracies.

  Exactly what a checkpoint keeps besides the LoopState, so that a resumed
  run writes the same files as one that never stopped.
  """

  def __init__(self, num_workers: int, record: Record | None = None):
    self.record = record if record is not None else Record.empty(num_workers)
    self.accuracy_at: dict[int, float] = {}

  def append(self, chunk: Record) -> None:
    self.record = Record.join([self.record, chunk])

  @property
  def num_workers(self) -> int:
    return self.record.num_workers

  @property
  def uploads(self) -> int:
    return int(self.record.uploads.sum())

  @property
  def bits(self) -> int:
    return int(self.record.bits.sum())

  @property
  def last_loss(self) -> float:
    """The last logged loss (NaN where none is)."""
    logged = self.record.loss[~np.isnan(self.record.loss)]
    return float(logged[-1]) if logged.size else math.nan

  def meta(self) -> dict[str, Any]:
    # JSON floats round-trip exactly (repr), so resumed accuracies are equal.
    return {'accuracy_at': {str(k): v for k, v in self.accuracy_at.items()}}

  @classmethod
  def from_checkpoint(cls, num_workers: int,
                      restored: checkpoint_lib.Restored) -> _Record:
    a = restored.arrays
    # (checkpoints of older code named the fields without their suffixes)
    old = {'grad_norm': 'grad_norm_sq', 'sent': 'sent_M', 'bits': 'bits_M',
           'bits_down': 'bits_down_M'}
    a = {old.get(k, k): v for k, v in a.items()}
    record = cls(num_workers, Record.from_arrays(**a))
    record.accuracy_at = {int(k): float(v) for k, v in
                          restored.meta['accuracy_at'].items()}
    return record


def _initial_state(built: build_lib.Built):
  state = laq_jax.init_state(built.spec, built.hyper, built.dtype)
  if built.mesh is not None:
    from laq_jax import sharding  # pylint: disable=g-import-not-at-top
    state = sharding.shard_state(state, built.mesh)
  return state


def _diverged_message(at: int, value: float, rows: int, workdir, config
                      ) -> str:
  return (f'diverged: the loss f(theta^k) is {value} at iteration k={at}; '
          f'the run stopped there. {pathlib.Path(workdir) / "metrics.csv"} '
          f'keeps iterations 0..{rows - 1} and summary.json says '
          f'"diverged": true, "diverged_at": {at}. Try a smaller step_size '
          f'(now {config.step_size}).')


def train_and_evaluate(config, workdir: str | os.PathLike, *,
                       overwrite: bool = False) -> dict[str, Any]:
  """Runs one config and writes its results into `workdir`.

  The scan runs in chunks of `config.eval_every` iterations. With
  `config.checkpoint_every` = C > 0 the full state and the metrics so far
  are saved (orbax) into workdir/checkpoints every C iterations and at the
  end; calling this again with the same config and workdir (e.g. after the
  process was killed) continues from the last checkpoint, bit-identically.
  A loss that becomes NaN or inf stops the run at that chunk: the files keep
  every iteration up to and including the first non-finite one, and the
  summary has `diverged: true` and `diverged_at: k`.

  Args:
    config: an ml_collections.ConfigDict with the fields of
      `configs/default.py` (checked before anything is loaded or compiled).
    workdir: output folder (created).
    overwrite: replace another config's results in `workdir` (otherwise
      refused), or start this config's run over.

  Returns:
    The summary dict (also written to workdir/summary.json).

  Raises:
    experiments.run.config.ConfigError: a field is not allowed.
    laq_jax.data.DataError: the data are missing or corrupt.
    experiments.run.outputs.WorkdirError: `workdir` holds another config's
      results.
  """
  wall_start = time.perf_counter()
  config_lib.validate_config(config)
  progress_lib.quiet_start()
  workdir = pathlib.Path(workdir)
  config_dict = config_lib.to_dict(config)
  outputs.prepare_workdir(workdir, config_dict, overwrite=overwrite)
  built = build_lib.build(config)  # DataError before any file is written
  if distributed.is_writer():
    outputs.write_json(workdir / 'config.json', config_dict)
  info('%s on %s, model %s (P=%d), M=%d, %s, %d iterations, workers on %s',
       config.algo, config.dataset, config.model, built.num_params,
       config.num_workers, config.precision, config.num_iters,
       config.workers_on)
  fstar_info = fstar_lib.resolve_fstar(config, built)
  ran = _run(config, built, workdir, config_dict, fstar_info['fstar'])
  try:
    summary = _summarize(config, built, ran, fstar_info, workdir)
    if ran.events is not None and not summary['diverged']:
      # f(theta^T); and its accuracy when no chunk ran (resumed at T).
      end = summary['iterations']
      ran.events.at(end, loss=summary['final_loss'],
                    accuracy=(summary['final_test_accuracy']
                              if ran.resumed_from == end else None))
  finally:
    if ran.events is not None:
      ran.events.close()
  if distributed.is_writer():
    _write_files(config, workdir, ran, summary)
    summary['wall_time_s'] = round(time.perf_counter() - wall_start, 3)
    outputs.write_json(workdir / 'summary.json', summary)
    if not summary['diverged']:
      logging.info('done in %s: %d uploads, %.4g bits, final loss %.10g, '
                   'test accuracy %s; target %g reached at iteration %s',
                   progress_lib.duration(summary['wall_time_s']),
                   summary['total_uploads'], summary['total_bits'],
                   summary['final_loss'], summary['final_test_accuracy'],
                   config.target_residual, summary['target_iteration'])
  return summary


class _Ran(NamedTuple):
  """What the chunks produced: the record, the final state and timing."""
  record: _Record
  state: Any
  diverged_at: int | None
  final_accuracy: float | None
  resumed_from: int | None
  run_seconds: float
  steady_rate: float | None
  events: events_lib.Events | None


def _run(config, built, workdir, config_dict, fstar) -> _Ran:
  """The chunks of `config.eval_every` iterations, checkpointed, resumed."""
  total, every = config.num_iters, config.checkpoint_every
  workers = config.num_workers
  state = _initial_state(built)
  ckpt = restored = None
  if every:
    # Every process takes part in saving and restoring (orbax's collective
    # writes of a state laid over several processes).
    ckpt = checkpoint_lib.Checkpointer(
        workdir / outputs.CHECKPOINT_DIR,
        checkpoint_lib.fingerprint(config_dict))
    restored = ckpt.restore(state)
  if restored is not None:
    state, done = restored.state, restored.step
    record = _Record.from_checkpoint(workers, restored)
    info('resuming from the checkpoint at step %d of %d (%s)', done, total,
         ckpt.directory / str(done))
  else:
    done, record = 0, _Record(workers)
    record.accuracy_at[0] = laq_jax.accuracy(
        built.problem, np.asarray(state.theta_P), built.test_x, built.test_y)
  resumed_from = done if restored is not None else None

  events = None
  if distributed.is_writer():
    a = record.record
    events = events_lib.Events(
        workdir / events_lib.TENSORBOARD_DIR, done,
        totals=[np.sum(x, dtype=np.float64) for x in
                (a.uploads, a.bits, a.bits_down)] + (
                    [] if a.time_s is None else [float(a.cum_time_s[-1])
                                                 if a.num_steps else 0.0]),
        config=config_dict, fstar=fstar)
    # theta^done's accuracy: the purge at `done` drops an earlier copy.
    events.at(done, accuracy=record.accuracy_at.get(done))

  diverged_at, final_accuracy = None, None
  progress = progress_lib.Progress('step', total, initial=done)
  run_start = time.perf_counter()
  progress.restart_clock()

  def on_chunk(chunk: laq_jax.Chunk) -> bool:
    """Record, log, evaluate, checkpoint; True (stop) on a bad loss."""
    nonlocal diverged_at, final_accuracy
    rows = Record.of(chunk.trace)
    length = rows.num_steps
    # (NaN at an iteration that does not log the loss is no divergence)
    bad = np.flatnonzero(~np.isfinite(rows.loss) & metrics.logged(
        length, built.spec.log_every, chunk.start))
    if bad.size:  # keep the steps up to and including the first bad one
      rows = rows.head(int(bad[0]) + 1)
      record.append(rows)
      if events is not None:
        events.steps(chunk.start, rows)
      diverged_at = chunk.start + int(bad[0])
      return True
    record.append(rows)
    if events is not None:
      events.steps(chunk.start, rows)
    done = chunk.start + length
    acc = laq_jax.accuracy(built.problem, np.asarray(chunk.state.theta_P),
                           built.test_x, built.test_y)
    if done < total:
      record.accuracy_at[done] = acc
    else:
      final_accuracy = acc
    if events is not None:
      events.at(done, accuracy=acc)
      events.flush()
    progress.update(done, _progress_note(record, fstar, done, acc))
    if ckpt is not None and (done % every == 0 or done == total):
      ckpt.save(done, chunk.state, record.record.arrays(),
                meta=record.meta())
    return False

  try:
    state, _ = laq_jax.run(built.spec, built.data, built.hyper, total - done,
                           chunk_size=config.eval_every, state=state,
                           callback=on_chunk,
                           run_chunk_fn=built.run_chunk_fn, keep_trace=False)
  except BaseException:
    if events is not None:
      events.close()
    raise
  finally:
    progress.close()
  run_seconds = time.perf_counter() - run_start
  if ckpt is not None:
    ckpt.close()
  return _Ran(record, state, diverged_at, final_accuracy, resumed_from,
              run_seconds, progress.steady_rate, events)


def _progress_note(record: _Record, fstar, done: int, acc: float) -> str:
  last = record.last_loss
  loss = (f'residual {last - fstar:.3e}' if fstar is not None
          else f'loss {last:.6g}')
  sent = record.num_workers * done
  return (f'{loss} | uploads {record.uploads} ({100 * record.uploads / sent:.1f}'
          f'% of {sent}) | bits {record.bits:.3e} | test acc {acc:.4f}')


def _summarize(config, built, ran: _Ran, fstar_info, workdir) -> dict:
  """summary.json: the figures of `laq_jax.metrics.summarize` and the run's."""
  rec = ran.record.record
  loss_K = rec.loss
  diverged_at, final_accuracy = ran.diverged_at, ran.final_accuracy
  final_loss = (math.nan if diverged_at is not None else
                full_objective(built, ran.state.theta_P))
  every = built.spec.log_every
  diverged_at = metrics.diverged_at(loss_K, final_loss, every)  # or theta^T
  if diverged_at is None and final_accuracy is None:  # resumed at the end
    final_accuracy = laq_jax.accuracy(
        built.problem, np.asarray(ran.state.theta_P), built.test_x,
        built.test_y)
  message = None
  if diverged_at is not None:
    value = loss_K[diverged_at] if diverged_at < len(loss_K) else final_loss
    message = _diverged_message(diverged_at, float(value), len(loss_K),
                                workdir, config)
    final_accuracy = None
    if distributed.is_writer():
      logging.error('%s', message)
  summary = metrics.summarize(
      rec, final_loss=final_loss, fstar=fstar_info['fstar'],
      target=config.target_residual, final_test_accuracy=final_accuracy,
      loss_every=every, algo=config.algo,
      model=config.model, dataset=config.dataset,
      num_workers=config.num_workers, num_params=built.num_params,
      precision=config.precision, test_set=built.test_set,
      network=network_lib.describe(built.hyper.network, config.network),
      flops_per_worker_step=np.broadcast_to(laq_jax.flops_per_worker_step(
          built.spec, built.host_data.sample_counts()),
          (config.num_workers,)).tolist())
  summary.update(
      diverged=diverged_at is not None, diverged_at=diverged_at,
      diverged_message=message,
      fstar_method=fstar_info['fstar_method'],
      fstar_source=fstar_info['fstar_source'],
      resumed_from=ran.resumed_from,
      run_time_s=round(ran.run_seconds, 3),
      iterations_per_s=(round(ran.steady_rate, 3) if ran.steady_rate
                        else None))
  return summary


def _write_files(config, workdir: pathlib.Path, ran: _Ran,
                 summary: dict) -> None:
  """metrics.csv, uploads.npy and the figures (summary.json comes last)."""
  rec = ran.record.record
  fstar = summary['fstar']
  outputs.atomic_write(workdir / 'metrics.csv', outputs.metrics_csv(
      rec, fstar, ran.record.accuracy_at, summary['paper_reference'],
      loss_every=summary['loss_every']))
  outputs.write_npy(workdir / 'uploads.npy', rec.sent_M)
  outputs.write_npy(workdir / 'bits.npy', rec.bits_M.astype(np.int64))
  if (rec.slowdown_M is not None
      and summary['network']['straggler'] != 'none'):
    outputs.write_npy(workdir / outputs.SLOWDOWN_FILE, rec.slowdown_M)
  if rec.participants_M is not None:
    outputs.write_npy(workdir / outputs.PARTICIPANTS_FILE, rec.participants_M)
  loss_K, grad_norm_K = rec.loss, rec.grad_norm_sq
  uploads_K, bits_K, bits_down_K = rec.uploads, rec.bits, rec.bits_down
  # Figures skip non-finite points (NaN leaves a gap; inf breaks log axes).
  finite = lambda x: np.where(np.isfinite(x), x, np.nan)
  final_loss = (math.nan if summary['final_loss'] is None
                else summary['final_loss'])
  curve = metrics.make_curve(config.algo, finite(loss_K), final_loss,
                             uploads_K, bits_K, fstar, bits_down_K,
                             rec.time_s)
  curve = curve._replace(value=finite(curve.value))
  norm_curve = metrics.value_curve(config.algo, finite(grad_norm_K),
                                   uploads_K, bits_K, 'grad_norm_sq',
                                   bits_down_K)
  title = f'{config.algo}, {config.model}, M={config.num_workers}'
  if summary['diverged']:
    title += f' (diverged at k={summary["diverged_at"]})'
  for curves, names in (([curve], outputs.FIGURES),
                        ([norm_curve], outputs.GRAD_NORM_FIGURES)):
    for x, name in names.items():
      if x == 'time' and curve.time_s is None:
        continue  # resumed from a checkpoint older than the network model
      outputs.save_figure(plotting.loss_figure(curves, x, title=title),
                          workdir / name)
  outputs.save_figure(plotting.upload_raster(rec.sent_M, title=config.algo),
                      workdir / outputs.RASTER_FIGURE)
  if (rec.participants_M is not None
      and config_lib.partial_participation(config)):
    outputs.save_figure(plotting.upload_raster(
        rec.participants_M, title=f'{config.algo}: participants',
        event='took part'), workdir / outputs.PARTICIPATION_FIGURE)
