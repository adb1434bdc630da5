"""The paper's claims, checked against an experiment's results.

    for c in claims(experiment, result):   # result: paper_results.load_results
      print(c['claim'], verdict(c['holds']), c['brief'], c['evidence'])

Definitions (stated in the report): "far fewer" = at most FAR_FEWER times
the other algorithm's count; "similar accuracy" = within ACCURACY_POINTS
percentage points of the unquantized, non-lazy baseline; "linear
convergence" = a least-squares line through log10 residual against k with
R^2 >= LINEAR_R2 and negative slope.

A row that diverged (`metrics.row_divergence`: the one rule, `laq_jax.metrics.
diverged_at`, marked on the rows by `paper_results`) is named with the
iteration, never compared: a claim of the diverged algorithm itself does not
hold; a comparison with it (or with a diverged baseline's accuracy) is not
tested, with the reason, and no ratio, gap or target iteration of a diverged
row is used (not even a target reached before it diverged).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from configs import paper
from experiments.run.markdown import fmt
from experiments.studies.paper.paper_results import curve
from laq_jax import metrics

# "Far fewer": at most this fraction of the other algorithm's count.
FAR_FEWER = 0.5
# "Similar accuracy": within this many percentage points of the baseline.
ACCURACY_POINTS = 1.0
# Linear convergence: a straight line fits log10(residual) against k with at
# least this R^2 and a negative slope.
LINEAR_R2 = 0.9


def linear_fit(residual_K, target: float) -> dict[str, float] | None:
  """Least-squares line through log10(residual) against k.

  Fitted over k = 0 .. the first k at which the residual reaches `target`
  (the whole run when it never does), positive residuals only.

  Returns:
    {'slope': per-iteration log10 decrease, 'rate': 10**slope (the
    contraction factor per iteration), 'r2': R^2, 'points': points fitted,
    'last_k': the last k fitted}, or None with fewer than 3 points.
  """
  residual = np.asarray(residual_K, np.float64)
  hits = np.flatnonzero(residual <= target)
  end = int(hits[0]) + 1 if hits.size else residual.size
  k = np.arange(end, dtype=np.float64)
  y = residual[:end]
  ok = np.isfinite(y) & (y > 0)
  if ok.sum() < 3:
    return None
  k, y = k[ok], np.log10(y[ok])
  slope, intercept = np.polyfit(k, y, 1)
  predicted = slope * k + intercept
  total = np.sum((y - y.mean()) ** 2)
  r2 = 1.0 - np.sum((y - predicted) ** 2) / total if total > 0 else 0.0
  return {'slope': float(slope), 'rate': float(10 ** slope), 'r2': float(r2),
          'points': int(k.size), 'last_k': int(k[-1])}


def verdict(holds: bool | None) -> str:
  return {True: 'holds', False: 'does not hold', None: 'not tested'}[holds]


def ran_away(row: dict[str, Any]) -> bool:
  """Diverged (`metrics.row_diverged`, the one rule) or ended above the loss
  it started from: what the LASG claim "does not run away" asks (a point above
  its start but under 10x f(theta^0) is not diverged, still ranked)."""
  final, start = row.get('final_loss'), row.get('initial_loss')
  return metrics.row_diverged(row) or (start is not None and final > start)


def diverged_short(row: dict[str, Any]) -> str:
  """'diverged at k=1011' (the summary's few words), or ''."""
  note = metrics.row_divergence(row)
  return note.split(' (')[0] if note else ''


def not_compared(algo: str, row: dict[str, Any]) -> str:
  """'qgd diverged at k=180 (…): not compared'."""
  return f'{algo} {metrics.row_divergence(row)}: not compared'


def _fewer(ours: float, ours_name: str, theirs: float | None,
           theirs_name: str, theirs_total: float | None
           ) -> tuple[bool | None, str]:
  """Whether `ours` <= FAR_FEWER * `theirs`, and the numbers, in words.

  `theirs` None means the other algorithm never reached the target;
  `theirs_total` is what it spent in the whole run (then a lower bound).
  """
  if theirs is None:
    # The other algorithm spent `theirs_total` without reaching the target;
    # the claim holds if even that is far more than ours.
    if theirs_total is not None and ours <= FAR_FEWER * theirs_total:
      return True, (f'{ours_name} {fmt(ours)} vs {theirs_name} more than '
                    f'{fmt(theirs_total)} ({theirs_name} never reached the '
                    'target)')
    return None, f'{theirs_name} never reached the target'
  ratio = ours / theirs if theirs else math.inf
  return ratio <= FAR_FEWER, (f'{ours_name} {fmt(ours)} vs {theirs_name} '
                              f'{fmt(theirs)} (ratio {ratio:.3f})')


def _binding(ours: float, ours_name: str, others: dict[str, Any]) -> str:
  """The claim's deciding comparison in a few words: `ours` against the
  other algorithm it is closest to (the largest ratio)."""
  known = {o: v for o, v in others.items() if v}
  if not known:
    return f'{ours_name} {fmt(ours)}'
  other = max(known, key=lambda o: ours / known[o])
  return (f'{ours_name} {fmt(ours)} = {ours / known[other]:.3f}x {other}\'s '
          f'{fmt(known[other])}')


def uploads_after_start(result: dict[str, Any], algo: str
                        ) -> tuple[int, list[int]] | None:
  """Uploads after the k = 0 initialization, and the steps that had any.

  Returns:
    (count, sorted steps k >= 1 with at least one upload), or None when
    curves.npz holds no per-worker uploads.
  """
  uploads = result['curves'].get('uploads')
  if uploads is None:
    return None
  sent_TxM = uploads[list(result['curves']['algo']).index(algo)][1:]
  return int(sent_TxM.sum()), (np.flatnonzero(sent_TxM.any(axis=1)) + 1
                               ).tolist()


def upload_note(result: dict[str, Any], algo: str) -> str:
  """How often `algo` uploaded after k = 0, and whether only when forced."""
  after = uploads_after_start(result, algo)
  if after is None:
    return ''
  count, steps = after
  where = (f' (at k = {", ".join(map(str, steps))})' if len(steps) <= 8
           else f' (at {len(steps):,} distinct steps)')
  note = f'{algo} uploaded {count:,} times after k = 0{where if count else ""}'
  # A worker that skips tbar times in a row must upload at the next step.
  forced = result['config']['max_staleness'] + 1
  if count and all(k % forced == 0 for k in steps):
    note += (f', only at steps where the staleness bound tbar = '
             f'{forced - 1} forces an upload')
  return note


def _why_behind(result: dict[str, Any], algo: str) -> str:
  """Computed reasons an algorithm fell behind: uploads, loss growth."""
  notes = [upload_note(result, algo)]
  c = result['curves']
  g = list(c['algo']).index(algo)
  first, last = float(c['loss'][g][0]), float(c['final_loss'][g])
  if not last <= first:
    notes.append(f'its loss rose from f(θ^0) = {first:.4g} to '
                 f'f(θ^T) = {last:.4g}')
  return '; '.join(n for n in notes if n)


def _combine(verdicts) -> bool | None:
  """False if any is False, else None if any is None, else True."""
  return False if False in verdicts else None if None in verdicts else True


def accuracy_gap(rows: dict[str, dict], algo: str, base: str
                 ) -> float | None:
  """`algo`'s final test accuracy minus `base`'s, in percentage points; None
  when either has none (a run that diverged is evaluated to no accuracy) or
  either diverged (`divergence`; results from before the rule kept an
  accuracy): such a row is named, never compared."""
  if metrics.row_divergence(rows[algo]) or metrics.row_divergence(rows[base]):
    return None
  ours = rows[algo].get('final_test_accuracy')
  theirs = rows[base].get('final_test_accuracy')
  if ours is None or theirs is None or not (
      math.isfinite(ours) and math.isfinite(theirs)):
    return None
  return 100 * (ours - theirs)


NO_ACCURACY = 'no test accuracy (diverged)'


def pp(gap: float | None) -> str:
  """A gap in percentage points, or why there is none."""
  return NO_ACCURACY if gap is None else f'{gap:+.2f} pp'


def at_gap(gap: float | None, whose: str) -> str:
  """', at -0.50 pp of sgd's accuracy', or why there is no gap."""
  return (f', with {NO_ACCURACY} to compare' if gap is None
          else f', at {gap:+.2f} pp of {whose} accuracy')


def _similar(gap: float | None) -> bool:
  return gap is not None and abs(gap) <= ACCURACY_POINTS


def _compare(ours: float, lazy: str, rows: dict[str, dict], others,
             column: str, what: str, at_target: bool
             ) -> tuple[list[bool | None], list[str], str, str]:
  """`ours` against each of `others` that did not diverge (`_fewer`); a
  diverged one is not compared (None, named).

  Returns:
    (verdicts, evidence, the deciding comparison in a few words
    (`_binding`), '; X diverged at k=…, not compared' per diverged one).
  """
  verdicts, evidence = [], []
  compared = {}
  for other in others:
    if metrics.row_divergence(rows[other]):
      verdicts.append(None)
      evidence.append(not_compared(other, rows[other]))
      continue
    theirs_total = rows[other]['total_' + what]
    theirs = rows[other][column] if at_target else theirs_total
    holds, text = _fewer(ours, lazy, theirs, other,
                         theirs_total if at_target else None)
    verdicts.append(holds)
    evidence.append(text)
    # (an algorithm that never reached the target: its whole run's count)
    compared[other] = (theirs or theirs_total) if at_target else theirs
  skipped = ''.join(f'; {o} {diverged_short(rows[o])}, not compared'
                    for o in others if metrics.row_divergence(rows[o]))
  return verdicts, evidence, _binding(ours, lazy, compared), skipped


def budget_iterations(rows: dict[str, dict]) -> int:
  """The iterations the experiment ran (a diverged row's count stops where
  it diverged: the others' budget)."""
  return max(int(r['iterations']) for r in rows.values())


def claims(experiment: paper.Experiment, result: dict[str, Any]
           ) -> list[dict[str, Any]]:
  """The paper's claims for one experiment, checked against its results.

  Convex full-batch: at the target residual (exact definition), the lazy
  algorithm spends far fewer uploads than `uploads_vs` and far fewer bits
  than `bits_vs`, and it and the baseline converge linearly. The other
  experiments compare fixed budgets: totals over the same iterations, at
  similar accuracy. Every experiment: similar test accuracy. A diverged row
  (`divergence`) is named and left out of every comparison: a claim of the
  lazy algorithm (or of a linear fit) that diverged does not hold, a
  comparison with a diverged one is not tested.

  Returns:
    [{'claim': words, 'holds': True / False / None, 'evidence': numbers,
      'brief': the deciding numbers in a few words (the summary's)}].
  """
  rows = result['rows']
  lazy, base = experiment.lazy, experiment.baseline
  out = []
  target = rows[lazy]['target_residual']
  lazy_away = metrics.row_divergence(rows[lazy])
  convex_full = experiment.convex and not experiment.stochastic
  if convex_full:
    for what, column, others in (
        ('uploads', 'target_uploads', experiment.uploads_vs),
        ('bits', 'target_bits', experiment.bits_vs)):
      if lazy_away:
        # (a target it reached before it diverged does not count)
        verdicts = [False]
        evidence = [not_compared(lazy, rows[lazy])]
        brief = f'{lazy} {diverged_short(rows[lazy])}'
      elif rows[lazy][column] is None:
        verdicts = [False]
        evidence = [f'{lazy} never reached the target within '
                    f'{rows[lazy]["iterations"]:,} iterations (final '
                    f'residual {fmt(rows[lazy]["final_residual"], "sci")})']
        brief = evidence[0]
      else:
        verdicts, evidence, brief, skipped = _compare(
            rows[lazy][column], lazy, rows, others, column, what, True)
        brief += skipped
      out.append({
          'claim': (f'{lazy.upper()} reaches residual {target:g} with far '
                    f'fewer {what} (at most {FAR_FEWER:g}x) than '
                    f'{", ".join(o.upper() for o in others)}'),
          'holds': _combine(verdicts), 'evidence': '; '.join(evidence),
          'brief': brief})
    for algo in (lazy, base):
      away = metrics.row_divergence(rows[algo])
      fit = (None if away else
             linear_fit(curve(result, algo, 'residual').value, target))
      if away:  # no fit through a run that diverged
        holds, text = False, f'{algo} {away}'
        brief = f'{algo} {diverged_short(rows[algo])}'
      elif fit is None:
        holds, text = None, 'too few positive residuals to fit'
        brief = text
      else:
        brief = f'R^2 = {fit["r2"]:.3f}, slope {fit["slope"]:.2e}/iteration'
        holds = fit['slope'] < 0 and fit['r2'] >= LINEAR_R2
        text = (f'log10 residual vs k over k = 0..{fit["last_k"]}: slope '
                f'{fit["slope"]:.3e}/iteration, rate {fit["rate"]:.5f} per '
                f'iteration, R^2 = {fit["r2"]:.3f}')
      out.append({'claim': (f'{algo.upper()} converges linearly (straight '
                            'line in log residual vs k, R^2 >= '
                            f'{LINEAR_R2:g})'),
                  'holds': holds, 'evidence': text, 'brief': brief})
  else:
    # Fixed budget: totals over the whole run, at similar accuracy.
    gap = accuracy_gap(rows, lazy, base)
    for what, others in (('uploads', experiment.uploads_vs),
                         ('bits', experiment.bits_vs)):
      if lazy_away:
        verdicts, evidence = [False], [not_compared(lazy, rows[lazy])]
        brief = f'{lazy} {diverged_short(rows[lazy])}'
      else:
        verdicts, evidence, brief, skipped = _compare(
            rows[lazy]['total_' + what], lazy, rows, others, None, what,
            False)
        if metrics.row_divergence(rows[base]):
          verdicts.append(None)
          evidence.append(f'similar accuracy not tested: '
                          f'{not_compared(base, rows[base])}')
          if base not in others:
            skipped += f'; {base} {diverged_short(rows[base])}, not compared'
        else:
          brief += at_gap(gap, f'{base}\'s')
          if not _similar(gap):
            verdicts.append(False)
            evidence.append(f'but not at similar accuracy: {lazy} is '
                            f'{pp(gap)} from {base}')
        brief += skipped
      out.append({
          'claim': (f'{lazy.upper()} uses far fewer {what} (at most '
                    f'{FAR_FEWER:g}x) than '
                    f'{", ".join(o.upper() for o in others)} over the same '
                    f'{budget_iterations(rows):,} iterations, at similar '
                    'accuracy'),
          'holds': _combine(verdicts), 'evidence': '; '.join(evidence),
          'brief': brief})
  out.append(_accuracy_claim(experiment, result))
  return out


def _accuracy_claim(experiment: paper.Experiment, result: dict[str, Any]
                    ) -> dict[str, Any]:
  """Every algorithm within ACCURACY_POINTS of the baseline's accuracy: not
  tested when the baseline diverged; an algorithm that diverged is not
  within (named, not ranked among the gaps)."""
  rows = result['rows']
  base = experiment.baseline
  claim = (f'similar test accuracy: every algorithm within '
           f'{ACCURACY_POINTS:g} percentage point of {base.upper()}')
  if metrics.row_divergence(rows[base]):
    return {'claim': claim, 'holds': None,
            'evidence': not_compared(base, rows[base]),
            'brief': f'{base} {diverged_short(rows[base])}: no baseline'}
  reference = rows[base]['final_test_accuracy']
  others = [a for a in experiment.algos if a != base]
  away = [a for a in others if metrics.row_divergence(rows[a])]
  gaps = {a: accuracy_gap(rows, a, base) for a in others if a not in away}
  far = [a for a, g in gaps.items() if not _similar(g)]
  why = [_why_behind(result, a) for a in far]
  briefs = [f'{a} {diverged_short(rows[a])}' for a in away]
  if gaps:
    worst = max(gaps, key=lambda a: math.inf if gaps[a] is None
                else abs(gaps[a]))
    brief = f'largest gap: {worst} {pp(gaps[worst])}'
    c = result['curves']
    g = list(c['algo']).index(worst)
    first, last = float(c['loss'][g][0]), float(c['final_loss'][g])
    if not last <= first:
      brief += f' (its loss rose from {first:.4g} to {last:.4g})'
    briefs.insert(0, brief)
  return {
      'claim': claim,
      'holds': not far and not away,
      'evidence': f'{base} {fmt(reference, "pct")}; ' + '; '.join(
          [f'{a} {fmt(rows[a]["final_test_accuracy"], "pct")} ({pp(g)})'
           for a, g in gaps.items()]
          + [f'{a} {metrics.row_divergence(rows[a])}' for a in away])
      + ''.join(f'; {w}' for w in why if w),
      'brief': '; '.join(briefs)}


# LASG's and CADA's claims, beside the minibatch network (their sweep,
# paper_results.lasg_sweep): the follow-ups against their own baselines.
LASG_PLAIN = ('lasg_wk2', 'lasg_wk1', 'lasg_ps')
CADA_BASELINE = 'cada_adam'


def lasg_claims(sweep: dict[str, Any]) -> list[dict[str, Any]]:
  """Whether LASG survives where SLAQ (Algorithm 1) runs away, and each
  LASG / CADA preset's uploads against its baseline (SGD; CADA's Adam) at
  similar accuracy, from the sweep's rows (same dicts as `claims`). A
  preset that diverged (`divergence`) does not hold its claims and is named
  with the iteration; against a diverged baseline nothing is tested."""
  by_algo = {r['algo']: r for r in sweep['rows']}
  sgd, slaq = by_algo.get('sgd'), by_algo.get('slaq')
  if sgd is None:
    return []
  acc = lambda a: (diverged_short(by_algo[a]) or
                   fmt(by_algo[a]['final_test_accuracy'], 'pct'))
  out = []
  plain = [a for a in LASG_PLAIN if a in by_algo]
  if plain:
    held = {a: not ran_away(by_algo[a])
            and _similar(accuracy_gap(by_algo, a, 'sgd')) for a in plain}
    where = ('' if slaq is None else
             ', where SLAQ (Algorithm 1) runs away' if ran_away(slaq)
             else ' (SLAQ, Algorithm 1, did not run away here either)')
    brief = '; '.join(
        [f'{a} {acc(a)}' + ('' if held[a] else ' (not)') for a in plain]
        + [f'sgd {acc("sgd")}']
        + ([f'slaq {acc("slaq")}' + (
            '' if metrics.row_divergence(slaq) else
            f', final loss {fmt(slaq["final_loss"], "sci")} from '
            f'{fmt(slaq["initial_loss"], "sci")}')] if slaq else []))
    holds = all(held.values())
    if metrics.row_divergence(sgd):  # no accuracy to stay within a point of
      holds, brief = None, not_compared('sgd', sgd)
    out.append({
        'claim': (f'LASG ({", ".join(a.upper() for a in plain)} at its '
                  f'code\'s settings) stays within {ACCURACY_POINTS:g} '
                  'point of SGD\'s accuracy and does not run away' + where),
        'holds': holds, 'brief': brief})
  pairs = [(a, 'sgd') for a in by_algo if a.startswith('lasg')]
  if CADA_BASELINE in by_algo:
    pairs += [(a, CADA_BASELINE) for a in by_algo
              if a.startswith('cada') and a != CADA_BASELINE]
  for a, base in pairs:
    claim = (f'{a.upper()} uses far fewer uploads (at most '
             f'{FAR_FEWER:g}x) than {base.upper()} over the same '
             f'{budget_iterations(by_algo):,} iterations, at similar '
             'accuracy')
    if metrics.row_divergence(by_algo[a]):
      out.append({'claim': claim, 'holds': False,
                  'brief': not_compared(a, by_algo[a])})
      continue
    if metrics.row_divergence(by_algo[base]):
      out.append({'claim': claim, 'holds': None,
                  'brief': not_compared(base, by_algo[base])})
      continue
    ours, theirs = by_algo[a]['total_uploads'], by_algo[base]['total_uploads']
    ratio = ours / theirs if theirs else math.inf
    g = accuracy_gap(by_algo, a, base)
    away = ran_away(by_algo[a])
    brief = (f'{a} {fmt(ours)} = {ratio:.3f}x {base}\'s {fmt(theirs)}'
             + at_gap(g, 'its')
             + (' (ran away: final loss '
                f'{fmt(by_algo[a]["final_loss"], "sci")})' if away else ''))
    out.append({'claim': claim,
                'holds': ratio <= FAR_FEWER and _similar(g) and not away,
                'brief': brief})
  for c in out:
    c['evidence'] = c['brief']
  return out
