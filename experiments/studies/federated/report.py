"""The federated study's report: its numbers, tables, figures and REPORT.md.

    text = report(workdir, problems, budget, command)   # writes REPORT.md

Test accuracy, and iterations, simulated seconds and uplink bits to the
target accuracy (the first evaluation at or above it, every `eval_every`
iterations); uploads per participation; the clients the deadline cut; upload
rates against the rounds a client was away; every number computed from the
sweeps (`experiments.studies.federated.sweeps`).

A point that diverged (`laq_jax.metrics.diverged_at`: a logged loss NaN/inf
or above 10x f(theta^0), also after it reached the target; `load_sweep`
marks each row) is named with its iteration and left out of every ranking,
"fastest", "fewest" and savings claim; its figure curve is drawn to the
divergence, dashed, and sets no axis range. A point that did not reach the
target is not "fastest" by default either: where one's budget ended before
the first's time (bits) to the target without reaching it, the claim is
marked not decided (`first_to`).
"""

from __future__ import annotations

import pathlib
from typing import Callable

import numpy as np

from experiments.studies.federated.sweeps import (DEADLINE_PERCENTILE,
                                                  LOCAL_K, SWEEPS, TITLES,
                                                  FederatedError, load_sweep,
                                                  sweep_config)
from laq_jax import metrics

REPORT = 'REPORT.md'


# ----------------------------------------------------------------------------
# The numbers of the report.

# Where a point diverged (its row's `diverged_at`, which `load_sweep` sets by
# the one rule, `laq_jax.metrics.diverged_at`), or None where it did not.
diverged_at = metrics.row_diverged_at


def point_summary(loaded: dict, g: int, target: float) -> dict:
  """One point's figures at the target accuracy and at the end. A diverged
  point (`diverged_at`) reaches no target, also where an evaluation before
  or after the divergence was above it: it is left out of every ranking."""
  c, row = loaded['curves'], loaded['rows'][g]
  acc, steps = c['test_accuracy'][g], c['test_accuracy_steps']
  at = diverged_at(row)
  hit = np.flatnonzero(acc >= target)
  k = int(steps[hit[0]]) if len(hit) and at is None else None
  before = acc if at is None else acc[steps < at]
  before = before[np.isfinite(before)]
  time = np.cumsum(c['time_s'][g])
  present = c['participants'][g]
  sent = c['uploads'][g]
  dropped = c['dropped'][g] if 'dropped' in c else np.zeros_like(present)
  return {
      'algo': row['algo'], 'point': g,
      'final_accuracy': float(acc[-1]),
      'best_accuracy': float(before.max()) if before.size else float('nan'),
      'target_iteration': k,
      'target_time_s': None if k is None else float(time[k - 1]),
      'target_bits': None if k is None else int(c['cum_bits'][g, k - 1]),
      'target_uploads': (None if k is None
                         else int(c['cum_uploads'][g, k - 1])),
      'total_time_s': float(time[-1]),
      'total_bits': int(c['cum_bits'][g, -1]),
      'participations': int(present.sum()),
      'uploads': int(sent.sum()),
      'upload_rate': float(sent.sum() / max(present.sum(), 1)),
      'dropped': int(dropped.sum()),
      'diverged': at is not None, 'diverged_at': at,
  }


def rates_by_absence(loaded: dict, g: int) -> list[tuple[str, int, float]]:
  """Upload rate of the participations after 1, 2-5, 6-20, > 20 rounds
  away (and at a client's first participation)."""
  c = loaded['curves']
  present, sent = c['participants'][g], c['uploads'][g]
  t_count, m_count = present.shape
  last = np.full(m_count, -1)
  gaps, ups = [], []
  for k in range(t_count):
    who = np.flatnonzero(present[k])
    gaps.append(np.where(last[who] < 0, 0, k - last[who]))
    ups.append(sent[k, who])
    last[who] = k
  gaps, ups = np.concatenate(gaps), np.concatenate(ups)
  out = []
  for label, lo, hi in (('first', 0, 0), ('1', 1, 1), ('2-5', 2, 5),
                        ('6-20', 6, 20), ('> 20', 21, 10**9)):
    mask = (gaps >= lo) & (gaps <= hi)
    out.append((label, int(mask.sum()),
                float(ups[mask].mean()) if mask.any() else float('nan')))
  return out


PROFILES = ('datacenter', 'cross_silo', 'mobile')


def profile_times(loaded: dict, g: int) -> dict[str, np.ndarray]:
  """{profile: [T] cumulative simulated seconds} of point g replayed on
  each network profile (its per-worker bits, downloads, gradients and
  participants; the stragglers drawn for that profile from its seed): on
  its own profile the replay is its run's time (a test checks)."""
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  c, row = loaded['curves'], loaded['rows'][g]
  bits = c['bits'][g]
  workers = bits.shape[1]
  present = (c['participants'][g] if 'participants' in c
             else np.ones(bits.shape, bool))
  if 'grads' in c:
    grads, down = c['grads'][g], c['bits_down'][g]
  else:
    grads = present.astype(np.float64)
    per_step = np.diff(c['cum_bits_down'][g], prepend=0)
    down = present * (per_step / np.maximum(present.sum(1), 1))[:, None]
  flops = np.full(workers, float(row['flops_per_worker_step']))
  return {p: np.cumsum(network.replay(
      network.make_network(p, num_workers=workers), flops, bits, down,
      seed=int(row['seed']), participants_TxM=present,
      grads_TxM=grads).time_s) for p in PROFILES}


def local_summary(loaded: dict, g: int, target: float) -> dict:
  """`point_summary` plus the time to target on every profile, the
  gradients computed to it, and K."""
  s = point_summary(loaded, g, target)
  row, c = loaded['rows'][g], loaded['curves']
  k = s['target_iteration']
  times = profile_times(loaded, g)
  s['profile_time_s'] = {p: None if k is None else float(t[k - 1])
                         for p, t in times.items()}
  s['profile_total_s'] = {p: float(t[-1]) for p, t in times.items()}
  grads = (c['grads'][g] if 'grads' in c else c['participants'][g])
  s['target_grads'] = None if k is None else int(np.sum(grads[:k]))
  client = row.get('algo')
  s['label'] = client
  if 'local.steps' in row and row['algo'] == 'fedavg':
    s['label'] = f'fedavg K={int(float(row["local.steps"]))}'
  return s


def _local_table(summaries) -> list[str]:
  best = {p: _decided(first_to(summaries, _at_target(p), _at_end(p),
                               'label'))
          for p in PROFILES}
  rows = []
  for s in summaries:
    times = []
    for p in PROFILES:
      t = target_cell(s, s['profile_time_s'][p], 's')
      times.append(f'**{t}**' if best[p] is not None
                   and s['profile_time_s'][p] == best[p] else t)
    rows.append([s['label'], accuracy_cell(s),
                 target_cell(s, s['target_iteration']), *times,
                 target_cell(s, s['target_bits'], 'bits'),
                 target_cell(s, s['target_grads'])])
  return table(['preset', 'final test acc.', 'rounds to target',
                 *(f'time to target, {p}' for p in PROFILES),
                 'uplink bits to target', 'gradients to target'], rows)


def _at_target(p):
  return lambda s: s['profile_time_s'][p]


def _at_end(p):
  return lambda s: s['profile_total_s'][p]


def winners(summaries) -> dict[str, tuple[str, float] | None]:
  """{profile: (label, seconds)} of the fastest to the target (presets
  tied at the same seconds joined by ' = ', in the tables' order), or
  None where nobody reached it; diverged points left out (`first_to`,
  which also says whether the claim is decided)."""
  out = {}
  for p in PROFILES:
    first = first_to(summaries, _at_target(p), _at_end(p), 'label')
    out[p] = None if first is None else (first['label'], first['value'])
  return out


def local_section(results: dict, target: float) -> list[str]:
  """The FedAvg family beside main's FedSGD and lazy presets: rounds,
  simulated time on the three profiles, bits and gradients to the target,
  FedAvg's K, and which preset reaches the target first on each profile."""
  lines = []
  every = []
  for sweep, title in (('main', 'FedSGD and the lazy family (main)'),
                       ('local', 'Local work (K local steps per round)'),
                       ('local_k', 'FedAvg\'s K, one program')):
    if sweep not in results:
      continue
    loaded = results[sweep]
    summaries = [local_summary(loaded, g, target)
                 for g in range(len(loaded['rows']))]
    every += summaries
    if sweep == 'main':
      continue
    lines += [f'### {title}', '']
    budget = (f'{loaded["config"]["num_iters"]:,} rounds, test accuracy '
              f'every {loaded["config"]["eval_every"]}. ')
    if sweep == 'local':
      lines += [budget + 'Each preset at its paper\'s settings (docs/algorithm.md, '
                '"Local work"): K = 10 local steps of client SGD on '
                'minibatches of the main sweep\'s size, the server step of '
                'its paper; the sample-weighted mean of the participants\' '
                'model changes. Times are the rounds replayed on each '
                'profile (bits, downloads, gradients and participants of '
                'the run; bold: the first of this table to the target, '
                'where no preset\'s budget ended before it without reaching '
                'it).', '']
    else:
      lines += [budget + f'FedAvg with K in {{{", ".join(map(str, LOCAL_K))}}}, '
                'one compiled program (K is data).', '']
    lines += _local_table(summaries) + ['']
    lines += divergence_lines(summaries, 'label')
  if every and 'local' in results:
    lines += ['**First to the target on each profile** (computed over the '
              'main, local and K sweeps; diverged points left out): '
              + '; '.join(f'{p}: ' + first_text(
                  first_to(every, _at_target(p), _at_end(p), 'label'), 's')
                          for p in PROFILES) + '.', '']
  return lines


def fmt(value, kind=''):
  if value is None:
    return 'not reached'
  if kind == 'pct':
    return f'{100 * value:.2f}%'
  if kind == 's':
    return f'{value:,.1f} s' if value >= 10 else f'{value:.3g} s'
  if kind == 'bits':
    return f'{value:.3g}'
  if isinstance(value, float):
    return f'{value:.3g}'
  return f'{value:,}'


def table(headers, rows) -> list[str]:
  lines = ['| ' + ' | '.join(headers) + ' |',
           '|' + '|'.join('---' if i == 0 else '---:'
                          for i in range(len(headers))) + '|']
  lines += ['| ' + ' | '.join(str(x) for x in r) + ' |' for r in rows]
  return lines


DIVERGED = 'diverged'


def target_cell(s: dict, value, kind: str = '') -> str:
  """A to-target cell: 'diverged' for a diverged point (it reaches no
  target, `point_summary`), else `fmt`."""
  return DIVERGED if s.get('diverged') else fmt(value, kind)


def accuracy_cell(s: dict) -> str:
  """The final accuracy, or 'diverged at k=…' for a diverged point."""
  if metrics.row_diverged(s):
    at = metrics.row_diverged_at(s)
    return 'diverged' if at is None else f'diverged at k={at:,}'
  return fmt(s['final_accuracy'], 'pct')


def divergence_lines(summaries, label: str = 'algo') -> list[str]:
  """A line naming the table's diverged points, where they diverged and by
  what rule (`laq_jax.metrics.divergence_note`); [] when none did."""
  bad = [s for s in summaries if s.get('diverged')]
  if not bad:
    return []
  return ['Diverged, left out of every ranking: ' + '; '.join(
      f'{s[label]} {metrics.divergence_note(s["diverged_at"])}'
      for s in bad) + '.', '']


def first_to(summaries, at_target, at_end, label: str = 'algo'
             ) -> dict | None:
  """Who reaches the target first, over the points that did not diverge.

  Args:
    summaries: `point_summary` / `local_summary` dicts.
    at_target: summary -> the measure (seconds, bits, rounds) spent to the
      target, None where not reached.
    at_end: summary -> the same measure at the end of its run.
    label: the key that names a point.

  Returns:
    None where no point that did not diverge reached the target, else
    {'label': the first (ties joined by ' = '), 'value': its measure,
    'open': [(label, at_end)] of the points that did not diverge nor reach
    the target but whose budget ended below the first's measure: they might
    have been first with a longer budget, so the claim is not decided}.
  """
  live = [s for s in summaries if not s.get('diverged')]
  reached = [s for s in live if at_target(s) is not None]
  if not reached:
    return None
  best = min(at_target(s) for s in reached)
  return {'label': ' = '.join(s[label] for s in reached
                              if at_target(s) == best),
          'value': best,
          'open': [(s[label], at_end(s)) for s in live
                   if at_target(s) is None and at_end(s) < best]}


def _decided(first: dict | None):
  """The first's measure where the claim is decided, else None."""
  return None if first is None or first['open'] else first['value']


def first_text(first: dict | None, kind: str = '', bold: bool = False,
               show=None) -> str:
  """`first_to`'s answer in words: 'nobody', 'X (68.3 s)', or, where a
  budget ended before it, 'not decided: X (68.3 s) ... but Y's budget
  ended at 50 s without reaching it'."""
  show = show or (lambda v: fmt(v, kind))
  if first is None:
    return 'nobody (that did not diverge)'
  name = f'**{first["label"]}**' if bold else first['label']
  text = f'{name} ({show(first["value"])})'
  if not first['open']:
    return text
  return ('not decided: ' + text + ' first of those that reached it, but '
          + ', '.join(f'{n}\'s budget ended at {show(v)}' for n, v
                      in first['open'])
          + ' without reaching it')


def _main_table(summaries, with_dropped: bool) -> list[str]:
  best_time = _decided(first_to(summaries, lambda s: s['target_time_s'],
                                lambda s: s['total_time_s']))
  rows = []
  for s in summaries:
    time = target_cell(s, s['target_time_s'], 's')
    if best_time is not None and s['target_time_s'] == best_time:
      time = f'**{time}**'
    rows.append([s['algo'], accuracy_cell(s),
                 target_cell(s, s['target_iteration']), time,
                 target_cell(s, s['target_bits'], 'bits'),
                 fmt(s['total_time_s'], 's'), fmt(s['total_bits'], 'bits'),
                 f'{s["upload_rate"]:.2f}']
                + ([f'{s["dropped"]:,}'] if with_dropped else []))
  headers = ['preset', 'final test acc.', 'iterations to target',
             'time to target', 'uplink bits to target', 'total time',
             'total uplink bits', 'uploads per participation']
  lines = table(headers + (['cut by deadline'] if with_dropped else []),
                rows)
  named = divergence_lines(summaries)  # [line, ''] or []
  return lines + ([''] + named[:1] if named else [])


def laziness_observations(lz: dict, target: float) -> list[str]:
  """SLAQ's upload rate against q and the rounds away, in words (diverged
  points left out, named)."""
  out = []
  for absent in ('stale', 'drop'):
    by_q, bad = {}, []
    for g, row in enumerate(lz['rows']):
      if row['algo'] == 'slaq' and row['absent'] == absent:
        s = point_summary(lz, g, target)
        q = float(row['participation'])
        if s['diverged']:
          bad.append(f'q = {q:g} diverged at k={s["diverged_at"]:,}')
          continue
        by_q[q] = (s, rates_by_absence(lz, g))
    if not by_q and not bad:
      continue
    qs = sorted(by_q, reverse=True)
    rates = ', '.join(f'{by_q[q][0]["upload_rate"]:.3f} at q = {q:g}'
                      for q in qs)
    seen = ([(label, r) for label, n, r in by_q[qs[-1]][1][1:] if n]
            if qs else [])
    trend = (f'; at q = {qs[-1]:g} it goes from {seen[0][1]:.3f} after '
             f'{seen[0][0]} round(s) away to {seen[-1][1]:.3f} after '
             f'{seen[-1][0]}' if len(seen) > 1 else '')
    left = (f' ({"; ".join(bad)}: left out)' if bad else '')
    out.append(f'- SLAQ with absent = {absent}: '
               + (f'{rates} uploads per participation{trend}' if qs
                  else 'every point diverged')
               + f'{left}.')
  return (['**Computed from the tables above:**', ''] + out + ['']
          if out else [])


def _ratio(a, b) -> str:
  return f'{a / b:.3f}x' if a is not None and b else 'n/a'


def observations(results: dict, target: float) -> list[str]:
  """What the main and deadline sweeps say, computed from their numbers
  (diverged points in no ranking, saving or comparison: named)."""
  out = []
  main = results.get('main')
  if main is None:
    return out
  summaries = {r['algo']: point_summary(main, g, target)
               for g, r in enumerate(main['rows'])}
  every = list(summaries.values())
  out += ['**Computed from the tables above:**', '']
  fastest = first_to(every, lambda s: s['target_time_s'],
                     lambda s: s['total_time_s'])
  fewest = first_to(every, lambda s: s['target_bits'],
                    lambda s: s['total_bits'])
  if fastest is not None:
    out.append(f'- Fastest to {100 * target:g}%: '
               f'{first_text(fastest, "s", bold=True)}; fewest uplink bits '
               'to it: ' + first_text(fewest, bold=True,
                                     show=lambda b: f'{b:.3g} bits') + '.')
  missed = [a for a, s in summaries.items()
            if s['target_time_s'] is None and not s['diverged']]
  if missed:
    out.append(f'- Not at {100 * target:g}% within the budget: '
               + ', '.join(missed) + '.')
  bad = [f'{a} at k={s["diverged_at"]:,}' for a, s in summaries.items()
         if s['diverged']]
  if bad:
    out.append('- Diverged (a logged loss NaN/inf or above 10x f(theta^0); '
               'in no ranking, saving or comparison): ' + ', '.join(bad)
               + '.')
  sgd = summaries.get('sgd')
  if sgd is not None and sgd['diverged']:
    out.append(f'- sgd, the baseline of the savings, diverged at '
               f'k={sgd["diverged_at"]:,}: no savings against it.')
    sgd = None
  for lazy in ('slag', 'slaq'):
    s = summaries.get(lazy)
    if s is None or sgd is None:
      continue
    if s['diverged']:
      out.append(f'- {lazy} diverged at k={s["diverged_at"]:,}: no savings '
                 'claimed.')
      continue
    out.append(
        f'- {lazy}: {s["upload_rate"]:.2f} uploads per participation; '
        f'total uplink bits {_ratio(s["total_bits"], sgd["total_bits"])} '
        f'of sgd\'s, total simulated time '
        f'{_ratio(s["total_time_s"], sgd["total_time_s"])} of sgd\'s'
        + (f' (it did not reach {100 * target:g}%: not at equal accuracy)'
           if s['target_time_s'] is None else '') + '.')
  cut = results.get('deadline')
  if cut is not None:
    deadline = float(cut['rows'][0]['deadline_s'])
    cut_summaries = [point_summary(cut, g, target)
                     for g in range(len(cut['rows']))]
    for row, with_d in zip(cut['rows'], cut_summaries):
      without = summaries.get(row['algo'])
      if without is None or not with_d['dropped']:
        continue
      if with_d['diverged'] or without['diverged']:
        which = ('with' if with_d['diverged'] else 'without')
        at = (with_d if with_d['diverged'] else without)['diverged_at']
        out.append(f'- {row["algo"]} {which} the deadline diverged at '
                   f'k={at:,}: not compared.')
        continue
      out.append(
          f'- The {deadline:.4g} s deadline cut {with_d["dropped"]:,} of '
          f'{row["algo"]}\'s {with_d["participations"]:,} '
          f'participations; its total time '
          f'{_ratio(with_d["total_time_s"], without["total_time_s"])} of '
          'the run without the deadline, time to target '
          + (_ratio(with_d['target_time_s'], without['target_time_s'])
             if with_d['target_time_s'] is not None else 'not reached')
          + ', final accuracy '
          f'{fmt(with_d["final_accuracy"], "pct")} (without: '
          f'{fmt(without["final_accuracy"], "pct")}).')
    if not any(s['dropped'] for s in cut_summaries):
      out.append(f'- The {deadline:.4g} s deadline cut no one.')
  return out + ['']


def _tick_label(value: float, _=None) -> str:
  """'0.05', '20', '500', else '5e5', '2e7' (short, one style a range)."""
  if value <= 0:
    return ''
  if 1e-3 <= value < 1e4:
    return f'{value:g}'
  exponent = int(np.floor(np.log10(value) + 1e-9))
  return f'{value / 10 ** exponent:.2g}e{exponent}'


def _log_ticks(ax) -> None:
  """Tick labels of a log x axis that do not overlap: decades where it
  spans two or more, else 1, 2 and 5 of each decade; no minor labels."""
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  lo, hi = ax.get_xlim()
  if lo > 0 and hi / lo < 100:
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10,
                                                 subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(_tick_label))
  ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def accuracy_floor(results: dict, target: float) -> float:
  """The accuracy axis' lower end: 25 points below the target, lower (to a
  multiple of 5%) where a point that did not diverge never got above it,
  so that every such point's best is on the axes."""
  low = max(0.0, target - 0.25)
  for sweep in ('main', 'deadline'):
    loaded = results.get(sweep)
    if loaded is None:
      continue
    acc = loaded['curves']['test_accuracy']
    for g, row in enumerate(loaded['rows']):
      best = np.asarray(acc[g], np.float64)
      best = best[np.isfinite(best)]
      if diverged_at(row) is None and best.size:
        low = min(low, np.floor(20 * float(best.max())) / 20 - 0.05)
  return max(0.0, float(low))


def accuracy_figure(results: dict, problem: str, target: float):
  """Test accuracy against simulated time and against uplink bits (a
  matplotlib Figure), one shared legend beside the axes. A diverged point
  is drawn to its divergence, dashed, ending in a cross, and named in the
  legend with its iteration; it sets no axis range (the x axes span the
  other points'). A point below the accuracy axis is named so."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  from laq_jax import plotting  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(13, 4.4), layout='constrained')
  axes = fig.subplots(1, 2)
  low = accuracy_floor(results, target)
  kept, drawn, any_diverged = ([], []), ([], []), False
  for sweep, style in (('main', '-'), ('deadline', ':')):
    loaded = results.get(sweep)
    if loaded is None:
      continue
    c = loaded['curves']
    steps = c['test_accuracy_steps']
    for g, row in enumerate(loaded['rows']):
      at = diverged_at(row)
      xs = (np.cumsum(c['time_s'][g])[steps - 1],
            np.maximum(c['cum_bits'][g][steps - 1], 1))
      acc = np.asarray(c['test_accuracy'][g], np.float64)
      keep = np.ones(len(steps), bool) if at is None else steps < at
      label = row['algo'] + (' (deadline)' if sweep == 'deadline' else '')
      if at is not None:
        label += f' (diverged at k={at:,}: drawn to it)'
        any_diverged = True
      elif not np.any(acc[keep] >= low):
        label += f' (below {100 * low:g}%: off the axes)'
      color = f'C{g % 10}'
      for i, (ax, x) in enumerate(zip(axes, xs)):
        ax.plot(x[keep], acc[keep], '--' if at is not None else style,
                color=color, label=label if i == 0 else None)
        if at is not None and keep.any():
          ax.plot(x[keep][-1:], acc[keep][-1:], 'x', color=color, ms=7)
        drawn[i].append(x[keep])
        if at is None:
          kept[i].append(x)
  for ax, xlabel, x, shown in zip(
      axes, ('simulated time (s), mobile network', 'uplink bits'), kept,
      drawn):
    ax.axhline(target, color='gray', lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel('test accuracy')
    ax.set_ylim(low, 1.0)
    ax.grid(alpha=0.3)
    if plotting.value_range(shown) is None:  # nothing to draw on a log axis
      ax.text(0.5, 0.5, 'no evaluation before a divergence',
              transform=ax.transAxes, ha='center', va='center')
      continue
    ax.set_xscale('log')
    limits = plotting.value_range(x, margin=1.15)
    if any_diverged and limits is not None:
      ax.set_xlim(*limits)
    _log_ticks(ax)
  handles, labels = axes[0].get_legend_handles_labels()
  if handles:
    fig.legend(handles, labels, loc='outside right center', fontsize=7)
  config = results['main']['config']
  fig.suptitle(f'{TITLES[problem]}: M = {config["num_workers"]}, '
               f'{100 * config["participation"]:g}% participation')
  return fig


def figure(results: dict, path: pathlib.Path, problem: str, target: float
           ) -> None:
  """Writes `accuracy_figure` to `path`."""
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  outputs.save_figure(accuracy_figure(results, problem, target), path)


def report(workdir: pathlib.Path, problems, budget: str, command: str,
           mlp_iters: int | None = None, *,
           mcmahan_section: Callable[[pathlib.Path, str], list[str]]
           | None = None) -> str:
  """Writes WORKDIR/REPORT.md from the sweeps; returns its text.
  `mcmahan_section(folder, problem)`, the study's `mcmahan.section` (which
  builds on this module's summaries: passed in, not imported), renders
  McMahan et al.'s comparison where its sweeps ran (None: not rendered)."""
  from configs import federated  # pylint: disable=g-import-not-at-top
  base = sweep_config(problems[0], 'main', budget)
  lines = [f'# Federated scale: {base.num_workers} clients, '
           f'{100 * base.participation:g}% participation, phones on LTE', '',
           f'Regenerate: `{command}`'
           + (f' (**{budget} budget**: not the report\'s numbers)'
              if budget != 'full' else '') + '.', '']
  lines += [
      '## Setting', '',
      f'- **Clients:** M = {base.num_workers}, '
      f'{(base.train_subset or 60000) // base.num_workers} MNIST images '
      f'each, labels Dirichlet({base.dirichlet_alpha}) (equal sizes, '
      f'`split={base.split}`).',
      f'- **Rounds:** each client takes part with probability '
      f'q = {base.participation}; absent clients are dropped from the '
      'aggregate (`absent=drop`, the server steps with (M/|S_k|) Σ over '
      'the participants). An absent client computes and sends nothing; '
      'its trigger clock counts on.',
      '- **Network:** `mobile` (6.3 Mbit/s up, 21.3 Mbit/s down, 55 ms '
      'each way, 22.5 GFLOP/s, lognormal(σ = 0.5) compute stragglers; '
      'docs/algorithm.md, "Time on a modeled network").',
      f'- **Objective:** λ = 0.1/M = {base.l2:g} per client, α = 0.2/M = '
      f'{base.step_size:g} on the sum (the paper\'s 0.01 and 0.02 at '
      'M = 10).',
      f'- **Gradients:** minibatches of {base.batch_size} per client; the '
      'lazy presets at the authors\' SLAQ settings (b = '
      f'{base.bits}, c_e = {base.err_weight}, c_0 = '
      f'{base.threshold_offset}, D = {base.memory}, t̄ = '
      f'{base.max_staleness}); QSGD s = {base.params.qsgd.levels:,}; '
      f'top-k {100 * base.params.top_k.k:g}% of p.',
      f'- **Budget:** {base.num_iters:,} iterations'
      + (f' ({mlp_iters:,} for the network, what a 2-core CPU affords; '
         '`--mlp_iters` sets it)'
         if mlp_iters and budget == 'full' and 'mlp' in problems else '')
      + f'; test accuracy (10,000 '
      f'MNIST test images) every {base.eval_every} iterations; targets '
      + ', '.join(f'{TITLES[p].split(" (")[0].lower()} '
                  f'{100 * federated.TARGET_ACCURACY[p]:g}%'
                  for p in problems) + '.',
      f'- **Deadline:** the {DEADLINE_PERCENTILE}th percentile of SGD\'s '
      'participants\' compute + upload times in the run without one (so '
      'it cuts the slowest tenth of SGD\'s uploads); a cut client counts '
      'as absent.', '',
      '"Time to target" is the simulated time through the first evaluation '
      'at or above the target; "uploads per participation" the uploads '
      'over the client-rounds that took part.', '']
  for problem in problems:
    target = federated.TARGET_ACCURACY[problem]
    results, notes = {}, []
    for sweep in SWEEPS:
      if (sweep == 'slaq_bits' and problem != 'mlp') or sweep == 'mcmahan':
        continue
      if not (workdir / problem / sweep).exists():
        notes += [f'*{problem}/{sweep} was not run (`--problems={problem} '
                  f'--sweeps={sweep}` runs it).*', '']
        continue
      try:
        results[sweep] = load_sweep(workdir / problem / sweep)
      except FederatedError as e:
        notes += [f'*{problem}/{sweep} missing: {e}*', '']
    lines += [f'## {TITLES[problem]}, target {100 * target:g}% test '
              'accuracy', ''] + notes
    if 'main' in results:
      iters = results['main']['config']['num_iters']
      lines += [f'{iters:,} iterations.', '']
    if 'main' in results:
      main = results['main']
      lines += ['### All presets, no deadline', '']
      lines += _main_table([point_summary(main, g, target)
                            for g in range(len(main['rows']))], False)
      lines += ['']
    if 'deadline' in results:
      d = results['deadline']
      deadline = float(d['rows'][0]['deadline_s'])
      lines += [f'### With a deadline of {deadline:.4g} s', '']
      lines += _main_table([point_summary(d, g, target)
                            for g in range(len(d['rows']))], True)
      lines += ['']
    if results.get('main') is not None:
      fig = f'{problem}_accuracy.png'
      figure(results, workdir / fig, problem, target)
      lines += [f'![{problem}: accuracy against time and bits]({fig})', '']
    lines += observations(results, target)
    lines += local_section(results, target)
    if (workdir / problem / 'mcmahan').exists() and mcmahan_section:
      lines += mcmahan_section(workdir / problem / 'mcmahan', problem)
    else:
      lines += [f'*{problem}/mcmahan was not run (`--problems={problem} '
                '--sweeps=mcmahan` runs it).*', '']
    if 'slaq_bits' in results:
      sb = results['slaq_bits']
      c = sb['curves']
      lines += ['### SLAQ\'s bits on the network', '',
                f'{sb["config"]["num_iters"]:,} iterations, otherwise the '
                'main sweep\'s setting (c_e, c_0 of the logistic SLAQ '
                'settings).', '']
      rows, named = [], []
      for g, row in enumerate(sb['rows']):
        s_ = point_summary(sb, g, target)
        s_['label'] = f'{row["algo"]} b = {row["bits"]}, {row["absent"]}'
        named.append(s_)
        rows.append([row['algo'], row['bits'], row['absent'],
                     accuracy_cell(s_),
                     f'{float(c["final_loss"][g]):.4g}',
                     f'{s_["upload_rate"]:.3f}',
                     target_cell(s_, s_['target_time_s'], 's')])
      lines += table(['preset', 'b', 'absent', 'final test acc.',
                       'final loss f', 'uploads per participation',
                       'time to target'], rows) + ['']
      lines += divergence_lines(named, 'label')
    if 'laziness' in results:
      lz = results['laziness']
      lines += ['### Laziness and participation (sgd, slaq)', '']
      rows, named = [], []
      for g, row in enumerate(lz['rows']):
        s = point_summary(lz, g, target)
        s['label'] = (f'{row["algo"]} q = {row["participation"]}, '
                      f'{row["absent"]}')
        named.append(s)
        rows.append([row['algo'], row['participation'], row['absent'],
                     accuracy_cell(s),
                     target_cell(s, s['target_iteration']),
                     target_cell(s, s['target_time_s'], 's'),
                     target_cell(s, s['target_bits'], 'bits'),
                     f'{s["upload_rate"]:.3f}'])
      lines += table(['preset', 'q', 'absent', 'final test acc.',
                       'iterations to target', 'time to target',
                       'uplink bits to target', 'uploads per participation'],
                      rows)
      lines += [''] + divergence_lines(named, 'label')[:1]
      lines += ['', 'SLAQ\'s upload rate by how many rounds the client had '
                'been away (participations, rate):', '']
      rows = []
      for g, row in enumerate(lz['rows']):
        if row['algo'] != 'slaq':
          continue
        at = diverged_at(row)
        rows.append([f'q = {row["participation"]}, {row["absent"]}'
                     + ('' if at is None else f' (diverged at k={at:,})')]
                    + [f'{n:,}: {r:.3f}' if n else '-'
                       for _, n, r in rates_by_absence(lz, g)])
      lines += table(['slaq', 'first', 'away 1', 'away 2-5', 'away 6-20',
                       'away > 20'], rows)
      lines += [''] + laziness_observations(lz, target)
  text = '\n'.join(lines) + '\n'
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  outputs.atomic_write(workdir / REPORT, text)
  return text
