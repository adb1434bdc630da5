"""The communication rule: compress, decide, aggregate, step. One for all.

Every algorithm is this one rule with different parts plugged in, each chosen
by data in `Hyper`: which compressor (`compressors.COMPRESSORS`), the
estimator that calls it (`estimators.ESTIMATORS`: the innovation g - Qhat
compressed, LAQ's and EF21's, or the gradient itself, QSGD's), error
feedback, the trigger (eager, LAG/LAQ's, CLAG's), and a quantized
broadcast; the loop feeds full or minibatch gradients. So one rule, written
once, serves every algorithm and every point of a sweep. `Parts` (static)
says which of them a program compiles in.

Arrays are flat: a worker's gradient is a vector of all P parameters, because
the quantizer's radius and the trigger's norms are taken over the whole
parameter vector (Sun et al. 2019). Every per-worker array has a leading worker
axis M. Under `jax.shard_map` the worker axis is split over devices; pass
`axis_name` and the aggregate gathers the workers over it
(`collectives.sum_workers`).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from laq_jax import collectives
from laq_jax import parts as parts_lib
from laq_jax import randomness
from laq_jax.parts import broadcasts as broadcasts_lib
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import estimators as estimators_lib
from laq_jax.parts import privatizers
from laq_jax.parts import servers as servers_lib
from laq_jax.parts import triggers as trigger_lib
from laq_jax.round import participation as participation_lib
from laq_jax.round import schedule
from laq_jax.round.hyper import Hyper
# The rule's records (re-exported: `rules.RuleState`, `rules.Parts`, ...).
from laq_jax.round.rule_state import init
from laq_jax.round.rule_state import LocalOut  # pylint: disable=unused-import
from laq_jax.round.rule_state import NEVER_UPLOADED
from laq_jax.round.rule_state import Parts
from laq_jax.round.rule_state import Rule
from laq_jax.round.rule_state import RuleState
from laq_jax.round.rule_state import SameSample
from laq_jax.round.rule_state import server_hyper
from laq_jax.round.rule_state import StepStats
from laq_jax.round.rule_state import Worker
from laq_jax.round.rule_state import worker_params  # pylint: disable=unused-import


def _worker(grad_P, last_upload_P, last_error, clock, error_P, states, key,
            sample, laq_shared, last_step_sq, history_sum, theta_P,
            hyper: Hyper, parts: Parts, grad_at=None, coin=None) -> Worker:
  """One worker: compress, decide (its new memory, the delta for the
  aggregate, its stats); `coin` is the round's shared uniform (its
  estimator's `Inputs.coin`). `sample` and `grad_at` give its trigger the
  same-sample gradient (None: none)."""
  if last_upload_P.shape[-1] != grad_P.shape[-1]:  # no upload memory
    last_upload_P = jnp.zeros_like(grad_P)
  sent_P = grad_P  # what the worker compresses (with error feedback's memory)
  if parts.error_feedback:
    sent_P = jnp.where(hyper.error_feedback, grad_P + error_P, grad_P)
  compressor_states = {p.name: states[p.name] for p in parts.compressors
                       if p.stateful}
  gradient_at = (None if grad_at is None else
                 lambda theta: grad_at(theta, sample))
  # The estimator's candidate upload Q (it calls the compressor slot).
  out, estimated_states = estimators_lib.estimate(
      sent_P, last_upload_P, key, hyper, parts.estimators, parts.compressors,
      {**compressor_states, **{p.name: states[p.name]
                               for p in parts.estimators if p.stateful}},
      parts.compressors_b, coin, gradient_at, theta_P)
  new_compressor_states = {n: estimated_states[n] for n in compressor_states}
  if parts.warm_start:  # a first upload is g itself, 32 p bits
    first = hyper.warm_start & (clock == NEVER_UPLOADED)
    out = out._replace(
        value_P=jnp.where(first, sent_P, out.value_P),
        bits=jnp.where(first, jnp.int32(32 * sent_P.shape[-1]), out.bits))
  value_P = out.value_P
  error = collectives.sum_sq(value_P - grad_P)
  compressed_sq = collectives.sum_sq(value_P - last_upload_P)
  raw_sq = collectives.sum_sq(grad_P - last_upload_P)
  trigger_states = {p.name: states[p.name] for p in parts.triggers
                    if p.stateful}
  decision, new_trigger_states = trigger_lib.decide(trigger_lib.Inputs(
      compressed_sq, raw_sq, error, last_error, laq_shared, last_step_sq,
      clock, hyper, grad_P, theta_P, history_sum, gradient_at),
      parts.triggers, trigger_states)
  sent = decision.sent
  delta_P = jnp.where(sent, value_P - last_upload_P, jnp.zeros_like(value_P))
  new_upload_P = jnp.where(sent, value_P, last_upload_P)
  new_error = jnp.where(sent, error, last_error)
  new_clock = jnp.where(sent, jnp.zeros_like(clock), clock + 1)
  if parts.error_feedback:
    error_P = jnp.where(sent & hyper.error_feedback, sent_P - value_P, error_P)
  # A compressor's memory moves with what it sent (as error feedback's); an
  # estimator's and a trigger's with every decision.
  kept = jax.tree.map(lambda new, old: jnp.where(sent, new, old),
                      new_compressor_states, compressor_states)
  kept.update({p.name: estimated_states[p.name] for p in parts.estimators
               if p.stateful})
  bits = jnp.where(sent, out.bits, jnp.int32(0))
  grads = decision.grads
  for part in parts.estimators:  # DASHA-MVR's second gradient
    if estimators_lib.takes_second_gradient(part):
      grads = grads + (hyper.estimator == estimators_lib.index(
          part.name)).astype(grads.dtype)
  stats = StepStats(sent, bits, jnp.zeros_like(bits), decision.lhs,
                    decision.rhs, error, jnp.zeros_like(sent), grads)
  return Worker(new_upload_P, new_error, new_clock, error_P, delta_P,
                {**states, **kept, **new_trigger_states}, stats,
                decision.server_side)


def broadcast(theta_P, last_broadcast_P, hyper: Hyper, parts: Parts,
              step_count=0):
  """(thetahat^{k+1}, bits each worker receives): theta itself (32 p)
  where no point's broadcast is compiled in (`parts.downlink`), else the
  broadcast part's (`laq_jax.broadcasts`: full, or two_laq's quantized
  thetahat^k + Q(theta^{k+1} - thetahat^k) at `hyper.downlink_bits`, or
  another broadcast part) after round `step_count`."""
  if not parts.downlink:
    return theta_P, jnp.int32(32 * theta_P.shape[-1])
  return broadcasts_lib.broadcast(theta_P, last_broadcast_P, hyper,
                                  parts.broadcasts, step_count)


def workers_stage(grads_MxP, state: RuleState, hyper: Hyper, step_count,
                  worker_ids_M, num_workers: int, parts: Parts,
                  same_sample: SameSample | None = None) -> Worker:
  """The rule stage: every local worker compresses and decides (vmapped);
  per-worker arrays with a leading worker axis."""
  # xi at iteration k: times its schedule's factor (exactly xi without one).
  xi = hyper.xi * schedule.factor_at(hyper.xi_steps, hyper.xi_factors,
                                     step_count)
  laq_shared = trigger_lib.history_threshold(
      state.history_D, hyper.step_size, xi, num_workers, step_count,
      hyper.authors_code, minibatch_scripts=parts.stochastic)
  keys = jax.vmap(lambda w: randomness.compress_key(hyper.seed, step_count,
                                                    w))(worker_ids_M)
  sample, grad_at = (None, None) if same_sample is None else same_sample
  coin = randomness.round_coin(hyper.seed, step_count, grads_MxP.dtype)
  worker = jax.vmap(functools.partial(_worker, grad_at=grad_at, coin=coin),
                    in_axes=(0,) * 8 + (None,) * 6)
  return worker(grads_MxP, state.last_upload_MxP, state.last_error_M,
                state.clock_M, state.error_MxP, state.parts_M, keys, sample,
                laq_shared, state.history_D[0], jnp.sum(state.history_D),
                state.broadcast_P, hyper, parts)


def step(grads_MxP: jax.Array, state: RuleState, theta_P: jax.Array,
         hyper: Hyper, *, step_count=0, worker_ids_M=None,
         num_workers: int | None = None, axis_name: str | None = None,
         parts: Parts | None = None, present_M: jax.Array | None = None,
         admit: Callable | None = None,
         same_sample: SameSample | None = None,
         local: LocalOut | None = None, counts_M: jax.Array | None = None,
         rows_M: jax.Array | None = None
         ) -> tuple[jax.Array, RuleState, StepStats]:
  """One iteration k of the family (docs/algorithm.md, "One iteration"):
  the workers' stage (compress, decide), participation, the aggregate, the
  server's update, the broadcast.

  Args:
    grads_MxP: each (local) worker's gradient at thetahat^k (= theta^k
      unless the broadcast is quantized).
    state: the rule state at iteration k.
    theta_P: the server's parameters theta^k (flat).
    hyper: scalar hyperparameters of this run.
    step_count: k (seeds the random compressors; the authors' history
      weights).
    worker_ids_M: global indices of the local workers (default 0..M-1):
      with the step and the seed they key the random compressors.
    num_workers: M over all devices (defaults to the local count).
    axis_name: mesh axis the workers are split over (under shard_map), or None.
    parts: the parts compiled in (static; default: every registered
      compressor and trigger, the sgd server).
    present_M: bool, which local workers take part in this round
      (`laq_jax.participation`), or None: every one (nothing of partial
      participation is compiled in).
    admit: with `present_M`, (sent_M, bits_M, grads_M) -> bool, which
      local workers' compute + upload end by the round's deadline (the loop
      builds it from the network); the others are dropped from the round.
    same_sample: this step's samples and gradient function (`SameSample`),
      for triggers that compare two gradients on one sample (LASG, CADA).
    local: the local-work stage's additions (`LocalOut`: the gradients
      each worker computed, a control variate's bits and new values), or
      None (no local work compiled in).
    counts_M: each local worker's sample count n_m (`Hyper.weighting`
      samples); None: equal shards.
    rows_M: the local rows this round computes (`RunSpec.round_size`:
      its participants, `participation.round_rows`), or None: every local
      worker. Given, `grads_MxP`, `worker_ids_M`, `present_M`, `admit`,
      `same_sample` and `local` are those rows' (S of them) while `state`
      and `counts_M` hold every local worker; the step gathers the rows'
      state, runs on them and scatters back (the others wait, absent), so
      its traffic is O(S P). The results are the masked program's: the
      aggregates are left-to-right sums (`collectives.sum_workers`), to
      which the masked program's absent rows add exact zeros.

  Returns:
    (theta^{k+1}, state^{k+1}, per-worker StepStats).
  """
  parts = parts or Parts.of()
  hyper = server_hyper(hyper, parts)
  full = state  # every local worker's (the rows' when rows_M is given)
  if rows_M is not None:
    state = participation_lib.gather_rows(state, rows_M)
  num_local = full.clock_M.shape[0]
  num_workers = num_workers or num_local
  if worker_ids_M is None:
    worker_ids_M = jnp.arange(grads_MxP.shape[0], dtype=jnp.int32)
  mean, worker_hyper = _weighting(hyper, parts, num_workers)
  if parts.private:
    grads_MxP = privacy_stage(grads_MxP, hyper, step_count, worker_ids_M,
                              parts)
  out = workers_stage(grads_MxP, state, worker_hyper, step_count,
                      worker_ids_M, num_workers, parts, same_sample)
  if local is not None:
    out = _add_local(out, state, local)
  taken = None
  if present_M is not None:
    out, taken = participation_lib.mask_absent(out, state, present_M, admit)
  written = (None if rows_M is None
             else _write_rows(full, out, rows_M, parts))
  if mean is not None and counts_M is None:
    counts_M = jnp.ones((num_local,), grads_MxP.dtype)
  aggregate_P, step_P = aggregate_stage(
      state, out, taken, written, hyper, mean, counts_M, rows_M,
      num_workers, num_local, axis_name, memory=parts.upload_memory)
  if mean is not None and local is not None and local.normalized is not None:
    step_P = work_scale(step_P, local, taken, counts_M, rows_M, hyper,
                        axis_name)
  central = privatizers.central_step(out.last_upload_P, taken, hyper,
                                     step_count, num_workers, parts.private,
                                     axis_name)
  if central is not None:  # the server's noisy mean (its points only)
    step_P = jnp.where(central[0], central[1], step_P)
  new_theta_P, server = server_stage(step_P, theta_P, state, out, taken,
                                     hyper, parts, num_workers, axis_name,
                                     always=None if central is None
                                     else central[0])
  if parts.shifts:
    out = after_stage(out, grads_MxP, state, theta_P, new_theta_P, taken,
                      hyper, parts)
    if rows_M is not None:  # the rows' moved state written back too
      written = participation_lib.scatter_rows(
          written, written._replace(parts_M=out.parts), rows_M,
          fields=('parts_M',))
  history, broadcast_P, stats = broadcast_stage(
      new_theta_P, theta_P, state, out, taken, hyper, parts, local,
      step_count, step_P)
  new_state = RuleState(out.last_upload_P if parts.upload_memory
                        else state.last_upload_MxP, out.last_error,
                        out.clock, out.error_P, aggregate_P, history,
                        broadcast_P, out.parts, server)
  if rows_M is not None:  # the others' stats are an absent's
    new_state = written._replace(aggregate_P=aggregate_P, history_D=history,
                                 broadcast_P=broadcast_P, server=server)
    stats = jax.tree.map(
        lambda x: jnp.zeros((num_local,) + x.shape[1:], x.dtype).at[
            rows_M].set(x), stats)
  return new_theta_P, new_state, stats


# The stages of `step`, in the order it calls them (docs/algorithm.md, "One
# iteration"). Each is a pure function of the round's values so far.


def _weighting(hyper: Hyper, parts: Parts, num_workers: int):
  """(whether the server steps with the weighted mean, the Hyper the
  workers' stage sees): a weighted mean steps each upload by about
  alpha / M, which is the alpha of the LAG/LAQ threshold (docs/algorithm.md,
  "Local work"). (None, hyper) where weighting is not compiled in."""
  if not parts.weighting:
    return None, hyper
  mean = hyper.weighting != participation_lib.WEIGHTING.index('sum')
  return mean, hyper._replace(step_size=jnp.where(
      mean, hyper.step_size / num_workers, hyper.step_size))


def privacy_stage(grads_MxP, hyper: Hyper, step_count, worker_ids_M,
                  parts: Parts):
  """Each worker's upload candidate privatized by the point's privacy part
  (`laq_jax.privatizers`: clipped, and in local and distributed modes its
  Gaussian noise added, keyed (seed, k, m)) before the compressor, the
  estimator and the trigger see it."""
  keys = jax.vmap(lambda w: randomness.dp_noise_key(hyper.seed, step_count,
                                                    w))(worker_ids_M)
  return jax.vmap(lambda g, key: privatizers.privatize(
      g, key, hyper, hyper.clients_per_round, parts.privacy))(grads_MxP, keys)


def _write_rows(full: RuleState, out: Worker, rows_M, parts: Parts
                ) -> RuleState:
  """A gathered round's rows' memory written back into every local
  worker's (in place; the others waited), so that what reads every
  client's (a stale weighted mean) reads this."""
  return participation_lib.scatter_rows(
      full._replace(clock_M=participation_lib.waited(full.clock_M)),
      full._replace(last_upload_MxP=(out.last_upload_P if parts.upload_memory
                                     else full.last_upload_MxP),
                    last_error_M=out.last_error, clock_M=out.clock,
                    error_MxP=(out.error_P if parts.error_feedback
                               else full.error_MxP),
                    parts_M=out.parts), rows_M,
      # (error feedback or the upload memory compiled out: nothing moves)
      fields=tuple(f for f in RuleState.PER_WORKER
                   if (parts.error_feedback or f != 'error_MxP')
                   and (parts.upload_memory or f != 'last_upload_MxP')))


def aggregate_stage(state: RuleState, out: Worker, taken, written, hyper,
                    mean, counts_M, rows_M, num_workers: int,
                    num_local: int, axis_name, memory: bool = True):
  """(the running aggregate sum_m Qhat_m, what the server steps with): the
  aggregate itself, or with partial participation its participants'
  step, or the weighted mean of the last uploads (`_weighting`). Without
  upload memory (`memory` False: every point's step is the round's
  weighted mean under drop) the aggregate is this round's uploads' sum."""
  aggregate_P = collectives.sum_workers(out.delta_P, axis_name)
  if memory:
    aggregate_P = state.aggregate_P + aggregate_P
  step_P = aggregate_P
  if taken is not None:
    step_P = participation_lib.server_step(
        aggregate_P, out.last_upload_P, taken, hyper, num_workers, axis_name)
  if mean is None:
    return aggregate_P, step_P
  if rows_M is None:
    weighted_P = participation_lib.weighted_step(
        out.last_upload_P, taken, counts_M, hyper, axis_name)
  else:
    # Under drop the mean is over the round's rows; under stale over every
    # client's last upload, the rows' written back.
    def rows_only():
      return participation_lib.weighted_step(
          out.last_upload_P, taken, counts_M[rows_M], hyper, axis_name)
    def every_client():
      return participation_lib.weighted_step(
          written.last_upload_MxP,
          jnp.zeros((num_local,), bool).at[rows_M].set(taken), counts_M,
          hyper, axis_name)
    weighted_P = (jax.lax.cond(
        hyper.absent == participation_lib.ABSENT.index('drop'), rows_only,
        every_client) if memory else rows_only())
  return aggregate_P, jnp.where(mean, weighted_P, step_P)


def server_stage(step_P, theta_P, state: RuleState, out: Worker, taken,
                 hyper: Hyper, parts: Parts, num_workers: int, axis_name,
                 always=None):
  """(theta^{k+1}, the server's state): its update part's step; under drop
  a round nobody took part in is no step at all (the optimizer's state
  stays), but where `always` (central DP: the noise is released every
  round); the control variates c += sum_S (c_m+ - c_m) / M."""
  round_ = None
  if any(map(servers_lib.needs_round, parts.servers)):
    took = (jnp.ones(out.clock.shape, bool) if taken is None else taken)
    round_ = servers_lib.Round(
        collectives.sum_workers(jnp.where(took[:, None], out.last_upload_P,
                                          0), axis_name),
        jnp.sum(collectives.gather_workers(took, axis_name), dtype=jnp.int32),
        num_workers)
  new_theta_P, server = servers_lib.update(step_P, theta_P, hyper,
                                           parts.servers, state.server,
                                           round_)
  if taken is not None:
    idle = (hyper.absent == participation_lib.ABSENT.index('drop')) & ~jnp.any(
        collectives.gather_workers(taken, axis_name))
    if always is not None:
      idle = idle & ~always
    new_theta_P = jnp.where(idle, theta_P, new_theta_P)
    server = jax.tree.map(lambda new, old: jnp.where(idle, old, new), server,
                          state.server)
  for part in parts.controls:
    change_P = collectives.sum_workers(
        out.parts[part.name] - state.parts_M[part.name], axis_name)
    server = {**server, part.name: state.server[part.name]
              + change_P / jnp.asarray(num_workers, change_P.dtype)}
  return new_theta_P, server


def broadcast_stage(new_theta_P, theta_P, state: RuleState, out: Worker,
                    taken, hyper: Hyper, parts: Parts,
                    local: LocalOut | None, step_count=0, step_P=None):
  """(the history of ||theta^{k+1} - theta^k||^2 (or the server's own
  entry, `servers.history_entry`, from the step it took), what the workers hold
  next, the round's stats with each worker's downlink bits): the
  broadcast (quantized or not), the server's control variate riding
  along, LASG-PS's selected workers pulling theta^k in full precision at
  the round's start, and only participants receiving."""
  moved = servers_lib.history_entry(step_P, theta_P, new_theta_P, hyper,
                                    parts.servers)
  history = jnp.concatenate([moved[None], state.history_D[:-1]])
  broadcast_P, bits_down = broadcast(new_theta_P, state.broadcast_P, hyper,
                                     parts, step_count)
  bits_down_M = jnp.broadcast_to(bits_down, out.stats.bits_M.shape).astype(
      jnp.int32)
  if local is not None:
    bits_down_M = bits_down_M + local.extra_down
  pulled = jnp.where(out.stats.sent_M, jnp.int32(32 * theta_P.shape[-1]), 0)
  bits_down_M = jnp.where(out.server_side, pulled, bits_down_M)
  if taken is not None:
    bits_down_M = jnp.where(taken, bits_down_M, 0)
  return history, broadcast_P, out.stats._replace(bits_down_M=bits_down_M)


def after_stage(out: Worker, uploads_MxP, state: RuleState, theta_P,
                new_theta_P, taken, hyper: Hyper, parts: Parts) -> Worker:
  """The clients' state after the server's step (`Part.after`, which
  may read theta^{k+1}: Scaffnew's h_m <- h_m + (p / gamma) (theta^{k+1} -
  y_m); FedDyn's nu_m <- nu_m + y_m - theta^k), for the points whose
  client it is and the round's participants; y_m = thetahat^k - Delta_m,
  the client's last local iterate."""
  # (the uploads are the local changes Delta_m from the parameters the
  # clients held, thetahat^k: theta^k unless the broadcast is compressed)
  anchor_P = state.broadcast_P if parts.downlink else theta_P
  new_parts = dict(out.parts)
  for part in parts.shifts:
    params = parts_lib.own_params(hyper, part)
    own_MxP = state.parts_M[part.name]
    local_MxP = anchor_P - uploads_MxP
    moved = jax.vmap(lambda own, y: part.after(params, own, y, anchor_P,
                                               new_theta_P))(own_MxP, local_MxP)
    use = hyper.client == clients_lib.index(part.name)
    if taken is not None:
      use = use & taken[:, None]
    new_parts[part.name] = jnp.where(use, moved, own_MxP)
  return out._replace(parts=new_parts)


def work_scale(step_P, local: LocalOut, taken, counts_M, rows_M, hyper,
               axis_name):
  """FedNova's server step (Wang et al. 2020, eq. 6): the weighted mean of
  the normalized changes Delta_m / ||a_m||_1 times tau_eff = sum_S w_m
  ||a_m||_1 / sum_S w_m, the same weights and participants
  (`participation.weighted_step`); a point whose uploads are not normalized
  steps as it was."""
  counts = counts_M if rows_M is None else counts_M[rows_M]
  tau_eff = participation_lib.weighted_step(
      local.norm_M[:, None].astype(step_P.dtype), taken, counts, hyper,
      axis_name)[0]
  return jnp.where(local.normalized, tau_eff * step_P, step_P)


def _add_local(out: Worker, state: RuleState, local: LocalOut) -> Worker:
  """The workers' stage output with the local work's accounting: each
  worker computed K gradients (its trigger's extra ones on top), an upload
  carries its control variate's change, and a worker that uploads keeps
  its new control variate."""
  stats = out.stats
  grads = jnp.where(stats.grads_M > 0, stats.grads_M + local.steps_M - 1, 0)
  bits = jnp.where(stats.sent_M, stats.bits_M + local.extra_bits_M,
                   stats.bits_M)
  new_parts = dict(out.parts)
  for name, control_MxP in local.controls_M.items():
    new_parts[name] = jnp.where(stats.sent_M[:, None], control_MxP,
                                state.parts_M[name])
  return out._replace(parts=new_parts, stats=stats._replace(
      grads_M=grads.astype(jnp.int32), bits_M=bits.astype(jnp.int32)))


def _init(theta_P, num_workers, memory, hyper, *, parts=None) -> RuleState:
  return init(theta_P, num_workers, memory, hyper.authors_code, parts, hyper)


# The LAQ family: every preset of `laq_jax.hyper.ALGORITHMS`.
LAQ = Rule(init=_init, step=step, same_sample=True, rows=True)
