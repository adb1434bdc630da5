"""What a worker sends: the compressors, each with its exact bit cost. ::

    out, states = compress(grad_P, ref_P, key, hyper, parts, states)

A compressor C turns v = grad - ref into what the server reconstructs,
Q = ref + C(v). `ref` is the worker's last upload Qhat when the rule
compresses the *innovation* (LAQ), or 0 when it compresses the gradient itself
(QSGD, sparsified SGD). Which compressor runs is data (`Hyper.compressor`, an
index into COMPRESSORS), so a sweep over compressors stays one compiled
program; `parts` (static) lists the ones a program may meet, and only those
are compiled in: a single run pays for its own compressor alone. A new
compressor is one `REGISTRY.register(name, part)` from any code, a
`laq_jax.parts.Part` that may own parameters and per-worker state.

Bits per upload (p = number of parameters)::

  identity  32 p
  uniform   b p + 32 (the codes and the float32 radius; b p with
            `Hyper.authors_code`, as the authors' scripts count it)
  qsgd      32 (the norm) + per nonzero level l_i: the Elias-gamma code of
            its gap to the previous nonzero (its position), 1 sign bit and
            the Elias-gamma code of l_i, 2 floor(log2 l_i) + 1 bits (QSGD's
            own encoding, Alistarh et al. 2017, Sec. 3.1, with gamma for
            their recursive Elias code; what `laq_jax.wire` sends); with
            `Hyper.authors_code` the authors' count (see `qsgd`)
  rand_p    32 per kept value + 32 for the seed of the mask (the server
            regenerates the mask from it, so indices cost nothing); 32 per
            kept value with `Hyper.authors_code`
  top_k     k (32 + ceil(log2 p)): each kept value and its index
  sign      p + 32: a sign bit per coordinate and the float32 scale
  terngrad  2 p + 32: a ternary digit per coordinate and the float32 scale

top_k's k is data too (`Hyper.top_k`, a fraction of p or a count), so it
cannot use `lax.top_k` (static k): the k-th largest magnitude is found
exactly by bisection on the bits of the non-negative floats (31 passes in
float32, 63 in float64), ties broken by the lowest index. On a 2-core CPU,
159,010 magnitudes of 10 workers take about 3x `lax.top_k` with a static k
(docs/benchmarks.md).

Random compressors draw from `randomness.compress_key(seed, step, worker)`,
so every device layout and every program shape draws the same numbers.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax import parts as parts_lib
from laq_jax import registry
from laq_jax.parts import codecs
from laq_jax.parts import quantize
from laq_jax.parts.sparsify import (  # pylint: disable=unused-import
    randk_mask, top_k_count, top_k_mask)


def index(name: str) -> int:
  """The position of `name` in COMPRESSORS (what `Hyper.compressor` holds)."""
  return REGISTRY.index(name)


class Compressed(NamedTuple):
  """One worker's compressed upload.

  Attributes:
    value_P: Q = ref + C(grad - ref), what the server reconstructs.
    bits: the exact size of the upload in bits (int32).
  """
  value_P: jax.Array
  bits: jax.Array


def identity(grad_P, ref_P, key, hyper) -> Compressed:
  """Full precision: Q = g exactly, 32 bits per coordinate."""
  del ref_P, key, hyper
  return Compressed(grad_P, jnp.int32(32 * grad_P.shape[-1]))


def uniform(grad_P, ref_P, key, hyper) -> Compressed:
  """LAQ's b-bit uniform quantizer of grad - ref (see `laq_jax.quantize`)."""
  del key
  q = quantize.quantize_innovation(grad_P, ref_P, hyper.bits)
  radius_bits = jnp.where(hyper.authors_code, 0, 32).astype(jnp.int32)
  return Compressed(q.value_P, hyper.bits * grad_P.shape[-1] + radius_bits)


def elias_gamma_bits(level):
  """Length of the Elias-gamma code of each positive integer `level`.

  2 floor(log2 l) + 1, with floor(log2 l) read exactly off the float's
  exponent (l = m 2^e with m in [0.5, 1), so floor(log2 l) = e - 1).
  """
  _, exponent = jnp.frexp(level)
  return 2 * (exponent.astype(jnp.int32) - 1) + 1


def qsgd(grad_P, ref_P, key, hyper, *, params=None) -> Compressed:
  """QSGD's unbiased stochastic quantizer with s levels (Alistarh et al. 2017).

  `C(v)_i = ||v||_2 sign(v_i) l_i / s`, where `l_i = floor(s |v_i| / ||v||_2)`,
  plus 1 with probability equal to the fractional part it dropped.
  """
  params = hyper.params['qsgd'] if params is None else params
  v = grad_P - ref_P
  dtype = v.dtype
  norm = jnp.sqrt(collectives.sum_sq(v))
  safe_norm = jnp.where(norm > 0, norm, jnp.ones_like(norm))
  s = params['levels'].astype(dtype)
  scaled = s * jnp.abs(v) / safe_norm
  low = jnp.floor(scaled)
  u = jax.random.uniform(key, v.shape, dtype)
  frac = scaled - low
  # The authors' quantr (TPAMI-LAQ SGD/*.py) rounds up with probability
  # 1 - frac (biased; a zero coordinate becomes +||v|| / s), and counts
  # the sum over |l_i| >= 2 of log2 l_i + log2 log2 l_i + ... (while >= 2),
  # with no sign bits and no norm.
  authors = hyper.authors_code
  up = jnp.where(authors, u <= 1 - frac, u < frac)
  level = low + up.astype(dtype)
  level = jnp.where(norm > 0, level, jnp.zeros_like(level))
  # Theirs gives 0 the sign +1; a coordinate that is 0 in exact arithmetic
  # (a bias gradient 0.1 - 1/10) comes out +-1e-17 in an order of summation
  # that differs between programs, so |v_i| <= kappa ||v|| counts as 0 (the
  # quantizer's tie rule, `quantize.tie_tolerance`).
  zero = jnp.abs(v) <= quantize.tie_tolerance(dtype) * norm
  signs = jnp.where(authors, jnp.where(zero | (v >= 0), 1, -1).astype(dtype),
                    jnp.sign(v))
  value = ref_P + norm * signs * level / s
  # Each nonzero's position travels as its gap to the previous nonzero
  # (the first's: its index + 1), Elias-gamma coded: a count the wire
  # format can decode (`laq_jax.wire`).
  nonzero = level > 0
  index = jnp.arange(v.shape[-1], dtype=jnp.int32)
  previous = jax.lax.cummax(jnp.where(nonzero, index, -1))
  previous = jnp.concatenate([jnp.full((1,), -1, jnp.int32), previous[:-1]])
  gap = (index - previous).astype(dtype)
  per_value = jnp.where(nonzero, 1 + elias_gamma_bits(level)
                        + elias_gamma_bits(gap), 0)
  bits = 32 + jnp.sum(per_value, dtype=jnp.int32)
  bits = jnp.where(authors, jnp.round(iterated_log_bits(level)).astype(
      jnp.int32), bits)
  return Compressed(value, bits)


def iterated_log_bits(level_P):
  """The authors' QSGD bit count: sum_i of log2 l + log2 log2 l + ... over
  the terms >= 1 reached from `|l_i| >= 2` (their `while tem >= 2: tem =
  log2(tem); nbit += tem`), in float64 where enabled. Five rounds reach
  below 2 from any l <= 2^24."""
  t = jnp.abs(level_P).astype(jnp.promote_types(level_P.dtype, jnp.float32))
  total = jnp.zeros((), t.dtype)
  for _ in range(5):
    active = t >= 2
    t = jnp.where(active, jnp.log2(jnp.where(active, t, 2)), t)
    total = total + jnp.sum(jnp.where(active, t, 0))
  return total


def rand_p(grad_P, ref_P, key, hyper, *, params=None) -> Compressed:
  """Random sparsification (Wangni et al. 2018): keep with probability p,
  scale by 1/p (unbiased)."""
  params = hyper.params['rand_p'] if params is None else params
  v = grad_P - ref_P
  p = params['keep_prob'].astype(v.dtype)
  keep = jax.random.uniform(key, v.shape, v.dtype) < p
  value = ref_P + jnp.where(keep, v / p, jnp.zeros_like(v))
  # The authors' scripts count 32 per kept value, no seed.
  seed_bits = jnp.where(hyper.authors_code, 0, 32).astype(jnp.int32)
  return Compressed(value, 32 * jnp.sum(keep, dtype=jnp.int32) + seed_bits)


def top_k(grad_P, ref_P, key, hyper, *, params=None) -> Compressed:
  """The k largest `|v_i|`, the rest 0 (Stich et al. 2018; Lin et al. 2018)."""
  del key
  params = hyper.params['top_k'] if params is None else params
  v = grad_P - ref_P
  num_params = v.shape[-1]
  k = top_k_count(params['k'], num_params)
  keep = top_k_mask(v, k)
  return Compressed(ref_P + jnp.where(keep, v, jnp.zeros_like(v)),
                    top_k_bits(k, num_params))


def top_k_bits(k, num_params: int):
  """The size of k of p values with their indices: k (32 + ceil(log2 p))
  bits (32 per value when p is 1)."""
  per_value = 32 + math.ceil(math.log2(num_params)) if num_params > 1 else 32
  return k * per_value


def randk(grad_P, ref_P, key, hyper, *, params=None) -> Compressed:
  """Random-k (the 3PC and MARINA papers' Rand-K): k distinct coordinates
  of v = grad - ref (`randk_mask`) scaled by p / k, the rest 0; unbiased,
  omega = p / k - 1. 32 bits per value and 32 for the seed the server
  regenerates the mask from (rand_p's convention; Flower counts an index
  per value, the 3PC scripts 64 per value)."""
  params = hyper.params['randk'] if params is None else params
  v = grad_P - ref_P
  num_params = v.shape[-1]
  k = top_k_count(params['k'], num_params)
  keep = randk_mask(key, num_params, k, v.dtype)
  scale = (jnp.asarray(num_params, v.dtype) / k.astype(v.dtype))
  return Compressed(ref_P + jnp.where(keep, scale * v, jnp.zeros_like(v)),
                    32 * k + 32)


def sign(grad_P, ref_P, key, hyper) -> Compressed:
  """Scaled sign (Karimireddy et al. 2019): (||v||_1 / p) sign(v).

  `|v_i| <= kappa max|v|` counts as 0 (`quantize.tie_tolerance`): a
  coordinate that is zero in exact arithmetic must not take the sign of
  rounding noise, which differs between program shapes.
  """
  del key, hyper
  v = grad_P - ref_P
  num_params = v.shape[-1]
  magnitude = jnp.abs(v)
  scale = collectives.fixed_sum(magnitude) / num_params
  zero = magnitude <= quantize.tie_tolerance(v.dtype) * jnp.max(magnitude)
  signs = jnp.where(zero, jnp.zeros_like(v), jnp.sign(v))
  return Compressed(ref_P + scale * signs, jnp.int32(num_params + 32))


def terngrad(grad_P, ref_P, key, hyper) -> Compressed:
  """TernGrad (Wen et al. 2017): `max|v| sign(v_i) Bernoulli(|v_i| / max|v|)`,
  unbiased."""
  del hyper
  v = grad_P - ref_P
  scale = jnp.max(jnp.abs(v))
  safe = jnp.where(scale > 0, scale, jnp.ones_like(scale))
  u = jax.random.uniform(key, v.shape, v.dtype)
  keep = u < jnp.abs(v) / safe
  value = jnp.where(keep, scale * jnp.sign(v), jnp.zeros_like(v))
  return Compressed(ref_P + value, jnp.int32(2 * v.shape[-1] + 32))


MAX_LEVELS = 2**24  # s: l_i <= s fits a float32 exactly


def _innovation_codes(grad_P, ref_P, bits):
  return quantize.quantize_innovation(jnp.asarray(grad_P, jnp.float32),
                                      jnp.asarray(ref_P, jnp.float32),
                                      jnp.int32(bits))


# `quantize.reconstruct` jitted (the quantizer's own expression, so a
# server rounds as the worker did); compiled on its first call
_RECONSTRUCT = jax.jit(quantize.reconstruct)


def _reconstruct(ref_P, codes_P, radius, bits):
  return _RECONSTRUCT(ref_P, codes_P, radius, np.int32(bits))


def _norm(v_P):
  return jnp.sqrt(collectives.sum_sq(jnp.asarray(v_P, jnp.float32)))


# Every compressor: a `laq_jax.parts.Part` (a plain function
# (grad_P, ref_P, key, hyper) -> Compressed registers as one without
# parameters, state or wire format). Add one with
# `REGISTRY.register(name, part)`; a preset that uses it with
# `hyper.register_algorithm`. `wire=`: its wire format (`laq_jax.codecs`).
_IDENTITY = parts_lib.compressor('identity', identity, wire=codecs.Identity(),
                                 doc='full precision')
_UNIFORM = parts_lib.compressor(
    'uniform', uniform, wire=codecs.Uniform(_innovation_codes, _reconstruct),
    doc="LAQ's b-bit uniform quantizer")
_QSGD = parts_lib.compressor('qsgd', qsgd, params=[parts_lib.Param(
    'levels', 10_000, 'int', lambda a: (a >= 1) & (a <= MAX_LEVELS),
    f'an integer in 1..{MAX_LEVELS}',
    "s, levels of the qsgd compressor (authors': 1e4)")],
    wire=codecs.Qsgd(_norm, MAX_LEVELS), doc='QSGD (Alistarh et al. 2017)')
_RAND_P = parts_lib.compressor('rand_p', rand_p, params=[parts_lib.Param(
    'keep_prob', 0.5, check=lambda a: (a > 0) & (a <= 1),
    allowed='a number in (0, 1]',
    doc='p, the probability a coordinate is kept')],
    doc='random sparsification (Wangni et al. 2018)')
_TOP_K = parts_lib.compressor('top_k', top_k, params=[parts_lib.Param(
    'k', 0.01, check=lambda a: (a > 0) & ((a < 1) | (a == np.round(a))),
    allowed='a fraction of p in (0, 1) or a whole count >= 1',
    doc='k: a fraction of p (< 1) or a count (>= 1)')],
    wire=codecs.TopK(top_k_count), doc='top-k sparsification')


def _own_group(fn, name: str):
  """`fn` (top_k, randk) reading the parameter group `name` when called
  without params: a copy with its own k, called directly or by its slot."""
  def copy(grad_P, ref_P, key, hyper, *, params=None) -> Compressed:
    return fn(grad_P, ref_P, key, hyper,
              params=hyper.params[name] if params is None else params)
  copy.__name__ = copy.__qualname__ = f'_{name}'
  copy.__doc__ = f'{fn.__name__} with its own parameters ({name}.k).'
  return copy


def _k_param(default: float) -> parts_lib.Param:
  return parts_lib.Param(
      'k', default, check=lambda a: (a > 0) & ((a < 1) | (a == np.round(a))),
      allowed='a fraction of p in (0, 1) or a whole count >= 1',
      doc='k: a fraction of p (< 1) or a count (>= 1)')


# The after-LAQ family's (docs/algorithm.md, "After LAQ"): Rand-K, and the
# copies with their own k that a second slot (compressor_b) holds beside
# the first: opt-in, so no program that does not name them compiles them.
@functools.partial(jax.jit, static_argnums=1)
def _randk_wire_mask(key, num_params: int, k):
  """Rand-K's mask as the compressor draws it (float32: a deployment's)."""
  return randk_mask(key, num_params, jnp.asarray(k, jnp.int32), jnp.float32)


def _randk_wire_tag(key) -> int:
  """The 32-bit tag of a Rand-K payload: the first 32 bits drawn from its
  compressor key (`codecs.RandK`)."""
  return int(jax.random.bits(key, (), jnp.uint32))


_RANDK_CODEC = codecs.RandK(top_k_count, _randk_wire_mask, _randk_wire_tag)
_RANDK = parts_lib.compressor(
    'randk', randk, params=[_k_param(0.09)], opt_in=True, wire=_RANDK_CODEC,
    doc='Rand-K: k random coordinates scaled by p/k (3PC, MARINA)')
_TOP_K_B = parts_lib.compressor(
    'top_k_b', _own_group(top_k, 'top_k_b'), params=[_k_param(0.01)],
    opt_in=True,
    wire=codecs.TopK(top_k_count),
    doc='top-k with its own k, for the second slot (3PC v4)')
_TOP_K_DOWN = parts_lib.compressor(
    'top_k_down', _own_group(top_k, 'top_k_down'), params=[_k_param(0.01)],
    opt_in=True, wire=codecs.TopK(top_k_count),
    doc='top-k with its own k, for the broadcast (EF21-P)')
_RANDK_B = parts_lib.compressor(
    'randk_b', _own_group(randk, 'randk_b'), params=[_k_param(0.01)],
    opt_in=True, wire=_RANDK_CODEC,
    doc='Rand-K with its own k, for the second slot (3PC v2)')
REGISTRY: parts_lib.PartRegistry = parts_lib.PartRegistry(
    'compressor', [('identity', _IDENTITY), ('uniform', _UNIFORM),
                   ('qsgd', _QSGD), ('rand_p', _RAND_P), ('top_k', _TOP_K),
                   ('sign', sign), ('terngrad', terngrad), ('randk', _RANDK),
                   ('top_k_b', _TOP_K_B), ('randk_b', _RANDK_B),
                   ('top_k_down', _TOP_K_DOWN)])
# COMPRESSORS: the registry's names (a compressor registered later is in it).
__getattr__ = registry.names_attribute(__name__, COMPRESSORS=REGISTRY)


def chain(names: Sequence[str]) -> str:
  """Registers the compressors `names` in turn as one, named 'chain(a,b)'.

  Returns that name. Each link compresses what the one before sent,
  Q = ref + C_n(C_n-1(...C_1(grad - ref))) (top_k then qsgd: QSGD's levels
  on the k values top_k kept, Basu et al. 2019's Qsparse), each drawing
  from its own key (`jax.random.fold_in(key, i)`) at its own parameters.
  Its bits are the last one's count of what it was given: exact where that
  encoding names positions itself (qsgd's gaps: k values cost their levels
  and gaps, not p), an overcount where it is dense (uniform, sign: every
  coordinate, the zeros too). It has no wire format. A preset's compressor
  slot takes it by name: 'gd+compressor=chain(top_k,qsgd)'.

  Raises:
    ValueError: fewer than two names, one not registered, a stateful one,
      or a chain inside a chain.
  """
  names = tuple(names)
  if len(names) < 2:
    raise ValueError(f'chain({",".join(names)}): a chain takes two or more '
                     'compressors')
  parts = []
  for name in names:
    if name not in REGISTRY.names or name.startswith('chain('):
      raise ValueError(f'chain({",".join(names)}): {name!r} is not allowed; '
                       'a link is one of '
                       + ', '.join(n for n in REGISTRY.names
                                   if not n.startswith('chain(')))
    part = REGISTRY.get(name)
    if part.stateful:
      raise ValueError(f'chain({",".join(names)}): {name!r} keeps a state '
                       'per worker, which a chain does not carry')
    parts.append(part)
  name = f'chain({",".join(names)})'
  if name in REGISTRY.names:
    return name

  def chained(grad_P, ref_P, key, hyper):
    u = grad_P - ref_P
    zero = jnp.zeros_like(u)
    for i, part in enumerate(parts):
      out, _ = part.call(u, zero, None if key is None else
                         jax.random.fold_in(key, i), hyper,
                         params=parts_lib.own_params(hyper, part))
      u = out.value_P  # (0 + C_i(u): C_i(u) exactly)
    return Compressed(ref_P + u, out.bits)

  # (opt-in: compiled only into programs whose points name it)
  REGISTRY.register(name, parts_lib.compressor(
      name, chained, doc=' then '.join(names), opt_in=True))
  return name


def check_names(names: Sequence[str]) -> tuple[str, ...]:
  """`names` as a tuple of known compressors, in COMPRESSORS order."""
  return REGISTRY.check_names(names)


def init_states(parts: Sequence[parts_lib.Part], num_params: int, dtype,
                theta_P=None) -> dict[str, Any]:
  """{name: one worker's state} of the stateful compressors among `parts`
  (`theta_P`, theta^0, for an init that takes it)."""
  return {p.name: parts_lib.init_state(p, num_params, dtype, theta_P)
          for p in parts if p.stateful}


def compress(grad_P, ref_P, key, hyper, parts: Sequence[parts_lib.Part],
             states: dict | None = None) -> tuple[Compressed, dict]:
  """Q = ref + C(grad - ref) with C = COMPRESSORS[hyper.compressor].

  Args:
    grad_P: the worker's gradient g.
    ref_P: Qhat (compress the innovation) or zeros (compress g itself).
    key: this worker's PRNG key for this step.
    hyper: the run's scalar Hyper (a part's own parameters:
      `hyper.params[name]`).
    parts: the compressors this program may meet (static Part values); a
      `hyper.compressor` outside them selects the first (callers refuse it:
      `RunSpec.check_hyper`).
    states: {name: this worker's state} of the stateful ones among `parts`.

  Returns:
    (a `Compressed`, the states with the chosen compressor's updated).
  """
  states = dict(states or {})

  def branch(part, grad_P, ref_P, key, hyper, states):
    out, new = part.call(grad_P, ref_P, key, hyper,
                         params=parts_lib.own_params(hyper, part),
                         state=states.get(part.name))
    # Under shard_map a count computed from hyperparameters alone
    # (identity's, uniform's) is replicated while one computed from the data
    # (qsgd's) varies over the workers axis; lax.switch needs every branch to
    # agree. Adding a zero shaped from the gradient gives every count the
    # gradient's type (XLA folds the addition away).
    zero = jnp.zeros_like(grad_P[..., 0], dtype=jnp.int32)
    out = Compressed(out.value_P, out.bits + zero)
    if part.stateful:
      states = {**states, part.name: new}
    return out, states

  index = parts_lib.local_index(hyper.compressor, parts, REGISTRY)
  return parts_lib.switch(index, parts, branch, grad_P, ref_P, key, hyper,
                          states)
