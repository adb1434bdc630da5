"""Run statistics from a Trace, in plain NumPy: uploads, bits, target hits.

Conventions (the same as `laq_jax.run`'s Trace): row k of a trace is
iteration k; `loss[k]` is f(theta^k), the objective *before* step k, and
`sent[k]`, `bits[k]` are the uploads of step k, which produce theta^{k+1}.
So reaching theta^k costs the uploads of steps 0..k-1: `spent(x)[k]`.

Counts are int64: a long MLP run exceeds 2^31 bits.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple

import numpy as np

from laq_jax.sweeps.record import Record


def per_step(sent_TxM, bits_TxM) -> tuple[np.ndarray, np.ndarray]:
  """(uploads_T, bits_T): uploads and bits of each step, summed over workers."""
  sent_TxM = np.asarray(sent_TxM)
  bits_TxM = np.asarray(bits_TxM)
  return (sent_TxM.sum(axis=-1, dtype=np.int64),
          bits_TxM.sum(axis=-1, dtype=np.int64))


def cumulative(x_T) -> np.ndarray:
  """Running totals including step k (int64): cum[k] = x[0] + ... + x[k]."""
  return np.cumsum(np.asarray(x_T, np.int64), axis=-1, dtype=np.int64)


def spent(x_T) -> np.ndarray:
  """[T+1] totals *before* step k: what reaching theta^k cost (spent[0] = 0)."""
  x = np.asarray(x_T, np.int64)
  zero = np.zeros(x.shape[:-1] + (1,), np.int64)
  return np.concatenate([zero, cumulative(x)], axis=-1)


def spent_time(time_T) -> np.ndarray:
  """[T+1] simulated seconds *before* step k (float64; spent_time[0] = 0):
  the time reaching theta^k took."""
  x = np.asarray(time_T, np.float64)
  zero = np.zeros(x.shape[:-1] + (1,), np.float64)
  return np.concatenate([zero, np.cumsum(x, axis=-1)], axis=-1)


def first_at_or_below(values, target: float) -> int | None:
  """The first index k with values[k] <= target (NaN never counts), or None."""
  hits = np.flatnonzero(np.asarray(values, np.float64) <= target)
  return int(hits[0]) if hits.size else None


def at_target(residual_K, uploads_T, bits_T, target: float,
              bits_down_T=None, time_T=None) -> dict[str, int | None]:
  """Iteration, uploads and bits at which the residual first reaches `target`.

  Args:
    residual_K: f(theta^k) - f* for k = 0..K-1; K may be T + 1 (the last
      entry is the final parameters after all T steps) or T.
    uploads_T: uploads of each step (summed over workers).
    bits_T: (uplink) bits of each step.
    target: e.g. 1e-6.
    bits_down_T: downlink bits of each step, or None.
    time_T: simulated seconds of each step (`laq_jax.network`), or None.

  Returns:
    {'iteration': k, 'uploads': uploads of steps 0..k-1, 'bits': their bits}
    for the first k with residual <= target, 'bits_down' with
    `bits_down_T` and 'time_s' (their seconds) with `time_T`; every value
    None if none.
  """
  k = first_at_or_below(residual_K, target)
  out = {'iteration': k, 'uploads': None, 'bits': None}
  if bits_down_T is not None:
    out['bits_down'] = None
  if time_T is not None:
    out['time_s'] = None
  if k is None:
    return out
  out.update(uploads=int(spent(uploads_T)[k]), bits=int(spent(bits_T)[k]))
  if bits_down_T is not None:
    out['bits_down'] = int(spent(bits_down_T)[k])
  if time_T is not None:
    out['time_s'] = float(spent_time(time_T)[k])
  return out


def logged(num_steps: int, loss_every: int = 1, start: int = 0
           ) -> np.ndarray:
  """[num_steps] bool: which iterations k = start .. start+num_steps-1 log
  the objective f(theta^k): k % loss_every == 0 (`RunSpec.loss_every`; the
  trace holds NaN at the others)."""
  k = np.arange(start, start + num_steps)
  return k % max(int(loss_every), 1) == 0


# A run diverged when a logged loss is NaN or inf, or more than this many times
# its initial loss f(theta^0) (at any logged row, also after it reached its
# target): the one rule every summary, sweep row and study report uses.
DIVERGENCE_FACTOR = 10.0


def diverged_at(loss_T, final_loss: float, loss_every: int = 1,
                factor: float = DIVERGENCE_FACTOR) -> int | None:
  """Where a run diverged: the first logged k whose loss ran away.

  A logged f(theta^k) runs away when it is NaN or inf, or exceeds `factor`
  times the initial loss f(theta^0) (when f(theta^0) > 0; a loss that
  starts at 0 or below is checked for NaN/inf only).

  Args:
    loss_T: f(theta^k) for k = 0..T-1 (NaN where not logged).
    final_loss: f(theta^T).
    loss_every: the interval of the logged iterations (`logged`): a NaN at
      any other k means "not evaluated", not divergence.
    factor: the multiple of f(theta^0) that counts as divergence
      (`DIVERGENCE_FACTOR`; inf checks NaN/inf only).

  Returns:
    The first logged k in 0..T-1 that ran away, else T if f(theta^T) did,
    else None (the run did not diverge).
  """
  loss = np.append(np.asarray(loss_T, np.float64), float(final_loss))
  watched = np.append(logged(len(loss) - 1, loss_every), True)
  bad = ~np.isfinite(loss)
  initial = loss[0] if len(loss) > 1 else math.nan
  if math.isfinite(initial) and initial > 0 and math.isfinite(factor):
    with np.errstate(invalid='ignore'):
      bad |= loss > factor * initial
  at = np.flatnonzero(bad & watched)
  return int(at[0]) if at.size else None


def divergence_note(at: int | None, factor: float = DIVERGENCE_FACTOR
                     ) -> str:
  """How a report names a diverged point: 'diverged at k=…' (the rule in
  `diverged_at`), or '' for a point that did not diverge."""
  if at is None:
    return ''
  return (f'diverged at k={at} (loss NaN/inf or above {factor:g}x '
          'f(theta^0))')


def row_diverged_at(row: Mapping[str, Any]) -> int | None:
  """The iteration a result row (`summarize`'s, `sweep_metrics`', or a
  results.json point) records as where it diverged, or None."""
  at = row.get('diverged_at')
  if at is None or at == '':
    return None
  return int(float(at))


def row_diverged(row: Mapping[str, Any]) -> bool:
  """Whether a result row diverged by the one rule (`diverged_at`): its
  `diverged` mark, as every summary and sweep row sets it from the curve;
  a row without the mark (rows by hand, old results) is read by the same
  rule at its two ends: a `final_loss` that is None or not finite, or one
  above DIVERGENCE_FACTOR times its `initial_loss` (a row without a
  `final_loss` quotes no loss: not diverged). Such a point is named, never
  ranked."""
  if row.get('diverged') or row_diverged_at(row) is not None:
    return True
  if 'final_loss' not in row:  # a row that quotes no loss
    return False
  final, start = row['final_loss'], row.get('initial_loss')
  if final is None or not math.isfinite(float(final)):
    return True
  return (start is not None and math.isfinite(float(start)) and start > 0
          and final > DIVERGENCE_FACTOR * start)


def row_divergence(row: Mapping[str, Any]) -> str:
  """How every report names a diverged row: 'diverged at k=... (loss NaN/inf
  or above 10x f(theta^0))' (`divergence_note`), without 'at k=...' where
  the row does not say where; '' for a row that did not diverge."""
  if not row_diverged(row):
    return ''
  at = row_diverged_at(row)
  return (divergence_note(at) if at is not None else
          f'diverged (loss NaN/inf or above {DIVERGENCE_FACTOR:g}x '
          'f(theta^0))')


# What a Curve's value can be, with its axis label.
QUANTITIES = {
    'residual': r'loss residual $f(\theta^k) - f^*$',
    'paper_residual': (r"paper's residual $\frac{1}{M}f(\theta^k) - "
                       r'\min$ (min: smallest reached)'),
    'loss': r'loss $f(\theta^k)$ (f* unknown: not a residual)',
    'grad_norm_sq': r'squared gradient norm $\|\sum_m \nabla f_m(\theta^k)'
                    r'\|^2$',
}


class Curve(NamedTuple):
  """One run's curve against its x axes, at theta^0 .. theta^(K-1).

  Attributes:
    label: legend entry.
    value: [K] the quantity at theta^k (K = T + 1 when it includes the
      parameters after the last step, else T).
    iterations: [K] k.
    uploads: [K] uploads spent to reach theta^k (starts at 0).
    bits: [K] uplink bits spent to reach theta^k (starts at 0).
    quantity: what `value` is, a key of QUANTITIES.
    bits_down: [K] downlink bits spent to reach theta^k, or None.
    time_s: [K] simulated seconds spent to reach theta^k on a modeled
      network (`laq_jax.network`), or None.
  """
  label: str
  value: np.ndarray
  iterations: np.ndarray
  uploads: np.ndarray
  bits: np.ndarray
  quantity: str
  bits_down: np.ndarray | None = None
  time_s: np.ndarray | None = None

  @property
  def is_residual(self) -> bool:
    """Whether `value` is the exact residual f(theta^k) - f*."""
    return self.quantity == 'residual'

  @property
  def bits_total(self) -> np.ndarray:
    """Uplink and downlink bits spent to reach theta^k."""
    return self.bits if self.bits_down is None else self.bits + self.bits_down


def value_curve(label: str, value_K, uploads_T, bits_T,
                quantity: str, bits_down_T=None, time_T=None) -> Curve:
  """A Curve of any per-iterate quantity (K <= T + 1 values from theta^0);
  with `time_T` (seconds per step) its x axis 'time' too."""
  if quantity not in QUANTITIES:
    raise ValueError(f'quantity={quantity!r} is not allowed: use one of '
                     f'{", ".join(QUANTITIES)}')
  value = np.asarray(value_K, np.float64)
  size = value.shape[-1]
  down = None if bits_down_T is None else spent(bits_down_T)[..., :size]
  time_s = None if time_T is None else spent_time(time_T)[..., :size]
  return Curve(label, value, np.arange(size, dtype=np.int64),
               spent(uploads_T)[..., :size], spent(bits_T)[..., :size],
               quantity, down, time_s)


def make_curve(label: str, loss_T, final_loss: float, uploads_T, bits_T,
               fstar: float | None = None, bits_down_T=None,
               time_T=None) -> Curve:
  """A Curve from the per-step loss, the loss after the last step, and costs:
  the residual f(theta^k) - f* with f*, else the loss itself."""
  loss = np.append(np.asarray(loss_T, np.float64), float(final_loss))
  if fstar is None:
    return value_curve(label, loss, uploads_T, bits_T, 'loss', bits_down_T,
                       time_T)
  return value_curve(label, loss - fstar, uploads_T, bits_T, 'residual',
                     bits_down_T, time_T)


def paper_residual(loss_K, num_workers: int, reference: float | None = None
                   ) -> tuple[np.ndarray, float]:
  """The authors' residual: the average worker loss minus the smallest one.

  Args:
    loss_K: f(theta^k) = sum_m f_m(theta^k).
    num_workers: M.
    reference: the smallest average loss any algorithm of the experiment
      reached; None takes this run's own smallest (finite) value.

  Returns:
    ((1/M) f(theta^k) - reference, reference).
  """
  average = np.asarray(loss_K, np.float64) / num_workers
  if reference is None:
    finite = average[np.isfinite(average)]
    reference = float(finite.min()) if finite.size else math.nan
  return average - reference, float(reference)


def _number(x) -> float | None:
  """JSON-friendly float: None for None, NaN or inf."""
  if x is None:
    return None
  x = float(x)
  return x if math.isfinite(x) else None


def summarize(record: Record, *, final_loss: float, fstar: float | None,
              target: float, final_test_accuracy: float | None = None,
              paper_reference: float | None = None, loss_every: int = 1,
              **extra: Any) -> dict[str, Any]:
  """The summary of one run as a JSON-ready dict.

  Two residuals, each with its own at-target figures: the exact one,
  f(theta^k) - f* (`final_residual`, `target_*`; needs f*), and the
  paper's, (1/M) f(theta^k) - the smallest average loss reached
  (`paper_final_residual`, `paper_target_*`; see `paper_residual`).

  Args:
    record: the run's `laq_jax.record.Record` ([T] / [T, M]): f(theta^k),
      ||sum_m g_m||^2 (optional), who uploaded, the bits up and down
      (optional) of each step k.
    final_loss: f(theta^T) after the last step.
    fstar: the optimum f*, or None when unknown.
    target: the residual the at-target figures refer to (both definitions).
    final_test_accuracy: accuracy of theta^T, if evaluated.
    paper_reference: the smallest average loss of the experiment (None: this
      run's own).
    loss_every: the loss is logged at k % loss_every == 0 (NaN elsewhere):
      the at-target figures are those of the first logged iterate at or
      below the target (f(theta^T) counts as logged).
    **extra: further keys copied in first (algo, model, wall time, ...).

  Returns:
    Keys: iterations, total_uploads, total_bits, final_loss, final_residual,
    final_test_accuracy, fstar, target_residual, target_iteration,
    target_uploads, target_bits (None where f* is unknown or the target is not
    reached), paper_reference, paper_final_residual, paper_target_iteration,
    paper_target_uploads, paper_target_bits, last_grad_norm_sq, loss_every,
    diverged;
    with the record's bits_down_M also total_bits_down, target_bits_down
    and paper_target_bits_down; with its time_s (simulated seconds per
    step) total_time_s, target_time_s and paper_target_time_s; with its
    participants_M participation_rate (the mean over rounds and clients)
    and with its dropped_M dropped_by_deadline (participants a deadline cut
    off, over all rounds);
    plus `extra`.
  """
  loss_T, grad_norm_sq_T = record.loss, record.grad_norm_sq
  uploads_T, bits_T, down_T = record.uploads, record.bits, record.bits_down
  time_T = record.time_s
  loss = np.append(np.asarray(loss_T, np.float64), float(final_loss))
  hit = {'iteration': None, 'uploads': None, 'bits': None, 'bits_down': None,
         'time_s': None}
  if fstar is not None:
    hit = at_target(loss - fstar, uploads_T, bits_T, target, down_T, time_T)
  num_workers = record.num_workers
  paper, reference = paper_residual(loss, num_workers, paper_reference)
  paper_hit = at_target(paper, uploads_T, bits_T, target, down_T, time_T)
  last_norm = (None if grad_norm_sq_T is None or not len(grad_norm_sq_T)
               else _number(np.asarray(grad_norm_sq_T)[-1]))
  return {
      **extra,
      'iterations': int(len(uploads_T)),
      'total_uploads': int(uploads_T.sum()),
      'total_bits': int(bits_T.sum()),
      'final_loss': _number(final_loss),
      'final_residual': (_number(final_loss - fstar) if fstar is not None
                         else None),
      'final_test_accuracy': _number(final_test_accuracy),
      'fstar': _number(fstar),
      'target_residual': float(target),
      'target_iteration': hit['iteration'],
      'target_uploads': hit['uploads'],
      'target_bits': hit['bits'],
      'paper_reference': _number(reference),
      'paper_final_residual': _number(paper[-1]),
      'paper_target_iteration': paper_hit['iteration'],
      'paper_target_uploads': paper_hit['uploads'],
      'paper_target_bits': paper_hit['bits'],
      'last_grad_norm_sq': last_norm,
      **({} if down_T is None else {
          'total_bits_down': int(down_T.sum()),
          'target_bits_down': hit['bits_down'],
          'paper_target_bits_down': paper_hit['bits_down']}),
      **({} if time_T is None else {
          'total_time_s': float(spent_time(time_T)[-1]),
          'target_time_s': hit['time_s'],
          'paper_target_time_s': paper_hit['time_s']}),
      **({} if record.participants_M is None else {
          'participation_rate': (float(np.mean(record.participants_M))
                                 if record.num_steps else None)}),
      **({} if record.dropped_M is None else {
          'dropped_by_deadline': int(np.sum(record.dropped_M))}),
      'loss_every': int(loss_every),
      'diverged': diverged_at(loss_T, final_loss, loss_every) is not None,
  }
