"""Uploads as bytes: what a deployed worker sends, exactly the bits counted. ::

    fmt = wire.Format.of(compressor, num_params, hyper)  # the run's format
    fields = wire.fields_of(fmt, grad_P, ref_P, value_P)  # codes, radius...
    payload = wire.encode(fmt, fields)            # bytes, ceil(bits / 8)
    value_P = wire.decode(fmt, payload, ref_P)    # Q, or WireError

The simulation counts each upload's bits (`laq_jax.compressors`); a
deployment (`laq_jax.flower`) moves them. A compressor declares its wire
format by the codec its part carries (`laq_jax.codecs`: the built-in
compressors' formats, and how to write one), or has none: this module reads
the codec off the compressor's part, so it names no compressor, and a
user's compressor with a codec deploys as a built-in one does. The built-in
formats: identity, uniform, qsgd, top_k, and Rand-K's (randk, randk_b:
its mask drawn from the compressor key, which `fields_of` and `decode`
take as `key=`) (`FORMATS`, every registered compressor with one); rand_p,
sign and terngrad have none, nor have the
authors' bit counts (`Hyper.authors_code`, which leave out the radius or
count QSGD their own way).

A skipped upload sends no payload at all (`laq_jax.flower` replies with a
one-line notice, `sent: False`).

`decode` is the server's gate: a payload of the wrong length, a bit width
or level out of range, an index past p or out of order, a NaN or an
infinity, spare bits that are not 0: each raises `WireError` naming what is
wrong, and nothing is decoded.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from laq_jax.parts import codecs
from laq_jax.parts import compressors as compressors_lib
from laq_jax.parts.codecs import MAX_BITS  # pylint: disable=unused-import
from laq_jax.parts.codecs import payload_bytes
from laq_jax.parts.codecs import WireError


def _formats() -> tuple[str, ...]:
  reg = compressors_lib.REGISTRY
  return tuple(n for n in reg.names if reg.get(n).wire is not None)


def _codec(compressor: str) -> codecs.Codec:
  reg = compressors_lib.REGISTRY
  part = reg.get(compressor) if compressor in reg.names else None
  if part is None or part.wire is None:
    raise ValueError(
        f'compressor {compressor!r} has no wire format: the formats are '
        f'{", ".join(_formats())}')
  return part.wire


class Format:
  """What one run's uploads look like on the wire: the compressor, p and
  its codec's values (`Format('uniform', p, bits=4)`; `fmt.bits`).

  Attributes:
    compressor: a compressor whose part declares a wire format (FORMATS).
    num_params: p, the number of parameters.
    codec: its `laq_jax.codecs.Codec`.
    values: {name: int}, the codec's values (uniform's bits, qsgd's levels,
      top_k's k).
  """

  def __init__(self, compressor: str, num_params: int, **values: int):
    codec = _codec(compressor)
    if num_params < 1:
      raise ValueError(f'num_params={num_params}: it must be >= 1')
    unknown = sorted(set(values) - set(codec.value_names))
    if unknown:
      raise ValueError(f'{compressor} format: no value {unknown[0]!r}; its '
                       f'values: {", ".join(codec.value_names) or "none"}')
    object.__setattr__(self, 'compressor', compressor)
    object.__setattr__(self, 'num_params', int(num_params))
    object.__setattr__(self, 'codec', codec)
    object.__setattr__(self, 'values', {
        n: int(values.get(n, 0)) for n in codec.value_names})
    codec.check(self)

  def __getattr__(self, name):
    values = self.__dict__.get('values', {})
    if name in values:
      return values[name]
    raise AttributeError(f'{type(self).__name__} of '
                         f'{self.__dict__.get("compressor")!r} has no {name!r}')

  def __setattr__(self, name, value):
    raise AttributeError('a Format is immutable')

  def _key(self):
    return (self.compressor, self.num_params, tuple(self.values.items()))

  def __eq__(self, other):
    return isinstance(other, Format) and self._key() == other._key()

  def __hash__(self):
    return hash(self._key())

  def __repr__(self):
    extra = ''.join(f', {n}={v}' for n, v in self.values.items())
    return f'Format({self.compressor!r}, {self.num_params}{extra})'

  @classmethod
  def of(cls, compressor: str, num_params: int, hyper) -> 'Format':
    """The format of a run whose points use `compressor` with `hyper`'s
    values (a single point's Hyper)."""
    if bool(np.asarray(hyper.authors_code)):
      raise ValueError(
          'authors_code=True counts bits the authors\' way (no radius, '
          'QSGD\'s iterated logs), which no payload carries: deploy with '
          'authors_code=False')
    codec = _codec(compressor)
    params = dict(hyper.params.get(compressor, {}))
    return cls(compressor, num_params,
               **codec.values(num_params, params, hyper))

  def max_bits(self) -> int:
    """The most bits a valid payload of this format takes (qsgd: every
    coordinate an entry, its gap and level at their longest codes): what a
    server reads at most before refusing one."""
    return self.codec.max_bits(self)

  def fixed_bits(self) -> int | None:
    """The payload's bits where they do not depend on the values (None for
    qsgd)."""
    return self.codec.fixed_bits(self)


def encode(fmt: Format, fields: Mapping[str, np.ndarray]) -> bytes:
  """One upload's payload from its compressor's fields (the fields
  `fields_of` returns; the built-in formats')::

    identity  value_P
    uniform   codes_P (integers in 0..2^b - 1), radius
    qsgd      norm, signed_levels_P (integers, |l| <= s)
    top_k     indices_K (ascending), values_K
    randk     tag (the key's 32 bits), values_K (in ascending index order)
  """
  return fmt.codec.encode(fmt, fields)


def bound(num_workers: int) -> float:
  """The largest magnitude the server accepts in a decoded upload: float32's
  largest finite number over 4 M, so that the aggregate of M uploads (and
  its step) cannot overflow to inf. No honest upload comes near it: one
  that did would overflow the aggregate anyway."""
  return float(np.finfo(np.float32).max) / (4 * max(int(num_workers), 1))


def decode(fmt: Format, payload: bytes, ref_P: np.ndarray, *,
           num_workers: int = 1, num_bits: int | None = None,
           key=None) -> np.ndarray:
  """Q, what the upload reconstructs, from the payload and the server's copy
  of the worker's reference (its last upload for an innovation; zeros for a
  gradient). Raises WireError on any payload the format cannot hold, and on
  a reconstruction that is not finite or exceeds `bound` (a
  payload whose every field is finite can still reconstruct to inf: codes
  at their top with a radius near float32's largest). `num_bits`, the
  count the client declares beside its payload, must be the payload's:
  its length in bytes, a fixed format's count, where a qsgd payload's
  entries end (a payload cut at a byte can parse as another update).
  `key`: the upload's compressor key, for a codec that draws from it
  (`needs_key`: Rand-K's mask)."""
  if (isinstance(payload, (bytes, bytearray)) and fmt.fixed_bits() is None
      and len(payload) > payload_bytes(fmt.max_bits())):
    # (a fixed format's exact length is compared before anything is read)
    raise WireError(f'{fmt.compressor} payload of {len(payload):,} bytes: a '
                    f'valid one takes at most {payload_bytes(fmt.max_bits()):,}'
                    ' (refused before it is read)')
  if num_bits is not None:
    _check_declared(fmt, payload, num_bits)
  with np.errstate(invalid='ignore', over='ignore'):  # checked just below
    value = _decode(fmt, payload, ref_P, ends=(ends := []), key=key)
    if num_bits is not None and ends and ends[0] != num_bits:
      raise WireError(f'{fmt.compressor} payload declared as {num_bits} '
                      f'bits: its entries end at bit {ends[0]}')
    codecs.finite(value, f'{fmt.compressor} reconstruction')
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
            ends: list | None = None, key=None) -> np.ndarray:
  """`decode` without the check of the reconstruction; a variable-length
  payload appends to `ends` the bit its entries end at."""
  if not isinstance(payload, (bytes, bytearray)):
    raise WireError(f'payload of type {type(payload).__name__}: bytes '
                    'expected')
  ref = np.asarray(ref_P, np.float32).reshape(-1)
  return np.asarray(fmt.codec.decode(fmt, bytes(payload), ref, ends,
                                     **_key_of(fmt, key)))


def _key_of(fmt: Format, key) -> dict:
  """{'key': key} for a codec that draws from the compressor key
  (`needs_key`), else {} (a codec written without it keeps working)."""
  if not getattr(fmt.codec, 'needs_key', False):
    return {}
  if key is None:
    raise ValueError(f'{fmt.compressor}: its format draws from the '
                     'compressor key: pass key=')
  return {'key': key}


def qsgd_bits(payload_fields: Mapping[str, np.ndarray]) -> int:
  """The bits of a qsgd payload (the count `compressors.qsgd` makes)."""
  return codecs.Qsgd.bits_of(payload_fields)


def fields_of(fmt: Format, grad_P, ref_P, value_P,
              norm=None, key=None) -> dict[str, np.ndarray]:
  """The wire fields of an upload whose compressor turned `grad_P` (with
  error feedback's memory, as compressed) against `ref_P` into `value_P`,
  recomputed the way the compressor computed them (its codec's `fields`).
  QSGD's `norm`, if given, is the compressor's own (`laq_jax.deploy`
  computes it in the compressor's program); its levels are read back off
  Q. `key`: the compressor key, for a codec that draws from it."""
  return fmt.codec.fields(fmt, grad_P, np.asarray(ref_P, np.float32),
                          value_P, norm=norm, **_key_of(fmt, key))


# FORMATS: the registered compressors with a wire format (one registered
# later with a codec is in it).
def __getattr__(name):
  if name == 'FORMATS':
    return _formats()
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')

__all__ = ['FORMATS', 'Format', 'WireError', 'bound', 'decode', 'encode',
           'fields_of', 'payload_bytes', 'qsgd_bits']
