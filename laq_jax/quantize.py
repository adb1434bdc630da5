"""The innovation quantizer of LAQ (Sun et al., NeurIPS 2019, eq. 4-6).

A worker quantizes the *innovation* g - Qhat (its new gradient minus its last
upload) on a uniform grid of 2^b points spanning [-R, R], R = ||g - Qhat||_inf,
and sends the b-bit codes plus R. The server rebuilds Q = Qhat + 2 tau R q - R.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Quantized(NamedTuple):
  """What one worker's quantizer produced.

  Attributes:
    value_P: Q, the reconstructed gradient the server would see.
    codes_P: q, integer codes in {0, ..., 2^b - 1} (stored in the float dtype,
      since 2^32 - 1 does not fit an int32).
    radius: R = ||g - Qhat||_inf.
    error_sq: e = ||Q - g||_2^2.
  """
  value_P: jax.Array
  codes_P: jax.Array
  radius: jax.Array
  error_sq: jax.Array


def quantize_innovation(grad_P: jax.Array, ref_P: jax.Array,
                        bits: jax.Array) -> Quantized:
  """Quantizes grad_P relative to the reference ref_P with `bits` bits.

  Args:
    grad_P: the new gradient g (flat vector).
    ref_P: the worker's last upload Qhat (same shape).
    bits: b in 1..32, a (traced) integer scalar.

  Returns:
    A `Quantized`. ||Q - g||_inf <= tau R with tau = 1 / (2^b - 1); when
    R == 0 the reference is returned unchanged with zero codes.
  """
  dtype = grad_P.dtype
  innovation = grad_P - ref_P
  radius = jnp.max(jnp.abs(innovation))
  levels = jnp.ldexp(jnp.ones((), dtype), bits) - 1  # 2^b - 1, exactly
  tau = 1 / levels
  # Guard R == 0 (then every code is 0 and Q = Qhat).
  safe_radius = jnp.where(radius > 0, radius, jnp.ones_like(radius))
  codes = jnp.floor((innovation + safe_radius) / (2 * tau * safe_radius) + 0.5)
  # An innovation of exactly 0 (a coordinate no sample touches, e.g. a blank
  # MNIST pixel at theta = 0) is a tie: 2^b - 1 is odd, so 0 lies halfway
  # between two grid points. In exact arithmetic the formula gives (levels +
  # 1) / 2 (round half up); in floats the last bit of R decides, and so the
  # code would depend on how XLA ordered a matmul (vmap, devices, sweep).
  # Pin it to the exact value.
  codes = jnp.where(innovation == 0, (levels + 1) / 2, codes)
  codes = jnp.clip(codes, 0, levels)
  value = ref_P + 2 * tau * safe_radius * codes - safe_radius
  value = jnp.where(radius > 0, value, ref_P)
  codes = jnp.where(radius > 0, codes, jnp.zeros_like(codes))
  error_sq = jnp.sum(jnp.square(value - grad_P))
  return Quantized(value, codes, radius, error_sq)


def upload_bits(num_params: int, bits: jax.Array,
                quantize: jax.Array) -> jax.Array:
  """Bits of one upload: b * p + 32 quantized, 32 * p at full precision (int32)."""
  bits = jnp.asarray(bits, jnp.int32)
  return jnp.where(quantize, bits * num_params + 32,
                   jnp.int32(32 * num_params))
