"""Wire formats: how a compressor's uploads travel as bytes. ::

    part = parts.compressor('mine', fn, wire=MyCodec())   # declares one
    wire.Format('mine', p, **values)   # the run's format (laq_jax.wire)

A compressor declares its wire format by the `Codec` it gives its part
(`laq_jax.parts.compressor(..., wire=codec)`), or has none (it is then not
deployable); `laq_jax.wire` reads the codec off the part, so it names no
compressor and a user's compressor deploys as a built-in does. A codec
packs the compressor's output into one big-endian bit string
(`np.packbits`), so a payload is the accounted bits rounded up to whole
bytes (the last byte's spare bits are 0). The built-in ones::

  identity  p float32 values (32 p bits).
  uniform   LAQ's b-bit codes, b bits each, then the float32 radius R
            (b p + 32 bits); the server rebuilds Q = Qhat + 2 tau R q - R
            from its own copy of Qhat.
  qsgd      the float32 norm, then per nonzero level, in index order: the
            Elias-gamma code of its gap to the previous nonzero (the first:
            its index + 1), a sign bit (1: negative) and the Elias-gamma
            code of the level (QSGD's encoding, Alistarh et al. 2017).
  top_k     k indices of ceil(log2 p) bits each, ascending, then their k
            float32 values (k (32 + ceil(log2 p)) bits).
  randk     the 32-bit tag of the mask's key, then the k kept values, in
            ascending index order (32 k + 32 bits); the server draws the
            mask from the run's keyed stream (seed, round, client) and
            checks the tag (`RandK`; the estimators' uplinks send it).

A codec's decoder raises `WireError` naming what is wrong; `wire.decode`
adds what every format shares (the declared length, a finite reconstruction
within `wire.bound`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

from laq_jax.parts.bits import (WireError, _gamma, finite, float_bits,  # noqa: F401
                                pack, payload_bytes, read_float, read_uint,
                                uint_bits, unpack)

MAX_BITS = 32  # b: LAQ's codes travel in at most 32 bits each


class Codec:
  """A compressor's wire format. Subclass it and override what differs::

    value_names      the integers the format is made of (b, s, k...)
    values(p, params, hyper)   those integers for one point (its Hyper,
                     and the part's own parameters `params`)
    check(fmt)       ValueError on values the format cannot hold
    fixed_bits(fmt)  the payload's bits, or None where they depend on the
                     values (then `max_bits` bounds them)
    fields(fmt, grad_P, ref_P, value_P, norm)   the upload's fields, from
                     what the compressor computed (Q = value_P)
    encode(fmt, fields) -> bytes
    decode(fmt, payload, ref_P, ends) -> Q

  `fmt` is the `laq_jax.wire.Format`: `fmt.num_params` and each value by
  name (`fmt.bits`). A variable-length decoder appends to `ends` the bit its
  entries end at (`wire.decode` compares it with the declared count).
  """
  value_names: tuple[str, ...] = ()

  def values(self, num_params: int, params: Mapping[str, Any],
             hyper) -> dict[str, int]:
    del num_params, params, hyper
    return {}

  def check(self, fmt) -> None:
    del fmt

  def fixed_bits(self, fmt) -> int | None:
    raise NotImplementedError

  def max_bits(self, fmt) -> int:
    """The most bits a valid payload takes: what a server reads at most
    before refusing one (a fixed format's own)."""
    fixed = self.fixed_bits(fmt)
    if fixed is None:
      raise NotImplementedError(f'{type(self).__name__}: a variable-length '
                                'format must bound its payload (max_bits)')
    return fixed

  def fields(self, fmt, grad_P, ref_P, value_P, norm=None) -> dict:
    raise NotImplementedError

  def encode(self, fmt, fields: Mapping[str, np.ndarray]) -> bytes:
    raise NotImplementedError

  def decode(self, fmt, payload: bytes, ref_P: np.ndarray,
             ends: list | None = None) -> np.ndarray:
    raise NotImplementedError


# --- the built-in formats ----------------------------------------------------


class Identity(Codec):
  """p float32 values."""

  def fixed_bits(self, fmt):
    return 32 * fmt.num_params

  def fields(self, fmt, grad_P, ref_P, value_P, norm=None):
    return {'value_P': np.asarray(value_P, np.float32)}

  def encode(self, fmt, fields):
    value = np.asarray(fields['value_P'], np.float32).reshape(-1)
    if value.size != fmt.num_params:
      raise ValueError(f'{value.size} values for p = {fmt.num_params}')
    return value.astype('>f4').tobytes()

  def decode(self, fmt, payload, ref_P, ends=None):
    unpack(payload, 32 * fmt.num_params, fmt.compressor)
    return finite(np.frombuffer(payload, '>f4').astype(np.float32),
                  fmt.compressor)


class Uniform(Codec):
  """LAQ's b-bit codes and the float32 radius; `reconstruct` is the
  quantizer's own expression (the server rounds as the worker did)."""
  value_names = ('bits',)

  def __init__(self, quantize: Callable, reconstruct: Callable):
    self._quantize, self._reconstruct = quantize, reconstruct

  def values(self, num_params, params, hyper):
    return {'bits': int(np.asarray(hyper.bits))}

  def check(self, fmt):
    if not 1 <= fmt.bits <= MAX_BITS:
      raise ValueError(f'bits={fmt.bits}: it must be in 1..{MAX_BITS}')

  def fixed_bits(self, fmt):
    return fmt.bits * fmt.num_params + 32

  def fields(self, fmt, grad_P, ref_P, value_P, norm=None):
    q = self._quantize(grad_P, ref_P, fmt.bits)
    return {'codes_P': np.asarray(q.codes_P), 'radius': np.asarray(q.radius)}

  def encode(self, fmt, fields):
    codes = np.asarray(fields['codes_P']).reshape(-1)
    if codes.size != fmt.num_params or np.any(codes < 0) or np.any(
        codes > 2.0**fmt.bits - 1):
      raise ValueError(f'codes must be {fmt.num_params} integers in '
                       f'0..{2**fmt.bits - 1}')
    return pack(np.concatenate([uint_bits(codes, fmt.bits),
                                float_bits(fields['radius'])]))

  def decode(self, fmt, payload, ref_P, ends=None):
    p, b = fmt.num_params, fmt.bits
    bits = unpack(payload, b * p + 32, fmt.compressor)
    codes = read_uint(bits[:b * p], b).astype(np.float32)
    radius = finite(read_float(bits[b * p:])[0], 'uniform radius')
    if radius < 0:
      raise WireError(f'uniform radius {radius} is negative')
    return np.asarray(self._reconstruct(ref_P, codes, np.float32(radius), b))


class Qsgd(Codec):
  """QSGD's norm and its Elias-gamma coded nonzero levels; `norm` computes
  the compressor's own norm of v where the caller does not pass it."""
  value_names = ('levels',)

  def __init__(self, norm: Callable, max_levels: int):
    self._norm, self._max_levels = norm, max_levels

  def values(self, num_params, params, hyper):
    return {'levels': int(np.asarray(params['levels']))}

  def check(self, fmt):
    if not 1 <= fmt.levels <= self._max_levels:
      raise ValueError(f'levels={fmt.levels}: it must be in '
                       f'1..{self._max_levels}')

  def fixed_bits(self, fmt):
    return None

  def max_bits(self, fmt):
    """Every coordinate an entry, its gap and level at their longest."""
    longest = lambda n: 2 * max(1, math.ceil(math.log2(n + 1))) + 1
    return 32 + fmt.num_params * (longest(fmt.num_params) + 1
                                  + longest(fmt.levels))

  def fields(self, fmt, grad_P, ref_P, value_P, norm=None):
    """The levels read back off Q (exact: each level at most 2^24), the
    norm again where not given (exact where `|Qhat| << ||v|| / s`: QSGD compresses the
    gradient, Qhat = 0)."""
    ref = np.asarray(ref_P, np.float32)
    if norm is None:
      norm = self._norm(np.asarray(grad_P, np.float32) - ref)
    norm = np.float32(np.asarray(norm))
    if norm == 0:
      return {'norm': norm, 'signed_levels_P': np.zeros(ref.shape, np.int64)}
    value = np.asarray(value_P, np.float32)
    signed = np.rint((value - ref).astype(np.float64) * fmt.levels
                     / np.float64(norm)).astype(np.int64)
    return {'norm': norm, 'signed_levels_P': signed}

  @staticmethod
  def bits_of(fields: Mapping[str, np.ndarray]) -> int:
    """A payload's bits (the count `compressors.qsgd` makes)."""
    levels = np.asarray(fields['signed_levels_P']).reshape(-1)
    bits, previous = 32, -1
    for i in np.flatnonzero(levels):
      bits += len(_gamma(int(i) - previous)) + 1 + len(_gamma(abs(int(
          levels[i]))))
      previous = int(i)
    return bits

  def encode(self, fmt, fields):
    levels = np.asarray(fields['signed_levels_P']).reshape(-1)
    parts = [''.join(map(str, float_bits(fields['norm'])))]
    previous = -1
    for i in np.flatnonzero(levels):
      level = int(levels[i])
      parts.append(_gamma(int(i) - previous) + ('1' if level < 0 else '0')
                   + _gamma(abs(level)))
      previous = int(i)
    text = ''.join(parts)
    return pack(np.frombuffer(text.encode(), np.uint8) - ord('0'))

  def decode(self, fmt, payload, ref_P, ends=None):
    p = fmt.num_params
    if len(payload) < 4:
      raise WireError(f'qsgd payload of {len(payload)} bytes: at least 4 '
                      '(the norm)')
    bits = np.unpackbits(np.frombuffer(payload, np.uint8))
    norm = finite(read_float(bits[:32])[0], 'qsgd norm')
    if norm < 0:
      raise WireError(f'qsgd norm {norm} is negative')
    text = (bits[32:] + ord('0')).tobytes().decode()
    end, pos, previous = len(text), 0, -1
    signed = np.zeros(p, np.float32)

    def gamma(at):
      one = text.find('1', at)
      if one < 0:
        return None, end
      width = one - at
      if width > 31 or one + width + 1 > end:
        raise WireError(f'qsgd payload: a malformed Elias-gamma code at bit '
                        f'{32 + at}')
      return int(text[one:one + width + 1], 2), one + width + 1

    while True:
      gap, after = gamma(pos)
      if gap is None:  # only the spare zeros are left
        if end - pos >= 8:
          raise WireError(f'qsgd payload: {end - pos} trailing zero bits (at '
                          'most 7 pad the last byte)')
        break
      index = previous + gap
      if index >= p:
        raise WireError(f'qsgd index {index} out of range: p = {p}')
      if after >= end:
        raise WireError('qsgd payload ends inside an entry')
      negative = text[after] == '1'
      level, pos = gamma(after + 1)
      if level is None:
        raise WireError('qsgd payload ends inside an entry')
      if level > fmt.levels:
        raise WireError(f'qsgd level {level} out of range: s = {fmt.levels}')
      signed[index] = -level if negative else level
      previous = index
    if norm == 0 and signed.any():
      raise WireError('qsgd payload: nonzero levels with a zero norm')
    if ends is not None:
      ends.append(32 + pos)  # the bits its entries take (the rest: padding)
    s = np.float32(fmt.levels)
    signs, level = np.sign(signed), np.abs(signed)
    # compressors.qsgd's expression, in its order
    return (ref_P + norm * signs * level / s).astype(np.float32)


class _KCodec(Codec):
  """A codec that keeps k of the p coordinates: `count` turns the part's
  parameter `k` into k, checked against 1..p."""
  value_names = ('k',)

  def __init__(self, count: Callable):
    self._count = count

  def values(self, num_params, params, hyper):
    return {'k': int(np.asarray(self._count(np.asarray(params['k']),
                                            num_params)))}

  def check(self, fmt):
    if not 1 <= fmt.k <= fmt.num_params:
      raise ValueError(f'k={fmt.k}: it must be in 1..{fmt.num_params}')


class TopK(_KCodec):
  """k ascending indices of ceil(log2 p) bits, then their k float32 values;
  `count` turns the part's parameter into k."""

  @staticmethod
  def index_bits(fmt) -> int:
    """Bits of one index, ceil(log2 p) (at least 1)."""
    return max(1, math.ceil(math.log2(fmt.num_params)))

  def fixed_bits(self, fmt):
    return fmt.k * (32 + self.index_bits(fmt))

  def fields(self, fmt, grad_P, ref_P, value_P, norm=None):
    """The kept entries are where Q differs from Qhat (v_i there); where
    fewer differ (a kept v_i of 0, or one that rounds away against Qhat),
    the lowest other indices fill the k, each sending 0: the server's
    reconstruction is Q exactly either way."""
    ref = np.asarray(ref_P, np.float32).reshape(-1)
    value = np.asarray(value_P, np.float32).reshape(-1)
    v = np.asarray(grad_P, np.float32).reshape(-1) - ref
    moved = value != ref
    fill = np.flatnonzero(~moved)[:fmt.k - int(moved.sum())]
    indices = np.sort(np.concatenate([np.flatnonzero(moved), fill]))
    return {'indices_K': indices, 'values_K': np.where(moved[indices],
                                                       v[indices], 0)}

  def encode(self, fmt, fields):
    indices = np.asarray(fields['indices_K'], np.int64).reshape(-1)
    values = np.asarray(fields['values_K'], np.float32).reshape(-1)
    if indices.size != fmt.k or values.size != fmt.k:
      raise ValueError(f'top_k sends k = {fmt.k} indices and values')
    return pack(np.concatenate([uint_bits(indices, self.index_bits(fmt)),
                                float_bits(values)]))

  def decode(self, fmt, payload, ref_P, ends=None):
    width, k, p = self.index_bits(fmt), fmt.k, fmt.num_params
    bits = unpack(payload, k * (32 + width), fmt.compressor)
    indices = read_uint(bits[:k * width], width).astype(np.int64)
    values = finite(read_float(bits[k * width:]), 'top_k values')
    if indices.max() >= p:
      raise WireError(f'top_k index {int(indices.max())} out of range: p '
                      f'= {p}')
    if k > 1 and np.any(np.diff(indices) <= 0):
      raise WireError('top_k indices not strictly ascending (a repeat or '
                      'out of order)')
    out = np.array(ref_P, np.float32)
    out[indices] = out[indices] + values
    return out


class RandK(_KCodec):
  """Rand-K: the 32-bit tag of the mask's key, then the k kept values
  (already scaled by p / k) as float32 in ascending index order (32 k + 32
  bits). The mask is not sent: it is drawn from the run's keyed stream
  (`randomness.compress_key(seed, round, client)`, which the server knows),
  and the tag, the first 32 bits drawn from that key, is checked against
  the server's own draw (a payload made for another round, client or seed
  is refused). `count` turns the part's parameter into k, `mask(key, p, k)`
  is the compressor's own mask and `tag(key)` the 32-bit tag. Its codec
  needs the key (`needs_key`): `laq_jax.wire` passes it."""
  needs_key = True

  def __init__(self, count: Callable, mask: Callable, tag: Callable):
    super().__init__(count)
    self._mask, self._tag = mask, tag

  def fixed_bits(self, fmt):
    return 32 * fmt.k + 32

  def _indices(self, fmt, key) -> np.ndarray:
    if key is None:
      raise ValueError(f'{fmt.compressor}: its wire format needs the '
                       'compressor key (laq_jax.wire passes key=)')
    return np.flatnonzero(np.asarray(self._mask(key, fmt.num_params, fmt.k)))

  def fields(self, fmt, grad_P, ref_P, value_P, norm=None, key=None):
    """The tag and Q - Qhat at the key's k coordinates, as the compressor
    computed them (p / k times v_i, in float32)."""
    indices = self._indices(fmt, key)
    v = (np.asarray(grad_P, np.float32).reshape(-1)
         - np.asarray(ref_P, np.float32).reshape(-1))
    scale = np.float32(fmt.num_params) / np.float32(fmt.k)
    return {'tag': np.uint32(self._tag(key)), 'indices_K': indices,
            'values_K': scale * v[indices]}

  def encode(self, fmt, fields):
    values = np.asarray(fields['values_K'], np.float32).reshape(-1)
    if values.size != fmt.k:
      raise ValueError(f'{fmt.compressor} sends k = {fmt.k} values')
    return pack(np.concatenate([uint_bits(fields['tag'], 32),
                                float_bits(values)]))

  def decode(self, fmt, payload, ref_P, ends=None, key=None):
    bits = unpack(payload, 32 * fmt.k + 32, fmt.compressor)
    tag, expected = int(read_uint(bits[:32], 32)[0]), int(self._tag(key))
    if tag != expected:
      raise WireError(f'{fmt.compressor} mask tag {tag:#010x}: the run\'s '
                      f'keyed draw for this round and client is '
                      f'{expected:#010x} (a payload made for another round, '
                      'client or seed)')
    values = finite(read_float(bits[32:]), f'{fmt.compressor} values')
    indices = self._indices(fmt, key)
    out = np.array(ref_P, np.float32)
    out[indices] = out[indices] + values
    return out


class Uplink:
  """An estimator's wire: how its upload travels when it is not one
  compressor's payload against a reference (`laq_jax.deploy.uplink`
  runs it). Its `fn(io, *, params) -> Q` is written once for both halves:
  it sends segments, each one compressor slot's payload, and returns Q
  from what they reconstruct and the server's copy of Qhat::

    io.send(slot, x, ref)  the segment of slot 'compressor', 'compressor_b'
                           or 'identity' compressing x() against ref (None:
                           0); returns what it reconstructs, ref + C(x - ref)
    io.qhat                Qhat (the worker's copy, or the server's)
    io.grad()              g (called only on the worker, inside x)
    io.state               the estimator's own state before the round (read
                           only on the worker, inside x)
    io.new_state           and after it (DASHA-MVR's h')
    io.coin, io.hyper, io.num_params   the round's u_k, the point's Hyper, p

  MARINA's: `io.qhat + io.send('compressor', lambda: io.grad() -
  io.state['y'], None)`, or on the coin's rounds `io.send('identity',
  io.grad, None)`. The segments' formats may depend on the round (its
  coin), never on the values; every segment but the last has a fixed length
  (the payload is their bits end to end, rounded up to whole bytes once).
  `slots`: the compressor slots it may send (each must have a wire
  format)."""

  def __init__(self, fn: Callable, slots: tuple[str, ...] = ('compressor',)):
    self.fn, self.slots = fn, tuple(slots)


class Downlink:
  """A broadcast's wire where the server does not send theta: each round it
  sends a compressor's payload of the change of a state its server part
  holds (EF21-BC's G), every worker holds a copy of that state and of
  theta, and steps theta itself (`laq_jax.deploy` runs it)::

    server     the server part whose state the workers copy
    compressor(first) -> the payload's compressor (its format: `wire`)
    first(hyper, step) -> whether round `step`'s payload is the warm
               start's (the state itself, in full)
    triple(step_P, before, after) -> (x, ref, value): what the server part
               compressed, against what, into what (its state before and
               after the round); the payload is `wire.fields_of` of them,
               and each worker's copy becomes the value it decodes
    step(theta_P, held_P, hyper) -> theta^{k+1} from theta^k and the new
               copy, as the server part steps it (jnp, the server's Hyper)
  """

  def __init__(self, server: str, compressor: Callable, first: Callable,
               triple: Callable, step: Callable):
    self.server, self.compressor, self.first = server, compressor, first
    self.triple, self.step = triple, step


# (WireError, payload_bytes and MAX_BITS are laq_jax.wire's, documented
# there)
__all__ = ['Codec', 'Identity', 'Qsgd', 'RandK', 'TopK', 'Uniform', 'Uplink', 'Downlink', 'finite',
           'float_bits', 'pack', 'read_float', 'read_uint', 'uint_bits',
           'unpack']
