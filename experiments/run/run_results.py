"""What a single run produced, and the files it leaves (after the loop).

    record = RunRecord(num_workers)     # the record and test accuracies so far
    summary = summarize(config, built, ran, fstar_info, workdir)
    write_files(config, workdir, ran, summary)   # metrics.csv, .npy, figures

RunRecord is exactly what a checkpoint keeps besides the LoopState, so a
resumed run writes the same files as one that never stopped; Ran is what the
chunks of `experiments.run.train` produced. The files are those listed in
experiments/run/train.py (summary.json is written last, by train).
"""

from __future__ import annotations

import math
import pathlib
from typing import Any, NamedTuple

from absl import logging
import numpy as np

import laq_jax
from experiments.run import build as build_lib
from experiments.run import config as config_lib
from experiments.run import events as events_lib
from experiments.run import outputs
from laq_jax import checkpoint as checkpoint_lib
from laq_jax import distributed
from laq_jax import metrics
from laq_jax import network as network_lib
from laq_jax import plotting
from laq_jax import privatizers
from laq_jax.record import Record


def full_objective(built: build_lib.Built, theta_P) -> float:
  """f(theta) on all shards, from the process's own copy of the data.

  `built.host_data`, not `built.data`: over a mesh of several processes the
  placed shards cannot be read back whole by one process.
  """
  return float(laq_jax.objective(built.problem, np.asarray(theta_P),
                                 built.host_data, built.hyper.l2))


class RunRecord:
  """What a run has produced so far: its record and test accuracies.

  Exactly what a checkpoint keeps besides the LoopState, so that a resumed
  run writes the same files as one that never stopped.
  """

  def __init__(self, num_workers: int, record: Record | None = None):
    # The chunks so far, joined only when the whole record is read (a
    # checkpoint, the files): joining at every chunk copied all the rounds
    # before it each time, quadratic in the run's length (a [T, M] field per
    # client: seconds at 20,000 rounds of 1,000 clients).
    self._chunks = [record if record is not None
                    else Record.empty(num_workers)]
    self._uploads = int(self._chunks[0].uploads.sum())
    self._bits = int(self._chunks[0].bits.sum())
    self._last_loss = _last_logged(self._chunks[0].loss)
    self.accuracy_at: dict[int, float] = {}

  @property
  def record(self) -> Record:
    """Every step so far, one Record."""
    if len(self._chunks) > 1:
      self._chunks = [Record.join(self._chunks)]
    return self._chunks[0]

  def append(self, chunk: Record) -> None:
    self._chunks.append(chunk)
    self._uploads += int(chunk.uploads.sum())
    self._bits += int(chunk.bits.sum())
    last = _last_logged(chunk.loss)
    if not math.isnan(last):
      self._last_loss = last

  @property
  def num_workers(self) -> int:
    return self._chunks[0].num_workers

  @property
  def uploads(self) -> int:
    return self._uploads

  @property
  def bits(self) -> int:
    return self._bits

  @property
  def last_loss(self) -> float:
    """The last logged loss (NaN where none is)."""
    return self._last_loss

  def meta(self) -> dict[str, Any]:
    # JSON floats round-trip exactly (repr), so resumed accuracies are equal.
    return {'accuracy_at': {str(k): v for k, v in self.accuracy_at.items()}}

  @classmethod
  def from_checkpoint(cls, num_workers: int,
                      restored: checkpoint_lib.Restored) -> RunRecord:
    a = restored.arrays
    # (checkpoints of older code named the fields without their suffixes)
    old = {'grad_norm': 'grad_norm_sq', 'sent': 'sent_M', 'bits': 'bits_M',
           'bits_down': 'bits_down_M'}
    a = {old.get(k, k): v for k, v in a.items()}
    record = cls(num_workers, Record.from_arrays(**a))
    record.accuracy_at = {int(k): float(v) for k, v in
                          restored.meta['accuracy_at'].items()}
    return record


def _last_logged(loss) -> float:
  logged = np.asarray(loss)[~np.isnan(loss)]
  return float(logged[-1]) if logged.size else math.nan


def diverged_message(at: int, value: float, rows: int, workdir, config,
                     initial: float | None = None,
                     stopped_at: int | None = None) -> str:
  """The error a diverged run ends with: where, why, what was kept.

  `at` is where the one rule (`laq_jax.metrics.diverged_at`) saw it,
  `stopped_at` where a NaN/inf loss stopped the run (None: it ran to its
  end)."""
  metrics_csv = pathlib.Path(workdir) / 'metrics.csv'
  if math.isfinite(value):  # ran away, finite
    why = (f'the loss f(theta^k) is {value} at iteration k={at}, more than '
           f'{metrics.DIVERGENCE_FACTOR:g}x f(theta^0) = {initial}')
  else:
    why = f'the loss f(theta^k) is {value} at iteration k={at}'
  if stopped_at is None:
    kept = (f'the run went on to its end; {metrics_csv} keeps every '
            f'iteration (0..{rows - 1})')
  else:
    kept = ((f'it became NaN/inf at k={stopped_at} and ' if stopped_at != at
             else '') + f'the run stopped there; {metrics_csv} keeps '
            f'iterations 0..{rows - 1}')
  algorithm = laq_jax.ALGORITHMS.get(config.algo)
  if algorithm is not None and algorithm.local:  # its server steps by eta_s
    rate = laq_jax.hyper.server_lr(algorithm, config.server_lr)
    hint = (f'a smaller server_lr (now {rate:g}) or client step '
            f'(params.{algorithm.client}.lr)')
  else:
    hint = f'a smaller step_size (now {config.step_size})'
  return (f'diverged: {why}; {kept}. summary.json says "diverged": true, '
          f'"diverged_at": {at}. Try {hint}.')


class Ran(NamedTuple):
  """What the chunks produced: the record, the final state and timing."""
  record: RunRecord
  state: Any
  diverged_at: int | None
  final_accuracy: float | None
  resumed_from: int | None
  run_seconds: float
  steady_rate: float | None
  events: events_lib.Events | None
  compile_seconds: float = 0.0  # of run_seconds (`startup.compile_seconds`)


def degenerate_settings(config, built, summary: dict) -> list[str]:
  """Settings that are legal but leave the run meaningless in a way its
  numbers alone do not show, one line each (a warning in the log and
  summary.json's `warnings`): top_k keeping every coordinate, a deadline
  no client met, round times that are not finite."""
  out = []
  algorithm = built.algorithm
  if algorithm.compressor == 'top_k':
    k = float(np.asarray(built.hyper.params['top_k']['k']))
    if k >= 1 and k >= built.num_params:
      out.append(f'top_k.k={k:g} keeps every one of the P={built.num_params:,} '
                 'coordinates (k is clipped to P): top_k is the identity '
                 'here, at the bits of values and indices')
  deadline = float(config_lib.get(config, 'deadline_s') or 0)
  if deadline > 0 and summary.get('total_uploads', 0) == 0:
    out.append(f'deadline_s={deadline:g}: no client met the deadline in any '
               'round, so nothing was uploaded and the model never moved')
  for key in ('total_time_s', 'target_time_s'):
    value = summary.get(key)
    if isinstance(value, float) and math.isinf(value):
      out.append(f'{key} is infinite (a round that never ends: check the '
                 'network profile\'s rates and straggler settings); '
                 'summary.json holds null for it')
      break
  return out


def summarize(config, built, ran: Ran, fstar_info, workdir) -> dict:
  """summary.json: the figures of `laq_jax.metrics.summarize` and the run's."""
  rec = ran.record.record
  loss_K = rec.loss
  stopped_at, final_accuracy = ran.diverged_at, ran.final_accuracy
  final_loss = (math.nan if stopped_at is not None else
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
    message = diverged_message(diverged_at, float(value), len(loss_K),
                               workdir, config,
                               float(loss_K[0]) if len(loss_K) else None,
                               stopped_at)
    final_accuracy = None
    final_loss = math.nan  # as a diverged sweep point's: no final figures
    if distributed.is_writer():
      logging.error('%s', message)
  summary = metrics.summarize(
      rec, final_loss=final_loss, fstar=fstar_info['fstar'],
      target=config.target_residual, final_test_accuracy=final_accuracy,
      loss_every=every, algo=config.algo,
      model=config.model, dataset=config.dataset,
      num_workers=config.num_workers, num_params=built.num_params,
      precision=config.precision, test_set=built.test_set,
      network=network_lib.describe(built.hyper.network,
                                   config.network.profile),
      flops_per_worker_step=np.broadcast_to(laq_jax.flops_per_worker_step(
          built.spec, built.host_data.sample_counts()),
          (config.num_workers,)).tolist())
  warnings = degenerate_settings(config, built, summary)
  if distributed.is_writer():
    for w in warnings:
      logging.warning('%s', w)
  summary.update(
      warnings=warnings,
      diverged=diverged_at is not None, diverged_at=diverged_at,
      diverged_message=message,
      fstar_method=fstar_info['fstar_method'],
      fstar_source=fstar_info['fstar_source'],
      resumed_from=ran.resumed_from,
      run_time_s=round(ran.run_seconds, 3),
      compile_time_s=round(ran.compile_seconds, 3),
      iterations_per_s=(round(ran.steady_rate, 3) if ran.steady_rate
                        else None))
  if built.algorithm.privacy != 'off':  # the (epsilon, delta) spent
    participants = rec.participants_M
    summary['dp'] = privatizers.accounting(
        built.algorithm.privacy, built.hyper.params[built.algorithm.privacy],
        rounds=int(summary['iterations']), num_clients=config.num_workers,
        participation=float(config.participation),
        clients_per_round=int(config.clients_per_round),
        participations=(int(np.max(np.sum(participants, axis=0)))
                        if participants is not None
                        else int(summary['iterations'])))
  return summary


def write_files(config, workdir: pathlib.Path, ran: Ran,
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
  grads = rec.fields.get('grads_M')
  if grads is not None and np.any(grads != 1):
    outputs.write_npy(workdir / outputs.GRADS_FILE, grads.astype(np.int32))
    outputs.write_npy(workdir / outputs.BITS_DOWN_FILE,
                      rec.bits_down_M.astype(np.int64))
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
