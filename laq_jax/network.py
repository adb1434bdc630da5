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
import math
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import randomness
from laq_jax.show import show

STRAGGLERS = ('none', 'exp', 'lognormal')
TOPOLOGIES = ('star', 'ring')
# The fields that may differ per worker ([M]; a scalar is every worker's).
PER_WORKER_FIELDS = ('up_bps', 'down_bps', 'up_latency_s', 'down_latency_s',
                     'flops_per_s')


class Network(NamedTuple):
  """A network as arrays (float64 where x64 is on; see `make_network`).

  Attributes:
    up_bps, down_bps: each worker's uplink and downlink bandwidth, bits/s
      ([M] or a scalar for all; > 0, inf: no limit).
    up_latency_s, down_latency_s: one-way latency, s (>= 0, finite).
    flops_per_s: each worker's sustained gradient compute rate (> 0, inf:
      compute is free).
    straggler: index into STRAGGLERS (int32).
    straggler_scale: the exp mean, or the lognormal sigma (>= 0, finite).
    server_in_bps, server_out_bps: the server's ingress and egress, bits/s
      (> 0, inf: not a bottleneck).
    topology: index into TOPOLOGIES (int32).
  """
  up_bps: Any
  down_bps: Any
  up_latency_s: Any
  down_latency_s: Any
  flops_per_s: Any
  straggler: Any
  straggler_scale: Any
  server_in_bps: Any
  server_out_bps: Any
  topology: Any


FIELDS = Network._fields
# One line per field (configs/default.py and `laq_jax.hyper.describe`).
DOCS = {
    'up_bps': "each worker's uplink bandwidth, bits/s",
    'down_bps': "each worker's downlink bandwidth, bits/s",
    'up_latency_s': 'one-way latency of an upload, s',
    'down_latency_s': 'one-way latency of the broadcast, s',
    'flops_per_s': "each worker's sustained gradient compute rate, FLOP/s",
    'straggler': f'the compute slowdown law: {", ".join(STRAGGLERS)}',
    'straggler_scale': "the slowdown's scale (exp: mean of s - 1; "
                       'lognormal: sigma of log s)',
    'server_in_bps': "the server's ingress, bits/s",
    'server_out_bps': "the server's egress, bits/s",
    'topology': f'how the round aggregates: {", ".join(TOPOLOGIES)} (ring: '
                'gd, sgd only)',
}
_POSITIVE = ('up_bps', 'down_bps', 'flops_per_s', 'server_in_bps',
             'server_out_bps')
_NONNEGATIVE_FINITE = ('up_latency_s', 'down_latency_s', 'straggler_scale')

# Named profiles. Every figure's source is in SOURCES and docs/algorithm.md.
PROFILES: dict[str, dict[str, Any]] = {
    # An accelerator cluster: A100s on 200 Gbit/s InfiniBand/Ethernet.
    'datacenter': dict(up_bps=200e9, down_bps=200e9, up_latency_s=1e-6,
                       down_latency_s=1e-6, flops_per_s=19.5e12,
                       straggler='none', straggler_scale=0.0,
                       server_in_bps=200e9, server_out_bps=200e9,
                       topology='star'),
    # Institutions or cloud regions: server CPUs on 1 Gbit/s links across
    # a continent or an ocean.
    'cross_silo': dict(up_bps=1e9, down_bps=1e9, up_latency_s=0.040,
                       down_latency_s=0.040, flops_per_s=3.6e12,
                       straggler='none', straggler_scale=0.0,
                       server_in_bps=1e9, server_out_bps=1e9,
                       topology='star'),
    # Phones on LTE: a slow uplink, CPU training, heterogeneous devices.
    'mobile': dict(up_bps=6.3e6, down_bps=21.3e6, up_latency_s=0.055,
                   down_latency_s=0.055, flops_per_s=22.5e9,
                   straggler='lognormal', straggler_scale=0.5,
                   server_in_bps=math.inf, server_out_bps=math.inf,
                   topology='star'),
}
# Where each figure comes from (docs/algorithm.md has the quotes).
SOURCES: dict[str, dict[str, str]] = {
    'datacenter': {
        'up_bps': 'NVIDIA ConnectX-6 EN user manual: "up to two ports of '
                  '200Gb/s"',
        'up_latency_s': 'ConnectX-6 EN: "sub-600ns latency"; osu_latency '
                        'runs: 0.9-1.2 us one-way for 0 bytes',
        'flops_per_s': 'NVIDIA A100 datasheet: FP32 19.5 TFLOP/s (peak)',
        'server_in_bps': 'the server has one such 200 Gbit/s port',
    },
    'cross_silo': {
        'up_bps': 'AWS Direct Connect link of 1 Gbit/s (P. Allen, Cornell '
                  'Cloudification blog, 2016): a capacity, an upper bound',
        'up_latency_s': '"Latency Between AWS Global Regions": US-East to '
                        'Ireland 80.6 ms round trip, halved',
        'flops_per_s': 'Intel Cascade Lake SP (Microway specifications): 28 '
                       'cores x 2 AVX-512 FMA units x 32 FP32 FLOP/cycle at '
                       '2.0 GHz = 3.6 TFLOP/s (derived from the per-cycle '
                       'figures)',
        'server_in_bps': 'the server on one such 1 Gbit/s link',
        'context': 'Kairouz et al. 2021, Advances and Open Problems in FL, '
                   'Table 1.1: cross-silo, "Typically 2-100 clients"',
    },
    'mobile': {
        'up_bps': 'Opensignal, State of Mobile: USA, May 2019 (Q1 2019): '
                  '"average upload speeds of 6.3 Mbps"',
        'down_bps': 'the same report: download 21.3 Mbps',
        'up_latency_s': 'the same report: "latency ... ranged from 44.1ms to '
                        '66.4ms" (the middle, 55 ms, taken as one-way; '
                        'Opensignal measures round trips, so this may be up '
                        'to 2x pessimistic)',
        'flops_per_s': 'Das et al. 2022, Enabling On-Device Smartphone GPU '
                       'based Training (arXiv:2202.10100): CPUs 15-30 '
                       'GFLOP/s on Snapdragon 8 (the middle, 22.5)',
        'straggler_scale': 'Yang et al., WWW 2021 (FLASH, '
                           'device_util.py): per-batch training times of '
                           'three device classes 1642 / 588 / 179 ms '
                           '(FEMNIST CNN) with population weights; a '
                           'lognormal fit gives sigma 0.37-0.69 (ours: 0.5)',
        'server_in_bps': 'a cloud server: not the bottleneck (an '
                         'assumption, no source)',
    },
}


def allowed(name: str) -> str:
  """What field `name` allows, in words (for error messages)."""
  if name in _POSITIVE:
    return 'a number > 0 (inf: no limit), not NaN'
  if name in _NONNEGATIVE_FINITE:
    return 'a finite number >= 0'
  if name == 'straggler':
    return f'one of {", ".join(STRAGGLERS)}'
  return f'one of {", ".join(TOPOLOGIES)}'


def check_field(name: str, value, where: str | None = None) -> None:
  """Raises ValueError unless `value` is allowed for Network field `name`
  (every element of an array), naming the field, the value and what is
  allowed."""
  where = where or name
  if name not in FIELDS:
    raise ValueError(f'unknown network field {show(name)}; allowed: '
                     f'{", ".join(FIELDS)}')
  bad = ValueError(f'{where}={show(value)} is not allowed: it must be '
                   f'{allowed(name)}')
  if name in ('straggler', 'topology'):
    names = STRAGGLERS if name == 'straggler' else TOPOLOGIES
    if not (isinstance(value, str) and value in names):
      raise bad
    return
  if isinstance(value, (str, bytes, bool, np.bool_)):
    raise bad
  try:
    a = np.asarray(value, np.float64)
  except (TypeError, ValueError):
    raise bad from None
  if a.size == 0 or np.any(np.isnan(a)):
    raise bad
  if name in _POSITIVE and not np.all(a > 0):
    raise bad
  if name in _NONNEGATIVE_FINITE and not np.all(np.isfinite(a) & (a >= 0)):
    raise bad
  if name == 'straggler_scale' and a.ndim:
    raise bad
  if name in ('server_in_bps', 'server_out_bps') and a.ndim:
    raise bad


def make_network(profile: str = 'cross_silo', *,
                 num_workers: int | None = None, dtype=None,
                 **overrides) -> Network:
  """The Network of a named profile, with any field overridden.

  Args:
    profile: one of PROFILES.
    num_workers: M, to give every per-worker field the shape [M] (a list
      override must have M entries); None leaves scalars scalar.
    dtype: the float dtype (default float64 when x64 is on, else float32).
    **overrides: any field of Network (`straggler` and `topology` by name).

  Raises:
    ValueError: an unknown profile or field, or a value not allowed (named,
      with what is allowed).
  """
  if num_workers is not None and (
      isinstance(num_workers, (bool, np.bool_))
      or not isinstance(num_workers, (int, np.integer)) or num_workers < 1):
    raise ValueError(f'num_workers={show(num_workers)} is not allowed: it '
                     'must be an integer >= 1, or None (scalar fields)')
  if not isinstance(profile, str) or profile not in PROFILES:
    raise ValueError(f'unknown network profile {show(profile)}; allowed: '
                     f'{", ".join(PROFILES)}')
  unknown = sorted(set(overrides) - set(FIELDS))
  if unknown:
    raise ValueError(f'unknown network field(s) {unknown}; allowed: '
                     f'{", ".join(FIELDS)}')
  values = {**PROFILES[profile], **overrides}
  for name, value in values.items():
    check_field(name, value, f'network.{name}')
  if dtype is None:
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
  out = {}
  for name in FIELDS:
    value = values[name]
    if name == 'straggler':
      out[name] = jnp.int32(STRAGGLERS.index(value))
    elif name == 'topology':
      out[name] = jnp.int32(TOPOLOGIES.index(value))
    else:
      a = np.asarray(value, np.float64)
      if name in PER_WORKER_FIELDS and num_workers is not None:
        if a.ndim == 0:
          a = np.full((num_workers,), float(a))
        elif a.shape != (num_workers,):
          raise ValueError(f'network.{name} has {a.size} values: it must be '
                           f'one number or one per worker ({num_workers})')
      out[name] = jnp.asarray(a, dtype)
  return Network(**out)


def describe(network: Network, profile: str | None = None) -> dict:
  """The network as JSON (summary.json's `network`): every field (lists
  for per-worker ones, 'inf' as a string), and the profile's name."""
  out = {'profile': profile}
  for name, value in zip(FIELDS, network):
    if name == 'straggler':
      out[name] = STRAGGLERS[int(value)]
    elif name == 'topology':
      out[name] = TOPOLOGIES[int(value)]
    else:
      a = np.asarray(value, np.float64)
      as_json = lambda x: x if math.isfinite(x) else str(x)
      out[name] = ([as_json(float(x)) for x in a] if a.ndim
                   else as_json(float(a)))
  return out


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


def as_mapping(network: Network) -> Mapping[str, np.ndarray]:
  """{field: NumPy array} (for files)."""
  return {n: np.asarray(v) for n, v in zip(FIELDS, network)}
