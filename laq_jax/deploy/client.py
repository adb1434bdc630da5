"""The worker's half of a deployed round (`laq_jax.deploy`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax.deploy import uplink
from laq_jax.deploy import wire
from laq_jax.deploy.common import (Held, Memory, Message, Upload,
                                   _held_step, _run_format, check_deployable,
                                   downlink_wire, uplink_part, warm_format,
                                   with_upload_memory)
from laq_jax.parts import triggers as trigger_lib
from laq_jax.round import hyper as hyper_lib
from laq_jax.round import loop
from laq_jax.round import rules
from laq_jax.round import stages
from laq_jax.round.hyper import Hyper
from laq_jax.round.spec import RunSpec


def _one(tree):
  return jax.tree.map(lambda a: a[None], tree)


def _row(tree):
  return jax.tree.map(lambda a: a[0], tree)

@functools.partial(jax.jit, static_argnums=0)
def _client_round(spec: RunSpec, data, hyper: Hyper, worker, step, theta_P,
                  history_D, memory: Memory):
  """The worker's half of `loop.make_step`'s round, on its one row."""
  s = stages.Setting(spec, data, hyper_lib.cast(hyper, theta_P.dtype),
                   worker[None], None, False)
  # (the server's step, as rules.step reads it: eta_s for local work)
  server_hyper = rules.server_hyper(s.hyper, spec.parts)
  state = rules.RuleState(
      memory.last_upload_P[None], memory.last_error[None],
      memory.clock[None], memory.error_P[None],
      jnp.zeros_like(theta_P), history_D, theta_P, _one(memory.parts), {})
  gradients = stages.gradient_part(s)
  local = None
  if spec.local:
    _, grads_1xP, same, local = gradients(step, theta_P, theta_P, state)
  else:
    _, grads_1xP, same = gradients(step, theta_P, theta_P)
  if spec.parts.private:  # local DP: the client's noise, before packing
    grads_1xP = rules.privacy_stage(grads_1xP, server_hyper, step,
                                    worker[None], spec.parts)
  # (as rules.step: alpha / M under a weighted mean)
  _, worker_hyper = rules._weighting(  # pylint: disable=protected-access
      server_hyper, spec.parts, spec.num_workers)
  out = rules.workers_stage(
      grads_1xP, state, worker_hyper, step, worker[None], spec.num_workers,
      spec.parts, same if spec.rule.same_sample else None)
  if local is not None:
    out = rules._add_local(out, state, local)  # pylint: disable=protected-access
  # What the compressor compressed (with error feedback's memory) and
  # against what: the wire fields are recomputed from these.
  sent_P = grads_1xP[0]
  if spec.parts.error_feedback:
    sent_P = jnp.where(s.hyper.error_feedback, sent_P + memory.error_P,
                       sent_P)
  ref_P = jnp.where(s.hyper.innovation, memory.last_upload_P,
                    jnp.zeros_like(memory.last_upload_P))
  new = Memory(out.last_upload_P[0], out.last_error[0], out.clock[0],
               out.error_P[0], _row(out.parts))
  # QSGD's norm, computed here as the compressor computes it, in the same
  # program (XLA merges the two; computed apart, a fused multiply-add in one
  # and not the other can move its last bit).
  norm = jnp.sqrt(collectives.sum_sq(sent_P - ref_P))
  return (out.stats.sent_M[0], out.stats.bits_M[0], sent_P, ref_P,
          out.last_upload_P[0], norm, new)


class Client:
  """One worker of a deployed run: its shard, its memory, its half of the
  round."""

  def __init__(self, spec: RunSpec, data, hyper: Hyper, worker: int,
               theta0_P=None, memory: Memory | None = None):
    """`data`: the run's Data (this worker's row is taken) or its one row;
    `theta0_P`: theta^0 (default: the problem's init under hyper.seed)."""
    spec = with_upload_memory(spec)
    self.spec, self.hyper, self.worker = spec, hyper, int(worker)
    if data.x_MxNxD.shape[0] != 1:
      data = jax.tree.map(
          lambda a: a if a is None or jnp.ndim(a) == 0 else
          a[self.worker:self.worker + 1], data)
    self.data = data
    dtype = data.x_MxNxD.dtype
    self.compressor = check_deployable(spec, hyper, dtype)
    self.uplink = uplink_part(hyper)
    self.format = _run_format(self.compressor, self.uplink, spec, hyper)
    self.warm_format = warm_format(hyper, spec.problem.num_params())
    if theta0_P is None:
      theta0_P, _ = loop.flat_params(spec.problem, hyper.seed, dtype)
    # Under a broadcast with a wire: theta and the server state's copy the
    # worker holds, and how many server steps it has applied.
    self.downlink = downlink_wire(spec, hyper)
    self.held = Held(jnp.asarray(theta0_P, dtype),
                     jnp.zeros_like(jnp.asarray(theta0_P, dtype)), 0)
    if memory is None:
      state = spec.rule.init(jnp.asarray(theta0_P), 1, spec.memory, hyper,
                             parts=spec.parts)
      memory = Memory(state.last_upload_MxP[0], state.last_error_M[0],
                      state.clock_M[0], state.error_MxP[0],
                      _row(state.parts_M))
    self.memory = memory
    self.previous: Memory | None = None  # before the last upload
    self.ran = -1  # the last round this client ran

  def catch_up(self, message: Message) -> None:
    """The memory at the start of round k, as the simulation has it: rolled
    back if the server did not take the client's last answer (refused, or
    lost on the way), one round older in the clock for each round it took
    nothing from this client (refused, or never run here: a process lost
    with the memory it wrote)."""
    k, ran = int(message.step), self.ran
    if k <= ran:
      raise ValueError(f'client {self.worker} asked for round {k} after '
                       f'answering round {ran}')
    last_taken = ran if message.last_taken is None else message.last_taken
    waits = k - 1 - ran  # the rounds it never ran
    if ran >= 0 and last_taken != ran:  # its last answer was not taken
      self.memory = self.previous
      waits += 1
    # participation.waited, `waits` times: saturating at NEVER_UPLOADED
    never = trigger_lib.NEVER_UPLOADED
    waits = min(waits, never)
    clock = jnp.asarray(self.memory.clock)
    self.memory = self.memory._replace(clock=jnp.where(
        clock >= never - waits, jnp.maximum(clock, never),
        clock + waits).astype(clock.dtype))

  def apply_downlinks(self, message: Message) -> jax.Array:
    """theta^k: the message's, or under a broadcast with a wire the
    client's own, stepped by the payloads it has not applied (each decoded
    against its copy, `wire.decode`)."""
    if self.downlink is None:
      return jnp.asarray(message.theta_P)
    down, held = self.downlink, self.held
    p = self.spec.problem.num_params()
    for j, payload in message.downlinks:
      if j < held.version:
        continue  # (applied from an earlier message)
      if j > held.version:
        raise ValueError(f'client {self.worker} holds theta^{held.version}: '
                         f'the message\'s payloads start at round {j}')
      fmt = wire.Format.of(down.compressor(down.first(self.hyper, j)), p,
                           self.hyper)
      copy_P = wire.decode(fmt, payload, np.asarray(held.copy_P),
                           num_workers=self.spec.num_workers)
      held = Held(_held_step(self.spec, down, self.hyper, held.theta_P,
                             jnp.asarray(copy_P)), jnp.asarray(copy_P),
                  held.version + 1)
    if held.version != int(message.step):
      raise ValueError(f'client {self.worker} holds theta^{held.version}: '
                       f'round {int(message.step)} computes at '
                       f'theta^{int(message.step)}')
    self.held = held
    return held.theta_P

  def round(self, message: Message) -> Upload:
    """Round k: catch up (`catch_up`), compute, compress, decide; the
    memory moves on as if the upload is taken."""
    self.catch_up(message)
    theta_P = self.apply_downlinks(message)
    # (the warm start's first upload: the clock of a worker that never
    # uploaded, as rules._worker reads it)
    warm = self.warm_format is not None and int(
        np.asarray(self.memory.clock)) == trigger_lib.NEVER_UPLOADED
    fmt = self.warm_format if warm else self.format
    self.previous = self.memory
    self.ran = int(message.step)
    sent, bits, sent_P, ref_P, value_P, norm, new = _client_round(
        self.spec, self.data, self.hyper, jnp.int32(self.worker),
        jnp.int32(message.step), theta_P,
        jnp.asarray(message.history_D), self.memory)
    if not bool(sent):
      # (a skip moves only the clock and a trigger's memory)
      self.memory = new
      return Upload(False, None, 0)
    if self.uplink is not None and not warm:  # its segments
      payload, fmt, segment_bits = uplink.encode(
          self.uplink, self.hyper, int(message.step), self.worker, sent_P,
          self.previous.last_upload_P,
          self.previous.parts.get(self.uplink.name),
          new.parts.get(self.uplink.name))
      if segment_bits != int(bits):
        raise ValueError(f'{fmt.compressor}: its segments take '
                         f'{segment_bits} bits, the round counted {int(bits)}')
      self.memory = new
      return Upload(True, payload, int(bits), fmt)
    if warm:  # g itself, against 0
      ref_P = jnp.zeros_like(ref_P)
    fields = wire.fields_of(fmt, sent_P, ref_P, value_P, norm=norm)
    payload = wire.encode(fmt, fields)
    self.memory = new
    return Upload(True, payload, int(bits), fmt)


__all__ = ['Client']
