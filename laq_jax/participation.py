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

from laq_jax import collectives
from laq_jax import randomness
from laq_jax import trigger as trigger_lib

ABSENT = ('stale', 'drop')  # what the server does with an absent client
# How the server combines the uploads (`Hyper.weighting`).
WEIGHTING = ('sum', 'samples', 'uniform')


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


# ----------------------------------------------------------------------------
# The participation stage of a round (`laq_jax.rules.step` calls both).

def mask_absent(out, state, present_M, admit=None):
  """The workers' stage output with absent clients taken out of the round.

  An absent client uploads nothing, keeps its memory (and its parts'
  state), and its clock counts on (saturating at NEVER_UPLOADED: a client
  that never uploaded still uploads at its first participation). A
  participant a deadline cuts off (`admit(sent_M, bits_M, grads_M)` False) counts as
  absent: its work is lost, and its stats say `dropped_M`.

  Args:
    out: `rules.Worker` of the local workers (leading worker axis).
    state: the `rules.RuleState` the round started from.
    present_M: bool, who was drawn for this round (local workers).
    admit: None, or the deadline's test.

  Returns:
    (out masked, taken_M: who took part and was not cut off).
  """
  stats = out.stats
  taken = present_M
  if admit is not None:
    dropped = taken & ~admit(stats.sent_M, stats.bits_M, stats.grads_M)
    taken = taken & ~dropped
    stats = stats._replace(dropped_M=dropped)
  row = lambda x: taken.reshape(taken.shape + (1,) * (x.ndim - 1))
  keep = lambda new, old: jnp.where(row(new), new, old)
  never = trigger_lib.NEVER_UPLOADED
  waited = jnp.where(state.clock_M >= never, state.clock_M, state.clock_M + 1)
  out = out._replace(
      last_upload_P=keep(out.last_upload_P, state.last_upload_MxP),
      last_error=keep(out.last_error, state.last_error_M),
      error_P=keep(out.error_P, state.error_MxP),
      clock=keep(out.clock, waited),
      parts=jax.tree.map(keep, out.parts, state.parts_M),
      delta_P=jnp.where(row(out.delta_P), out.delta_P,
                        jnp.zeros_like(out.delta_P)),
      stats=stats._replace(sent_M=stats.sent_M & taken,
                           bits_M=jnp.where(taken, stats.bits_M, 0),
                           # a client not drawn computes nothing (one cut
                           # off by the deadline did: its work is lost)
                           grads_M=jnp.where(present_M, stats.grads_M, 0)))
  return out, taken


def server_step(aggregate_P, last_upload_MxP, taken_M, hyper,
                num_workers: int, axis_name=None):
  """What the server steps with under partial participation.

  `stale`: the aggregate (every client's last upload). `drop`: M / |S_k|
  times the participants' last uploads after this round; every client
  present: the aggregate itself (so q = 1 is the full-participation run bit
  for bit); nobody: no step.
  """
  count = jnp.sum(collectives.gather_workers(taken_M, axis_name),
                  dtype=jnp.int32)
  sampled_P = collectives.sum_workers(
      jnp.where(taken_M[:, None], last_upload_MxP, 0), axis_name)
  scale = num_workers / jnp.maximum(count, 1).astype(aggregate_P.dtype)
  dropped_P = jnp.where(count > 0, scale * sampled_P,
                        jnp.zeros_like(sampled_P))
  drop = hyper.absent == ABSENT.index('drop')
  return jnp.where(drop & (count < num_workers), dropped_P, aggregate_P)


def weighted_step(last_upload_MxP, taken_M, weights_M, hyper,
                  axis_name=None):
  """The server's step input as a weighted MEAN of the last uploads
  (`Hyper.weighting` samples or uniform; FedAvg's aggregate).

  Under `drop` the mean is over the round's participants, sum_{m in S}
  w_m Qhat_m / sum_{m in S} w_m (nobody: no step); under `stale` over every
  client's last upload, sum_m w_m Qhat_m / sum_m w_m. w_m is n_m, the
  client's sample count (samples), or 1 (uniform).

  Args:
    last_upload_MxP: every local client's last upload after this round.
    taken_M: bool, who took part (None: every client, full participation).
    weights_M: each local client's sample count n_m.
    hyper: reads `weighting` and `absent`.
    axis_name: the mesh axis under shard_map.
  """
  dtype = last_upload_MxP.dtype
  samples = hyper.weighting == WEIGHTING.index('samples')
  w_M = jnp.where(samples, jnp.asarray(weights_M, dtype),
                  jnp.ones(weights_M.shape, dtype))
  if taken_M is not None:
    drop = hyper.absent == ABSENT.index('drop')
    w_M = jnp.where(drop & ~taken_M, jnp.zeros_like(w_M), w_M)
  total = collectives.fixed_sum(collectives.gather_workers(w_M, axis_name))
  num_P = collectives.sum_workers(w_M[:, None] * last_upload_MxP, axis_name)
  return jnp.where(total > 0, num_P / jnp.maximum(total, 1e-30).astype(dtype),
                   jnp.zeros_like(num_P))
