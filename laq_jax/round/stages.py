"""The round's stages on the workers' side: what a round's clients compute.
`laq_jax.loop.make_step` calls them in order; `laq_jax.deploy` calls the
client's half on one worker. ::

    s = stages.Setting(spec, data, hyper, rows, axis_name, authors_order)
    grads = stages.gradient_part(s)      # full batch, minibatch, local work
    present = stages.participation_stage(s, step, slowdown_M, flops_M, ...)

Each takes the round's `Setting` (the static spec, the data, the Hyper,
which rows the round computes). The stages: the gradient part (full-batch
or minibatch gradients, or K local steps, `clients.work`), the clients'
FLOPs, participation (who is drawn, who meets the deadline), the rows a
gathered round computes, and the round's time on the modeled network.
Their names are `laq_jax.loop`'s too, where they are documented.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax import network as network_lib
from laq_jax import parts as parts_lib
from laq_jax import randomness
from laq_jax.parts import clients as clients_lib
from laq_jax.problems.objective import Data, _unravel, full_batch, worker_objective
from laq_jax.round import participation as participation_lib
from laq_jax.round import rules
from laq_jax.round.hyper import Hyper
from laq_jax.round.spec import RunSpec


def flops_per_worker_step(spec: RunSpec, shard_size):
  """F_m: one worker's gradient FLOPs per step
  (`Problem.grad_flops_per_sample` times its minibatch, min(batch_size, its
  samples), or its whole shard); 0 for a problem that does not state its
  count (its rounds are then timed on communication alone).

  `shard_size` is the samples per worker (an int: a float comes back), or
  each worker's own count (an array [M]: an array [M] comes back, for
  clients of unequal sizes)."""
  per_sample = float(spec.problem.grad_flops_per_sample or 0.0)
  if np.ndim(shard_size):
    counts = np.asarray(shard_size, np.float64)
    samples = (np.minimum(spec.batch_size, counts) if spec.stochastic
               else counts)
    return per_sample * samples
  samples = spec.batch_size if spec.stochastic else shard_size
  return per_sample * samples


def client_batch_rows(key, count, shard_size: int, batch_size: int,
                      authors_code=False) -> tuple[jax.Array, jax.Array]:
  """A client's minibatch rows when clients have unequal sizes.

  min(batch_size, count) of the client's own rows 0..count-1, without
  replacement: its rows in a random order (the padding rows sort last) and
  the first batch_size of them. With `authors_code`, one of its
  floor(count / batch_size) contiguous blocks drawn uniformly (the whole
  client when it holds fewer than batch_size).

  Returns:
    (rows [batch_size] int32, used): the first `used` = min(batch_size,
    count) rows are the batch, the rest padding the loss masks out.
  """
  rows = jnp.arange(shard_size, dtype=jnp.int32)
  u = jnp.where(rows < count, jax.random.uniform(key, (shard_size,)), 2.0)
  idx = jnp.argsort(u)[:batch_size].astype(jnp.int32)
  if batch_size > shard_size:  # every row, then repeats the loss masks out
    idx = jnp.pad(idx, (0, batch_size - shard_size))
  blocks = jnp.maximum(count // batch_size, 1)
  block = jax.random.randint(key, (), 0, blocks)
  idx = jnp.where(authors_code,
                  block * batch_size + jnp.arange(batch_size, dtype=jnp.int32),
                  idx)
  return jnp.minimum(idx, shard_size - 1), jnp.minimum(count, batch_size)


class Setting(NamedTuple):
  """What every stage of a step reads (static shapes and traced arrays).

  Attributes:
    spec: the RunSpec.
    data: the (local) worker shards.
    hyper: the point's Hyper, cast to the data's precision.
    worker_ids_M: global indices of the local workers.
    axis_name: the mesh axis under shard_map, else None.
    vmapped: the step runs vmapped over a grid's points (a choice between
      two computations that read the data is then a select, never a
      `lax.cond` on a per-point predicate, whose batching would copy the
      data once per point).
  """
  spec: RunSpec
  data: Data
  hyper: Hyper
  worker_ids_M: jax.Array
  axis_name: str | None
  vmapped: bool


def _objective_m(s: Setting):
  unravel = _unravel(s.spec.problem, s.data.x_MxNxD.dtype)
  return lambda th, x, y, count=None: worker_objective(
      s.spec.problem, unravel, th, x, y, s.hyper.l2, count)


def _shard_sample(s: Setting) -> rules.SameSample:
  """Each worker's whole shard as its sample (full-batch gradients)."""
  objective_m = _objective_m(s)
  data = s.data
  if data.count_M is None:
    return rules.SameSample((data.x_MxNxD, data.y_MxN), lambda th, xy: (
        jax.grad(objective_m)(th, *xy)))
  return rules.SameSample(
      (data.x_MxNxD, data.y_MxN, jnp.asarray(data.count_M, jnp.int32)),
      lambda th, xyn: jax.grad(objective_m)(th, *xyn))


def full_batch_gradients(s: Setting) -> Callable:
  """The full-batch gradient part: (step, theta_P, at_P) -> (loss, grads_MxP,
  SameSample), each worker's gradient on its whole shard at the parameters
  it holds (at_P), the loss f(theta^k) at the server's (one forward pass
  more only where a point quantizes the broadcast), and the shards as the
  samples a same-sample trigger (LAG-WK's, LASG's) takes gradients on."""
  full_value_and_grad, full_values = full_batch(s.spec.problem, s.data,
                                                s.hyper.l2)
  every = s.spec.log_every

  def gradients(step, theta_P, at_P):
    losses_M, grads_MxP = full_value_and_grad(at_P)
    if s.spec.downlink:  # the loss at the server's theta, not the broadcast
      # (a conditional: a run with a full-precision broadcast, where the
      # two agree, skips the extra forward pass; vmapped over a grid,
      # a select of the two, which reads the data once for every point)
      quantized = s.hyper.downlink_bits > 0
      if s.vmapped:
        losses_M = jnp.where(quantized, full_values(theta_P), losses_M)
      else:
        losses_M = jax.lax.cond(quantized, lambda: full_values(theta_P),
                                lambda: losses_M)
    # Added left to right (not a reduce, whose order XLA picks per fusion),
    # so a program with other parts compiled in sums alike.
    loss = collectives.sum_workers(losses_M, s.axis_name)
    if every > 1:
      loss = jnp.where(step % every == 0, loss,
                       jnp.asarray(jnp.nan, loss.dtype))
    return loss, grads_MxP, _shard_sample(s)

  return gradients


def over_workers(s: Setting, fn: Callable, in_axes, *args):
  """`jax.vmap(fn, in_axes)(*args)` over the rows of the round's workers,
  or, with `RunSpec.client_batch` = b below the rows, in a loop over
  batches of b rows, each vmapped (`lax.map`'s `batch_size`): the
  temporaries of b clients, not of every row (a CNN's local steps vmapped
  over all 1,000 clients of a masked round: 47 GB), and on a CPU faster
  for the convolutional models (`RunSpec.client_batch`). Each row's result
  is a function of its own row: the same to rounding."""
  rows = s.data.x_MxNxD.shape[0]
  size = s.spec.client_batch
  if not size or size >= rows:
    return jax.vmap(fn, in_axes=in_axes)(*args)
  mapped = [i for i, axis in enumerate(in_axes) if axis is not None]

  def one(xs):
    full = list(args)
    for i, x in zip(mapped, xs):
      full[i] = x
    return fn(*full)

  return jax.lax.map(one, [args[i] for i in mapped], batch_size=size)


def draw_minibatch(s: Setting, key, x_NxD, y_N, count=None):
  """One worker's minibatch from `key`: (x, y) of batch_size rows of its
  shard drawn without replacement, or with `count` (clients of unequal
  sizes) (x, y, used), `client_batch_rows`'s rows of its own samples."""
  spec, hyper = s.spec, s.hyper
  shard_size = x_NxD.shape[0]
  if count is not None:
    idx, used = client_batch_rows(key, count, shard_size, spec.batch_size,
                                  hyper.authors_code)
    return x_NxD[idx], y_N[idx], used
  idx = randomness.sample_rows(key, shard_size, spec.batch_size)
  # The authors' scripts: one of the shard's fixed contiguous blocks of
  # batch_size (tf.data's batch, then shuffle().take(1)), drawn uniformly.
  block = jax.random.randint(key, (), 0, max(shard_size // spec.batch_size,
                                             1))
  idx = jnp.where(hyper.authors_code,
                  block * spec.batch_size + jnp.arange(spec.batch_size), idx)
  return x_NxD[idx], y_N[idx]


def minibatch_gradients(s: Setting) -> Callable:
  """The minibatch gradient part: (step, theta_P, at_P) -> (loss,
  grads_MxP, SameSample), each worker's gradient on a minibatch drawn from
  (seed, step, worker), the full loss at the logged iterations only, and
  the minibatches (a same-sample trigger's second gradient is on the same
  rows)."""
  spec, hyper, data = s.spec, s.hyper, s.data
  objective_m = _objective_m(s)
  _, full_values = full_batch(spec.problem, data, hyper.l2)

  def minibatch(step, worker, x_NxD, y_N):
    return draw_minibatch(s, randomness.batch_key(hyper.seed, step, worker),
                          x_NxD, y_N)

  def client_minibatch(step, worker, x_NxD, y_N, count):
    return draw_minibatch(s, randomness.batch_key(hyper.seed, step, worker),
                          x_NxD, y_N, count)

  def gradients(step, theta_P, at_P):
    if data.count_M is not None:  # clients of unequal sizes
      xb, yb, nb = jax.vmap(client_minibatch, in_axes=(None, 0, 0, 0, 0))(
          step, s.worker_ids_M, data.x_MxNxD, data.y_MxN,
          jnp.asarray(data.count_M, jnp.int32))
      _, grads_MxP = over_workers(s, jax.value_and_grad(objective_m),
                                  (None, 0, 0, 0), at_P, xb, yb, nb)
      sample = (xb, yb, nb)
    else:
      xb, yb = jax.vmap(minibatch, in_axes=(None, 0, 0, 0))(
          step, s.worker_ids_M, data.x_MxNxD, data.y_MxN)
      _, grads_MxP = over_workers(s, jax.value_and_grad(objective_m),
                                  (None, 0, 0), at_P, xb, yb)
      sample = (xb, yb)
    same = rules.SameSample(sample, lambda th, batch: jax.grad(objective_m)(
        th, *batch))
    return _logged_loss(s, step, theta_P, full_values), grads_MxP, same

  return gradients


def local_gradients(s: Setting) -> Callable:
  """The local-work gradient part: (step, theta_P, at_P, rule_state) ->
  (loss, uploads_MxP, SameSample, rules.LocalOut).

  Each worker runs its point's client part (`Hyper.client`, among
  `RunSpec.clients`): `gradient` uploads its minibatch gradient at at_P
  (the draw of `minibatch_gradients`); a local client runs K =
  `params['steps']` steps of its optax client optimizer from at_P
  (thetahat^k) on minibatches keyed (seed, step, worker, local step j) (j
  = 0: that same draw; j >= 1: `fold_in` of it with j), on the local
  objective f_m + mu/2 ||theta - thetahat||^2 (+ <c - c_m, theta> with
  control variates), and uploads Delta_m = thetahat - theta_m^K. With K = 1
  and client SGD, Delta_m = eta_l g_m up to rounding (the uploads of the
  gradient part times eta_l; docs/algorithm.md, "Local work")."""
  spec, hyper, data = s.spec, s.hyper, s.data
  clients = spec.parts.clients
  num_params = spec.problem.num_params()
  objective_m = _objective_m(s)
  grad_fn = jax.grad(objective_m)
  _, full_values = full_batch(spec.problem, data, hyper.l2)
  controls = tuple(p.name for p in spec.parts.controls)
  owned = tuple(p.name for p in clients if p.stateful)  # + Scaffnew's h_m

  batch = functools.partial(draw_minibatch, s)
  shard_size = data.x_MxNxD.shape[1]

  def _client_steps(part, params, step, worker, count):
    """This client's K: its own draw where the part draws work (FedNova's
    E_m epochs), the round's shared draw (Scaffnew's K_k ~ Geometric(p)),
    else the part's steps."""
    if clients_lib.draws_coin(part):
      return clients_lib.geometric_steps(params, randomness.round_coin(
          hyper.seed, step, data.x_MxNxD.dtype))
    if not clients_lib.heterogeneous(part):
      return None
    u = randomness.local_work_uniform(hyper.seed, step, worker)
    return clients_lib.local_steps(
        params, u, shard_size if count is None else count,
        spec.batch_size if spec.stochastic else shard_size)

  def one_worker(step, worker, x_NxD, y_N, count, anchor_P, own_M,
                 server_controls):
    key0 = randomness.batch_key(hyper.seed, step, worker)
    first = batch(key0, x_NxD, y_N, count)
    g0_P = grad_fn(anchor_P, *first)

    def branch(part, g0_P, anchor_P, own):
      no_bits = jnp.int32(0)
      one, plain = jnp.ones((), g0_P.dtype), jnp.zeros((), bool)
      if not clients_lib.is_local(part):
        return g0_P, jnp.int32(1), no_bits, no_bits, own, one, plain
      params = parts_lib.own_params(hyper, part)
      grad_at = lambda theta_P, j: grad_fn(
          theta_P, *batch(jax.random.fold_in(key0, j), x_NxD, y_N, count))
      # SCAFFOLD corrects by c - c_m; a part with an after-step update
      # (Scaffnew, FedDyn) reads its state in its own optimizer.
      controls_ = part.stateful and part.after is None
      delta_P, num_steps, control_P = clients_lib.work(
          part, params, anchor_P, g0_P, grad_at,
          *((own[part.name], server_controls[part.name]) if controls_
            else (None, None)),
          num_steps=_client_steps(part, params, step, worker, count),
          state_P=own[part.name] if part.after is not None else None)
      if clients_lib.normalizes(part):  # FedNova: Delta_m / ||a_m||_1
        normalized = params['normalize'] == 1
        norm = jnp.where(normalized, clients_lib.normalizer(
            params, num_steps, delta_P.dtype), one)
        return (delta_P / norm, num_steps,
                jnp.where(normalized, jnp.int32(32), no_bits), no_bits, own,
                norm, normalized)
      if control_P is None:
        return delta_P, num_steps, no_bits, no_bits, own, one, plain
      full = jnp.int32(32 * num_params)  # c_m's change up, c's down
      return (delta_P, num_steps, full, full, {**own, part.name: control_P},
              one, plain)

    index = parts_lib.local_index(hyper.client, clients,
                                  clients_lib.REGISTRY)
    out = parts_lib.switch(index, clients, branch, g0_P, anchor_P, own_M)
    return out, first

  def gradients(step, theta_P, at_P, rule_state):
    own_M = {n: rule_state.parts_M[n] for n in owned}
    server_controls = {n: rule_state.server[n] for n in controls}
    count_M = (None if data.count_M is None
               else jnp.asarray(data.count_M, jnp.int32))
    worker = lambda w, x, y, n, own: one_worker(step, w, x, y, n, at_P, own,
                                                server_controls)
    (uploads_MxP, steps_M, bits_M, down_M, own_M, norm_M, normalized_M
     ), sample = over_workers(
         s, worker, (0, 0, 0, None if count_M is None else 0, 0),
         s.worker_ids_M, data.x_MxNxD, data.y_MxN, count_M, own_M)
    same = rules.SameSample(sample, lambda th, batch_: grad_fn(th, *batch_))
    first = lambda x, empty: x[0] if x.shape[0] else empty
    local = rules.LocalOut(steps_M.astype(jnp.int32), bits_M,
                           first(down_M, jnp.int32(0)),
                           {n: own_M[n] for n in controls}, norm_M,
                           first(normalized_M, jnp.zeros((), bool)))
    return (_logged_loss(s, step, theta_P, full_values), uploads_MxP, same,
            local)

  return gradients


# The name scope of the logged objective's `lax.cond` (in the compiled
# program's metadata).
LOGGED_OBJECTIVE = 'logged_objective'


def _logged_loss(s: Setting, step, theta_P, full_values):
  """The full objective at the logged iterations (NaN at the others)."""
  every = s.spec.log_every
  if every == 1:
    losses_M = full_values(theta_P)
  else:
    def not_logged(_):
      nan_M = jnp.full((s.data.x_MxNxD.shape[0],), jnp.nan,
                       s.data.x_MxNxD.dtype)
      # Under shard_map the logged branch is per worker: so is this one.
      return (nan_M if s.axis_name is None else
              jax.lax.pcast(nan_M, s.axis_name, to='varying'))
    # (the scope names the conditional in the compiled program:
    # benchmarks/kernels.py counts an iteration that does not log apart)
    with jax.named_scope(LOGGED_OBJECTIVE):
      losses_M = jax.lax.cond(step % every == 0, full_values, not_logged,
                              theta_P)
  return collectives.sum_workers(losses_M, s.axis_name)


def worker_flops(s: Setting) -> tuple[jax.Array, jax.Array]:
  """(the local workers' gradient FLOPs per step [M_local], every worker's
  [M]): the compute the round time and the deadline read."""
  spec, data = s.spec, s.data
  num_local, shard_size = data.x_MxNxD.shape[:2]
  if data.count_M is None:
    flops = flops_per_worker_step(spec, shard_size)
    return (jnp.full((num_local,), flops), jnp.full((spec.num_workers,),
                                                    flops))
  count_M = jnp.asarray(data.count_M, jnp.int32)
  samples_M = (jnp.minimum(count_M, spec.batch_size) if spec.stochastic
               else count_M)
  per_sample = float(spec.problem.grad_flops_per_sample or 0.0)
  local = per_sample * samples_M.astype(s.hyper.network.up_bps.dtype)
  return local, collectives.gather_workers(local, s.axis_name)


def participation_stage(s: Setting, step, slowdown_M, local_flops_M,
                        present_all=None, rows=None):
  """Who takes part in round k, and the deadline's test: (every client's
  flag [M], the rule step's keyword arguments). Without
  `RunSpec.participation`, everyone and nothing compiled.

  `present_all` is the round's draw when the caller has it; `rows` the
  local rows the round computes (`RunSpec.round_size`; None: all), whose
  flags and deadline test the rule step then gets."""
  if not s.spec.participation:
    return jnp.ones((s.spec.num_workers,), bool), {}
  # Every device draws every client's flag.
  if present_all is None:
    present_all = participation_lib.participants(s.hyper, step,
                                                 s.spec.num_workers)
  take = (lambda x: x) if rows is None else (lambda x: x[rows])
  ids = take(s.worker_ids_M)
  local_net = network_lib.worker_view(s.hyper.network, ids)
  slowdown, flops = take(slowdown_M), take(local_flops_M)
  deadline = jnp.asarray(s.hyper.deadline_s, s.hyper.network.up_bps.dtype)

  def admit(sent_M, bits_M, grads_M):
    # compute (each gradient it took) + upload (a skip: its notice's
    # latency) by the deadline
    del sent_M
    flops_M = flops * grads_M.astype(flops.dtype)
    end = (slowdown * flops_M / local_net.flops_per_s
           + local_net.up_latency_s + bits_M / local_net.up_bps)
    return (deadline <= 0) | (end <= deadline)

  return present_all, {'present_M': present_all[ids], 'admit': admit}


def round_rows(spec: RunSpec, num_local: int) -> int:
  """S_local: the rows a round computes on each device
  (`RunSpec.round_size`, at most the local workers); num_local when it
  gathers nothing."""
  if not (spec.participation and spec.round_size):
    return num_local
  return min(spec.round_size, num_local)


def round_fits(s: Setting, present_all) -> jax.Array:
  """Whether every device's participants fit its S_local rows (the same
  bool on every device)."""
  num_local = s.worker_ids_M.shape[0]
  count = jnp.sum(present_all[s.worker_ids_M], dtype=jnp.int32)
  if s.axis_name is not None:
    count = jax.lax.pmax(count, s.axis_name)
  return count <= round_rows(s.spec, num_local)


def gather_setting(s: Setting, rows) -> Setting:
  """The Setting of a round computed on `rows` of the local workers: their
  shards and ids."""
  return s._replace(data=participation_lib.gather_rows(s.data, rows),
                    worker_ids_M=s.worker_ids_M[rows])


def round_time_stage(s: Setting, stats, all_flops_M, slowdown_M, present_all):
  """The round on the modeled network: every worker's bits, gradients and
  slowdown, gathered over devices (the stragglers' keys are (seed, step,
  worker), so every layout draws the same). A worker that computed nothing
  (LASG-PS's server did not select it) is not in the round."""
  num_local = s.data.x_MxNxD.shape[0]
  zeros = jnp.zeros((num_local,), jnp.int32)
  gather = lambda x: collectives.gather_workers(x, s.axis_name)
  cut = gather(getattr(stats, 'dropped_M', jnp.zeros((num_local,), bool)))
  grads = gather(getattr(stats, 'grads_M', jnp.ones((num_local,), jnp.int32)))
  return network_lib.round_time(
      s.hyper.network, all_flops_M * grads.astype(all_flops_M.dtype),
      gather(getattr(stats, 'bits_M', zeros)),
      gather(getattr(stats, 'bits_down_M', zeros)), gather(slowdown_M),
      participants_M=present_all & ~cut & (grads > 0),
      num_params=s.spec.problem.num_params(), deadline_s=s.hyper.deadline_s,
      cut_M=cut)


def gradient_part(s: Setting) -> Callable:
  """The run's gradient part built on `s` (`RunSpec.gradient`, local work,
  minibatch or full-batch gradients)."""
  if s.spec.local:
    return local_gradients(s)
  return (s.spec.gradient or (minibatch_gradients if s.spec.stochastic
                              else full_batch_gradients))(s)
