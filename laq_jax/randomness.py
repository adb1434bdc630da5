"""Where every random number of a run comes from: (seed, stream, step, worker).

Keys are derived, never carried: `fold_in` of the run's seed with a stream
number, then the step and the worker's global index. So a run needs no PRNG
state to checkpoint, and every device layout, program shape (single run or
grid point) and chunking draws exactly the same numbers.
"""

from __future__ import annotations

import jax

INIT, BATCH, COMPRESS, STRAGGLER, PARTICIPATION = 0, 1, 2, 3, 4  # streams


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
