"""Where every random number of a run comes from: (seed, stream, step, worker).

Keys are derived, never carried: `fold_in` of the run's seed with a stream
number, then the step and the worker's global index. So a run needs no PRNG
state to checkpoint, and every device layout, program shape (single run or
grid point) and chunking draws exactly the same numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

(INIT, BATCH, COMPRESS, STRAGGLER, PARTICIPATION, COIN, LOCAL_WORK,
 DP_NOISE) = range(8)


def init_key(seed) -> jax.Array:
  """The model initialization's key."""
  return jax.random.fold_in(jax.random.key(seed), INIT)


def _key(seed, stream, step, worker) -> jax.Array:
  key = jax.random.fold_in(jax.random.key(seed), stream)
  return jax.random.fold_in(jax.random.fold_in(key, step), worker)


def batch_key(seed, step, worker) -> jax.Array:
  """Worker `worker`'s minibatch draw at step `step`."""
  return _key(seed, BATCH, step, worker)


def compress_key(seed, step, worker) -> jax.Array:
  """Worker `worker`'s random compressor at step `step`."""
  return _key(seed, COMPRESS, step, worker)


def straggler_key(seed, step, worker) -> jax.Array:
  """Worker `worker`'s compute slowdown at step `step` (the network model)."""
  return _key(seed, STRAGGLER, step, worker)


def participation_key(seed, step, client) -> jax.Array:
  """Client `client`'s participation uniform at step `step`."""
  return _key(seed, PARTICIPATION, step, client)


def round_coin(seed, step, dtype=jnp.float32) -> jax.Array:
  """u_k, the round's one uniform in [0, 1) shared by every worker (stream
  COIN, worker index 0): MARINA's and 3PC v5's coin c_k = [u_k < p]
  (`estimators.Inputs.coin`)."""
  return jax.random.uniform(_key(seed, COIN, step, 0), (), dtype)


def local_work_uniform(seed, step, worker, dtype=jnp.float32) -> jax.Array:
  """u_{k,m}, client m's uniform in [0, 1) of round k (stream LOCAL_WORK):
  FedNova's heterogeneous work, E_m = E_min + floor(u (E_max - E_min + 1))
  epochs (`clients.local_steps`)."""
  return jax.random.uniform(_key(seed, LOCAL_WORK, step, worker), (), dtype)


def dp_noise_key(seed, step, worker) -> jax.Array:
  """Differential privacy's Gaussian noise at step `step` (stream DP_NOISE):
  client `worker`'s own (local and distributed modes), or the server's
  with `worker` = M, the number of clients (central mode)."""
  return _key(seed, DP_NOISE, step, worker)


# The minibatch draw's keyed permutation: rounds of a balanced Feistel
# network, each mixing one half with murmur3's 32-bit finalizer.
FEISTEL_ROUNDS = 8


def _fmix32(h: jax.Array) -> jax.Array:
  """murmur3's finalizer: a bijection of uint32 that mixes every bit."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def feistel_half_bits(n: int) -> int:
  """h: the permutation acts on [0, 4^h), the least power of 4 >= n."""
  return max(1, (max(int(n) - 1, 1).bit_length() + 1) // 2)


def sample_rows(key: jax.Array, n: int, k: int) -> jax.Array:
  """k distinct indices of range(n) (int32) from `key`: a minibatch drawn
  without replacement, in O(k) work.

  The first k values pi(0), ..., pi(k - 1) of a keyed pseudo-random
  permutation pi of range(n): a balanced Feistel network of
  FEISTEL_ROUNDS rounds on 2h-bit integers (4^h >= n, `feistel_half_bits`),
  (L, R) -> (R, L ^ (fmix32(R ^ key_i) & (2^h - 1))) with the round keys
  key_i = `jax.random.bits(key, (FEISTEL_ROUNDS,), uint32)`, restricted
  to range(n) by cycle walking (a value >= n is permuted again until it is
  < n; Black and Rogaway 2002), which keeps it a permutation. It replaces
  `jax.random.choice(key, n, (k,), replace=False)`, whose two sorts of all
  n keys cost 4.9 ms of a 12 ms minibatch step (10 workers, n = 6,000, k =
  500) on a 2-core CPU, against 0.3 ms here (docs/benchmarks.md, "The
  minibatch draw"). tests/randomness_test.py checks it against a NumPy
  computation and for uniform marginals.

  Raises:
    ValueError: k < 1 or k > n (there are not k distinct rows).
  """
  if not 0 < k <= n:
    raise ValueError(f'sample_rows: cannot draw k={k} distinct rows of '
                     f'n={n} (need 0 < k <= n)')
  half = feistel_half_bits(n)
  mask = jnp.uint32((1 << half) - 1)
  round_keys = jax.random.bits(key, (FEISTEL_ROUNDS,), jnp.uint32)

  def permute(x):
    left, right = x >> half, x & mask
    for i in range(FEISTEL_ROUNDS):
      left, right = right, left ^ (_fmix32(right ^ round_keys[i]) & mask)
    return (left << half) | right

  x = permute(jnp.arange(k, dtype=jnp.uint32))
  if (1 << (2 * half)) > n:
    x = jax.lax.while_loop(lambda x: jnp.any(x >= n),
                           lambda x: jnp.where(x >= n, permute(x), x), x)
  return x.astype(jnp.int32)
