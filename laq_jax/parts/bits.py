"""Bit strings for the wire formats (`laq_jax.codecs` re-exports them): a
payload is one big-endian bit string packed into bytes (`np.packbits`), its
last byte's spare bits 0; `WireError` names what does not decode."""

from __future__ import annotations

import numpy as np


class WireError(ValueError):
  """A payload that does not decode under the run's format."""


def payload_bytes(bits: int) -> int:
  """The bytes a payload of `bits` bits takes: ceil(bits / 8)."""
  return -(-int(bits) // 8)


def uint_bits(values, width: int) -> np.ndarray:
  """[n * width] bits (uint8), each value big-endian in `width` bits."""
  values = np.asarray(values, np.uint64).reshape(-1)
  shifts = np.arange(width - 1, -1, -1, dtype=np.uint64)
  return ((values[:, None] >> shifts) & np.uint64(1)).astype(
      np.uint8).reshape(-1)


def float_bits(values) -> np.ndarray:
  """[32 n] bits of float32 values, big-endian."""
  return uint_bits(np.asarray(values, '>f4').reshape(-1).view('>u4'), 32)


def read_uint(bits: np.ndarray, width: int) -> np.ndarray:
  """Big-endian unsigned integers of `width` bits from a [n * width] array."""
  weights = np.uint64(1) << np.arange(width - 1, -1, -1, dtype=np.uint64)
  return (bits.reshape(-1, width).astype(np.uint64) * weights).sum(
      1, dtype=np.uint64)


def read_float(bits: np.ndarray) -> np.ndarray:
  """float32 values from [32 n] bits (`float_bits` undone)."""
  return read_uint(bits, 32).astype('>u4').view('>f4').astype(np.float32)


def pack(bits: np.ndarray) -> bytes:
  """A bit string as bytes, the last byte's spare bits 0."""
  return np.packbits(np.asarray(bits).astype(np.uint8)).tobytes()


def unpack(payload: bytes, num_bits: int, what: str) -> np.ndarray:
  """The payload's first `num_bits` bits; WireError unless it is exactly
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


def finite(x: np.ndarray, what: str) -> np.ndarray:
  """`x`, or WireError naming its first non-finite value."""
  if not np.all(np.isfinite(x)):
    bad = np.flatnonzero(~np.isfinite(np.reshape(x, -1)))
    raise WireError(f'{what}: {bad.size} non-finite value(s) (first at '
                    f'{int(bad[0])}: {np.reshape(x, -1)[bad[0]]})')
  return x


def _gamma(n: int) -> str:
  """The Elias-gamma code of a positive integer, as '0'/'1'."""
  binary = bin(n)[2:]
  return '0' * (len(binary) - 1) + binary
