"""Piecewise-constant schedules by iteration, as data: xi's multipliers.

A schedule is a few breakpoints (k_1, c_1), ..., (k_n, c_n) with
0 <= k_1 < k_2 < ... : the value it multiplies is used as is before k_1,
times c_j from iteration k_j on (until the next breakpoint). The factors are
not cumulative: `'300:2,500:6'` is xi for k < 300, 2 xi for 300 <= k < 500
and 6 xi from k = 500 on (the authors' minibatch-network script,
TPAMI-LAQ SGD/lasterrsgdDNN.py, which doubles its xi at k = 300 and triples
it again at k = 500).

In a `Hyper` a schedule is two arrays of SLOTS entries (the unused ones at
step NEVER with factor 1), so every schedule has the same shape: a sweep
stacks any schedules into one grid axis and a new schedule never
recompiles. Written as text ('300:2,500:6', '' for none) in configs and
sweeps, or as a sequence of (step, factor) pairs from Python.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np

from laq_jax.show import show

SLOTS = 8  # breakpoints a schedule may have
NEVER = 2**31 - 1  # the step of an unused slot (no int32 iteration reaches it)
ALLOWED = ("'' (none) or 'K1:C1,K2:C2,...': up to 8 breakpoints, steps "
           'integers 0 <= K1 < K2 < ... < 2**31-1, factors finite numbers '
           '>= 0 (the multiplier from step K on)')


def parse(value: Any, where: str = 'xi_schedule'
          ) -> tuple[tuple[int, float], ...]:
  """The breakpoints of a schedule given as text or as (step, factor) pairs.

  Args:
    value: '' / None (no schedule), 'K1:C1,K2:C2' or [(K1, C1), ...].
    where: the name the error message gives the value.

  Returns:
    ((K1, C1), ...) with int steps and float factors, steps increasing.

  Raises:
    ValueError: naming `where`, the value and what is allowed.
  """
  def fail():
    return ValueError(f'{where}={show(value)} is not allowed: it must be '
                      f'{ALLOWED}')

  if value is None:
    return ()
  if isinstance(value, str):
    text = value.strip()
    if not text:
      return ()
    pairs = []
    for item in text.split(','):
      step, sep, factor = item.partition(':')
      if not sep:
        raise fail()
      try:
        step_f, factor_f = float(step), float(factor)
      except ValueError:
        raise fail() from None
      if not step_f.is_integer():
        raise fail()
      pairs.append((int(step_f), factor_f))
  else:
    try:
      pairs = [tuple(p) for p in value]
    except TypeError:
      raise fail() from None
    if any(len(p) != 2 for p in pairs):
      raise fail()
    out = []
    for step, factor in pairs:
      if isinstance(step, (bool, np.bool_)) or not isinstance(
          step, (int, np.integer, float, np.floating)) or not float(
              step).is_integer() or isinstance(factor, (bool, np.bool_)):
        raise fail()
      try:
        out.append((int(step), float(factor)))
      except (TypeError, ValueError):
        raise fail() from None
    pairs = out
  if len(pairs) > SLOTS:
    raise fail()
  steps = [s for s, _ in pairs]
  if any(s < 0 or s >= NEVER for s in steps) or any(
      b <= a for a, b in zip(steps, steps[1:])):
    raise fail()
  if any(not math.isfinite(c) or c < 0 for _, c in pairs):
    raise fail()
  return tuple(pairs)


def to_text(pairs: Sequence[tuple[int, float]]) -> str:
  """The text form of parsed breakpoints ('' for none)."""
  return ','.join(f'{s}:{c:g}' for s, c in pairs)


def arrays(value: Any, dtype=jnp.float32) -> tuple[jnp.ndarray, jnp.ndarray]:
  """(steps int32 [SLOTS], factors `dtype` [SLOTS]) of a schedule, unused
  slots at step NEVER with factor 1."""
  pairs = parse(value)
  steps = np.full((SLOTS,), NEVER, np.int64)
  factors = np.ones((SLOTS,), np.float64)
  for j, (s, c) in enumerate(pairs):
    steps[j], factors[j] = s, c
  return jnp.asarray(steps, jnp.int32), jnp.asarray(factors, dtype)


def factor_at(steps_S, factors_S, step) -> jnp.ndarray:
  """The multiplier at iteration `step`: the factor of the last breakpoint
  at or before it, 1 before the first (traceable; steps increasing)."""
  out = jnp.ones((), factors_S.dtype)
  for j in range(steps_S.shape[-1]):
    out = jnp.where(step >= steps_S[..., j], factors_S[..., j], out)
  return out

