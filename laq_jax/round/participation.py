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

import math
from typing import Iterable

import jax
import jax.numpy as jnp

from laq_jax import collectives
from laq_jax import randomness
from laq_jax.parts import triggers as trigger_lib

ABSENT = ('stale', 'drop')  # what the server does with an absent client
# How the server combines the uploads (`Hyper.weighting`).
WEIGHTING = ('sum', 'samples', 'uniform')


def uniforms(seed, step, num_clients: int) -> jax.Array:
  """u[k, m] for every client m in [0, 1) (the default float: float64 under
  x64)."""
  def one(client):
    return jax.random.uniform(randomness.participation_key(seed, step,
                                                           client))
  return jax.vmap(one)(jnp.arange(num_clients, dtype=jnp.int32))


def participants(hyper, step, num_clients: int,
                 bound: int | None = None, u_M=None) -> jax.Array:
  """bool [M]: who takes part in round `step` (every client's flag: under
  shard_map every device computes all of them and keeps its own).

  `bound`: a static upper bound on `hyper.clients_per_round` that the
  caller guarantees (a round on `RunSpec.round_size` rows, where the chunk
  checked its rounds fit), or None. With it the S smallest uniforms come
  from `smallest` over k = bound instead of a sort of all M: the same
  clients, as it orders ties by index like the stable sort (0.03
  against 0.32 ms a round at M = 1,000 on a 2-core CPU for float32
  uniforms; float64 ones, under x64, by passes of argmin).
  `u_M`: the round's `uniforms`, where the caller drew them (None: drawn
  here)."""
  u = uniforms(hyper.seed, step, num_clients) if u_M is None else u_M
  bernoulli = u < hyper.participation
  if bound is not None and 0 < bound < num_clients:
    # The `bound` smallest uniforms, ascending (ties: the smaller index
    # first); the first S of them take part.
    first = smallest(u, bound)
    chosen = jnp.zeros((num_clients,), bool).at[first].set(
        jnp.arange(bound) < hyper.clients_per_round)
  else:
    # rank[m] = how many clients come before m (smaller uniform, or equal
    # with a smaller index): a stable sort's position.
    order = jnp.argsort(u, stable=True)
    rank = jnp.zeros((num_clients,), jnp.int32).at[order].set(
        jnp.arange(num_clients, dtype=jnp.int32))
    chosen = rank < hyper.clients_per_round
  return jnp.where(hyper.clients_per_round > 0, chosen, bernoulli)


# At or below this many, `smallest` takes float64 values by passes of argmin.
SMALLEST_BY_PASSES = 32


def smallest(u_M: jax.Array, k: int) -> jax.Array:
  """int32 [k]: the indices of the k smallest entries of u_M, ascending (ties:
  the smaller index first), as `lax.top_k(-u_M, k)` gives them.

  For float64 and k <= `SMALLEST_BY_PASSES`, k passes of argmin (each takes
  the first smallest and sets it to +inf): XLA:CPU's top_k sorts all of a
  float64 array (0.16 ms a round at M = 1,000 on a 2-core CPU, against
  0.014 ms for k = 10 passes; float32's top_k 0.004 ms); float32 keeps
  top_k, which XLA:CPU does not sort. The same indices either way (u_M holds no NaN or +inf: the
  participation uniforms are in [0, 1))."""
  if u_M.dtype != jnp.float64 or k > SMALLEST_BY_PASSES:
    return jax.lax.top_k(-u_M, k)[1].astype(jnp.int32)
  inf = jnp.asarray(jnp.inf, u_M.dtype)

  def one_pass(i, carry):
    left_M, first_k = carry
    j = jnp.argmin(left_M).astype(jnp.int32)
    return left_M.at[j].set(inf), first_k.at[i].set(j)

  return jax.lax.fori_loop(0, k, one_pass,
                           (u_M, jnp.zeros((k,), jnp.int32)),
                           unroll=True)[1]


# ----------------------------------------------------------------------------
# A round that costs its participants (`RunSpec.round_size`).

# A round of Bernoulli(q) participation draws more clients than its bound
# with at most this probability (it then runs the masked program).
ROUND_SIZE_TAIL = 1e-6


def binomial_bound(num_clients: int, q: float,
                   tail: float = ROUND_SIZE_TAIL) -> int:
  """The smallest S with P(Binomial(M, q) > S) <= tail: how many clients a
  round of Bernoulli(q) participation draws, but for a `tail` of rounds."""
  if q >= 1:
    return num_clients
  if q <= 0:
    return 0
  log_q, log_p = math.log(q), math.log1p(-q)
  above = 1.0  # P(X > s), for s = -1, 0, 1, ...
  for s in range(num_clients + 1):
    above -= math.exp(math.lgamma(num_clients + 1) - math.lgamma(s + 1)
                      - math.lgamma(num_clients - s + 1) + s * log_q
                      + (num_clients - s) * log_p)
    if above <= tail:
      return s
  return num_clients


def round_size(points: Iterable, num_clients: int,
               tail: float = ROUND_SIZE_TAIL) -> int:
  """The `RunSpec.round_size` that covers every point: the largest of their
  clients_per_round S, or for Bernoulli points (S = 0) the binomial bound
  on their rounds (`binomial_bound`); num_clients when a point takes every
  client (q = 1, S = 0), where gathering saves nothing.

  Args:
    points: mappings (grid points, configs) or Hyper-like objects with
      `participation` and `clients_per_round` (missing: 1 and 0).
    num_clients: M.
  """
  sizes = []
  for point in points:
    get = ((lambda k, d, p=point: p.get(k, d)) if hasattr(point, 'get')
           else (lambda k, d, p=point: getattr(p, k, d)))
    per_round = int(get('clients_per_round', 0))
    q = float(get('participation', 1.0))
    sizes.append(min(per_round, num_clients) if per_round > 0
                 else binomial_bound(num_clients, q, tail))
  return max(sizes, default=num_clients)


def chosen_round_size(points: Iterable, num_clients: int) -> int:
  """The round size the launchers and sweeps use: `round_size` when it
  saves at least half of a round (S <= M / 2), else 0 (the masked
  program, with nothing gathered)."""
  size = round_size(points, num_clients)
  return size if 0 < size <= num_clients // 2 else 0


def round_rows(present_M: jax.Array, size: int) -> jax.Array:
  """The `size` local rows a round computes: the participants in ascending
  order, then the absent clients in ascending order to fill (distinct
  rows, so a scatter back is well defined). Exactly the participants when
  there are `size` of them."""
  # Each row's place in that order, by two running counts (a stable
  # partition: XLA:CPU sorts even lax.top_k, 0.27 ms a round at n = 1,000);
  # the rows placed past `size` are dropped.
  present = present_M.astype(jnp.int32)
  place = jnp.where(present_M, jnp.cumsum(present) - 1,
                    jnp.sum(present) + jnp.cumsum(1 - present) - 1)
  return jnp.zeros((size,), jnp.int32).at[place].set(
      jnp.arange(present_M.shape[0], dtype=jnp.int32), mode='drop',
      unique_indices=True)


def gather_rows(tree, rows_S: jax.Array, fields=None):
  """The per-worker fields of a NamedTuple (its class's PER_WORKER, or
  `fields`) at `rows_S`; the others unchanged. None fields stay None."""
  fields = type(tree).PER_WORKER if fields is None else fields
  return tree._replace(**{
      f: jax.tree.map(lambda a: a[rows_S], getattr(tree, f))
      for f in fields if getattr(tree, f) is not None})


def scatter_rows(full, part, rows_S: jax.Array, fields=None):
  """`full` with its per-worker fields' rows `rows_S` replaced by `part`'s
  (gather_rows' inverse); the other fields are `part`'s."""
  fields = type(full).PER_WORKER if fields is None else fields
  return part._replace(**{
      f: jax.tree.map(lambda a, b: a.at[rows_S].set(b), getattr(full, f),
                      getattr(part, f))
      for f in fields if getattr(full, f) is not None})


def waited(clock_M: jax.Array) -> jax.Array:
  """An absent client's clock after the round: one more round without an
  upload, saturating at NEVER_UPLOADED."""
  never = trigger_lib.NEVER_UPLOADED
  return jnp.where(clock_M >= never, clock_M, clock_M + 1)


# ----------------------------------------------------------------------------
# The participation stage of a round (`laq_jax.rules.step` calls both).

def mask_absent(out, state, present_M, admit=None):
  """The workers' stage output with absent clients taken out of the round.

  An absent client uploads nothing, keeps its memory (and its parts'
  state), and its clock counts on (saturating at NEVER_UPLOADED: a client
  that never uploaded still uploads at its first participation). A
  participant a deadline cuts off (`admit(sent_M, bits_M, grads_M)` False)
  counts as absent: its work is lost, and its stats say `dropped_M`. A
  client not drawn computed nothing: its innovation, threshold and error
  are 0.

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
  # A client not drawn computed nothing: its diagnostics are 0 (so a round
  # computed on its participants alone, `RunSpec.round_size`, is the same).
  drawn = lambda x: jnp.where(present_M, x, jnp.zeros_like(x))
  last_upload = state.last_upload_MxP
  if last_upload.shape[-1] != out.last_upload_P.shape[-1]:
    last_upload = jnp.zeros_like(out.last_upload_P)  # no upload memory
  out = out._replace(
      last_upload_P=keep(out.last_upload_P, last_upload),
      last_error=keep(out.last_error, state.last_error_M),
      error_P=keep(out.error_P, state.error_MxP),
      clock=keep(out.clock, waited(state.clock_M)),
      parts=jax.tree.map(keep, out.parts, state.parts_M),
      delta_P=jnp.where(row(out.delta_P), out.delta_P,
                        jnp.zeros_like(out.delta_P)),
      stats=stats._replace(sent_M=stats.sent_M & taken,
                           bits_M=jnp.where(taken, stats.bits_M, 0),
                           # a client not drawn computes nothing (one cut
                           # off by the deadline did: its work is lost)
                           grads_M=jnp.where(present_M, stats.grads_M, 0),
                           innovation_M=drawn(stats.innovation_M),
                           threshold_M=drawn(stats.threshold_M),
                           error_M=drawn(stats.error_M)))
  return out, taken


def server_step(aggregate_P, last_upload_MxP, taken_M, hyper,
                num_workers: int, axis_name=None):
  """What the server steps with under partial participation.

  `stale`: the aggregate (every client's last upload). `drop`: `M / |S_k|`
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
  # One client at a time, in worker order (a loop: XLA contracts the
  # products into the sum, or not, by the shape of the unrolled sum, so the
  # rounding would change with the number of rows): the same bits from
  # every client's rows and from the round's participants' alone.
  w_M, last_upload_MxP = (collectives.gather_workers(w_M, axis_name),
                          collectives.gather_workers(last_upload_MxP,
                                                     axis_name))
  product = lambda m: jax.lax.optimization_barrier(w_M[m]
                                                   * last_upload_MxP[m])
  num_P = jax.lax.fori_loop(1, w_M.shape[0],
                            lambda m, acc: acc + product(m), product(0))
  return jnp.where(total > 0, num_P / jnp.maximum(total, 1e-30).astype(dtype),
                   jnp.zeros_like(num_P))
