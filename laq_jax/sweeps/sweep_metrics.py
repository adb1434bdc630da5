"""A sweep's summaries: one row per grid point, its curves, its Pareto front.

    rows = summarize_sweep(result, fstar=f_star, target=1e-6,
                           test_accuracy=accuracy_G)

Each row is `laq_jax.metrics.summarize` of the point's own record
(`SweepResult.record.point(g)`), plus its hyperparameters.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from laq_jax.sweeps.metrics import diverged_at, summarize



def paper_references(result) -> np.ndarray:
  """[G] the paper's residual reference of each point: the smallest average
  worker loss (1/M) f(theta^k), k = 0..T, that any point with the same
  objective (the same l2) reached. Diverged values are ignored."""
  num_workers = result.sent_GxTxM.shape[-1]
  average = np.concatenate([result.loss_GxT, result.final_loss_G[:, None]],
                           axis=1) / num_workers
  average = np.where(np.isfinite(average), average, np.inf)
  lowest = average.min(axis=1)
  l2 = np.asarray([p['l2'] for p in result.points], np.float64)
  out = np.empty(len(result.points))
  for value in np.unique(l2):
    group = l2 == value
    out[group] = lowest[group].min()
  return np.where(np.isfinite(out), out, np.nan)


def summarize_sweep(result, *, fstar, target: float, test_accuracy=None
                    ) -> list[dict[str, Any]]:
  """One row per point: its hyperparameters, then `metrics.summarize`'s figures.

  Args:
    result: from `run_sweep`.
    fstar: f* (a number or None), or one per point (a sequence; the points
      may differ in l2 and so in f).
    target: the residual the at-target figures refer to (both the exact and
      the paper's residual; see `metrics.summarize`).
    test_accuracy: [G] accuracies of the final parameters, or None.

  Returns:
    JSON-ready dicts: 'point' (index), every GRID_KEYS key, then the keys of
    `metrics.summarize` (iterations, total_uploads, total_bits, final_loss,
    final_residual, final_test_accuracy, fstar, target_residual,
    target_iteration, target_uploads, target_bits, paper_reference,
    paper_final_residual, paper_target_iteration, paper_target_uploads,
    paper_target_bits, last_grad_norm_sq; None where unknown / not
    reached), diverged, diverged_at. The paper's residual of every point is
    measured from the smallest average loss any point of the sweep with the
    same objective reached (`paper_references`), as the authors did across
    the algorithms of an experiment.

  A point whose loss became NaN or inf at step k (`metrics.diverged_at`) is
  summarized as `experiments.run.train` summarizes a run stopped there: its
  steps 0..k count, its final loss and accuracy are None, `diverged` is
  True and `diverged_at` is k. The other points are unaffected (each point
  of the vmapped program computes on its own).
  """
  num = len(result.points)
  if fstar is None or np.ndim(fstar) == 0:
    fstar = [fstar] * num
  references = paper_references(result)
  rows = []
  for g, point in enumerate(result.points):
    acc = None if test_accuracy is None else float(test_accuracy[g])
    final = float(result.final_loss_G[g])
    every = 1 if result.loss_every_G is None else int(result.loss_every_G[g])
    at = diverged_at(result.loss_GxT[g], final, every)
    if at is not None:
      final, acc = math.nan, None
    record = result.record.point(g)
    if at is not None:
      record = record.head(at + 1)
    row = summarize(
        record, final_loss=final,
        fstar=None if fstar[g] is None else float(fstar[g]), target=target,
        final_test_accuracy=acc, paper_reference=float(references[g]),
        loss_every=every, point=g, **point)
    row['diverged_at'] = at
    rows.append(row)
  return rows


def columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
  """The rows as NumPy columns (None -> NaN in numeric columns)."""
  out = {}
  for key in rows[0]:
    values = [r[key] for r in rows]
    if all(isinstance(v, str) for v in values):
      out[key] = np.asarray(values)
    elif all(isinstance(v, (bool, np.bool_)) for v in values):
      out[key] = np.asarray(values, bool)
    elif all(isinstance(v, (int, np.integer)) for v in values):
      out[key] = np.asarray(values, np.int64)
    else:
      out[key] = np.asarray([np.nan if v is None else v for v in values],
                            np.float64)
  return out


def curve_arrays(result, *, max_upload_elements: int = 10**8
                 ) -> dict[str, np.ndarray]:
  """[G, T] curves plus each point's hyperparameters, for an .npz file.

  Returns:
    loss [G,T] (f(theta^k) before step k), final_loss [G] (f(theta^T)),
    grad_norm_sq [G,T] (||sum_m g_m||^2 at theta^k), paper_reference [G]
    (see `paper_references`), cum_uploads, cum_bits and cum_bits_down
    [G,T] (int64, through step k, summed over workers), loss_every [G]
    (loss is NaN at the iterations not logged), uploads [G,T,M] bool
    (who uploaded at step k) and bits [G,T,M] int64 (the bits each worker
    uploaded at step k: what `laq_jax.network.replay` times), both only
    when G*T*M <= max_upload_elements; time_s [G,T] (float64, each round's
    simulated seconds on the point's network) and slowest [G,T], and with
    them slowdown [G,T,M] (the stragglers' factors) under the same element
    limit; participants and dropped [G,T,M] bool (who took part, who the
    deadline cut) under the same limit, when some client was absent; grads
    [G,T,M] int32 and bits_down [G,T,M] int64 (the gradients each worker
    took, the bits each downloaded) under the same limit, when some worker
    did not take exactly one; and one
    [G] array per GRID_KEYS key (algo as strings; None
    values, such as a network field left at its profile's, as NaN), named
    grid_KEY where KEY is also a curve's name (grid_bits: each point's b).
  """
  record = result.record
  out = {
      'loss': np.asarray(result.loss_GxT, np.float64),
      'final_loss': np.asarray(result.final_loss_G, np.float64),
      'grad_norm_sq': np.asarray(result.grad_norm_sq_GxT, np.float64),
      'paper_reference': paper_references(result),
      'cum_uploads': record.cum_uploads,
      'cum_bits': record.cum_bits,
      'cum_bits_down': record.cum_bits_down,
      'loss_every': (np.ones(len(result.points), np.int64)
                     if result.loss_every_G is None
                     else np.asarray(result.loss_every_G, np.int64)),
  }
  small = result.sent_GxTxM.size <= max_upload_elements
  if small:
    out['uploads'] = np.asarray(result.sent_GxTxM, bool)
    out['bits'] = np.asarray(result.bits_GxTxM, np.int64)
  if record.time_s is not None:
    out['time_s'] = np.asarray(record.time_s, np.float64)
    out['slowest'] = np.asarray(record.slowest, np.int32)
    if small:
      out['slowdown'] = np.asarray(record.slowdown_M, np.float64)
  for name, field in (('participants', 'participants_M'),
                      ('dropped', 'dropped_M')):
    value = getattr(record, field, None)
    if small and value is not None and not record.participants_M.all():
      out[name] = np.asarray(value, bool)
  # The gradients each worker took and the bits each downloaded, where some
  # worker did not take exactly one (LASG's and CADA's pairs, LASG-PS's
  # idle workers, absent clients): what the replay needs besides bits.
  grads = record.fields.get('grads_M')
  if small and grads is not None and np.any(grads != 1):
    out['grads'] = np.asarray(grads, np.int32)
    out['bits_down'] = np.asarray(record.bits_down_M, np.int64)
  # A grid key named like a curve (bits: b) is kept as grid_KEY.
  out.update({(f'grid_{k}' if k in out else k): v for k, v in
              columns([dict(p) for p in result.points]).items()})
  return out


def pareto_front(cost, value, maximize: bool = True) -> np.ndarray:
  """Indices of the points no other point beats on both cost and value.

  A point is dominated when another costs no more and is no worse, and is
  strictly better in one of the two. NaNs are never on the front.

  Returns:
    Indices sorted by increasing cost.
  """
  cost = np.asarray(cost, np.float64)
  value = np.asarray(value, np.float64)
  if not maximize:
    value = -value
  ok = np.isfinite(cost) & np.isfinite(value)
  front = []
  for i in np.flatnonzero(ok):
    others = ok & (cost <= cost[i]) & (value >= value[i]) & (
        (cost < cost[i]) | (value > value[i]))
    if not others.any():
      front.append(i)
  front = np.asarray(front, np.int64)
  return front[np.argsort(cost[front], kind='stable')]
