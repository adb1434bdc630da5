"""The federated study's report: its numbers, tables, figures and REPORT.md.

    text = report(workdir, problems, budget, command)   # writes REPORT.md

Test accuracy, and iterations, simulated seconds and uplink bits to the
target accuracy (the first evaluation at or above it, every `eval_every`
iterations); uploads per participation; the clients the deadline cut; upload
rates against the rounds a client was away; every number computed from the
sweeps (`experiments.studies.federated.sweeps`).
"""

from __future__ import annotations

import pathlib

import numpy as np

from experiments.studies.federated.sweeps import (DEADLINE_PERCENTILE,
                                                  LOCAL_K, SWEEPS, TITLES,
                                                  FederatedError, load_sweep,
                                                  sweep_config)

REPORT = 'REPORT.md'


# ----------------------------------------------------------------------------
# The numbers of the report.

def point_summary(loaded: dict, g: int, target: float) -> dict:
  """One point's figures at the target accuracy and at the end."""
  c, row = loaded['curves'], loaded['rows'][g]
  acc, steps = c['test_accuracy'][g], c['test_accuracy_steps']
  hit = np.flatnonzero(acc >= target)
  k = int(steps[hit[0]]) if len(hit) else None
  time = np.cumsum(c['time_s'][g])
  present = c['participants'][g]
  sent = c['uploads'][g]
  dropped = c['dropped'][g] if 'dropped' in c else np.zeros_like(present)
  return {
      'algo': row['algo'], 'point': g,
      'final_accuracy': float(acc[-1]),
      'best_accuracy': float(np.nanmax(acc)),
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
      'diverged': row.get('diverged') == 'True',
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
  grads = (c['grads'][g] if 'grads' in c else c['participants'][g])
  s['target_grads'] = None if k is None else int(np.sum(grads[:k]))
  client = row.get('algo')
  s['label'] = client
  if 'local.steps' in row and row['algo'] == 'fedavg':
    s['label'] = f'fedavg K={int(float(row["local.steps"]))}'
  return s


def _local_table(summaries) -> list[str]:
  best = {p: min((s['profile_time_s'][p] for s in summaries
                  if s['profile_time_s'][p] is not None), default=None)
          for p in PROFILES}
  rows = []
  for s in summaries:
    times = []
    for p in PROFILES:
      t = fmt(s['profile_time_s'][p], 's')
      times.append(f'**{t}**' if s['profile_time_s'][p] is not None
                   and s['profile_time_s'][p] == best[p] else t)
    rows.append([s['label'], fmt(s['final_accuracy'], 'pct'),
                 fmt(s['target_iteration']), *times,
                 fmt(s['target_bits'], 'bits'), fmt(s['target_grads'])])
  return table(['preset', 'final test acc.', 'rounds to target',
                 *(f'time to target, {p}' for p in PROFILES),
                 'uplink bits to target', 'gradients to target'], rows)


def winners(summaries) -> dict[str, tuple[str, float] | None]:
  """{profile: (label, seconds)} of the fastest to the target (presets
  tied at the same seconds joined by ' = ', in the tables' order), or
  None where nobody reached it."""
  out = {}
  for p in PROFILES:
    reached = [s['profile_time_s'][p] for s in summaries
               if s['profile_time_s'][p] is not None]
    if not reached:
      out[p] = None
      continue
    best = min(reached)
    out[p] = (' = '.join(s['label'] for s in summaries
                         if s['profile_time_s'][p] == best), best)
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
                'the run; the bold one is the fastest of this table).', '']
    else:
      lines += [budget + f'FedAvg with K in {{{", ".join(map(str, LOCAL_K))}}}, '
                'one compiled program (K is data).', '']
    lines += _local_table(summaries) + ['']
  if every and 'local' in results:
    win = winners(every)
    lines += ['**First to the target on each profile** (computed over the '
              'main, local and K sweeps): ' + '; '.join(
                  f'{p}: ' + ('nobody' if w is None
                              else f'{w[0]} ({fmt(w[1], "s")})')
                  for p, w in win.items()) + '.', '']
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


def _main_table(summaries, with_dropped: bool) -> list[str]:
  best_time = min((s['target_time_s'] for s in summaries
                   if s['target_time_s'] is not None), default=None)
  rows = []
  for s in summaries:
    time = fmt(s['target_time_s'], 's')
    if best_time is not None and s['target_time_s'] == best_time:
      time = f'**{time}**'
    rows.append([s['algo'], fmt(s['final_accuracy'], 'pct'),
                 fmt(s['target_iteration']), time,
                 fmt(s['target_bits'], 'bits'),
                 fmt(s['total_time_s'], 's'), fmt(s['total_bits'], 'bits'),
                 f'{s["upload_rate"]:.2f}']
                + ([f'{s["dropped"]:,}'] if with_dropped else []))
  headers = ['preset', 'final test acc.', 'iterations to target',
             'time to target', 'uplink bits to target', 'total time',
             'total uplink bits', 'uploads per participation']
  return table(headers + (['cut by deadline'] if with_dropped else []),
                rows)


def laziness_observations(lz: dict, target: float) -> list[str]:
  """SLAQ's upload rate against q and the rounds away, in words."""
  out = []
  for absent in ('stale', 'drop'):
    by_q = {}
    for g, row in enumerate(lz['rows']):
      if row['algo'] == 'slaq' and row['absent'] == absent:
        by_q[float(row['participation'])] = (
            point_summary(lz, g, target), rates_by_absence(lz, g))
    if not by_q:
      continue
    qs = sorted(by_q, reverse=True)
    rates = ', '.join(f'{by_q[q][0]["upload_rate"]:.3f} at q = {q:g}'
                      for q in qs)
    low = by_q[qs[-1]][1]
    seen = [(label, r) for label, n, r in low[1:] if n]
    trend = (f'; at q = {qs[-1]:g} it goes from {seen[0][1]:.3f} after '
             f'{seen[0][0]} round(s) away to {seen[-1][1]:.3f} after '
             f'{seen[-1][0]}' if len(seen) > 1 else '')
    out.append(f'- SLAQ with absent = {absent}: {rates} uploads per '
               f'participation{trend}.')
  return (['**Computed from the tables above:**', ''] + out + ['']
          if out else [])


def _ratio(a, b) -> str:
  return f'{a / b:.3f}x' if a is not None and b else 'n/a'


def observations(results: dict, target: float) -> list[str]:
  """What the main and deadline sweeps say, computed from their numbers."""
  out = []
  main = results.get('main')
  if main is None:
    return out
  summaries = {r['algo']: point_summary(main, g, target)
               for g, r in enumerate(main['rows'])}
  reached = {a: s for a, s in summaries.items()
             if s['target_time_s'] is not None}
  out += ['**Computed from the tables above:**', '']
  if reached:
    fastest = min(reached, key=lambda a: reached[a]['target_time_s'])
    fewest = min(reached, key=lambda a: reached[a]['target_bits'])
    out.append(f'- Fastest to {100 * target:g}%: **{fastest}** '
               f'({fmt(reached[fastest]["target_time_s"], "s")}); fewest '
               f'uplink bits to it: **{fewest}** '
               f'({reached[fewest]["target_bits"]:.3g} bits).')
  missed = [a for a in summaries if a not in reached]
  if missed:
    out.append(f'- Not at {100 * target:g}% within the budget: '
               + ', '.join(missed) + '.')
  sgd = summaries.get('sgd')
  for lazy in ('slag', 'slaq'):
    s = summaries.get(lazy)
    if s is None or sgd is None:
      continue
    out.append(
        f'- {lazy}: {s["upload_rate"]:.2f} uploads per participation; '
        f'total uplink bits {_ratio(s["total_bits"], sgd["total_bits"])} '
        f'of sgd\'s, total simulated time '
        f'{_ratio(s["total_time_s"], sgd["total_time_s"])} of sgd\'s.')
  cut = results.get('deadline')
  if cut is not None:
    deadline = float(cut['rows'][0]['deadline_s'])
    for g, row in enumerate(cut['rows']):
      with_d = point_summary(cut, g, target)
      without = summaries.get(row['algo'])
      if without is None or not with_d['dropped']:
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
    if not any(point_summary(cut, g, target)['dropped']
               for g in range(len(cut['rows']))):
      out.append(f'- The {deadline:.4g} s deadline cut no one.')
  return out + ['']


def figure(results: dict, path: pathlib.Path, problem: str, target: float
           ) -> None:
  """Test accuracy against simulated time and against uplink bits."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
  for sweep, style in (('main', '-'), ('deadline', ':')):
    loaded = results.get(sweep)
    if loaded is None:
      continue
    c = loaded['curves']
    steps = c['test_accuracy_steps']
    for g, row in enumerate(loaded['rows']):
      time = np.cumsum(c['time_s'][g])[steps - 1]
      bits = c['cum_bits'][g][steps - 1]
      label = row['algo'] + (' (deadline)' if sweep == 'deadline' else '')
      color = f'C{g % 10}'
      axes[0].plot(time, c['test_accuracy'][g], style, color=color,
                   label=label)
      axes[1].plot(np.maximum(bits, 1), c['test_accuracy'][g], style,
                   color=color, label=label)
  for ax, xlabel in zip(axes, ('simulated time (s), mobile network',
                               'uplink bits')):
    ax.axhline(target, color='gray', lw=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel('test accuracy')
    ax.set_xscale('log')
    ax.set_ylim(max(0.0, target - 0.25), 1.0)
    ax.grid(alpha=0.3)
  axes[1].legend(fontsize=7, ncol=2)
  config = results['main']['config']
  fig.suptitle(f'{TITLES[problem]}: M = {config["num_workers"]}, '
               f'{100 * config["participation"]:g}% participation')
  outputs.save_figure(fig, path)
  plt.close(fig)


def report(workdir: pathlib.Path, problems, budget: str, command: str,
           mlp_iters: int | None = None) -> str:
  """Writes WORKDIR/REPORT.md from the sweeps; returns its text."""
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
    if (workdir / problem / 'mcmahan').exists():
      from experiments.studies.federated import mcmahan  # pylint: disable=g-import-not-at-top
      lines += mcmahan.section(workdir / problem / 'mcmahan', problem)
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
      rows = []
      for g, row in enumerate(sb['rows']):
        s_ = point_summary(sb, g, target)
        rows.append([row['algo'], row['bits'], row['absent'],
                     fmt(s_['final_accuracy'], 'pct'),
                     f'{float(c["final_loss"][g]):.4g}',
                     f'{s_["upload_rate"]:.3f}',
                     fmt(s_['target_time_s'], 's')])
      lines += table(['preset', 'b', 'absent', 'final test acc.',
                       'final loss f', 'uploads per participation',
                       'time to target'], rows) + ['']
    if 'laziness' in results:
      lz = results['laziness']
      lines += ['### Laziness and participation (sgd, slaq)', '']
      rows = []
      for g, row in enumerate(lz['rows']):
        s = point_summary(lz, g, target)
        rows.append([row['algo'], row['participation'], row['absent'],
                     fmt(s['final_accuracy'], 'pct'),
                     fmt(s['target_iteration']),
                     fmt(s['target_time_s'], 's'),
                     fmt(s['target_bits'], 'bits'),
                     f'{s["upload_rate"]:.3f}'])
      lines += table(['preset', 'q', 'absent', 'final test acc.',
                       'iterations to target', 'time to target',
                       'uplink bits to target', 'uploads per participation'],
                      rows)
      lines += ['', 'SLAQ\'s upload rate by how many rounds the client had '
                'been away (participations, rate):', '']
      rows = []
      for g, row in enumerate(lz['rows']):
        if row['algo'] != 'slaq':
          continue
        rows.append([f'q = {row["participation"]}, {row["absent"]}']
                    + [f'{n:,}: {r:.3f}' if n else '-'
                       for _, n, r in rates_by_absence(lz, g)])
      lines += table(['slaq', 'first', 'away 1', 'away 2-5', 'away 6-20',
                       'away > 20'], rows)
      lines += [''] + laziness_observations(lz, target)
  text = '\n'.join(lines) + '\n'
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  outputs.atomic_write(workdir / REPORT, text)
  return text
