"""Who takes part in round k: partial participation as data.

    present_M = participants(hyper, step, num_clients)

Each client m draws one uniform u[k, m] from (`Hyper.seed`, the
participation stream, k, m) (`laq_jax.randomness`), the same on every device
and in every layout. With `Hyper.clients_per_round` S > 0 the S clients with
the smallest uniforms take part (ties by index: a draw without replacement);
otherwise each client with u < `Hyper.participation` q (Bernoulli(q); q = 1
takes every client, as u < 1 always). The contract is docs/algorithm.md,
"Partial participation".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from laq_jax import randomness

ABSENT = ('stale', 'drop')  # what the server does with an absent client


def uniforms(seed, step, num_clients: int) -> jax.Array:
  """u[k, m] for every client m (float32 in [0, 1))."""
  def one(client):
    return jax.random.uniform(randomness.participation_key(seed, step,
                                                           client))
  return jax.vmap(one)(jnp.arange(num_clients, dtype=jnp.int32))


def participants(hyper, step, num_clients: int) -> jax.Array:
  """bool [M]: who takes part in round `step` (every client's flag: under
  shard_map every device computes all of them and keeps its own)."""
  u = uniforms(hyper.seed, step, num_clients)
  # rank[m] = how many clients come before m (smaller uniform, or equal
  # with a smaller index): a stable sort's position.
  order = jnp.argsort(u, stable=True)
  rank = jnp.zeros((num_clients,), jnp.int32).at[order].set(
      jnp.arange(num_clients, dtype=jnp.int32))
  chosen = rank < hyper.clients_per_round
  bernoulli = u < hyper.participation
  return jnp.where(hyper.clients_per_round > 0, chosen, bernoulli)
