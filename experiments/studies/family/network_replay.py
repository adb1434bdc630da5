"""Time to target on many modeled networks at once, per point of a sweep.

    profiles = profile_times(timed, target)        # {algo: {profile: ..}}
    curves = bandwidth_times(timed, target, bandwidth_grid())
    exact = Exact(timed, target)                   # one bandwidth, cached

Every round is timed with `laq_jax.network.round_time` (docs/algorithm.md,
"Time on a modeled network") from the bits each worker uploaded at each
step, the broadcast each received, each point's FLOPs per worker step and
stragglers drawn from each point's seed exactly as `network.replay` draws
them. Many networks (the three profiles, or a grid of bandwidths, on the
star and on a ring) are one stacked `Network` and one jitted, vmapped
program per sweep, not a compile per network. gd and sgd can all-reduce
(`network.check_topology`): they are timed on the star and on the ring.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from experiments.studies.family.timed_sweep import Target, TimedSweep, untimed

if TYPE_CHECKING:
  from laq_jax.network import Network

BANDWIDTH_RANGE = (1e6, 1e11)  # 1 Mbit/s to 100 Gbit/s
GRID_PER_DECADE = 10
BASE_PROFILE = 'cross_silo'  # every field but the link bandwidth
TOPOLOGIES = ('star', 'ring')


# ----------------------------------------------------------------------------
# The replay of many networks at once.


def stack(networks) -> Network:
  """Networks of equal shapes as one Network with a leading axis."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jax.tree.map(lambda *xs: jnp.stack(xs), *networks)


@functools.cache
def _program():
  """The jitted time to target on a stack of networks (built once)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from laq_jax import network  # pylint: disable=g-import-not-at-top

  def times(networks, flops, bits_TxM, bits_down_TxM, seed, k, num_params):
    steps, workers = bits_TxM.shape
    step_ids = jnp.arange(steps, dtype=jnp.int32)
    ids = jnp.arange(workers, dtype=jnp.int32)
    flops_M = jnp.full((workers,), flops, bits_TxM.dtype)

    def on(net):
      def one(step, up_M, down_M):
        s = network.slowdown(net, seed, step, ids)
        return network.round_time(net, flops_M, up_M, down_M, s,
                                  num_params=num_params).time_s
      time_T = jax.vmap(one)(step_ids, bits_TxM, bits_down_TxM)
      return jnp.sum(jnp.where(step_ids < k, time_T, 0))

    return jax.vmap(on)(networks)

  return jax.jit(times)


def time_to_target(networks, flops: float, bits_TxM, bits_down_TxM,
                   seed: int, k: int, num_params: int) -> np.ndarray:
  """[B] sum_{j < k} T[j] of one point on each of a stack of B networks
  (one program for all; stragglers from `seed` as `network.replay` draws
  them). Needs float64 (jax_enable_x64) for the contract's precision."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if not jax.config.jax_enable_x64:
    raise ValueError('jax_enable_x64 is off: simulated times are float64 '
                     '(turn it on first, as experiments.family does)')
  dtype = jnp.float64
  out = _program()(networks, jnp.asarray(flops, dtype),
                   jnp.asarray(bits_TxM, dtype),
                   jnp.asarray(bits_down_TxM, dtype), jnp.asarray(seed),
                   jnp.int32(k), jnp.asarray(num_params, dtype))
  return np.asarray(out, np.float64)


@functools.cache
def can_ring(algo: str) -> bool:
  """Whether the preset may run on a ring all-reduce
  (`network.check_topology`: full-precision eager presets only)."""
  from laq_jax import hyper  # pylint: disable=g-import-not-at-top
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  return network.can_ring(hyper.get_algorithm(algo))


def topologies(algo: str) -> tuple[str, ...]:
  return TOPOLOGIES if can_ring(algo) else TOPOLOGIES[:1]


def label(algo: str, topology: str) -> str:
  """'gd (ring)' for a preset that can all-reduce, else the preset."""
  return f'{algo} ({topology})' if can_ring(algo) else algo


def _point_times(sweep: TimedSweep, target: Target, g: int,
                 networks: Sequence) -> np.ndarray:
  """Point g's seconds to the target on each network (a list, or a
  `stack` of them)."""
  if isinstance(networks, list):
    networks = stack(networks)
  return time_to_target(networks, sweep.flops[g], sweep.bits_up[g],
                        sweep.bits_down[g], int(sweep.seeds[g]),
                        int(target.iteration[g]), sweep.num_params)


def _timed_points(sweep: TimedSweep, target: Target, networks: Sequence,
                  rows: int) -> dict[str, np.ndarray]:
  """{algo: [rows, len(TOPOLOGIES)] seconds to the target} of every timed
  point on `networks` (given row by row, star then ring), one program."""
  stacked = stack(networks)
  out = {}
  for g, algo in enumerate(sweep.algos):
    if untimed(sweep, target, g):
      continue
    out[algo] = _point_times(sweep, target, g, stacked).reshape(
        rows, len(TOPOLOGIES))
  return out


def profile_times(sweep: TimedSweep, target: Target,
                  profiles: Sequence[str] | None = None
                  ) -> dict[str, dict[str, dict[str, float]]]:
  """{algo: {profile: {topology: seconds to the target}}} of every timed
  point on each profile (`network.PROFILES`; the ring only where allowed),
  one program per sweep for every profile and topology."""
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  profiles = tuple(profiles or network.PROFILES)
  nets = [network.make_network(p, num_workers=sweep.num_workers,
                               topology=t)
          for p in profiles for t in TOPOLOGIES]
  return {algo: {p: {t: float(seconds[i, j])
                     for j, t in enumerate(TOPOLOGIES) if t in topologies(algo)}
                 for i, p in enumerate(profiles)}
          for algo, seconds in _timed_points(sweep, target, nets,
                                             len(profiles)).items()}


def fastest(by_topology: dict[str, float]) -> tuple[float, str]:
  """(seconds, topology) of the faster topology (the star on a tie)."""
  topology = min(by_topology, key=lambda t: (by_topology[t],
                                             TOPOLOGIES.index(t)))
  return by_topology[topology], topology


def bandwidth_grid(per_decade: int = GRID_PER_DECADE) -> np.ndarray:
  """Bandwidths from 1 Mbit/s to 100 Gbit/s, evenly spaced in log."""
  lo, hi = (math.log10(x) for x in BANDWIDTH_RANGE)
  return np.logspace(lo, hi, round((hi - lo) * per_decade) + 1)


def bandwidth_networks(bandwidths, num_workers: int) -> list:
  """For each x, star then ring: `BASE_PROFILE` with up_bps = down_bps = x
  (its latencies, compute, stragglers and server ingress/egress kept)."""
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  return [network.make_network(BASE_PROFILE, num_workers=num_workers,
                               up_bps=float(x), down_bps=float(x),
                               topology=t)
          for x in np.atleast_1d(bandwidths) for t in TOPOLOGIES]


def bandwidth_times(sweep: TimedSweep, target: Target, bandwidths
                    ) -> dict[str, dict[str, np.ndarray]]:
  """{algo: {topology: [B] seconds to the target}} of every timed point
  against the link bandwidth (`bandwidth_networks`), one program for the
  whole grid."""
  bandwidths = np.atleast_1d(np.asarray(bandwidths, np.float64))
  nets = bandwidth_networks(bandwidths, sweep.num_workers)
  return {algo: {t: seconds[:, j] for j, t in enumerate(TOPOLOGIES)
                 if t in topologies(algo)}
          for algo, seconds in _timed_points(sweep, target, nets,
                                             len(bandwidths)).items()}


class Exact:
  """The exact time to target of one sweep's points at single bandwidths
  (cached), for the bisections."""

  def __init__(self, sweep: TimedSweep, target: Target):
    self.sweep, self.target = sweep, target
    self.index = {a: g for g, a in enumerate(sweep.algos)}
    self.cache = {}

  def __call__(self, algo: str, topology: str, x: float) -> float:
    key = (algo, x)
    if key not in self.cache:
      seconds = _point_times(self.sweep, self.target, self.index[algo],
                             bandwidth_networks([x], self.sweep.num_workers))
      self.cache[key] = dict(zip(TOPOLOGIES, seconds.tolist()))
    return self.cache[key][topology]
