"""Hyperparameters as data, and the algorithm presets.

Every number a sweep may vary lives in `Hyper` as an array, so a new value never
recompiles and a grid of values is a batch of `Hyper`s (leading axis G). That
includes the choices that make one algorithm another: which compressor, whether
it compresses the gradient or the innovation, whether workers may skip. Only
shapes (worker count M, history length D, chunk length T, batch size, model,
full-batch or minibatch gradients) are static.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import compressors


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A preset of the one rule.

  Attributes:
    name: what configs and sweeps call it.
    stochastic: minibatch gradients (else full shards).
    compressor: one of `compressors.COMPRESSORS`.
    innovation: compress g - Qhat (LAQ) rather than g itself (QSGD, SSGD).
    lazy: workers may skip an upload (the LAG/LAQ trigger).
    description: one line for docs and reports.
  """
  name: str
  stochastic: bool
  compressor: str
  innovation: bool
  lazy: bool
  description: str = ''

  @property
  def quantize(self) -> bool:
    """Whether uploads go through LAQ's innovation quantizer."""
    return self.compressor == 'uniform'


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in (
        Algorithm('gd', False, 'identity', False, False,
                  'gradient descent: every worker uploads its gradient'),
        Algorithm('qgd', False, 'uniform', True, False,
                  'GD with the b-bit innovation quantizer, never skipping'),
        Algorithm('lag', False, 'identity', False, True,
                  'lazily aggregated gradients (LAG-WK, Chen et al. 2018)'),
        Algorithm('laq', False, 'uniform', True, True,
                  'lazily aggregated quantized gradients (Sun et al. 2019)'),
        Algorithm('sgd', True, 'identity', False, False,
                  'minibatch SGD: every worker uploads its gradient'),
        Algorithm('sqgd', True, 'uniform', True, False,
                  'SGD with the b-bit innovation quantizer, never skipping'),
        Algorithm('slag', True, 'identity', False, True,
                  'LAG with minibatch gradients'),
        Algorithm('slaq', True, 'uniform', True, True,
                  'LAQ with minibatch gradients (the paper\'s SLAQ)'),
        Algorithm('qsgd', True, 'qsgd', False, False,
                  'QSGD (Alistarh et al. 2017): the gradient through the '
                  'unbiased s-level stochastic quantizer'),
        Algorithm('ssgd', True, 'rand_p', False, False,
                  'sparsified SGD (Wangni et al. 2018): each coordinate kept '
                  'with probability p, scaled by 1/p'),
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
  """Hyperparameters of one run (scalars) or of a grid (leading G axis).

  Attributes:
    step_size: alpha, applied to the *sum* of worker gradients.
    bits: b, bits per coordinate of the uniform quantizer, 1..32 (int32).
    xi: total weight of the parameter-difference history; xi_d = xi / D.
    err_weight: c_e, weight of the quantization errors in the trigger.
    threshold_offset: c_0, constant added to the trigger threshold.
    max_staleness: tbar, a worker uploads after this many consecutive skips.
    l2: lam, the per-worker L2 regularization weight.
    seed: seeds the model initialization, the minibatch draws and the random
      compressors (int32).
    levels: s, the number of levels of the qsgd compressor (int32).
    keep_prob: p, the probability rand_p keeps a coordinate.
    compressor: index into `compressors.COMPRESSORS` (int32).
    innovation: compress g - Qhat rather than g (bool).
    lazy: whether workers may skip (the LAG/LAQ trigger) (bool).
    authors_code: follow the authors' released scripts where they depart
      from Algorithm 1 (no forced upload at k = 0; history weights xi / k
      for k <= D; b*p bits per quantized upload) (bool).
  """
  step_size: Any
  bits: Any
  xi: Any
  err_weight: Any
  threshold_offset: Any
  max_staleness: Any
  l2: Any
  seed: Any
  levels: Any
  keep_prob: Any
  compressor: Any
  innovation: Any
  lazy: Any
  authors_code: Any

  @property
  def quantize(self):
    """Whether the uniform (LAQ) quantizer compresses the uploads (bool)."""
    return self.compressor == compressors.index('uniform')


# The numeric fields a config or a grid sets directly; the preset sets
# compressor, innovation and lazy.
DEFAULTS = dict(step_size=0.02, bits=4, xi=0.8, err_weight=3.0,
                threshold_offset=0.0, max_staleness=100, l2=0.01, seed=0,
                levels=10_000, keep_prob=0.5)
FLOAT_FIELDS = ('step_size', 'xi', 'err_weight', 'threshold_offset', 'l2',
                'keep_prob')
INT_FIELDS = ('bits', 'max_staleness', 'seed', 'levels')
MAX_LEVELS = 2**24  # s: l_i <= s fits a float32 exactly


def is_integer(value) -> bool:
  """A Python or NumPy integer (not a bool)."""
  return isinstance(value, (int, np.integer)) and not isinstance(
      value, (bool, np.bool_))


def is_number(value) -> bool:
  """A finite Python or NumPy integer or float (not a bool)."""
  return (is_integer(value) or isinstance(value, (float, np.floating))
          ) and math.isfinite(float(value))


def check_scalar(name: str, value, where: str | None = None) -> None:
  """Raises ValueError unless `value` is one allowed scalar for field `name`
  of DEFAULTS: an integer for INT_FIELDS, a finite number otherwise, in the
  field's range. `where` names the value in the message (default `name`)."""
  ok, allowed = CHECKS[name]
  typed = is_integer(value) if name in INT_FIELDS else is_number(value)
  if not (typed and ok(value)):
    raise ValueError(f'{where or name}={value!r} is not allowed: it must be '
                     f'{allowed}')


def _check(v, test) -> bool:
  a = np.asarray(v)
  return bool(np.all(test(a)))


def _integer(v, low, high) -> bool:
  a = np.asarray(v)
  if a.dtype == bool or not np.all(np.isfinite(a.astype(np.float64))):
    return False
  return bool(np.all(a == np.round(a)) and np.all((a >= low) & (a <= high)))


CHECKS = {
    'step_size': (lambda v: _check(v, lambda a: np.isfinite(a) & (a > 0)),
                  'a finite number > 0'),
    'bits': (lambda v: _integer(v, 1, 32), 'an integer in 1..32'),
    'xi': (lambda v: _check(v, lambda a: np.isfinite(a) & (a >= 0)),
           'a finite number >= 0'),
    'err_weight': (lambda v: _check(v, lambda a: np.isfinite(a) & (a >= 0)),
                   'a finite number >= 0'),
    'threshold_offset': (lambda v: _check(v, lambda a: np.isfinite(a)
                                          & (a >= 0)),
                         'a finite number >= 0'),
    'max_staleness': (lambda v: _integer(v, 0, 2**31 - 1),
                      'an integer in 0..2**31-1'),
    'l2': (lambda v: _check(v, lambda a: np.isfinite(a) & (a >= 0)),
           'a finite number >= 0'),
    'seed': (lambda v: _integer(v, 0, 2**31 - 1), 'an integer in 0..2**31-1'),
    'levels': (lambda v: _integer(v, 1, MAX_LEVELS),
               f'an integer in 1..{MAX_LEVELS} (s, the qsgd levels)'),
    'keep_prob': (lambda v: _check(v, lambda a: (a > 0) & (a <= 1)),
                  'a number in (0, 1] (p, the rand_p keep probability)'),
}


def validate(**values) -> None:
  """Raises ValueError naming the field, the value and what is allowed.

  Accepts scalars or arrays (every element is checked). Unknown names are
  ignored so callers can pass a whole config.
  """
  for name, value in values.items():
    if name not in CHECKS:
      continue
    ok, allowed = CHECKS[name]
    try:
      good = ok(value)
    except (TypeError, ValueError):
      good = False
    if not good:
      raise ValueError(f'{name}={value!r} is not allowed: it must be {allowed}')


def make_hyper(algo: str | Algorithm = 'laq', *, dtype=jnp.float32,
               authors_code: bool = False, **overrides) -> Hyper:
  """Builds a `Hyper` for one run from a preset name plus overrides.

  Args:
    algo: one of ALGORITHMS (or an Algorithm); sets compressor, innovation
      and lazy.
    dtype: float dtype of the numeric fields (float32 or float64).
    authors_code: follow the authors' scripts (see `Hyper`).
    **overrides: any field of DEFAULTS; array values make a grid (see
      `stack_hypers` for the usual way).

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
      **{f: jnp.asarray(values[f], dtype) for f in FLOAT_FIELDS},
      **{f: jnp.asarray(values[f], jnp.int32) for f in INT_FIELDS},
      compressor=jnp.asarray(compressors.index(algorithm.compressor),
                             jnp.int32),
      innovation=jnp.asarray(algorithm.innovation, bool),
      lazy=jnp.asarray(algorithm.lazy, bool),
      authors_code=jnp.asarray(authors_code, bool),
  )


def stack_hypers(hypers: list[Hyper]) -> Hyper:
  """Stacks per-point Hypers into one grid Hyper with a leading G axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *hypers)
