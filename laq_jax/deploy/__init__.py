"""One round split where a deployment splits it: the worker's half on the
worker, the server's half on the server, each from the library's own
functions, so a deployed run is the simulated one. ::

    client = deploy.Client(spec, data, hyper, worker=m)   # on worker m
    server = deploy.Server(spec, hyper, counts_M)         # on the server
    message = server.broadcast(m)               # theta^k, k, the history
    upload = client.round(message)              # its memory moves on
    server.receive(m, upload.sent, upload.payload, upload.bits)  # or WireError
    server.finish_round()                       # aggregate, step, history

The worker's half is `stages.gradient_part` on its own shard (its gradient, or
its K local steps) and `rules.workers_stage` on its own memory (its
compressor, error feedback, its trigger): the simulation's stages on one
row. The server's half is the rest of `rules.step`: the aggregate of the
uploads as decoded from their payloads (`laq_jax.wire`), the participants'
weighted mean, the server's update (`laq_jax.servers`), the history the
trigger reads. Every client of the round that the server heard from takes
part; one it did not hear from, or whose payload it refused, is absent for
the round (as `participation.mask_absent` treats a client not drawn: it
keeps its memory, its clock counts on), and the next message tells it so.

Deployable: the presets whose compressor has a wire format (`wire.FORMATS`:
gd, lag, laq, qgd, sgd, slag, slaq, sqgd, qsgd, ef21, topk_ef, fedavg,
fedavgm, fedadam, fedyogi, fedprox, fedpaq, fedlaq, local_sgd, the 3PC
family's tpc_ef21, tpc_lag and tpc_clag, whose warm start sends a worker's
first upload, g itself, in the identity format: `warm_format`,
`Server.format_for`, ...), in
float32, without the authors' bit counts, a quantized broadcast, control
variates (SCAFFOLD), or a server that selects workers (LASG-PS). Every
client the server reaches takes part in every round (a participation draw
is the engine's: Flower samples its nodes).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax.deploy import wire
from laq_jax.parts import broadcasts
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import compressors
from laq_jax.parts import estimators
from laq_jax.parts import servers as servers_lib
from laq_jax.parts import triggers as trigger_lib
from laq_jax.round import hyper as hyper_lib
from laq_jax.round import loop
from laq_jax.round import participation as participation_lib
from laq_jax.round import rules
from laq_jax.round import stages
from laq_jax.round.hyper import Hyper
from laq_jax.round.spec import RunSpec


class Memory(NamedTuple):
  """One worker's memory between rounds (its row of `rules.RuleState`)."""
  last_upload_P: Any
  last_error: Any
  clock: Any
  error_P: Any
  parts: dict


class Message(NamedTuple):
  """What the server sends every client at the start of round k.

  Attributes:
    step: k, the round.
    theta_P: theta^k (float32).
    history_D: the trigger's history of squared parameter steps.
    last_taken: the last round (< k) whose answer the server took from this
      client, -1 for none; None: the client's last round (the default).
      A client whose last answer was refused or never arrived rolls back;
      rounds it never ran (its process lost with its memory) count as
      absent.
  """
  step: int
  theta_P: np.ndarray
  history_D: np.ndarray
  last_taken: int | None = None


class Upload(NamedTuple):
  """One worker's answer: sent, its payload (None on a skip), the bits
  the simulation counts for it (0 on a skip) and the format it is in (the
  run's, or with the 3PC family's warm start the first upload's identity
  format; None on a skip)."""
  sent: bool
  payload: bytes | None
  bits: int
  format: Any = None


def warm_format(hyper: Hyper, num_params: int):
  """The format of a worker's first upload under the warm start (g
  uncompressed: identity, 32 p bits), or None without it."""
  if not bool(np.asarray(hyper.warm_start)):
    return None
  return wire.Format('identity', num_params)


# The estimators whose upload is ref + C(g - ref) with a reference the
# server holds too (Qhat or 0): what the wire formats carry.
WIRE_ESTIMATORS = ('direct', 'innovation')


def check_deployable(spec: RunSpec, hyper: Hyper, dtype) -> str:
  """The run's compressor name, or ValueError naming what a deployment
  cannot carry."""
  if np.dtype(dtype) != np.float32:
    raise ValueError(f'precision {np.dtype(dtype).name}: a deployment sends '
                     'float32 (precision=float32)')
  parts = spec.parts
  name = compressors.REGISTRY.names[int(np.asarray(hyper.compressor))]
  if name not in wire.FORMATS:
    raise ValueError(f'compressor {name!r} has no wire format: deployable '
                     f'are {", ".join(wire.FORMATS)}')
  estimator = estimators.REGISTRY.names[int(np.asarray(hyper.estimator))]
  if estimator not in WIRE_ESTIMATORS:
    raise ValueError(f'estimator {estimator!r} is not deployable: a payload '
                     'carries C(g - ref) against a reference the server holds '
                     f'too; deployable are {", ".join(WIRE_ESTIMATORS)}')
  if parts.controls:
    raise ValueError('control variates (scaffold) are not deployable yet')
  reading = [p.name for p in parts.servers if servers_lib.needs_round(p)]
  if reading:
    raise ValueError(f'server {reading[0]!r} (it reads the round\'s '
                     'participants) is not deployable yet')
  if parts.shifts:
    raise ValueError(f'client {parts.shifts[0].name!r} (a state moved after '
                     'the server\'s step) is not deployable yet')
  broadcast = broadcasts.REGISTRY.names[int(np.asarray(hyper.broadcast))]
  if spec.downlink and broadcast not in ('full', 'quantized'):
    raise ValueError(f'broadcast {broadcast!r} is not deployable yet: a '
                     'deployment sends theta itself (broadcast full)')
  if spec.downlink and int(np.asarray(hyper.downlink_bits)) > 0:
    raise ValueError('a quantized broadcast (downlink_bits > 0) is not '
                     'deployable yet')
  triggers = [p.name for p in parts.triggers]
  if 'lasg_ps' in triggers:
    raise ValueError('LASG-PS (the server selects) is not deployable')
  client = clients_lib.REGISTRY.names[int(np.asarray(hyper.client))]
  if clients_lib.heterogeneous(clients_lib.REGISTRY.get(client)) or (
      clients_lib.normalizes(clients_lib.REGISTRY.get(client))):
    raise ValueError(f'client {client!r} (FedNova\'s drawn work and '
                     'normalized change, ||a_m||_1 beside Delta_m) is not '
                     'deployable yet')
  return name


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
    self.spec, self.hyper, self.worker = spec, hyper, int(worker)
    if data.x_MxNxD.shape[0] != 1:
      data = jax.tree.map(
          lambda a: a if a is None or jnp.ndim(a) == 0 else
          a[self.worker:self.worker + 1], data)
    self.data = data
    dtype = data.x_MxNxD.dtype
    self.compressor = check_deployable(spec, hyper, dtype)
    self.format = wire.Format.of(self.compressor, spec.problem.num_params(),
                                 hyper)
    self.warm_format = warm_format(hyper, spec.problem.num_params())
    if memory is None:
      if theta0_P is None:
        theta0_P, _ = loop.flat_params(spec.problem, hyper.seed, dtype)
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

  def round(self, message: Message) -> Upload:
    """Round k: catch up (`catch_up`), compute, compress, decide; the
    memory moves on as if the upload is taken."""
    self.catch_up(message)
    # (the warm start's first upload: the clock of a worker that never
    # uploaded, as rules._worker reads it)
    warm = self.warm_format is not None and int(
        np.asarray(self.memory.clock)) == trigger_lib.NEVER_UPLOADED
    fmt = self.warm_format if warm else self.format
    self.previous = self.memory
    self.ran = int(message.step)
    sent, bits, sent_P, ref_P, value_P, norm, new = _client_round(
        self.spec, self.data, self.hyper, jnp.int32(self.worker),
        jnp.int32(message.step), jnp.asarray(message.theta_P),
        jnp.asarray(message.history_D), self.memory)
    if not bool(sent):
      # (a skip moves only the clock and a trigger's memory)
      self.memory = new
      return Upload(False, None, 0)
    if warm:  # g itself, against 0
      ref_P = jnp.zeros_like(ref_P)
    fields = wire.fields_of(fmt, sent_P, ref_P, value_P, norm=norm)
    payload = wire.encode(fmt, fields)
    self.memory = new
    return Upload(True, payload, int(bits), fmt)


@functools.partial(jax.jit, static_argnums=0)
def _server_round(spec: RunSpec, hyper: Hyper, theta_P, state: rules.RuleState,
                  value_MxP, sent_M, taken_M, counts_M):
  """The server's half of `rules.step`: the aggregate, the participants'
  (weighted) step, the server's update, the history."""
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
      history_D=history, broadcast_P=new_theta_P, server=server)


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
    self.spec, self.hyper = spec, hyper
    self.compressor = check_deployable(spec, hyper, dtype)
    self.format = wire.Format.of(self.compressor, spec.problem.num_params(),
                                 hyper)
    self.warm_format = warm_format(hyper, spec.problem.num_params())
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
    return self.format

  def broadcast(self, worker: int) -> Message:
    """Round k's message to `worker`."""
    return Message(self.step, np.asarray(self.theta_P),
                   np.asarray(self.state.history_D),
                   int(self.last_taken[worker]))

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

  def finish_round(self) -> np.ndarray:
    """Closes round k: the clients heard from (and not refused) take part.
    Returns who took part."""
    refused = getattr(self, '_refused', set())
    taken = self._heard.copy()
    for w in refused:
      taken[w] = False
    self.theta_P, self.state = _server_round(
        self.spec, self.hyper, self.theta_P, self.state,
        jnp.asarray(self._values), jnp.asarray(self._sent),
        jnp.asarray(taken), self.counts_M)
    self.taken_last = taken
    self.last_taken[taken] = self.step
    self._refused = set()
    self.step += 1
    self._begin()
    return taken


__all__ = ['Client', 'Memory', 'Message', 'Refusal', 'Server', 'Upload',
           'check_deployable']
