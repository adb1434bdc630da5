"""Where each method wins: the family's presets timed on modeled networks.

    timed = load_sweep(workdir / 'logreg' / 'full')
    target = choose_target(timed, residual=True)
    profiles = profile_times(timed, target)          # {algo: {profile: ..}}
    grid = bandwidth_grid()
    curves = bandwidth_times(timed, target, grid)    # {algo: {topology: [B]}}
    text = section(study, workdir)                   # the report's lines

Post hoc, from a finished sweep's curves.npz: no training again. Every
round is timed with `laq_jax.network.round_time` (docs/algorithm.md, "Time
on a modeled network") from the bits each worker uploaded at each step, the
broadcast each received, each point's FLOPs per worker step (its problem's
`grad_flops_per_sample` times its minibatch, or its shard) and stragglers
drawn from each point's seed exactly as `network.replay` draws them. Many
networks (the three profiles, or a grid of bandwidths, on the star and on a
ring) are one stacked `Network` and one jitted, vmapped program per sweep,
not a compile per network.

Time to target = sum_{j < k*} T[j], k* the first logged iterate at or below
the sweep's target (`choose_target`: the residual target of a convex
full-batch sweep, else the highest final loss among the presets that did not
diverge, a level every one of them reaches). gd and sgd can all-reduce
(`network.check_topology`): they are timed on the star and on the ring and
the faster counts, named. Crossover bandwidths are found on the grid and
refined by bisection in log-bandwidth with the same exact replay.

Older sweeps' curves.npz lack the per-worker bits (`bits` [G,T,M]); they are
rebuilt from the uploads and each step's bits only where that is exact
(`per_worker_bits`), and the other presets are left out with a note.
"""

from __future__ import annotations

import functools
import json
import math
import pathlib
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

import numpy as np

from experiments.run import outputs
from experiments.run.markdown import DASH, fmt, table
from laq_jax import metrics

if TYPE_CHECKING:
  from matplotlib.figure import Figure
  from laq_jax.network import Network

BANDWIDTH_RANGE = (1e6, 1e11)  # 1 Mbit/s to 100 Gbit/s
GRID_PER_DECADE = 10
BASE_PROFILE = 'cross_silo'  # every field but the link bandwidth
TOPOLOGIES = ('star', 'ring')
# Compressors whose upload size depends on the data: their per-worker bits
# cannot be rebuilt from a step's total, whatever the totals look like.
VARIABLE_SIZE = ('qsgd', 'rand_p')
STALE = 'curves.npz predates per-worker bits; rerun the sweep'
RTOL = 1e-4  # bisection stops when hi / lo < 1 + RTOL (2 figures reported)
FIGURE = 'time_vs_bandwidth.png'
FIGURE_DPI = 90
KINDS = (('full', 'Full batch', 'laq', 'gd'),
         ('minibatch', 'Minibatch', 'slaq', 'sgd'))


class TimedSweep(NamedTuple):
  """What timing a finished sweep needs, one entry per grid point g.

  Attributes:
    path: the sweep's folder.
    algos: [G] preset names.
    loss: [G, T] f(theta^k) (NaN where not logged).
    final_loss: [G] f(theta^T).
    loss_every: [G] the logging interval (`metrics.logged`).
    diverged: [G] bool (results.csv `diverged`).
    bits_up: [G] per-worker uplink bits [T, M] (float64), None where they
      are unknown (see `notes`).
    bits_down: [G, T, M] what each worker received after each step.
    notes: {algo: why its bits are unknown}.
    flops: [G] FLOPs of one worker's gradient per step.
    seeds: [G] the points' seeds (the stragglers' draws).
    num_params: p (the ring's messages).
    target_residual: the sweep's residual target or None.
    target_iteration: [G] results.csv `target_iteration` (None: not
      reached).
  """
  path: pathlib.Path
  algos: tuple[str, ...]
  loss: np.ndarray
  final_loss: np.ndarray
  loss_every: np.ndarray
  diverged: np.ndarray
  bits_up: tuple[np.ndarray | None, ...]
  bits_down: np.ndarray
  notes: dict[str, str]
  flops: np.ndarray
  seeds: np.ndarray
  num_params: int
  target_residual: float | None
  target_iteration: tuple[int | None, ...]

  @property
  def num_workers(self) -> int:
    return self.bits_down.shape[-1]


class Target(NamedTuple):
  """What reaching the target means for one sweep.

  Attributes:
    kind: 'residual' (f(theta^k) - f* <= level) or 'loss' (f <= level).
    level: the residual or the loss level.
    iteration: [G] k*, the first logged iterate at or below it (0..T, T
      the final parameters); -1 where not reached or diverged.
    rule: a sentence for the report: the level and how it was chosen.
  """
  kind: str
  level: float
  iteration: np.ndarray
  rule: str


# ----------------------------------------------------------------------------
# Per-worker bits of older sweeps.


def per_worker_bits(uploads_TxM, cum_bits_T, compressor: str | None = None
                    ) -> tuple[np.ndarray | None, str | None]:
  """bits[t, m] = uploads[t, m] * (bits of step t / uploads of step t),
  only when that is exact: every upload of the point has the same size.

  Exact when every step's bits divide evenly by its uploads, a step without
  uploads has no bits, and the size per upload is one number over all the
  point's steps: true of the deterministic-size compressors (identity,
  uniform, top_k, sign, terngrad), never assumed of the data-dependent ones
  (VARIABLE_SIZE: qsgd's Elias codes, rand_p's kept values), where equal
  totals could hide unequal uploads.

  Args:
    uploads_TxM: bool, who uploaded at each step.
    cum_bits_T: the uplink bits through each step, summed over workers.
    compressor: the preset's compressor (`Algorithm.compressor`), or None.

  Returns:
    (bits int64 [T, M], None), or (None, why it is not exact).
  """
  if compressor in VARIABLE_SIZE:
    return None, (f'its compressor {compressor} sends uploads of '
                  'data-dependent size')
  uploads = np.asarray(uploads_TxM, bool)
  cum = np.asarray(cum_bits_T, np.int64)
  if cum.shape != uploads.shape[:1]:
    raise ValueError(f'cum_bits has shape {cum.shape}: it must be '
                     f'[T] = {uploads.shape[:1]} like uploads [T, M]')
  step_bits = np.diff(cum, prepend=np.int64(0))
  step_uploads = uploads.sum(axis=1, dtype=np.int64)
  some = step_uploads > 0
  if np.any(step_bits[~some] != 0):
    return None, 'a step without uploads has bits'
  if np.any(step_bits[some] % step_uploads[some]):
    return None, 'a step\'s bits do not divide evenly by its uploads'
  sizes = np.unique(step_bits[some] // step_uploads[some])
  if sizes.size > 1:
    return None, (f'its uploads have {sizes.size} different sizes '
                  f'({sizes.min():,} to {sizes.max():,} bits)')
  size = sizes[0] if sizes.size else np.int64(0)
  return uploads.astype(np.int64) * size, None


def downlink_per_worker(cum_bits_down_T, num_workers: int) -> np.ndarray:
  """[T, M] what each worker received after each step: every participant
  receives the same broadcast, so a step's total over M."""
  step = np.diff(np.asarray(cum_bits_down_T, np.int64), prepend=np.int64(0))
  return np.repeat((step / num_workers)[:, None], num_workers, axis=1)


def _sweep_flops(config: dict, info: dict) -> Callable[[str], float]:
  from experiments.run import replay  # pylint: disable=g-import-not-at-top
  return lambda algo: replay.flops_per_worker_step(
      {**config, 'algo': algo}, num_train=info.get('num_train'))[0]


def load_sweep(folder, flops: Callable[[str], float] | None = None
               ) -> TimedSweep:
  """A finished sweep's curves.npz, results.csv, sweep.json and config.json
  as a TimedSweep.

  The per-worker uplink bits are curves.npz `bits` when it is [G, T, M]
  (a [G] `bits` is the quantizer's b of each point); else they are rebuilt
  by `per_worker_bits` where exact, and the others noted (STALE, and why).

  Args:
    folder: the sweep's folder.
    flops: algo -> FLOPs of one worker's step; default: from the sweep's
      problem (`replay.flops_per_worker_step`, its minibatch or its shard
      of sweep.json `num_train` images).

  Raises:
    FileNotFoundError: a file is missing.
    ValueError: curves.npz has no per-worker uploads.
  """
  from laq_jax import hyper  # pylint: disable=g-import-not-at-top
  folder = pathlib.Path(folder)
  info = json.loads((folder / 'sweep.json').read_text())
  config = json.loads((folder / 'config.json').read_text())
  rows = [{k: outputs.parse_cell(v) for k, v in r.items()}
          for r in outputs.read_results(folder / 'results.csv')]
  rows.sort(key=lambda r: r['point'])
  with np.load(folder / 'curves.npz') as z:
    curves = {k: z[k] for k in z.files}
  if 'uploads' not in curves:
    raise ValueError(f'{folder}/curves.npz holds no per-worker uploads (the '
                     'sweep was too large to save them): it cannot be timed')
  algos = tuple(str(a) for a in curves['algo'])
  workers = curves['uploads'].shape[-1]
  saved = curves.get('bits')
  saved = saved if saved is not None and saved.ndim == 3 else None
  bits_up, notes = [], {}
  for g, algo in enumerate(algos):
    row = rows[g]
    if ((row.get('deadline_s') or 0) > 0 or (row.get('participation') or 1)
        < 1 or (row.get('clients_per_round') or 0) > 0):
      # who took part depended on the run (and, with a deadline, on its
      # network): the replay over every worker would be another run
      bits_up.append(None)
      notes[algo] = ('ran with partial participation or a deadline: not '
                     'replayed on other networks')
      continue
    if saved is not None:
      bits_up.append(np.asarray(saved[g], np.float64))
      continue
    bits, why = per_worker_bits(curves['uploads'][g], curves['cum_bits'][g],
                                hyper.get_algorithm(algo).compressor)
    bits_up.append(None if bits is None else bits.astype(np.float64))
    if why:
      notes[algo] = f'{STALE}: {why}'
  flops = flops or _sweep_flops(config, info)
  return TimedSweep(
      path=folder, algos=algos,
      loss=np.asarray(curves['loss'], np.float64),
      final_loss=np.asarray(curves['final_loss'], np.float64),
      loss_every=np.asarray(curves['loss_every'], np.int64),
      diverged=np.asarray([bool(r.get('diverged')) for r in rows]),
      bits_up=tuple(bits_up),
      bits_down=np.stack([downlink_per_worker(c, workers)
                          for c in curves['cum_bits_down']]),
      notes=notes, flops=np.asarray([flops(a) for a in algos], np.float64),
      seeds=np.asarray(curves['seed'], np.int64),
      num_params=int(info['num_params']),
      target_residual=info.get('target_residual'),
      target_iteration=tuple(r.get('target_iteration') for r in rows))


# ----------------------------------------------------------------------------
# The target.


def first_logged_at_or_below(loss_T, final_loss: float, loss_every: int,
                             level: float) -> int | None:
  """k* in 0..T: the first logged iterate with f(theta^k) <= level
  (f(theta^T) counts as logged), or None."""
  loss = np.asarray(loss_T, np.float64)
  loss = np.where(metrics.logged(len(loss), loss_every), loss, np.nan)
  return metrics.first_at_or_below(np.append(loss, final_loss), level)


def choose_target(sweep: TimedSweep, residual: bool) -> Target:
  """The one rule of what reaching the target means in a sweep.

  A convex full-batch sweep (`residual`) with a residual target that some
  preset reached: the target residual f - f* <= sweep.json
  `target_residual`, k* each point's results.csv `target_iteration`
  (presets that did not reach it are not timed). Otherwise (the minibatch
  sweeps, the network, or a budget too short for the residual target): the
  loss level f <= L, L the highest final loss f(theta^T) among the presets
  that did not diverge and ended below their initial loss f(theta^0), so
  every one of them reaches it (at the latest at theta^T); a preset that
  ran away (finite, above where it started) does not set the level and is
  timed only if it passed it on the way. k* is the first logged iterate at
  or below L. Diverged presets are never timed.

  Raises:
    ValueError: every point diverged (no level to choose).
  """
  ok = ~np.asarray(sweep.diverged, bool)
  prefix = ''
  if residual and sweep.target_residual is not None:
    level = float(sweep.target_residual)
    k = np.asarray([-1 if (it is None or not good) else int(it)
                    for it, good in zip(sweep.target_iteration, ok)])
    if np.any(k >= 0):
      return Target('residual', level, k, (
          f'the residual target f(θ^k) − f* ≤ {level:g} (sweep.json '
          '`target_residual`; k* is results.csv `target_iteration`); '
          f'{int(np.sum(k >= 0))} of {len(k)} presets reach it'))
    prefix = (f'no preset reached the residual target {level:g} in this '
              'budget, so ')
  if not ok.any():
    raise ValueError(f'every point of {sweep.path} diverged: there is no '
                     'loss level to time to')
  # The level: among the presets that made progress (f(theta^T) below
  # f(theta^0); one that ran away, finite but far above where it started,
  # would make every preset reach the level at k = 0).
  start = np.asarray(sweep.loss, np.float64)[:, 0]  # k = 0 always logs
  progressed = ok & (np.asarray(sweep.final_loss) < start)
  if not progressed.any():
    raise ValueError(f'no point of {sweep.path} ended below its initial '
                     'loss: there is no loss level to time to')
  finals = np.where(progressed, sweep.final_loss, -np.inf)
  worst = int(np.argmax(finals))
  level = float(finals[worst])
  k = []
  for g in range(len(sweep.algos)):
    hit = (first_logged_at_or_below(sweep.loss[g], sweep.final_loss[g],
                                    sweep.loss_every[g], level)
           if ok[g] else None)
    k.append(-1 if hit is None else hit)
  return Target('loss', level, np.asarray(k), (
      f'{prefix}the loss level f(θ^k) ≤ {level:.6g}: the highest final '
      f'loss f(θ^T) among the {int(progressed.sum())} presets that ended '
      f'below their initial loss (that of {sweep.algos[worst]}), so every '
      'one of them reaches it'
      + (f' ({", ".join(sweep.algos[g] for g in np.flatnonzero(ok & ~progressed))}'
         ' ended above where it started and is timed only if it passed the '
         'level on the way)' if np.any(ok & ~progressed) else '')
      + '; k* is the first logged iterate at or below it'))


def untimed(sweep: TimedSweep, target: Target, g: int) -> str | None:
  """Why point g has no time to target (None: it has one)."""
  if sweep.diverged[g]:
    return 'diverged'
  if sweep.bits_up[g] is None:
    return 'no per-worker bits'
  if target.iteration[g] < 0:
    return 'target not reached'
  return None


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


# ----------------------------------------------------------------------------
# Who wins where.


def contenders(curves: dict[str, dict[str, np.ndarray]],
               algos: Sequence[str] | None = None) -> list[tuple[str, str]]:
  """(algo, topology) pairs of the given presets (default all) that have
  times, each allowed topology its own contender."""
  algos = list(curves) if algos is None else [a for a in algos
                                              if a in curves]
  return [(a, t) for a in algos for t in TOPOLOGIES if t in curves[a]]


class Segment(NamedTuple):
  """A range of bandwidths [lo, hi] over which one contender is fastest."""
  lo: float
  hi: float
  algo: str
  topology: str


def bisect_crossing(diff: Callable[[float], float], lo: float, hi: float,
                    rtol: float = RTOL) -> float:
  """x in [lo, hi] where diff changes sign (diff(lo), diff(hi) of opposite
  signs or one zero), by bisection in log x until hi / lo < 1 + rtol."""
  start = np.sign(diff(lo))
  if start == 0:
    return lo
  log_lo, log_hi = math.log(lo), math.log(hi)
  while log_hi - log_lo > math.log1p(rtol):
    mid = 0.5 * (log_lo + log_hi)
    sign = np.sign(diff(math.exp(mid)))
    if sign == 0:
      return math.exp(mid)
    if sign == start:
      log_lo = mid
    else:
      log_hi = mid
  return math.exp(0.5 * (log_lo + log_hi))


def fastest_segments(grid, curves: dict[str, dict[str, np.ndarray]],
                     exact: Callable[[str, str, float], float],
                     pairs: Sequence[tuple[str, str]]) -> list[Segment]:
  """Which of `pairs` (algo, topology) is fastest, range by range.

  The fastest on each grid bandwidth (the first of `pairs` on a tie); where
  it changes between two grid points, the crossing of the two is refined
  by bisection in log-bandwidth with `exact(algo, topology, x)` (the exact
  replay at one bandwidth).
  """
  grid = np.asarray(grid, np.float64)
  if not pairs:
    return []
  times = np.stack([curves[a][t] for a, t in pairs])  # [C, B]
  best = np.argmin(times, axis=0)
  segments, start = [], float(grid[0])
  for i in range(len(grid) - 1):
    if best[i] == best[i + 1]:
      continue
    (a, s), (b, t) = pairs[best[i]], pairs[best[i + 1]]
    x = bisect_crossing(lambda x, a=a, s=s, b=b, t=t:
                        exact(a, s, x) - exact(b, t, x),
                        float(grid[i]), float(grid[i + 1]))
    segments.append(Segment(start, x, a, s))
    start = x
  a, s = pairs[best[-1]]
  segments.append(Segment(start, float(grid[-1]), a, s))
  return segments


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


def bps(x: float) -> str:
  """A bandwidth to 2 significant figures: '42 Mbit/s', '1.5 Gbit/s'."""
  for scale, unit in ((1e9, 'Gbit/s'), (1e6, 'Mbit/s'), (1e3, 'kbit/s')):
    if x >= scale * 0.9995:
      break
  else:
    scale, unit = 1.0, 'bit/s'
  value = float(f'{x / scale:.2g}')
  return f'{value:g} {unit}'


def describe_segments(segments: Sequence[Segment], best: str = 'fastest'
                      ) -> str:
  """'below 42 Mbit/s **laq**; above 42 Mbit/s **gd (ring)**' or, with no
  crossover, that the one contender is the `best` ('fastest', or 'faster'
  of two) throughout."""
  lo, hi = bps(BANDWIDTH_RANGE[0]), bps(BANDWIDTH_RANGE[1])
  if len(segments) == 1:
    s = segments[0]
    return (f'no crossover from {lo} to {hi}: **{label(s.algo, s.topology)}**'
            f' is the {best} throughout')
  parts = []
  for i, s in enumerate(segments):
    name = f'**{label(s.algo, s.topology)}**'
    if i == 0:
      parts.append(f'below {bps(s.hi)} {name}')
    elif i == len(segments) - 1:
      parts.append(f'above {bps(s.lo)} {name}')
    else:
      parts.append(f'from {bps(s.lo)} to {bps(s.hi)} {name}')
  return '; '.join(parts)


# ----------------------------------------------------------------------------
# The report.


def profile_table(sweep: TimedSweep, target: Target,
                  times: dict[str, dict[str, dict[str, float]]]) -> str:
  """Markdown: every preset's time to target on each profile (the faster
  topology, named, for those that can all-reduce), the fastest per profile
  bold; a preset without a time says why."""
  profiles = list(next(iter(times.values()))) if times else []
  best = {p: min(fastest(times[a][p])[0] for a in times) for p in profiles}
  body = []
  for g, algo in enumerate(sweep.algos):
    why = untimed(sweep, target, g)
    k = int(target.iteration[g])
    cells = [algo, fmt(sweep.flops[g], 'sci'), fmt(k) if k >= 0 else DASH]
    for p in profiles:
      if why:
        cells.append(why)
        continue
      seconds, topology = fastest(times[algo][p])
      cell = fmt(seconds, '.3g') + (f' ({topology})' if can_ring(algo)
                                    else '')
      cells.append(f'**{cell}**' if seconds == best[p] else cell)
    body.append(cells)
  return table(['preset', 'FLOPs per worker step', 'k*']
               + [f'{p} (s)' for p in profiles], body)


def winners_sentence(times: dict[str, dict[str, dict[str, float]]]) -> str:
  """'Fastest to the target: datacenter **gd (ring)** (1.2 s), ...' (every
  preset of a tie named)."""
  if not times:
    return 'No preset is timed here.'
  parts = []
  for p in next(iter(times.values())):
    seconds = min(fastest(times[a][p])[0] for a in times)
    tied = [label(a, fastest(times[a][p])[1]) for a in times
            if fastest(times[a][p])[0] == seconds]
    names = ' and '.join(f'**{n}**' for n in tied)
    parts.append(f'{p} {names} ({"tied, " if len(tied) > 1 else ""}'
                 f'{seconds:.3g} s)')
  return 'Fastest to the target: ' + ', '.join(parts) + '.'


def bandwidth_figure(title: str, panels) -> Figure:
  """Time to target against the link bandwidth, one panel per kind, every
  preset a line (on its faster topology), the winner changes dotted.

  Args:
    title: the figure's title.
    panels: [(panel title, grid [B], {algo: {topology: [B]}}, segments)].
  """
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=(6.5 * len(panels), 4.8), layout='constrained')
  axes = fig.subplots(1, len(panels), squeeze=False)[0]
  for ax, (name, grid, curves, segments) in zip(axes, panels):
    if not curves:
      ax.text(0.5, 0.5, 'no preset timed', ha='center', va='center',
              transform=ax.transAxes)
    for algo, by_topology in curves.items():
      times = np.min(np.stack(list(by_topology.values())), axis=0)
      what = (f'{algo} (faster of star, ring)' if len(by_topology) > 1
              else algo)
      ax.plot(grid, times, label=what,
              linestyle='--' if len(by_topology) > 1 else '-')
    for s in segments[1:]:
      ax.axvline(s.lo, color='0.6', linestyle=':', linewidth=1)
      ax.annotate(bps(s.lo), (s.lo, 1), xycoords=('data', 'axes fraction'),
                  xytext=(2, -10), textcoords='offset points', fontsize=7,
                  color='0.4')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('link bandwidth, up = down (bit/s); '
                  f'otherwise {BASE_PROFILE}')
    ax.set_ylabel('simulated seconds to the target')
    ax.set_title(name)
    ax.grid(True, which='major', alpha=0.3)
    if curves:
      ax.legend(fontsize=7)
  fig.suptitle(title)
  return fig


def kind_lines(label_text: str, sweep: TimedSweep, target: Target,
               times) -> list[str]:
  """The report's profile part of one sweep: the target, the table, the
  presets left out, the winners."""
  lines = [f'**{label_text}.** Target: {target.rule}.', '',
           profile_table(sweep, target, times), '']
  for algo, why in sweep.notes.items():
    lines += [f'**Not timed: {algo}** ({why}).', '']
  return lines + [winners_sentence(times), '']


def section(study, workdir: pathlib.Path) -> list[str]:
  """The report's "time to target" part of one study (a
  `family_report.Study`): per sweep the profile table, then the bandwidth
  figure (written to WORKDIR/STUDY/time_vs_bandwidth.png) and the
  crossovers, every number computed here."""
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  base = network.PROFILES[BASE_PROFILE]
  lines = ['### Time to target on modeled networks', '',
           'Simulated seconds (docs/algorithm.md, "Time on a modeled '
           'network"), replayed post hoc from each point\'s per-worker bits '
           '(`laq_jax.network`): each worker computes F FLOPs per step (the '
           'problem\'s gradient FLOPs per sample times its minibatch, or '
           'its shard), stragglers drawn from each point\'s seed. gd and '
           'sgd can all-reduce: they are timed on the star and on a ring and '
           'the faster is shown, named. Time to target = Σ_{j<k*} T[j], '
           'k* the first logged iterate at or below the target; the fastest '
           'per profile in bold.', '']
  grid = bandwidth_grid()
  panels, crossings = [], []
  for kind, label_text, lazy, eager in KINDS:
    if kind not in study.sweeps:
      continue
    folder = workdir / study.name / study.sweeps[kind][1]
    try:
      sweep = load_sweep(folder)
    except (OSError, ValueError, KeyError) as e:
      lines += [f'**{label_text}: not timed** ({e}).', '']
      continue
    target = choose_target(sweep, residual=study.convex and kind == 'full')
    times = profile_times(sweep, target)
    lines += kind_lines(label_text, sweep, target, times)
    curves = bandwidth_times(sweep, target, grid)
    exact = Exact(sweep, target)
    every = fastest_segments(grid, curves, exact, contenders(curves))
    panels.append((label_text, grid, curves, every))
    crossings.append(f'- {label_text}, the fastest of all presets: '
                     + (describe_segments(every) if every
                        else 'no preset is timed') + '.')
    pair = contenders(curves, (lazy, eager))
    if {a for a, _ in pair} == {lazy, eager}:
      crossings.append(
          f'- {label_text}, {lazy.upper()} against {eager.upper()} on its '
          'faster topology: '
          + describe_segments(fastest_segments(grid, curves, exact, pair),
                              'faster')
          + '.')
    else:
      gone = [a for a in (lazy, eager) if a not in curves]
      crossings.append(f'- {label_text}: {lazy.upper()} against '
                       f'{eager.upper()} cannot be compared ('
                       + ', '.join(f'{a} is not timed' for a in gone) + ').')
  if panels:
    path = f'{study.name}/{FIGURE}'
    outputs.save_figure(bandwidth_figure(
        f'{study.title}: time to target against link bandwidth', panels),
                        workdir / path, dpi=FIGURE_DPI)
    lines += [
        f'Against the link bandwidth x from {bps(BANDWIDTH_RANGE[0])} to '
        f'{bps(BANDWIDTH_RANGE[1])} (up_bps = down_bps = x; every other '
        f'field {BASE_PROFILE}\'s: {base["up_latency_s"] * 1e3:g} ms '
        f'one-way, {base["flops_per_s"]:.3g} FLOP/s, stragglers '
        f'{base["straggler"]}, server ingress and egress '
        f'{bps(base["server_in_bps"])}), {len(grid)} bandwidths '
        'replayed as one program per sweep, each change of the fastest '
        'refined by bisection in log-bandwidth on the exact replay (to 2 '
        'significant figures):', ''] + crossings + [
            '', f'![{study.name}: time to target against bandwidth]({path})',
            '']
  return lines
