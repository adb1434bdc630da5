"""Uploads as bytes: what a deployed worker sends, exactly the bits counted. ::

    fmt = wire.Format.of(compressor, num_params, hyper)  # the run's format
    fields = wire.fields_of(fmt, grad_P, ref_P, value_P)  # codes, radius...
    payload = wire.encode(fmt, fields)            # bytes, ceil(bits / 8)
    value_P = wire.decode(fmt, payload, ref_P)    # Q, or WireError

The simulation counts each upload's bits (`laq_jax.compressors`); a
deployment (`laq_jax.flower`) moves them. Each format below packs the
compressor's output into one big-endian bit string with `np.packbits`, so a
payload is the accounted bits rounded up to whole bytes (the last byte's
spare bits are 0)::

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

A skipped upload sends no payload at all (`laq_jax.flower` replies with a
one-line notice, `sent: False`). The other compressors (rand_p, sign,
terngrad) and the authors' bit counts (`Hyper.authors_code`, which leave out
the radius or count QSGD their own way) have no wire format here: `Format.of`
refuses them by name.

`decode` is the server's gate: a payload of the wrong length, a bit width
or level out of range, an index past p or out of order, a NaN or an
infinity, spare bits that are not 0: each raises `WireError` naming what is
wrong, and nothing is decoded.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np

from laq_jax import compressors as compressors_lib

FORMATS = ('identity', 'uniform', 'qsgd', 'top_k')
MAX_BITS = 32  # b: LAQ's codes travel in at most 32 bits each


class WireError(ValueError):
  """A payload that does not decode under the run's format."""


@dataclasses.dataclass(frozen=True)
class Format:
  """What one run's uploads look like on the wire.

  Attributes:
    compressor: one of FORMATS.
    num_params: p, the number of parameters.
    bits: b, LAQ's bits per code (uniform).
    levels: s, QSGD's levels (qsgd).
    k: the number of values top_k keeps.
  """
  compressor: str
  num_params: int
  bits: int = 0
  levels: int = 0
  k: int = 0

  def __post_init__(self):
    if self.compressor not in FORMATS:
      raise ValueError(
          f'compressor {self.compressor!r} has no wire format: the formats '
          f'are {", ".join(FORMATS)}')
    if self.num_params < 1:
      raise ValueError(f'num_params={self.num_params}: it must be >= 1')
    if self.compressor == 'uniform' and not 1 <= self.bits <= MAX_BITS:
      raise ValueError(f'bits={self.bits}: it must be in 1..{MAX_BITS}')
    if self.compressor == 'qsgd' and not (
        1 <= self.levels <= compressors_lib.MAX_LEVELS):
      raise ValueError(f'levels={self.levels}: it must be in '
                       f'1..{compressors_lib.MAX_LEVELS}')
    if self.compressor == 'top_k' and not 1 <= self.k <= self.num_params:
      raise ValueError(f'k={self.k}: it must be in 1..{self.num_params}')

  @classmethod
  def of(cls, compressor: str, num_params: int, hyper) -> 'Format':
    """The format of a run whose points use `compressor` with `hyper`'s
    values (a single point's Hyper)."""
    if bool(np.asarray(hyper.authors_code)):
      raise ValueError(
          'authors_code=True counts bits the authors\' way (no radius, '
          'QSGD\'s iterated logs), which no payload carries: deploy with '
          'authors_code=False')
    params = {}
    if compressor in ('qsgd', 'top_k'):
      params = dict(hyper.params[compressor])
    if compressor == 'qsgd':
      return cls(compressor, num_params, levels=int(params['levels']))
    if compressor == 'top_k':
      return cls(compressor, num_params, k=int(
          compressors_lib.top_k_count(np.asarray(params['k']), num_params)))
    if compressor == 'uniform':
      return cls(compressor, num_params, bits=int(hyper.bits))
    return cls(compressor, num_params)

  @property
  def index_bits(self) -> int:
    """Bits of one top_k index, ceil(log2 p) (at least 1)."""
    return max(1, math.ceil(math.log2(self.num_params)))

  def max_bits(self) -> int:
    """The most bits a valid payload of this format takes (qsgd: every
    coordinate an entry, its gap and level at their longest codes): what a
    server reads at most before refusing one."""
    fixed = self.fixed_bits()
    if fixed is not None:
      return fixed
    longest = lambda n: 2 * max(1, math.ceil(math.log2(n + 1))) + 1
    return 32 + self.num_params * (longest(self.num_params) + 1
                                   + longest(self.levels))

  def fixed_bits(self) -> int | None:
    """The payload's bits where they do not depend on the values (None for
    qsgd)."""
    p = self.num_params
    return {'identity': 32 * p, 'uniform': self.bits * p + 32,
            'qsgd': None, 'top_k': self.k * (32 + self.index_bits)
            }[self.compressor]


def payload_bytes(bits: int) -> int:
  """The bytes a payload of `bits` bits takes: ceil(bits / 8)."""
  return -(-int(bits) // 8)


# --- bit strings -------------------------------------------------------------


def _uint_bits(values: np.ndarray, width: int) -> np.ndarray:
  """[n * width] bits (uint8), each value big-endian in `width` bits."""
  values = np.asarray(values, np.uint64)
  shifts = np.arange(width - 1, -1, -1, dtype=np.uint64)
  return ((values[:, None] >> shifts) & np.uint64(1)).astype(
      np.uint8).reshape(-1)


def _float_bits(values) -> np.ndarray:
  return _uint_bits(np.asarray(values, '>f4').reshape(-1).view('>u4'), 32)


def _read_uint(bits: np.ndarray, width: int) -> np.ndarray:
  """Big-endian unsigned integers of `width` bits from a [n * width] array."""
  weights = np.uint64(1) << np.arange(width - 1, -1, -1, dtype=np.uint64)
  return (bits.reshape(-1, width).astype(np.uint64) * weights).sum(
      1, dtype=np.uint64)


def _read_float(bits: np.ndarray) -> np.ndarray:
  return _read_uint(bits, 32).astype('>u4').view('>f4').astype(np.float32)


def _gamma(n: int) -> str:
  """The Elias-gamma code of a positive integer, as '0'/'1'."""
  binary = bin(n)[2:]
  return '0' * (len(binary) - 1) + binary


def _pack(bits: np.ndarray) -> bytes:
  return np.packbits(bits.astype(np.uint8)).tobytes()


def _unpack(payload: bytes, num_bits: int, what: str) -> np.ndarray:
  """The payload's first `num_bits` bits; it must be exactly
  ceil(num_bits / 8) bytes with zero spare bits."""
  expected = payload_bytes(num_bits)
  if len(payload) != expected:
    raise WireError(f'{what} payload of {len(payload)} bytes: the format '
                    f'takes {expected} ({num_bits} bits)')
  bits = np.unpackbits(np.frombuffer(payload, np.uint8))
  if bits[num_bits:].any():
    raise WireError(f'{what} payload: the spare bits after bit {num_bits} '
                    'are not 0')
  return bits[:num_bits]


def _finite(x: np.ndarray, what: str) -> np.ndarray:
  if not np.all(np.isfinite(x)):
    bad = np.flatnonzero(~np.isfinite(np.reshape(x, -1)))
    raise WireError(f'{what}: {bad.size} non-finite value(s) (first at '
                    f'{int(bad[0])}: {np.reshape(x, -1)[bad[0]]})')
  return x


# --- encode / decode ---------------------------------------------------------


def encode(fmt: Format, fields: Mapping[str, np.ndarray]) -> bytes:
  """One upload's payload from its compressor's fields::

    identity  value_P
    uniform   codes_P (integers in 0..2^b - 1), radius
    qsgd      norm, signed_levels_P (integers, |l| <= s)
    top_k     indices_K (ascending), values_K

  (the fields `fields_of` returns).
  """
  c = fmt.compressor
  if c == 'identity':
    value = np.asarray(fields['value_P'], np.float32).reshape(-1)
    if value.size != fmt.num_params:
      raise ValueError(f'{value.size} values for p = {fmt.num_params}')
    return value.astype('>f4').tobytes()
  if c == 'uniform':
    codes = np.asarray(fields['codes_P']).reshape(-1)
    if codes.size != fmt.num_params or np.any(codes < 0) or np.any(
        codes > 2.0**fmt.bits - 1):
      raise ValueError(f'codes must be {fmt.num_params} integers in '
                       f'0..{2**fmt.bits - 1}')
    return _pack(np.concatenate([_uint_bits(codes.astype(np.uint64), fmt.bits),
                                 _float_bits(fields['radius'])]))
  if c == 'top_k':
    indices = np.asarray(fields['indices_K'], np.int64).reshape(-1)
    values = np.asarray(fields['values_K'], np.float32).reshape(-1)
    if indices.size != fmt.k or values.size != fmt.k:
      raise ValueError(f'top_k sends k = {fmt.k} indices and values')
    return _pack(np.concatenate([_uint_bits(indices, fmt.index_bits),
                                 _float_bits(values)]))
  # qsgd
  levels = np.asarray(fields['signed_levels_P']).reshape(-1)
  parts = [''.join(map(str, _float_bits(fields['norm'])))]
  previous = -1
  for i in np.flatnonzero(levels):
    level = int(levels[i])
    parts.append(_gamma(int(i) - previous) + ('1' if level < 0 else '0')
                 + _gamma(abs(level)))
    previous = int(i)
  text = ''.join(parts)
  return _pack(np.frombuffer(text.encode(), np.uint8) - ord('0'))


def bound(num_workers: int) -> float:
  """The largest magnitude the server accepts in a decoded upload: float32's
  largest finite number over 4 M, so that the aggregate of M uploads (and
  its step) cannot overflow to inf. No honest upload comes near it: one
  that did would overflow the aggregate anyway."""
  return float(np.finfo(np.float32).max) / (4 * max(int(num_workers), 1))


def decode(fmt: Format, payload: bytes, ref_P: np.ndarray, *,
           num_workers: int = 1, num_bits: int | None = None) -> np.ndarray:
  """Q, what the upload reconstructs, from the payload and the server's copy
  of the worker's reference (its last upload for an innovation; zeros for a
  gradient). Raises WireError on any payload the format cannot hold, and on
  a reconstruction that is not finite or exceeds `bound` (a
  payload whose every field is finite can still reconstruct to inf: codes
  at their top with a radius near float32's largest). `num_bits`, the
  count the client declares beside its payload, must be the payload's:
  its length in bytes, a fixed format's count, where a qsgd payload's
  entries end (a payload cut at a byte can parse as another update)."""
  if (isinstance(payload, (bytes, bytearray)) and fmt.fixed_bits() is None
      and len(payload) > payload_bytes(fmt.max_bits())):
    # (a fixed format's exact length is compared before anything is read)
    raise WireError(f'{fmt.compressor} payload of {len(payload):,} bytes: a '
                    f'valid one takes at most {payload_bytes(fmt.max_bits()):,}'
                    ' (refused before it is read)')
  if num_bits is not None:
    _check_declared(fmt, payload, num_bits)
  with np.errstate(invalid='ignore', over='ignore'):  # checked just below
    value = _decode(fmt, payload, ref_P, ends=(ends := []))
    if num_bits is not None and ends and ends[0] != num_bits:
      raise WireError(f'qsgd payload declared as {num_bits} bits: its '
                      f'entries end at bit {ends[0]}')
    _finite(value, f'{fmt.compressor} reconstruction')
    top = float(np.max(np.abs(value))) if value.size else 0.0
  limit = bound(num_workers)
  if top > limit:
    at = int(np.argmax(np.abs(value)))
    raise WireError(f'{fmt.compressor} reconstruction: |value| {top:.3e} at '
                    f'{at} exceeds the bound {limit:.3e} (float32\'s largest '
                    f'over 4 M, M = {num_workers}): the aggregate would '
                    'overflow')
  return value


def _check_declared(fmt: Format, payload, num_bits) -> None:
  """The declared bit count against the payload (see `decode`)."""
  if (isinstance(num_bits, (bool, np.bool_))
      or not isinstance(num_bits, (int, np.integer)) or num_bits < 0):
    raise WireError(f'declared bits {num_bits!r}: an integer >= 0 expected')
  if not isinstance(payload, (bytes, bytearray)):
    return  # refused by the decoder, naming the type
  if payload_bytes(num_bits) != len(payload):
    raise WireError(f'{fmt.compressor} payload of {len(payload)} bytes '
                    f'declared as {num_bits} bits ({payload_bytes(num_bits)} '
                    'bytes)')
  fixed = fmt.fixed_bits()
  if fixed is not None and num_bits != fixed:
    raise WireError(f'{fmt.compressor} payload declared as {num_bits} bits: '
                    f'the format takes {fixed}')
  # (a qsgd payload's own end is compared in `decode`, from its one parse)


def _decode(fmt: Format, payload: bytes, ref_P: np.ndarray,
            ends: list | None = None) -> np.ndarray:
  """`decode` without the check of the reconstruction; a qsgd payload
  appends to `ends` the bit its entries end at."""
  if not isinstance(payload, (bytes, bytearray)):
    raise WireError(f'payload of type {type(payload).__name__}: bytes '
                    'expected')
  payload = bytes(payload)
  ref = np.asarray(ref_P, np.float32).reshape(-1)
  p, c = fmt.num_params, fmt.compressor
  if c == 'identity':
    _unpack(payload, 32 * p, c)
    return _finite(np.frombuffer(payload, '>f4').astype(np.float32), c)
  if c == 'uniform':
    bits = _unpack(payload, fmt.bits * p + 32, c)
    codes = _read_uint(bits[:fmt.bits * p], fmt.bits).astype(np.float32)
    radius = _finite(_read_float(bits[fmt.bits * p:])[0], 'uniform radius')
    if radius < 0:
      raise WireError(f'uniform radius {radius} is negative')
    return np.asarray(_reconstruct(ref, codes, np.float32(radius),
                                   np.int32(fmt.bits)))
  if c == 'top_k':
    width = fmt.index_bits
    bits = _unpack(payload, fmt.k * (32 + width), c)
    indices = _read_uint(bits[:fmt.k * width], width).astype(np.int64)
    values = _finite(_read_float(bits[fmt.k * width:]), 'top_k values')
    if indices.max() >= p:
      raise WireError(f'top_k index {int(indices.max())} out of range: p '
                      f'= {p}')
    if fmt.k > 1 and np.any(np.diff(indices) <= 0):
      raise WireError('top_k indices not strictly ascending (a repeat or '
                      'out of order)')
    out = ref.copy()
    out[indices] = ref[indices] + values
    return out
  return _decode_qsgd(fmt, payload, ref, ends)


_JIT = {}


def _reconstruct(*args):
  """`quantize.reconstruct`, jitted once per process (the quantizer's own
  expression, so the server rounds as the worker did)."""
  if not _JIT:
    import jax  # pylint: disable=g-import-not-at-top
    from laq_jax import quantize  # pylint: disable=g-import-not-at-top
    _JIT['reconstruct'] = jax.jit(quantize.reconstruct)
  return _JIT['reconstruct'](*args)


def _decode_qsgd(fmt: Format, payload: bytes, ref: np.ndarray,
                 ends: list | None = None) -> np.ndarray:
  p = fmt.num_params
  if len(payload) < 4:
    raise WireError(f'qsgd payload of {len(payload)} bytes: at least 4 (the '
                    'norm)')
  bits = np.unpackbits(np.frombuffer(payload, np.uint8))
  norm = _finite(_read_float(bits[:32])[0], 'qsgd norm')
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
  return (ref + norm * signs * level / s).astype(np.float32)


def qsgd_bits(payload_fields: Mapping[str, np.ndarray]) -> int:
  """The bits of a qsgd payload (the count `compressors.qsgd` makes)."""
  levels = np.asarray(payload_fields['signed_levels_P']).reshape(-1)
  bits, previous = 32, -1
  for i in np.flatnonzero(levels):
    bits += len(_gamma(int(i) - previous)) + 1 + len(_gamma(abs(int(
        levels[i]))))
    previous = int(i)
  return bits


def fields_of(fmt: Format, grad_P, ref_P, value_P,
              norm=None) -> dict[str, np.ndarray]:
  """The wire fields of an upload whose compressor turned `grad_P` (with
  error feedback's memory, as compressed) against `ref_P` into `value_P`,
  recomputed the way the compressor computed them. QSGD's `norm`, if
  given, is the compressor's own (`laq_jax.deploy` computes it in the
  compressor's program); its levels are read back off Q, exact where
  `|Qhat| << ||v|| / s` (QSGD compresses the gradient: Qhat = 0)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from laq_jax import quantize  # pylint: disable=g-import-not-at-top
  c = fmt.compressor
  value = np.asarray(value_P, np.float32)
  ref = np.asarray(ref_P, np.float32)
  if c == 'identity':
    return {'value_P': value}
  if c == 'uniform':
    q = quantize.quantize_innovation(jnp.asarray(grad_P, jnp.float32),
                                     jnp.asarray(ref, jnp.float32),
                                     jnp.int32(fmt.bits))
    return {'codes_P': np.asarray(q.codes_P), 'radius': np.asarray(q.radius)}
  if c == 'top_k':
    v = jnp.asarray(grad_P, jnp.float32) - jnp.asarray(ref, jnp.float32)
    keep = np.asarray(compressors_lib.top_k_mask(v, jnp.int32(fmt.k)))
    indices = np.flatnonzero(keep)
    return {'indices_K': indices, 'values_K': np.asarray(v)[indices]}
  # qsgd: the levels read back off Q (exact: |l| <= 2^24), the norm again
  v = jnp.asarray(grad_P, jnp.float32) - jnp.asarray(ref, jnp.float32)
  from laq_jax import collectives  # pylint: disable=g-import-not-at-top
  if norm is None:
    norm = jnp.sqrt(collectives.sum_sq(v))
  norm = np.float32(np.asarray(norm))
  if norm == 0:
    return {'norm': norm, 'signed_levels_P': np.zeros(ref.shape, np.int64)}
  signed = np.rint((value - ref).astype(np.float64) * fmt.levels
                   / np.float64(norm)).astype(np.int64)
  return {'norm': norm, 'signed_levels_P': signed}


__all__ = ['FORMATS', 'Format', 'WireError', 'bound', 'decode', 'encode',
           'fields_of', 'payload_bytes', 'qsgd_bits']
