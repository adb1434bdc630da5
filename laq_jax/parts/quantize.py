"""The innovation quantizer of LAQ (Sun et al., NeurIPS 2019, eq. 4-6).

A worker quantizes the *innovation* g - Qhat (its new gradient minus its last
upload) on a uniform grid of 2^b points spanning [-R, R], R = ||g - Qhat||_inf,
and sends the b-bit codes plus R. The server rebuilds Q = Qhat + 2 tau R q - R.

The grid has no zero level (2^b - 1 is odd), so an innovation of 0 lies exactly
halfway between the two middle levels. Exact arithmetic rounds it up; floats
let the last bit decide, and a coordinate that is zero in exact arithmetic
comes out as +-1e-17 in an order of summation that differs between program
shapes (a sweep, a device layout, a NumPy loop). So every |v_i| <= kappa R is
treated as exactly zero (code 2^(b-1)), with kappa = TIE_TOLERANCE[dtype]:
far above summation noise, far below half a grid step for every b the dtype
can resolve (b <= 29 in float64, b <= 16 in float32).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives

# kappa per dtype: |g_i - Qhat_i| <= kappa R counts as a zero innovation.
TIE_TOLERANCE = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-5}


def tie_tolerance(dtype) -> float:
  """kappa for `dtype` (float32's for any other float type)."""
  return TIE_TOLERANCE.get(np.dtype(dtype), TIE_TOLERANCE[np.dtype(np.float32)])


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


def reconstruct(ref_P: jax.Array, codes_P: jax.Array, radius: jax.Array,
                bits: jax.Array) -> jax.Array:
  """Q = Qhat + 2 tau R q - R, what the server rebuilds from the b-bit codes
  q and the radius R (Qhat itself when R == 0). The quantizer and the wire
  decoder (`laq_jax.wire`) both call this, so they round alike (XLA contracts
  the product and the sum into one fused multiply-add on the CPU)."""
  dtype = ref_P.dtype
  levels = jnp.ldexp(jnp.ones((), dtype), bits) - 1  # 2^b - 1, exactly
  tau = 1 / levels
  safe_radius = jnp.where(radius > 0, radius, jnp.ones_like(radius))
  value = ref_P + 2 * tau * safe_radius * codes_P.astype(dtype) - safe_radius
  return jnp.where(radius > 0, value, ref_P)


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
  # A zero innovation (a blank MNIST pixel at theta = 0; a bias gradient
  # 0.1 - 600/6000 that summation left at +-1e-17) is the tie of the module
  # docstring: pin it to exact arithmetic's code, (levels + 1) / 2.
  zero = jnp.abs(innovation) <= tie_tolerance(dtype) * radius
  codes = jnp.where(zero, (levels + 1) / 2, codes)
  codes = jnp.clip(codes, 0, levels)
  value = reconstruct(ref_P, codes, radius, bits)
  codes = jnp.where(radius > 0, codes, jnp.zeros_like(codes))
  error_sq = collectives.sum_sq(value - grad_P)
  return Quantized(value, codes, radius, error_sq)

