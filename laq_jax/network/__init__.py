"""Simulated time on a modeled network: a `Network` as data, one round's time. ::

    net = make_network('mobile', num_workers=10, up_bps=5e6)
    time_T = replay(net, flops_M, bits_TxM, bits_down_TxM, seed=0)

The contract is docs/algorithm.md, "Time on a modeled network". Per worker m
the network holds its uplink and downlink bandwidth (bits/s) and one-way
latency (s) and its compute rate (FLOP/s); a seeded straggler distribution
slows each (step, worker)'s compute; the server has an ingress and an egress
bandwidth. One synchronous round k of the parameter server (the star) takes::

    c[k,m] = s[k,m] F_m / flops_per_s[m]
    u[k,m] = up_latency_s[m] + bits_up[k,m] / up_bps[m]
    arrive = max(max_m (c + u),
                 min_m c + max_m up_latency_s + sum_m bits_up / server_in_bps)
    d[k]   = max(max_m (down_latency_s + bits_down / down_bps),
                 max_m down_latency_s + sum_m bits_down / server_out_bps)
    T[k]   = arrive + d[k]

over the round's participants (every worker, without partial participation);
a ring all-reduce (gd, sgd) takes max_m c + 2 (n - 1) (l + (32 p / n) / B).
Every field is an array, so a sweep over bandwidths is a grid axis of one
program, and the same function replays a finished run's saved bits on any
network without training again.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import randomness
from laq_jax.show import show
# The Network record, its fields and the profiles (re-exported:
# `network.make_network`, `network.Network`, ...).
from laq_jax.network.profiles import allowed  # pylint: disable=unused-import
from laq_jax.network.profiles import as_mapping  # pylint: disable=unused-import
from laq_jax.network.profiles import check_field  # pylint: disable=unused-import
from laq_jax.network.profiles import describe  # pylint: disable=unused-import
from laq_jax.network.profiles import DOCS  # pylint: disable=unused-import
from laq_jax.network.profiles import FIELDS
from laq_jax.network.profiles import make_network  # pylint: disable=unused-import
from laq_jax.network.profiles import Network
from laq_jax.network.profiles import PER_WORKER_FIELDS
from laq_jax.network.profiles import PROFILES  # pylint: disable=unused-import
from laq_jax.network.profiles import SOURCES  # pylint: disable=unused-import
from laq_jax.network.profiles import STRAGGLERS  # pylint: disable=unused-import
from laq_jax.network.profiles import TOPOLOGIES

def slowdown(network: Network, seed, step, worker_ids_M) -> jax.Array:
  """s[k, m] for the workers `worker_ids_M` at step k: 1 ('none'),
  1 + Exp(mean = scale) ('exp') or exp(scale Z), Z ~ N(0, 1) ('lognormal'),
  from (seed, the straggler stream, step, worker), so every layout and
  rerun draws the same."""
  dtype = jnp.asarray(network.straggler_scale).dtype

  def one(worker):
    key = randomness.straggler_key(seed, step, worker)
    e_key, z_key = jax.random.split(key)
    scale = network.straggler_scale
    exp = 1 + scale * jax.random.exponential(e_key, (), dtype)
    lognormal = jnp.exp(scale * jax.random.normal(z_key, (), dtype))
    return jnp.select([network.straggler == 1, network.straggler == 2],
                      [exp, lognormal], jnp.ones((), dtype))

  return jax.vmap(one)(jnp.asarray(worker_ids_M))


def no_slowdown(network: Network, worker_ids_M) -> jax.Array:
  """`slowdown`'s factors where no straggler model is compiled in
  (`RunSpec.stragglers` False): 1 for every worker, as 'none' gives, with
  no random draws."""
  return jnp.ones(jnp.shape(worker_ids_M),
                  jnp.asarray(network.straggler_scale).dtype)


def worker_view(network: Network, worker_ids_M) -> Network:
  """The per-worker fields at the given workers (a scalar broadcasts)."""
  def pick(name, value):
    value = jnp.asarray(value)
    if name in PER_WORKER_FIELDS and value.ndim:
      return value[worker_ids_M]
    return value
  return Network(*(pick(n, v) for n, v in zip(FIELDS, network)))


class Round(NamedTuple):
  """One round's simulated time and who set it."""
  time_s: jax.Array
  slowest: jax.Array  # the participant whose compute + upload ended last


def round_time(network: Network, flops_M, bits_up_M, bits_down_M,
               slowdown_M, *, participants_M=None, num_params=None,
               worker_ids_M=None, deadline_s=None, cut_M=None) -> Round:
  """T[k] of one round (float64 where x64 is on) over the participants.

  Args:
    network: the Network (per-worker fields [M] or scalars).
    flops_M: F_m, each worker's gradient FLOPs at this step.
    bits_up_M: bits each worker uploaded (0 on a skip).
    bits_down_M: bits each worker receives after the step.
    slowdown_M: s[k, m] (`slowdown`).
    participants_M: bool, who takes part (default all).
    num_params: p, for the ring (32 p / n bits per hop).
    worker_ids_M: the workers' indices into the network's per-worker
      fields (default 0..M-1).
    deadline_s, cut_M: a round deadline (> 0) and who it cut off (bool):
      where anyone was cut, the uploads end at the deadline (the server
      waited for it); the cut workers are not among `participants_M`.

  A round nobody takes part in takes 0 s (nothing is computed or sent), or
  the deadline where one cut everyone off.
  """
  dtype = jnp.asarray(network.up_bps).dtype
  m = jnp.shape(bits_up_M)[-1]
  ids = jnp.arange(m) if worker_ids_M is None else worker_ids_M
  net = worker_view(network, ids)
  f = lambda x: jnp.broadcast_to(jnp.asarray(x, dtype), (m,))
  inn = (jnp.ones((m,), bool) if participants_M is None
         else jnp.asarray(participants_M, bool))
  big = jnp.asarray(jnp.inf, dtype)
  anyone = jnp.any(inn)
  # Every time here is >= 0, so 0 is the max of no participants.
  vmax = lambda x: jnp.max(jnp.where(inn, x, 0))
  vmin = lambda x: jnp.min(jnp.where(inn, x, big))
  vsum = lambda x: jnp.sum(jnp.where(inn, x, 0))
  compute = f(slowdown_M) * f(flops_M) / f(net.flops_per_s)
  up_latency = f(net.up_latency_s)
  down_latency = f(net.down_latency_s)
  upload = up_latency + f(bits_up_M) / f(net.up_bps)
  finish = compute + upload
  arrive = jnp.maximum(
      vmax(finish),
      jnp.where(anyone, vmin(compute) + vmax(up_latency)
                + vsum(f(bits_up_M)) / net.server_in_bps, 0))
  if cut_M is not None:
    arrive = jnp.where(jnp.any(cut_M), jnp.asarray(deadline_s, dtype),
                       arrive)
  down = jnp.maximum(
      vmax(down_latency + f(bits_down_M) / f(net.down_bps)),
      vmax(down_latency) + vsum(f(bits_down_M)) / net.server_out_bps)
  star = arrive + down
  slowest = jnp.argmax(jnp.where(inn, finish, -big)).astype(jnp.int32)
  if num_params is None:
    return Round(star, slowest)
  n = jnp.sum(inn).astype(dtype)
  hop = jnp.min(jnp.where(inn, jnp.minimum(f(net.up_bps), f(net.down_bps)),
                          big))
  ring = vmax(compute) + 2 * (n - 1) * (
      vmax(up_latency) + (32 * num_params / jnp.maximum(n, 1)) / hop)
  ring_slowest = jnp.argmax(jnp.where(inn, compute, -big)).astype(jnp.int32)
  is_ring = network.topology == TOPOLOGIES.index('ring')
  return Round(jnp.where(is_ring, ring, star),
               jnp.where(is_ring, ring_slowest, slowest))


@jax.jit
def _replay(network, flops_M, bits_TxM, bits_down_TxM, slowdown_TxM,
            participants_TxM, grads_TxM, num_params):
  def one(bits, down, s, inn, grads):
    return round_time(network, flops_M * grads, bits, down, s,
                      participants_M=inn & (grads > 0),
                      num_params=num_params)
  return jax.vmap(one)(bits_TxM, bits_down_TxM, slowdown_TxM,
                       participants_TxM, grads_TxM)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _slowdowns(network, seed, num_steps, num_workers):
  ids = jnp.arange(num_workers, dtype=jnp.int32)
  return jax.vmap(lambda k: slowdown(network, seed, k, ids))(
      jnp.arange(num_steps, dtype=jnp.int32))


def slowdowns(network: Network, seed: int, num_steps: int,
              num_workers: int) -> np.ndarray:
  """s [T, M] of a run (what `slowdown` draws inside it). Compiled once
  per (T, M, the network's types): the seed and the profile's values are
  arguments, so replaying many runs does not compile each anew."""
  return np.asarray(_slowdowns(network, jnp.asarray(seed),
                               int(num_steps), int(num_workers)))


def replay(network: Network, flops_M, bits_TxM, bits_down_TxM, *,
           seed: int = 0, slowdown_TxM=None, participants_TxM=None,
           grads_TxM=None, num_params: int = 0) -> Round:
  """Every round of a finished run on `network`, from its saved bits.

  Args:
    network: the Network to replay on.
    flops_M: each worker's gradient FLOPs per step.
    bits_TxM, bits_down_TxM: the run's saved per-worker bits (bits.npy and
      the broadcast's).
    seed: the run's seed (the stragglers' draws), used when `slowdown_TxM`
      is None.
    slowdown_TxM: the run's saved factors (slowdown.npy), or None to draw
      them for this network.
    participants_TxM: bool, who took part (default all).
    grads_TxM: the gradients each worker computed (the run's grads_M;
      default 1 everywhere): its compute is that many times flops_M, and a
      worker that computed none (LASG-PS, not selected) is not in the
      round.
    num_params: p (the ring's messages).

  Returns:
    Round of [T] arrays (NumPy).
  """
  bits = np.asarray(bits_TxM, np.float64)
  steps, workers = bits.shape
  if slowdown_TxM is None:
    slowdown_TxM = slowdowns(network, seed, steps, workers)
  if participants_TxM is None:
    participants_TxM = np.ones((steps, workers), bool)
  if grads_TxM is None:
    grads_TxM = np.ones((steps, workers))
  out = _replay(network, jnp.asarray(flops_M, network.up_bps.dtype),
                jnp.asarray(bits, network.up_bps.dtype),
                jnp.asarray(bits_down_TxM, network.up_bps.dtype),
                jnp.asarray(slowdown_TxM, network.up_bps.dtype),
                jnp.asarray(participants_TxM, bool),
                jnp.asarray(grads_TxM, network.up_bps.dtype), num_params)
  return Round(np.asarray(out.time_s, np.float64), np.asarray(out.slowest))


def can_ring(algorithm) -> bool:
  """Whether a preset's uploads can be summed in transit (a ring
  all-reduce): full precision, eager, no error feedback, a full-precision
  broadcast (gd, sgd)."""
  return (algorithm.compressor == 'identity' and algorithm.trigger == 'eager'
          and not algorithm.error_feedback and not algorithm.downlink)


def check_ring(ring, *, can_ring=True, deadline_s=0.0, name=None,
               where: str = '') -> None:
  """The ring's rules, the one place they live: a ring all-reduce sums
  full-precision messages in transit (only gd, sgd: `can_ring`), and it has
  no round to cut a late worker from (no deadline). Every argument may be
  an array (a grid's points).

  Raises:
    ValueError: naming the value (`where` prefixes the field names) and what
      is allowed.
  """
  ring = np.asarray(ring, bool)
  if np.any(ring & ~np.asarray(can_ring, bool)):
    preset = f' for {show(name)}' if name else ' with a compressed, lazy, ' \
        'error-feedback or quantized-broadcast rule'
    raise ValueError(
        f"{where}network.topology='ring' is not allowed{preset}: a ring "
        'all-reduce sums full-precision messages in transit, so only '
        'full-precision eager presets (gd, sgd) can use it; use '
        f"{where}network.topology='star'")
  deadline = np.asarray(deadline_s)
  if np.any(ring & (deadline > 0)):
    raise ValueError(
        f'{where}deadline_s={show(deadline.tolist())} is not allowed: it must '
        f"be 0 with {where}network.topology='ring' (a ring all-reduce has no "
        'round to cut a late worker from; use the star)')


def check_topology(network: Network | str, algorithm, deadline_s=0.0,
                   where: str = '') -> None:
  """`check_ring` for a preset on a network (a Network, or a topology's
  name; a traced Network is not checked here: `RunSpec.check_hyper` checks
  the concrete values)."""
  if isinstance(network, str):
    ring = network == 'ring'
  else:
    try:
      ring = np.asarray(network.topology) == TOPOLOGIES.index('ring')
    except jax.errors.ConcretizationTypeError:
      return
  check_ring(ring, can_ring=can_ring(algorithm), deadline_s=deadline_s,
             name=algorithm.name, where=where)
