"""Hyperparameters as data, and the eight algorithm presets.

Every number a sweep may vary lives in `Hyper` as an array, so a new value never
recompiles and a grid of values is a batch of `Hyper`s (leading axis G). Only
shapes (worker count M, history length D, chunk length T, batch size, model) are
static.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A preset: (gradient: full | minibatch) x (quantize) x (lazy)."""
  name: str
  stochastic: bool
  quantize: bool
  lazy: bool


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in (
        Algorithm('gd', stochastic=False, quantize=False, lazy=False),
        Algorithm('qgd', stochastic=False, quantize=True, lazy=False),
        Algorithm('lag', stochastic=False, quantize=False, lazy=True),
        Algorithm('laq', stochastic=False, quantize=True, lazy=True),
        Algorithm('sgd', stochastic=True, quantize=False, lazy=False),
        Algorithm('qsgd', stochastic=True, quantize=True, lazy=False),
        Algorithm('slag', stochastic=True, quantize=False, lazy=True),
        Algorithm('slaq', stochastic=True, quantize=True, lazy=True),
    )
}


def get_algorithm(name: str) -> Algorithm:
  """Returns the preset called `name`, or a ValueError listing the choices."""
  try:
    return ALGORITHMS[name]
  except (KeyError, TypeError):
    raise ValueError(
        f'unknown algorithm {name!r}; allowed: {", ".join(ALGORITHMS)}'
    ) from None


class Hyper(NamedTuple):
  """Numeric hyperparameters of one run (scalars) or of a grid (leading G axis).

  Attributes:
    step_size: alpha, applied to the *sum* of worker gradients.
    bits: b, bits per coordinate of a quantized upload, 1..32 (int32).
    xi: total weight of the parameter-difference history; xi_d = xi / D.
    err_weight: c_e, weight of the quantization errors in the trigger.
    threshold_offset: c_0, constant added to the trigger threshold.
    max_staleness: tbar, a worker uploads after this many consecutive skips.
    l2: lam, the per-worker L2 regularization weight.
    seed: seeds the model initialization and the minibatch draws (int32).
    quantize: whether uploads go through the innovation quantizer (bool).
    lazy: whether workers may skip (the LAG/LAQ trigger) (bool).
  """
  step_size: Any
  bits: Any
  xi: Any
  err_weight: Any
  threshold_offset: Any
  max_staleness: Any
  l2: Any
  seed: Any
  quantize: Any
  lazy: Any


DEFAULTS = dict(step_size=0.02, bits=4, xi=0.8, err_weight=3.0,
                threshold_offset=0.0, max_staleness=100, l2=0.01, seed=0)


def validate(**values) -> None:
  """Raises ValueError naming the field, the value and what is allowed.

  Accepts scalars or arrays (every element is checked). Unknown names are
  ignored so callers can pass a whole config.
  """
  def arr(v):
    return np.asarray(v)

  checks = {
      'step_size': (lambda v: np.all(arr(v) > 0) and np.all(np.isfinite(arr(v))),
                    'a finite number > 0'),
      'bits': (lambda v: np.all(arr(v) == np.round(arr(v)))
               and np.all((arr(v) >= 1) & (arr(v) <= 32)),
               'an integer in 1..32'),
      'xi': (lambda v: np.all(arr(v) >= 0), 'a number >= 0'),
      'err_weight': (lambda v: np.all(arr(v) >= 0), 'a number >= 0'),
      'threshold_offset': (lambda v: np.all(arr(v) >= 0), 'a number >= 0'),
      'max_staleness': (lambda v: np.all(arr(v) == np.round(arr(v)))
                        and np.all((arr(v) >= 0) & (arr(v) < 2**31)),
                        'an integer in 0..2**31-1'),
      'l2': (lambda v: np.all(arr(v) >= 0), 'a number >= 0'),
      'seed': (lambda v: np.all(arr(v) == np.round(arr(v)))
               and np.all((arr(v) >= 0) & (arr(v) < 2**31)),
               'an integer in 0..2**31-1'),
  }
  for name, value in values.items():
    if name not in checks:
      continue
    ok, allowed = checks[name]
    try:
      good = bool(ok(value))
    except (TypeError, ValueError):
      good = False
    if not good:
      raise ValueError(f'{name}={value!r} is not allowed: it must be {allowed}')


def make_hyper(algo: str | Algorithm = 'laq', *, dtype=jnp.float32,
               **overrides) -> Hyper:
  """Builds a `Hyper` for one run from a preset name plus overrides.

  Args:
    algo: one of ALGORITHMS (or an Algorithm); sets the quantize/lazy switches.
    dtype: float dtype of the numeric fields (float32 or float64).
    **overrides: any Hyper field except quantize/lazy (which the preset sets);
      array values make a grid (see `stack_hypers` for the usual way).

  Returns:
    A Hyper of jnp arrays.
  """
  algorithm = algo if isinstance(algo, Algorithm) else get_algorithm(algo)
  unknown = set(overrides) - set(DEFAULTS)
  if unknown:
    raise ValueError(f'unknown hyperparameter(s) {sorted(unknown)}; '
                     f'allowed: {sorted(DEFAULTS)}')
  values = {**DEFAULTS, **overrides}
  validate(**values)
  return Hyper(
      step_size=jnp.asarray(values['step_size'], dtype),
      bits=jnp.asarray(values['bits'], jnp.int32),
      xi=jnp.asarray(values['xi'], dtype),
      err_weight=jnp.asarray(values['err_weight'], dtype),
      threshold_offset=jnp.asarray(values['threshold_offset'], dtype),
      max_staleness=jnp.asarray(values['max_staleness'], jnp.int32),
      l2=jnp.asarray(values['l2'], dtype),
      seed=jnp.asarray(values['seed'], jnp.int32),
      quantize=jnp.asarray(algorithm.quantize, bool),
      lazy=jnp.asarray(algorithm.lazy, bool),
  )


def stack_hypers(hypers: list[Hyper]) -> Hyper:
  """Stacks per-point Hypers into one grid Hyper with a leading G axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *hypers)


def grid_size(hyper: Hyper) -> int | None:
  """G for a grid Hyper, None for a single point."""
  shape = jnp.shape(hyper.step_size)
  return shape[0] if shape else None
