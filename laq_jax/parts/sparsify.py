"""Which coordinates a sparsifier keeps: top-k's k largest magnitudes and
Rand-K's k uniform coordinates, as bool masks, exact (ties to the lowest
index) and without a sort. `laq_jax.parts.compressors` re-exports the
public ones (`compressors.top_k_mask`, ...)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def top_k_count(top_k, num_params: int):
  """k for top_k's parameter `top_k.k`: a fraction of p when < 1 (at least 1), else a
  count (at most p). int32."""
  top_k = jnp.asarray(top_k)
  k = jnp.where(top_k < 1, jnp.floor(top_k * num_params + 0.5),
                jnp.floor(top_k))
  return jnp.clip(k, 1, num_params).astype(jnp.int32)


def _kth_largest(bits_P, k):
  """The k-th largest of non-negative integers (float bit patterns): the
  largest t with #{bits >= t} >= k, by bisection over the integer range."""
  dtype = bits_P.dtype
  width = jnp.iinfo(dtype).bits - 1  # the sign bit is 0

  def body(_, lohi):
    lo, hi = lohi
    span = hi - lo  # (hi - lo + 1) could overflow at the top of the range
    mid = lo + span // 2 + span % 2
    enough = jnp.sum(bits_P >= mid) >= k
    return jnp.where(enough, mid, lo), jnp.where(enough, hi, mid - 1)

  # The bounds start typed like the data (varying over the workers axis
  # under shard_map), as the loop's carry must keep one type.
  lo = jnp.zeros_like(bits_P[0])
  hi = jnp.full_like(bits_P[0], jnp.iinfo(dtype).max)
  lo, _ = jax.lax.fori_loop(0, width, body, (lo, hi))
  return lo


def top_k_mask(v_P, k):
  """The k entries of largest `|v_i|` (ties: the lowest indices), as a bool
  mask: exactly k True."""
  int_type = jnp.int64 if v_P.dtype == jnp.float64 else jnp.int32
  bits_P = jax.lax.bitcast_convert_type(jnp.abs(v_P), int_type)
  return _largest_mask(bits_P, k)


def _largest_mask(bits_P, k):
  """The k largest of non-negative integers (ties: the lowest indices), as
  a bool mask."""
  kth = _kth_largest(bits_P, k)
  above = bits_P > kth
  tied = bits_P == kth
  room = k - jnp.sum(above)  # how many of the ties fit
  tied_i = tied.astype(jnp.int32)
  rank = jnp.cumsum(tied_i) - tied_i  # ties before this one
  return above | (tied & (rank < room))


def randk_mask(key, num_params: int, k, dtype):
  """k distinct coordinates drawn uniformly: those of the k smallest of p
  uniforms `jax.random.uniform(key, (p,), dtype)` (ties: the lowest
  indices), as a bool mask. Its key is all the server needs to rebuild it."""
  u_P = jax.random.uniform(key, (num_params,), dtype)
  int_type = jnp.int64 if u_P.dtype == jnp.float64 else jnp.int32
  bits_P = jax.lax.bitcast_convert_type(u_P, int_type)  # >= 0, as u orders
  return _largest_mask(jnp.iinfo(int_type).max - bits_P, k)
