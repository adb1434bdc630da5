"""What both halves of a deployed run share: the messages, what a worker
holds, and what a deployment can carry (`laq_jax.deploy`)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import numpy as np

from laq_jax.deploy import uplink
from laq_jax.deploy import wire
from laq_jax.parts import broadcasts
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import compressors
from laq_jax.parts import estimators
from laq_jax.parts import servers as servers_lib
from laq_jax.round import hyper as hyper_lib
from laq_jax.round import participation
from laq_jax.round import rules
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
    downlinks: under a broadcast with a wire (EF21-BC's; `theta_P` is then
      None): ((j, payload), ...) the server's payloads of rounds j =
      max(last_taken, 0)..k-1, from which the client steps its own theta
      (it applies those it has not).
  """
  step: int
  theta_P: np.ndarray | None
  history_D: np.ndarray
  last_taken: int | None = None
  downlinks: tuple = ()


class Held(NamedTuple):
  """What a worker holds under a broadcast with a wire (EF21-BC's):
  theta^version, its copy of the server part's state (G) and how many
  server steps it has applied."""
  theta_P: Any
  copy_P: Any
  version: int


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


def with_upload_memory(spec: RunSpec) -> RunSpec:
  """`spec` keeping the last uploads (`RunSpec.upload_memory`): a deployed
  server and client hold their own copy of each upload, whatever the
  simulation compiled (the same results: the launchers leave it out only
  where nothing reads it)."""
  if spec.upload_memory:
    return spec
  return dataclasses.replace(spec, upload_memory=True)


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
  part = uplink_part(hyper)
  if estimator not in WIRE_ESTIMATORS and part is None:
    allowed = WIRE_ESTIMATORS + tuple(
        n for n in estimators.REGISTRY.names
        if estimators.REGISTRY.get(n).wire is not None)
    raise ValueError(f'estimator {estimator!r} is not deployable: a payload '
                     'carries C(g - ref) against a reference the server holds '
                     'too, or the segments its part\'s wire declares '
                     f'(codecs.Uplink); deployable are {", ".join(allowed)}')
  for slot in part.wire.slots if part is not None else ():
    held = uplink.slot_compressor(slot, hyper)
    if held not in wire.FORMATS:
      raise ValueError(f'compressor {held!r} (estimator {estimator!r}\'s '
                       f'slot {slot}) has no wire format: deployable are '
                       f'{", ".join(wire.FORMATS)}')
    if compressors.REGISTRY.get(held).stateful:
      raise ValueError(f'compressor {held!r} keeps state: estimator '
                       f'{estimator!r}\'s segments are deployable with '
                       'stateless compressors')
  if parts.controls:
    raise ValueError('control variates (scaffold) are not deployable yet')
  undeployed = [p.name for p in parts.private if p.name != 'dp_local']
  if undeployed:  # (local DP: each client adds its noise before packing)
    raise ValueError(f'privacy part {undeployed[0]!r} is not deployable yet '
                     '(the server\'s noise, or secure aggregation, is not '
                     'simulated on a wire); deploy with privacy=dp_local or '
                     'off')
  reading = [p.name for p in parts.servers if servers_lib.needs_round(p)]
  if reading:
    raise ValueError(f'server {reading[0]!r} (it reads the round\'s '
                     'participants) is not deployable yet')
  if parts.shifts:
    raise ValueError(f'client {parts.shifts[0].name!r} (a state moved after '
                     'the server\'s step) is not deployable yet')
  broadcast = broadcasts.REGISTRY.names[int(np.asarray(hyper.broadcast))]
  down = downlink_wire(spec, hyper)
  if spec.downlink and broadcast not in ('full', 'quantized') and down is None:
    raise ValueError(f'broadcast {broadcast!r} is not deployable yet: a '
                     'deployment sends theta itself (broadcast full), or '
                     'what a broadcast part\'s wire declares '
                     '(codecs.Downlink)')
  if down is not None:
    server = servers_lib.REGISTRY.names[int(np.asarray(hyper.server))]
    if server != down.server:
      raise ValueError(f'broadcast {broadcast!r} sends the state of server '
                       f'{down.server!r}: the run\'s server is {server!r}')
    # its compressor must have a wire format (Format.of refuses one without)
    wire.Format.of(down.compressor(False), spec.problem.num_params(), hyper)
    if int(np.asarray(hyper.absent)) == participation.ABSENT.index('drop'):
      raise ValueError(f'broadcast {broadcast!r} with absent=\'drop\' is not '
                       'deployable: a round no client answers leaves the '
                       'server\'s theta where it was while each client '
                       'steps its own from the broadcast; use '
                       'absent=\'stale\'')
  if (spec.downlink and down is None
      and int(np.asarray(hyper.downlink_bits)) > 0):
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


def uplink_part(hyper: Hyper):
  """The point's estimator part where its upload travels in segments (its
  `Part.wire`, `laq_jax.deploy.uplink`), else None (direct, innovation:
  one payload against a reference)."""
  name = estimators.REGISTRY.names[int(np.asarray(hyper.estimator))]
  part = estimators.REGISTRY.get(name)
  return part if part.wire is not None and name not in WIRE_ESTIMATORS \
      else None


def downlink_wire(spec: RunSpec, hyper: Hyper):
  """The point's broadcast's wire (a `codecs.Downlink`: the workers step
  their own theta from the server's payloads), or None (theta is sent)."""
  if not spec.downlink:
    return None
  name = broadcasts.REGISTRY.names[int(np.asarray(hyper.broadcast))]
  return broadcasts.REGISTRY.get(name).wire

@functools.partial(jax.jit, static_argnums=(0, 1))
def _held_step(spec: RunSpec, down, hyper: Hyper, theta_P, held_P):
  """theta^{k+1} from theta^k and the workers' new copy, as the server part
  steps it (its Hyper as `_server_round` casts it)."""
  hyper = rules.server_hyper(hyper_lib.cast(hyper, theta_P.dtype), spec.parts)
  return down.step(theta_P, held_P, hyper).astype(theta_P.dtype)


def _run_format(compressor: str, part, spec: RunSpec, hyper: Hyper):
  """The run's format: its compressor's, or an uplink's segments as its
  first round plans them (the format a skip names)."""
  if part is None:
    return wire.Format.of(compressor, spec.problem.num_params(), hyper)
  return uplink.plan(part, hyper, 0, spec.problem.num_params())


__all__ = ['Held', 'Memory', 'Message', 'Upload', 'WIRE_ESTIMATORS',
           'check_deployable', 'downlink_wire', 'uplink_part', 'warm_format']
