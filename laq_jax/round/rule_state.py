"""The communication rule's records: its state, its per-step statistics,
the parts a program compiles in, and what its stages hand each other.

`laq_jax.rules` runs the round on these (its `step` and stages);
`laq_jax.rules` re-exports every name here, so `rules.RuleState`,
`rules.Parts`, `rules.init` and `rules.Rule` keep working. Arrays are flat
with a leading worker axis M on every per-worker field (the `PER_WORKER`
names a record's class states).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from laq_jax import parts as parts_lib
from laq_jax.parts import broadcasts as broadcasts_lib
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import compressors
from laq_jax.parts import estimators as estimators_lib
from laq_jax.parts import privatizers
from laq_jax.parts import servers as servers_lib
from laq_jax.parts import triggers as trigger_lib
from laq_jax.round import hyper as hyper_lib
from laq_jax.round.hyper import Hyper


class RuleState(NamedTuple):
  """Server and worker memory.

  Attributes:
    last_upload_MxP: Qhat_m, what the server holds of worker m (0 at start);
      [M, 0] where the RunSpec keeps no upload memory
      (`RunSpec.upload_memory` False: Qhat_m reads as 0).
    last_error_M: ehat_m, ||Q - g||^2 of that upload (0 at start).
    clock_M: t_m, consecutive skips so far (int32); NEVER_UPLOADED before a
      worker's first upload.
    error_MxP: error feedback's memory: what earlier compressions dropped (0
      at start, and always 0 without error feedback); [M, 0] where the
      RunSpec compiles error feedback out (`RunSpec.error_feedback` False).
    aggregate_P: sum_m Qhat_m, what the server steps with (all workers);
      without upload memory the sum of this round's uploads.
    history_D: h_d = ||theta^{k+1-d} - theta^{k-d}||^2, d = 1..D ([0] newest).
    broadcast_P: thetahat, the parameters the workers hold: theta itself, or
      its quantized broadcast when the downlink is quantized.
    parts_M: {part name: state with a leading worker axis} of the stateful
      compressors and triggers compiled in ({} when none).
    server: {part name: state} of the stateful servers compiled in (optax's
      momentum, Adam's moments; {} for sgd).
  """
  last_upload_MxP: jax.Array
  last_error_M: jax.Array
  clock_M: jax.Array
  error_MxP: jax.Array
  aggregate_P: jax.Array
  history_D: jax.Array
  broadcast_P: jax.Array
  parts_M: dict = {}
  server: dict = {}

  # The fields with a leading worker axis (split over the devices under
  # shard_map; the others are replicated): stated, not read off the names.
  PER_WORKER = ('last_upload_MxP', 'last_error_M', 'clock_M', 'error_MxP',
                'parts_M')


class StepStats(NamedTuple):
  """Per-step, per-worker statistics: the one logging surface.

  Attributes:
    sent_M: whether each worker uploaded.
    bits_M: bits each worker uploaded (0 on a skip), int32.
    bits_down_M: bits each worker received: the broadcast of the new
      parameters (32 p, or b_down p + 32 quantized), int32.
    innovation_M: the trigger's left-hand side: ||Q - Qhat||^2 (eager and
      LAG/LAQ), ||g - Qhat||^2 (CLAG).
    threshold_M: the trigger's right-hand side.
    error_M: e = ||Q - g||^2 of this step's compression (0 at full
      precision).
    dropped_M: whether a round deadline cut the worker off (its work lost:
      `Hyper.deadline_s`).
    grads_M: the gradients each worker computed (int32): 1, 2 for LASG's
      and CADA's same-sample pair (1 on their forced steps), 0 for a client
      not in the round or one LASG-PS's server did not select.
  """
  sent_M: jax.Array
  bits_M: jax.Array
  bits_down_M: jax.Array
  innovation_M: jax.Array
  threshold_M: jax.Array
  error_M: jax.Array
  dropped_M: jax.Array
  grads_M: jax.Array

  PER_WORKER = ('sent_M', 'bits_M', 'bits_down_M', 'innovation_M',
                'threshold_M', 'error_M', 'dropped_M', 'grads_M')


NEVER_UPLOADED = trigger_lib.NEVER_UPLOADED


@dataclasses.dataclass(frozen=True)
class Parts:
  """The parts a program compiles in (static); `Hyper` picks among them.

  Attributes:
    compressors: the compressor Parts it may meet.
    triggers: the trigger Parts it may meet.
    servers: the server Parts it may meet.
    error_feedback: whether any point uses error feedback.
    downlink: whether any point quantizes the broadcast.
    stochastic: minibatch gradients: `Hyper.authors_code` then follows the
      authors' minibatch scripts (their history window).
    clients: the client Parts it may meet (`laq_jax.clients`; ('gradient',)
      unless a point runs local work).
    weighting: whether any point combines the uploads as a weighted mean
      (`Hyper.weighting` samples or uniform).
    estimators: the estimator Parts it may meet (`laq_jax.estimators`;
      empty: every registered one but the opt-in ones).
    broadcasts: the broadcast Parts it may meet where `downlink` is on
      (`laq_jax.broadcasts`; empty: every registered one but the opt-in
      ones).
    compressors_b: the compressor Parts `Hyper.compressor_b` may pick, the
      second compressor an estimator may call (empty: identity alone).
    warm_start: whether any point starts warm (`Hyper.warm_start`: a
      worker's first upload is its gradient, 32 p bits).
    upload_memory: whether the server keeps each worker's last upload
      (`RuleState.last_upload_MxP`); False where no point reads it
      (`RunSpec.upload_memory`): [M, 0], and the round's uploads alone.
    privacy: the privacy parts it may meet (`laq_jax.privatizers`); empty
      or ('off',) alone: nothing of differential privacy compiled in.
  """
  compressors: tuple[parts_lib.Part, ...] = ()
  triggers: tuple[parts_lib.Part, ...] = ()
  servers: tuple[parts_lib.Part, ...] = ()
  error_feedback: bool = True
  downlink: bool = True
  stochastic: bool = False
  clients: tuple[parts_lib.Part, ...] = ()
  weighting: bool = False
  estimators: tuple[parts_lib.Part, ...] = ()
  broadcasts: tuple[parts_lib.Part, ...] = ()
  compressors_b: tuple[parts_lib.Part, ...] = ()
  warm_start: bool = False
  upload_memory: bool = True
  privacy: tuple[parts_lib.Part, ...] = ()

  def __post_init__(self):
    if not self.estimators:
      object.__setattr__(self, 'estimators', estimators_lib.REGISTRY.parts())
    if not self.broadcasts:
      object.__setattr__(self, 'broadcasts', broadcasts_lib.REGISTRY.parts())
    if not self.compressors_b:
      object.__setattr__(self, 'compressors_b',
                         compressors.REGISTRY.parts(('identity',)))

  @classmethod
  def of(cls, compressors_=None, triggers=None, servers=None, clients=None,
         estimators=None, broadcasts=None, compressors_b=None,
         privacy=None, **flags) -> 'Parts':
    """Parts from names (None: every registered part of that kind; the
    sgd server, the gradient client and no privacy)."""
    return cls(compressors.REGISTRY.parts(compressors_),
               trigger_lib.REGISTRY.parts(triggers),
               servers_lib.REGISTRY.parts(servers or ('sgd',)),
               clients=clients_lib.REGISTRY.parts(clients or ('gradient',)),
               estimators=estimators_lib.REGISTRY.parts(estimators),
               broadcasts=broadcasts_lib.REGISTRY.parts(broadcasts),
               compressors_b=compressors.REGISTRY.parts(
                   compressors_b or ('identity',)),
               privacy=privatizers.REGISTRY.parts(privacy or ('off',)),
               **flags)

  @property
  def private(self) -> tuple[parts_lib.Part, ...]:
    """The privacy parts that privatize (all but 'off'); empty: nothing of
    differential privacy compiled in."""
    return tuple(p for p in self.privacy if p.name != 'off')

  @property
  def controls(self) -> tuple[parts_lib.Part, ...]:
    """The stateful client parts that keep control variates (SCAFFOLD's:
    a server copy c, the gradient corrected by c - c_m)."""
    return tuple(p for p in self.clients if p.stateful and p.after is None)

  @property
  def shifts(self) -> tuple[parts_lib.Part, ...]:
    """The stateful client parts whose state h_m moves after the server's
    step (`Part.after`, Scaffnew's): the gradient corrected by -h_m."""
    return tuple(p for p in self.clients if p.after is not None)


def init(theta_P: jax.Array, num_workers: int, memory: int,
         authors_code=False, parts: Parts | None = None,
         hyper: Hyper | None = None) -> RuleState:
  """Zero memory for `num_workers` workers (the local count under shard_map).

  With `authors_code` the clocks start at 0, as in the authors' scripts, and
  the trigger alone decides at k = 0; otherwise at NEVER_UPLOADED. The
  workers start from theta^0 (the seeded initialization, not broadcast).
  The stateful parts among `parts` start from their `init`.
  """
  num_params, dtype = theta_P.shape[-1], theta_P.dtype
  clock = jnp.where(authors_code, 0, NEVER_UPLOADED).astype(jnp.int32)
  parts_M, server = {}, {}
  if parts is not None:
    one = {**compressors.init_states(parts.compressors, num_params, dtype,
                                     theta_P),
           **trigger_lib.init_states(parts.triggers, num_params, dtype,
                                     theta_P),
           **estimators_lib.init_states(parts.estimators, num_params, dtype,
                                        theta_P)}
    one.update({p.name: p.init(num_params, dtype)
                for p in parts.controls + parts.shifts})
    parts_M = jax.tree.map(
        lambda a: jnp.broadcast_to(a, (num_workers,) + jnp.shape(a)), one)
    server = servers_lib.init_states(
        parts.servers, theta_P,
        server_hyper(hyper_lib.cast(hyper, dtype), parts))
    # The server's control variate c = the mean of the clients' (all 0).
    server.update({p.name: p.init(num_params, dtype) for p in parts.controls})
  return RuleState(
      # (no width where no point reads the last uploads: FedAvg's 1,000
      # clients of a 1.6 M-parameter CNN would hold 6.5 GB)
      last_upload_MxP=jnp.zeros((num_workers, num_params if parts is None
                                 or parts.upload_memory else 0), dtype),
      last_error_M=jnp.zeros((num_workers,), dtype),
      clock_M=jnp.full((num_workers,), clock, jnp.int32),
      # (no width where error feedback is compiled out: nothing reads it,
      # and at M = 1,000 clients of a 1.6 M-parameter CNN it is 6.5 GB)
      error_MxP=jnp.zeros((num_workers, num_params if parts is None
                           or parts.error_feedback else 0), dtype),
      aggregate_P=jnp.zeros((num_params,), dtype),
      history_D=jnp.zeros((memory,), dtype),
      broadcast_P=theta_P,
      parts_M=parts_M,
      server=server,
  )


class Worker(NamedTuple):
  """One worker's side of the round (the rule stage's output, per worker)."""
  last_upload_P: jax.Array
  last_error: jax.Array
  clock: jax.Array
  error_P: jax.Array
  delta_P: jax.Array
  parts: dict
  stats: 'StepStats'
  server_side: jax.Array  # the server chose the worker before it computed


class SameSample(NamedTuple):
  """This step's samples and how to take a gradient on one of them: the
  same-sample pair LASG's and CADA's triggers compare
  (`trigger.Inputs.gradient_at`).

  Attributes:
    sample_M: each local worker's sample of this step, a pytree with a
      leading worker axis (its minibatch, or its shard for full-batch
      gradients).
    grad_at: (theta_P, one worker's sample) -> its gradient there.
  """
  sample_M: object
  grad_at: Callable


class LocalOut(NamedTuple):
  """What the local-work stage adds to a round (`loop.local_gradients`).

  Attributes:
    steps_M: the gradients each local worker computed (K for a local
      point, 1 for a gradient point), int32.
    extra_bits_M: bits an upload carries beside the compressed one (a
      control variate's change, 32 p), int32.
    extra_down: bits every participant receives beside theta (the server's
      control variate, 32 p), int32 scalar.
    controls_M: {stateful client part: each local worker's new control
      variate c_m+ [M, P]} (kept where the worker uploads).
    norm_M: each local worker's ||a_m||_1, what its upload was divided by
      (FedNova's normalized change; 1 for every other client), or None.
    normalized: whether the point's uploads are normalized changes (the
      server then steps tau_eff = sum_S w_m ||a_m||_1 times their weighted
      mean: `rules.work_scale`), bool scalar, or None.
  """
  steps_M: jax.Array
  extra_bits_M: jax.Array
  extra_down: jax.Array
  controls_M: dict
  norm_M: jax.Array | None = None
  normalized: jax.Array | None = None


def server_hyper(hyper: Hyper, parts: Parts) -> Hyper:
  """`hyper` with `step_size` the server's step, the one every stage
  reads (the server's update, the LAG/LAQ threshold's alpha): eta_s
  (`Hyper.server_lr`) where the running client takes local steps and
  uploads its model change, alpha (`step_size`, the rate on gradients)
  where it uploads a gradient. Unchanged where no local client is compiled
  in, so a grid over FedSGD and FedAvg runs each at its own step."""
  local = [clients_lib.is_local(c) for c in parts.clients]
  if not any(local):
    return hyper
  rate = jnp.asarray(hyper.server_lr, jnp.result_type(hyper.step_size))
  if not all(local):
    index = parts_lib.local_index(hyper.client, parts.clients,
                                  clients_lib.REGISTRY)
    rate = jnp.where(jnp.asarray(local)[index], rate, hyper.step_size)
  return hyper._replace(step_size=rate)


def worker_params(state: RuleState, theta_P: jax.Array) -> jax.Array:
  """The parameters the workers hold: the broadcast (theta itself unless
  the downlink is quantized)."""
  del theta_P
  return state.broadcast_P


class Rule(NamedTuple):
  """A communication rule as an optax-style set of pure functions.

  `laq_jax.RunSpec.rule` holds one and the loop calls only these, so
  another rule plugs in without editing the loop:

  Attributes:
    init: `(theta_P, num_workers, memory, hyper, *, parts) -> state`, for
      the local workers. The state is a NamedTuple whose class states its
      PER_WORKER fields (a leading worker axis: split over the devices under
      shard_map); the others are replicated.
    step: `(grads_MxP, state, theta_P, hyper, *, step_count, worker_ids_M,
      num_workers, axis_name, parts) -> (theta^{k+1}, state, stats)`, the
      stats a `stats_type`.
    worker_params: (state, theta_P) -> the parameters the workers compute
      their gradients at.
    stats_type: the NamedTuple of per-step stats `step` returns (its class
      states PER_WORKER too); the loop's Trace is its fields after the loss
      and the gradient norm. It must hold sent_M, bits_M and bits_down_M
      (the accounting every file reads, `laq_jax.record.RECORDED`).
    same_sample: `step` takes `same_sample=` (a `SameSample`: this step's
      samples, for triggers that take a second gradient on them).
    rows: `step` takes `rows_M=` (a round computed on its participants'
      rows alone, `RunSpec.round_size`; see `laq_jax.rules.step`).
  """
  init: Callable[..., NamedTuple]
  step: Callable[..., tuple[jax.Array, NamedTuple, NamedTuple]]
  worker_params: Callable[[NamedTuple, jax.Array], jax.Array] = worker_params
  stats_type: type = StepStats
  same_sample: bool = False
  rows: bool = False
