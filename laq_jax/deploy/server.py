"""The server's half of a deployed round (`laq_jax.deploy`)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax.deploy import uplink
from laq_jax.deploy import wire
from laq_jax.deploy.common import (Message, _run_format, check_deployable,
                                   downlink_wire, uplink_part, warm_format,
                                   with_upload_memory)
from laq_jax.parts import servers as servers_lib
from laq_jax.round import hyper as hyper_lib
from laq_jax.round import loop
from laq_jax.round import participation as participation_lib
from laq_jax.round import rules
from laq_jax.round.hyper import Hyper
from laq_jax.round.spec import RunSpec


@functools.partial(jax.jit, static_argnums=0)
def _server_round(spec: RunSpec, hyper: Hyper, theta_P, state: rules.RuleState,
                  value_MxP, sent_M, taken_M, counts_M):
  """The server's half of `rules.step`: the aggregate, the participants'
  (weighted) step, the server's update, the history. Returns theta^{k+1},
  the state and the step the server part took (what a broadcast's wire
  compresses)."""
  hyper = rules.server_hyper(hyper_lib.cast(hyper, theta_P.dtype),
                             spec.parts)
  sent_M = sent_M & taken_M
  delta_MxP = jnp.where(sent_M[:, None], value_MxP - state.last_upload_MxP,
                        jnp.zeros_like(value_MxP))
  last_upload_MxP = jnp.where(sent_M[:, None], value_MxP,
                              state.last_upload_MxP)
  aggregate_P = state.aggregate_P + collectives.sum_workers(delta_MxP)
  step_P = participation_lib.server_step(aggregate_P, last_upload_MxP,
                                         taken_M, hyper, spec.num_workers)
  if spec.parts.weighting:
    mean = hyper.weighting != participation_lib.WEIGHTING.index('sum')
    weighted_P = participation_lib.weighted_step(last_upload_MxP, taken_M,
                                                 counts_M, hyper)
    step_P = jnp.where(mean, weighted_P, step_P)
  new_theta_P, server = servers_lib.update(step_P, theta_P, hyper,
                                           spec.parts.servers, state.server)
  idle = (hyper.absent == participation_lib.ABSENT.index('drop')) & ~jnp.any(
      taken_M)
  new_theta_P = jnp.where(idle, theta_P, new_theta_P)
  server = jax.tree.map(lambda new, old: jnp.where(idle, old, new), server,
                        state.server)
  moved = servers_lib.history_entry(step_P, theta_P, new_theta_P, hyper,
                                    spec.parts.servers)
  history = jnp.concatenate([moved[None], state.history_D[:-1]])
  return new_theta_P, state._replace(
      last_upload_MxP=last_upload_MxP, aggregate_P=aggregate_P,
      history_D=history, broadcast_P=new_theta_P, server=server), step_P


@dataclasses.dataclass
class Refusal:
  """A message the server refused: the round, the client, why."""
  step: int
  worker: int
  reason: str


class Server:
  """The server of a deployed run: theta, every worker's last upload as
  decoded, the aggregate, the server's optimizer state."""

  def __init__(self, spec: RunSpec, hyper: Hyper, counts_M=None,
               theta0_P=None, dtype=np.float32):
    spec = with_upload_memory(spec)
    self.spec, self.hyper = spec, hyper
    self.compressor = check_deployable(spec, hyper, dtype)
    self.uplink = uplink_part(hyper)
    self.format = _run_format(self.compressor, self.uplink, spec, hyper)
    self.warm_format = warm_format(hyper, spec.problem.num_params())
    self.downlink = downlink_wire(spec, hyper)
    self.downlinks: dict[int, bytes] = {}  # round -> its payload (a wire's)
    self.bits_down: list[int] = []  # per round, each worker's (a wire's)
    if theta0_P is None:
      theta0_P, _ = loop.flat_params(spec.problem, hyper.seed, dtype)
    self.theta_P = jnp.asarray(theta0_P, dtype)
    self.state = spec.rule.init(self.theta_P, spec.num_workers, spec.memory,
                                hyper, parts=spec.parts)
    m = spec.num_workers
    # (equal shards weigh alike, as the simulation's counts_M = None does)
    self.counts_M = jnp.asarray(np.ones(m) if counts_M is None else counts_M,
                                dtype)
    self.step = 0
    self.taken_last = np.ones(m, bool)
    self.last_taken = np.full(m, -1)  # per client: the last round taken
    self.refusals: list[Refusal] = []
    self._begin()

  def _begin(self):
    m = self.spec.num_workers
    self._values = np.asarray(self.state.last_upload_MxP).copy()
    self._sent = np.zeros(m, bool)
    self._heard = np.zeros(m, bool)

  def format_for(self, worker: int):
    """The format `worker`'s upload this round must be in: with the warm
    start, identity until the server has taken one from it (its first
    participation always uploads), else the run's."""
    if self.warm_format is not None and self.last_taken[worker] < 0:
      return self.warm_format
    if self.uplink is not None:  # (its segments may change with the round)
      return uplink.plan(self.uplink, self.hyper, self.step,
                         self.spec.problem.num_params())
    return self.format

  def broadcast(self, worker: int) -> Message:
    """Round k's message to `worker`."""
    last = int(self.last_taken[worker])
    if self.downlink is None:
      return Message(self.step, np.asarray(self.theta_P),
                     np.asarray(self.state.history_D), last)
    # (a client taken in round L applied the payloads before L)
    return Message(self.step, None, np.asarray(self.state.history_D), last,
                   tuple((j, self.downlinks[j])
                         for j in range(max(last, 0), self.step)))

  def refuse(self, worker: int, reason: str) -> None:
    """Take `worker` out of this round (absent), recording why."""
    if 0 <= worker < self.spec.num_workers:
      self._heard[worker] = True  # a second message is refused too
      self._sent[worker] = False
      self._values[worker] = np.asarray(self.state.last_upload_MxP[worker])
      self._refused = getattr(self, '_refused', set()) | {worker}
    self.refusals.append(Refusal(self.step, worker, reason))

  def receive(self, worker: int, sent: bool, payload: bytes | None,
              bits: int | None = None) -> None:
    """A client's answer for this round; raises wire.WireError (the server
    refuses it: call `refuse`) on a bad one. `bits`, the count the client
    declares for its upload, must be its payload's (`wire.decode`)."""
    m = self.spec.num_workers
    if (isinstance(worker, (bool, np.bool_))
        or not isinstance(worker, (int, np.integer)) or not 0 <= worker < m):
      raise wire.WireError(f'client index {worker!r} is not an integer in '
                           f'0..{m - 1}')
    if self._heard[worker]:
      raise wire.WireError(f'client {worker} answered round {self.step} '
                           'twice')
    if sent:
      if payload is None:
        raise wire.WireError('an upload without a payload')
      fmt = self.format_for(worker)
      innovation = (fmt is self.format
                    and bool(np.asarray(self.hyper.innovation)))
      if self.uplink is not None and fmt is not self.warm_format:
        value = uplink.decode(
            self.uplink, self.hyper, self.step, worker, payload,
            np.asarray(self.state.last_upload_MxP[worker]), num_workers=m,
            num_bits=bits)
      else:
        value = wire.decode(fmt, payload,
                            np.asarray(self.state.last_upload_MxP[worker])
                            if innovation else
                            np.zeros(fmt.num_params, np.float32),
                            num_workers=m, num_bits=bits)
      self._values[worker] = value
    elif payload:
      raise wire.WireError('a skip with a payload')
    self._heard[worker] = True
    self._sent[worker] = bool(sent)

  def _send_down(self, step_P, before) -> None:
    """Round k's payload under a broadcast with a wire: what its server
    part compressed, in the wire's format; the log keeps the rounds a
    client not taken since may still need."""
    down, p = self.downlink, self.spec.problem.num_params()
    fmt = wire.Format.of(down.compressor(down.first(self.hyper, self.step)),
                         p, self.hyper)
    x_P, ref_P, value_P = down.triple(step_P, before[down.server],
                                      self.state.server[down.server])
    fields = wire.fields_of(fmt, np.asarray(x_P), np.asarray(ref_P),
                            np.asarray(value_P))
    self.downlinks[self.step] = wire.encode(fmt, fields)
    self.bits_down.append(fmt.fixed_bits())
    oldest = max(int(self.last_taken.min()), 0)
    self.downlinks = {j: v for j, v in self.downlinks.items() if j >= oldest}

  def finish_round(self) -> np.ndarray:
    """Closes round k: the clients heard from (and not refused) take part.
    Returns who took part."""
    refused = getattr(self, '_refused', set())
    taken = self._heard.copy()
    for w in refused:
      taken[w] = False
    before = self.state.server
    self.theta_P, self.state, step_P = _server_round(
        self.spec, self.hyper, self.theta_P, self.state,
        jnp.asarray(self._values), jnp.asarray(self._sent),
        jnp.asarray(taken), self.counts_M)
    if self.downlink is not None:
      self._send_down(step_P, before)
    self.taken_last = taken
    self.last_taken[taken] = self.step
    self._refused = set()
    self.step += 1
    self._begin()
    return taken


__all__ = ['Refusal', 'Server']
