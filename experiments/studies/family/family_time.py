"""Where each method wins: the family's presets timed on modeled networks.

    text = section(study, workdir)                   # the report's lines

built from (experiments/studies/family/):

    timed = timed_sweep.load_sweep(workdir / 'logreg' / 'full')
    target = timed_sweep.choose_target(timed, residual=True)
    profiles = network_replay.profile_times(timed, target)  # {algo: {..}}
    grid = network_replay.bandwidth_grid()
    curves = network_replay.bandwidth_times(timed, target, grid)
    every = crossovers.fastest_segments(grid, curves, exact, pairs)

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

A point that diverged (the one rule, `laq_jax.metrics.diverged_at`: a
logged loss NaN/inf or above 10x f(theta^0), also after it reached the
target) is never timed: it is named with its iteration, left out of the
fastest per profile, the bandwidth figure and the crossovers. A sweep where
every point diverged is said to have none timed; the report is written.

Older sweeps' curves.npz lack the per-worker bits (`bits` [G,T,M]); they are
rebuilt from the uploads and each step's bits only where that is exact
(`per_worker_bits`), and the other presets are left out with a note.
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING

import numpy as np

from experiments.run import outputs
from experiments.run.markdown import DASH, fmt, table
from experiments.studies.family.crossovers import (bps, contenders,
                                                   describe_segments,
                                                   fastest_segments)
from experiments.studies.family.network_replay import (BANDWIDTH_RANGE,
                                                        BASE_PROFILE, Exact,
                                                        bandwidth_grid,
                                                        bandwidth_times,
                                                        can_ring, fastest,
                                                        label, profile_times)
from experiments.studies.family.timed_sweep import (Target, TimedSweep,
                                                    choose_target, divergence,
                                                    load_sweep, untimed)
from laq_jax import metrics

if TYPE_CHECKING:
  from matplotlib.figure import Figure

FIGURE = 'time_vs_bandwidth.png'
FIGURE_DPI = 90
KINDS = (('full', 'Full batch', 'laq', 'gd'),
         ('minibatch', 'Minibatch', 'slaq', 'sgd'))


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


def time_values(prefix: str, sweep: TimedSweep, target: Target,
                times: dict[str, dict[str, dict[str, float]]]
                ) -> dict[str, object]:
  """What `profile_table` shows, as results.json values under `prefix`
  (every timed point; an untimed one, diverged or without per-worker bits,
  has none)."""
  out = {}
  for g, algo in enumerate(sweep.algos):
    if untimed(sweep, target, g) or algo not in times:
      continue
    k = int(target.iteration[g])
    out[f'{prefix}/{algo}/k_star'] = k if k >= 0 else None
    for profile, by_topology in times[algo].items():
      seconds, topology = fastest(by_topology)
      out[f'{prefix}/{algo}/seconds/{profile}'] = seconds
      out[f'{prefix}/{algo}/topology/{profile}'] = topology
  return out


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
    panels: [(panel title, grid [B], {algo: {topology: [B]}}, segments)]:
      the timed presets alone, so a diverged one (never timed) is drawn
      nowhere and sets no axis; `section` names it in the panel's title.
  """
  from matplotlib import figure  # pylint: disable=g-import-not-at-top
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(figsize=(8.5 * len(panels), 4.8), layout='constrained')
  axes = fig.subplots(1, len(panels), squeeze=False)[0]
  for ax, (name, grid, curves, segments) in zip(axes, panels):
    if not curves:
      ax.text(0.5, 0.5, 'no preset timed', ha='center', va='center',
              transform=ax.transAxes)
    # A colour of its own for each line (tab20: 20), the legend beside the
    # panel, where it hides no line.
    colours = colormaps['tab20' if len(curves) > 10 else 'tab10'].colors
    for n, (algo, by_topology) in enumerate(curves.items()):
      times = np.min(np.stack(list(by_topology.values())), axis=0)
      what = (f'{algo} (faster of star, ring)' if len(by_topology) > 1
              else algo)
      ax.plot(grid, times, label=what, color=colours[n % len(colours)],
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
      ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1.0),
                frameon=False)
  fig.suptitle(title)
  return fig


def diverged_line(sweep: TimedSweep) -> list[str]:
  """'**Diverged, not timed**: **slaq** (diverged at k=12), ...' (the
  sweep's diverged points, ranked nowhere), or nothing."""
  away = [f'**{a}** ({divergence(sweep, g)})'
          for g, a in enumerate(sweep.algos) if sweep.diverged[g]]
  if not away:
    return []
  return ['**Diverged, not timed** (a logged loss NaN/inf or above '
          f'{metrics.DIVERGENCE_FACTOR:g}x f(θ^0); in no ranking, figure or '
          'crossover): ' + ', '.join(away) + '.', '']


def kind_lines(label_text: str, sweep: TimedSweep, target: Target,
               times) -> list[str]:
  """The report's profile part of one sweep: the target, the table, the
  presets left out (diverged, or without per-worker bits), the winners."""
  lines = [f'**{label_text}.** Target: {target.rule}.', '',
           profile_table(sweep, target, times), '']
  lines += diverged_line(sweep)
  for algo, why in sweep.notes.items():
    lines += [f'**Not timed: {algo}** ({why}).', '']
  return lines + [winners_sentence(times), '']


def section(study, workdir: pathlib.Path, values: dict | None = None
            ) -> list[str]:
  """The report's "time to target" part of one study (a
  `family_report.Study`): per sweep the profile table, then the bandwidth
  figure (written to WORKDIR/STUDY/time_vs_bandwidth.png) and the
  crossovers, every number computed here. `values`, where given, receives
  the table's numbers for results.json: 'STUDY/FOLDER/ALGO/seconds/PROFILE'
  (the faster topology's seconds to the target), '.../topology/PROFILE' and
  '.../k_star'."""
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
    try:
      target = choose_target(sweep,
                             residual=study.convex and kind == 'full')
    except ValueError as e:  # every point diverged, or none made progress
      lines += [f'**{label_text}: not timed** ({e}).', '']
      lines += diverged_line(sweep)
      crossings.append(f'- {label_text}: no preset is timed ({e}).')
      continue
    times = profile_times(sweep, target)
    if values is not None:
      values.update(time_values(f'{study.name}/{study.sweeps[kind][1]}',
                                sweep, target, times))
    lines += kind_lines(label_text, sweep, target, times)
    curves = bandwidth_times(sweep, target, grid)
    exact = Exact(sweep, target)
    every = fastest_segments(grid, curves, exact, contenders(curves))
    away = [f'{a} ({divergence(sweep, g)})'
            for g, a in enumerate(sweep.algos) if sweep.diverged[g]]
    panels.append((label_text + ('\nnot drawn: ' + ', '.join(away)
                                 if away else ''), grid, curves, every))
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
      why = {a: divergence(sweep, sweep.algos.index(a))
             for a in gone if a in sweep.algos}
      crossings.append(f'- {label_text}: {lazy.upper()} against '
                       f'{eager.upper()} cannot be compared ('
                       + ', '.join(f'{a} {why.get(a) or "is not timed"}'
                                   for a in gone) + ').')
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
  elif crossings:  # no sweep timed: say why, no figure
    lines += crossings + ['']
  return lines
