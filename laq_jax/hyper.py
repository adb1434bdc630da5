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
from laq_jax import schedule
from laq_jax.trigger import TRIGGERS


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A preset of the one rule: which parts it plugs in.

  Attributes:
    name: what configs and sweeps call it.
    stochastic: minibatch gradients (else full shards).
    compressor: one of `compressors.COMPRESSORS`.
    innovation: compress g - Qhat (LAQ, EF21) rather than g itself (QSGD).
    trigger: one of TRIGGERS: 'eager' (always upload), 'laq' (the LAG/LAQ
      rule), 'clag' (CLAG's, Richtarik et al. 2022).
    error_feedback: add what earlier compressions dropped before compressing.
    downlink: the server's broadcast is quantized too (b bits, LAQ's
      quantizer on the parameters' innovation).
    reference: where it comes from.
  """
  name: str
  stochastic: bool
  compressor: str
  innovation: bool
  trigger: str = 'eager'
  error_feedback: bool = False
  downlink: bool = False
  reference: str = ''

  @property
  def lazy(self) -> bool:
    """Whether workers may skip an upload."""
    return self.trigger != 'eager'

  @property
  def quantize(self) -> bool:
    """Whether uploads go through LAQ's innovation quantizer."""
    return self.compressor == 'uniform'


_A = Algorithm
ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in (
        # The LAQ paper's family (Sun et al. 2019).
        _A('gd', False, 'identity', False, 'eager', reference='GD'),
        _A('qgd', False, 'uniform', True, 'eager',
           reference='Sun et al. 2019: QGD, the quantizer that never skips'),
        _A('lag', False, 'identity', False, 'laq',
           reference='Chen et al. 2018: LAG-WK'),
        _A('laq', False, 'uniform', True, 'laq', reference='Sun et al. 2019'),
        _A('sgd', True, 'identity', False, 'eager', reference='SGD'),
        _A('sqgd', True, 'uniform', True, 'eager',
           reference='QGD with minibatch gradients'),
        _A('slag', True, 'identity', False, 'laq',
           reference='LAG with minibatch gradients'),
        _A('slaq', True, 'uniform', True, 'laq',
           reference='Sun et al. 2019: SLAQ'),
        # The field's compressors and rules.
        _A('qsgd', True, 'qsgd', False, 'eager',
           reference='Alistarh et al. 2017: QSGD'),
        _A('ssgd', True, 'rand_p', False, 'eager',
           reference='Wangni et al. 2018: sparsified SGD'),
        _A('terngrad', True, 'terngrad', False, 'eager',
           reference='Wen et al. 2017: TernGrad'),
        _A('ef_signsgd', True, 'sign', False, 'eager', error_feedback=True,
           reference='Karimireddy et al. 2019: EF-SignSGD'),
        _A('topk_ef', True, 'top_k', False, 'eager', error_feedback=True,
           reference='Stich et al. 2018; Lin et al. 2018 (DGC\'s core)'),
        _A('ef21', False, 'top_k', True, 'eager',
           reference='Richtarik, Sokolov, Fatkhullin 2021: EF21'),
        _A('ef21_sgd', True, 'top_k', True, 'eager',
           reference='EF21 with minibatch gradients'),
        _A('clag', False, 'top_k', True, 'clag',
           reference='Richtarik et al. 2022 (3PC): CLAG'),
        _A('two_laq', False, 'uniform', True, 'laq', downlink=True,
           reference='Sun et al., TPAMI 2020: LAQ with a quantized '
                     'broadcast'),
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
    xi: total weight of the parameter-difference history; xi_d = xi / D
      (times the schedule's factor at iteration k).
    err_weight: c_e, weight of the quantization errors in the trigger.
    threshold_offset: c_0, constant added to the trigger threshold.
    max_staleness: tbar, a worker uploads after this many consecutive skips.
    l2: lam, the per-worker L2 regularization weight.
    seed: seeds the model initialization, the minibatch draws and the random
      compressors (int32).
    levels: s, the number of levels of the qsgd compressor (int32).
    keep_prob: p, the probability rand_p keeps a coordinate.
    top_k: top_k's k: a fraction of p (< 1) or a count (>= 1).
    zeta: CLAG's trigger weight (upload iff ||g - Qhat||^2 > zeta h_1).
    downlink_bits: bits of the quantized broadcast, 0 for a full-precision
      one (int32).
    compressor: index into `compressors.COMPRESSORS` (int32).
    innovation: compress g - Qhat rather than g (bool).
    trigger: index into TRIGGERS (int32).
    error_feedback: add the worker's error memory before compressing (bool).
    authors_code: follow the authors' released scripts where they depart
      from Algorithm 1 (no forced upload at k = 0; their history weights;
      b*p bits per quantized upload; in minibatch runs their minibatch
      scripts' history window and contiguous-block minibatches, and QSGD's
      and SSGD's rounding and bit counts: docs/algorithm.md) (bool).
    xi_steps: the iterations from which xi's schedule changes its factor
      (int32 [schedule.SLOTS], unused slots at schedule.NEVER).
    xi_factors: xi's multiplier from each of those iterations on (not
      cumulative; 1 before the first), [schedule.SLOTS].
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
  top_k: Any
  zeta: Any
  downlink_bits: Any
  compressor: Any
  innovation: Any
  trigger: Any
  error_feedback: Any
  authors_code: Any
  xi_steps: Any
  xi_factors: Any

  @property
  def lazy(self):
    """Whether workers may skip an upload (bool)."""
    return self.trigger != TRIGGERS.index('eager')

  @property
  def quantize(self):
    """Whether the uniform (LAQ) quantizer compresses the uploads (bool)."""
    return self.compressor == compressors.index('uniform')


# The numeric fields a config or a grid sets directly; the preset sets
# compressor, innovation and lazy.
# (The preset sets compressor, innovation, trigger and error feedback;
# downlink_bits 0 means "b" for a preset that quantizes the broadcast.)
DEFAULTS = dict(step_size=0.02, bits=4, xi=0.8, err_weight=3.0,
                threshold_offset=0.0, max_staleness=100, l2=0.01, seed=0,
                levels=10_000, keep_prob=0.5, top_k=0.01, zeta=20.0,
                downlink_bits=0, xi_schedule='')
FLOAT_FIELDS = ('step_size', 'xi', 'err_weight', 'threshold_offset', 'l2',
                'keep_prob', 'top_k', 'zeta')
INT_FIELDS = ('bits', 'max_staleness', 'seed', 'levels', 'downlink_bits')
# Schedules: text '300:2,500:6' ('' none) or (step, factor) pairs, stored in
# Hyper as xi_steps / xi_factors (`laq_jax.schedule`).
SCHEDULE_FIELDS = ('xi_schedule',)
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
  if name in SCHEDULE_FIELDS:
    schedule.parse(value, where or name)
    return
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
    'top_k': (lambda v: _check(v, lambda a: np.isfinite(a) & (a > 0) & (
        (a < 1) | (a == np.round(a)))),
              'a fraction of p in (0, 1) or a whole count >= 1 (top_k\'s k)'),
    'zeta': (lambda v: _check(v, lambda a: np.isfinite(a) & (a >= 0)),
             'a finite number >= 0 (CLAG\'s trigger weight)'),
    'downlink_bits': (lambda v: _integer(v, 0, 32),
                      'an integer in 0..32 (0: the preset\'s default)'),
}


def validate(**values) -> None:
  """Raises ValueError naming the field, the value and what is allowed.

  Accepts scalars or arrays (every element is checked). Unknown names are
  ignored so callers can pass a whole config.
  """
  for name, value in values.items():
    if name in SCHEDULE_FIELDS:
      schedule.parse(value, name)
      continue
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
    algo: one of ALGORITHMS (or an Algorithm); sets compressor, innovation,
      trigger, error feedback and whether the broadcast is quantized.
    dtype: float dtype of the numeric fields (float32 or float64).
    authors_code: follow the authors' scripts (see `Hyper`).
    **overrides: any field of DEFAULTS; array values make a grid (see
      `stack_hypers` for the usual way). `xi_schedule` is text
      ('300:2,500:6') or (step, factor) pairs (`laq_jax.schedule`).

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
  values['downlink_bits'] = broadcast_bits(algorithm, values['bits'],
                                           values['downlink_bits'])
  xi_steps, xi_factors = schedule.arrays(values['xi_schedule'], dtype)
  return Hyper(
      **{f: jnp.asarray(values[f], dtype) for f in FLOAT_FIELDS},
      **{f: jnp.asarray(values[f], jnp.int32) for f in INT_FIELDS},
      compressor=jnp.asarray(compressors.index(algorithm.compressor),
                             jnp.int32),
      innovation=jnp.asarray(algorithm.innovation, bool),
      trigger=jnp.asarray(TRIGGERS.index(algorithm.trigger), jnp.int32),
      error_feedback=jnp.asarray(algorithm.error_feedback, bool),
      authors_code=jnp.asarray(authors_code, bool),
      xi_steps=xi_steps,
      xi_factors=xi_factors,
  )


def broadcast_bits(algorithm: Algorithm, bits, requested):
  """The broadcast's bits for `algorithm`: 0 (full precision) unless the
  preset quantizes it, then `requested`, or b when `requested` is 0."""
  if not algorithm.downlink:
    return np.zeros_like(np.asarray(requested))
  return np.where(np.asarray(requested) > 0, requested, bits)


def stack_hypers(hypers: list[Hyper]) -> Hyper:
  """Stacks per-point Hypers into one grid Hyper with a leading G axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *hypers)
