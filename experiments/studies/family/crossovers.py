"""Who wins where: the fastest preset range by range of link bandwidth.

    every = fastest_segments(grid, curves, exact, contenders(curves))
    text = describe_segments(every)   # 'below 42 Mbit/s **laq**; above ...'

The fastest on each grid bandwidth; where it changes between two grid
points, the crossing is refined by bisection in log-bandwidth with the same
exact replay (`network_replay.Exact`).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import numpy as np

from experiments.studies.family.network_replay import (BANDWIDTH_RANGE,
                                                        TOPOLOGIES, label)

RTOL = 1e-4  # bisection stops when hi / lo < 1 + RTOL (2 figures reported)


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
