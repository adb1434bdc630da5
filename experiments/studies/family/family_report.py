"""The family report: every preset side by side, and which beat LAQ where.

    text = report(studies, workdir, quick)    # writes WORKDIR/REPORT.md

A study is one problem (logistic regression or the network) with its two
sweeps (the full-batch presets and the minibatch ones,
`experiments.run.grid`). Every number is read from their results.csv; the
verdicts are computed from those numbers, not written by hand. Where each
method wins in simulated seconds (every preset on every network profile, time
to target against the link bandwidth and the crossovers) is
`experiments.studies.family.family_time`, replayed from the sweeps'
curves.npz.

A point that diverged (the one rule, `laq_jax.metrics.diverged_at`: a
logged loss NaN/inf or above 10x f(theta^0), also after it reached its
target; recomputed from each sweep's curves.npz by
`outputs.mark_divergence`) is named with its iteration ("diverged at
k=..."), left out of every ranking ("beat LAQ", the Pareto front, the times
to target, the fastest, the crossovers) and drawn nowhere; the report is
written whichever points diverged, the reference (LAQ, SLAQ) or all of
them included.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import NamedTuple, Sequence

import numpy as np

from configs import compressors as compressors_config
from experiments.run import outputs
from experiments.run.markdown import fmt, table
from experiments.studies.family import family_time
from laq_jax import hyper as hyper_lib
from laq_jax import metrics
from laq_jax import plotting
from laq_jax import sweep_metrics

REPORT = 'REPORT.md'
FIGURE_DPI = 90


class Study(NamedTuple):
  """One problem, two sweeps.

  Attributes:
    name: the folder and the figure's prefix.
    title: the report's heading.
    sweeps: {kind: (sweep config argument, subfolder)} for 'full' and
      'minibatch'.
    convex: compare at the target residual (else at a fixed budget).
  """
  name: str
  title: str
  sweeps: dict[str, tuple[str, str]]
  convex: bool


def load_rows(workdir: pathlib.Path, study: Study) -> dict[str, dict] | None:
  """{kind: {algo: results.csv row}} of a study, None when a sweep is
  missing (not run, or interrupted). Each row's `diverged` and
  `diverged_at` are the one rule's, recomputed from curves.npz
  (`outputs.mark_divergence`), and `initial_loss` is its f(theta^0)."""
  out = {}
  for kind, (_, folder) in study.sweeps.items():
    path = workdir / study.name / folder
    if not (path / 'sweep.json').is_file():
      return None
    rows = [{k: outputs.parse_cell(v) for k, v in row.items()}
            for row in outputs.read_results(path / 'results.csv')]
    if all(r.get('point') is not None for r in rows):
      rows.sort(key=lambda r: r['point'])  # curves.npz's order
    outputs.mark_divergence(rows, path)
    # Each point's first logged loss (where it started).
    with np.load(path / 'curves.npz') as curves:
      for row, loss_T in zip(rows, curves['loss']):
        finite = loss_T[np.isfinite(loss_T)]
        row['initial_loss'] = float(finite[0]) if finite.size else None
    out[kind] = {r['algo']: r for r in rows}
  return out


def diverged_cell(row: dict) -> str:
  """'at k=12' (or 'yes' without the iteration) for a diverged point's
  table cell, '' otherwise."""
  if not metrics.row_diverged(row):
    return ''
  at = metrics.row_diverged_at(row)
  return f'at k={at}' if at is not None else 'yes'


def named(rows: dict[str, dict]) -> str:
  """'**slaq** (diverged at k=12 (...)); **sign** (...)' of the diverged
  rows of {algo: row}."""
  return '; '.join(f'**{a}** ({metrics.row_divergence(r)})'
                   for a, r in rows.items() if metrics.row_diverged(r))


def _lower(row: dict, convex: bool) -> float:
  """The quality a row is judged by (lower is better)."""
  value = row['final_residual'] if convex else row['final_loss']
  return math.inf if value is None else float(value)


def beats_laq(rows: dict[str, dict], convex: bool, lazy: str
              ) -> list[tuple[str, str]]:
  """Presets that do better than LAQ (`lazy`), each with the numbers.

  Convex full batch: reached the target residual with fewer uplink bits
  than `lazy` did. Otherwise (a fixed budget): Pareto-better on (total
  uplink bits, final quality): no more bits and a lower final residual or
  loss, or fewer bits and no higher one. A diverged point (`diverged`)
  beats nobody, and a diverged `lazy` is beaten by nobody: [].
  """
  ours = rows.get(lazy)
  if ours is None or metrics.row_diverged(ours):
    return []
  out = []
  for algo, row in rows.items():
    if algo == lazy or metrics.row_diverged(row):
      continue
    if convex and ours['target_bits'] is not None:
      if row['target_bits'] is not None and (
          row['target_bits'] < ours['target_bits']):
        out.append((algo, f'{fmt(row["target_bits"])} uplink bits to the '
                    f'target vs {fmt(ours["target_bits"])} for {lazy}'))
      continue
    bits, quality = row['total_bits'], _lower(row, convex)
    our_bits, our_quality = ours['total_bits'], _lower(ours, convex)
    if (bits <= our_bits and quality < our_quality) or (
        bits < our_bits and quality <= our_quality):
      what = 'residual' if convex else 'loss'
      out.append((algo, f'{fmt(bits)} uplink bits and final {what} '
                  f'{fmt(quality, "sci")} vs {fmt(our_bits)} and '
                  f'{fmt(our_quality, "sci")} for {lazy}'))
  return out


COLUMNS = (('uploads', 'total_uploads', 'int'),
           ('uplink bits', 'total_bits', 'sci'),
           ('downlink bits', 'total_bits_down', 'sci'),
           ('test accuracy', 'final_test_accuracy', 'pct'))
TARGET_COLUMNS = (('final residual', 'final_residual', 'sci'),
                  ('iterations to target', 'target_iteration', 'int'),
                  ('uplink bits to target', 'target_bits', 'sci'),
                  ('downlink bits to target', 'target_bits_down', 'sci'))
BUDGET_COLUMNS = (('final loss', 'final_loss', 'sci'),
                  ('final residual', 'final_residual', 'sci'))


def _table(rows: dict[str, dict], columns, convex: bool) -> str:
  """Every preset's row; a diverged point's iteration in the last column
  and no time to target (it is counted nowhere, also where it reached the
  target before diverging)."""
  extra = TARGET_COLUMNS if convex else BUDGET_COLUMNS[:1]
  if not convex and all(r['final_residual'] is not None
                        for r in rows.values() if not metrics.row_diverged(r)):
    extra = BUDGET_COLUMNS
  targets = {k for _, k, _ in TARGET_COLUMNS[1:]}
  header = ['preset'] + [h for h, _, _ in columns + extra] + ['diverged']
  body = [[a] + [fmt(None if metrics.row_diverged(r) and k in targets
                     else r.get(k), kind) for _, k, kind in columns + extra]
          + [diverged_cell(r)]
          for a, r in rows.items()]
  return table(header, body, 'l' + 'r' * (len(header) - 2) + 'l')


def tradeoff(study: Study, rows: dict[str, dict]):
  """The Figure of `figure`: the points that did not diverge (they alone
  set the axes), the diverged ones named in a corner."""
  everything = {a: r for kind_rows in rows.values()
                for a, r in kind_rows.items()}
  labels = [a for a, r in everything.items() if not metrics.row_diverged(r)]
  cost = [everything[a]['total_bits'] + everything[a]['total_bits_down']
          for a in labels]
  convex = _convex(everything)
  value = [_lower(everything[a], convex) for a in labels]
  what = 'final residual f - f*' if convex else 'final loss f'
  fig = plotting.tradeoff_figure(
      labels, cost, value, x_label='total bits, uplink + downlink',
      y_label=what, title=f'{study.title}: every preset')
  away = [f'{a} ({diverged_cell(r)})' for a, r in everything.items()
          if metrics.row_diverged(r)]
  if away:
    fig.axes[0].text(
        0.01, 0.01, 'diverged, not drawn: ' + ', '.join(away),
        transform=fig.axes[0].transAxes, fontsize=7, color='tab:red',
        va='bottom', wrap=True)
  return fig


def figure(study: Study, rows: dict[str, dict], workdir: pathlib.Path
           ) -> str:
  """Final quality against total bits (up + down) of every preset that did
  not diverge, the Pareto front marked, the diverged ones named; returns the
  path relative to `workdir`."""
  convex = _convex({a: r for kind_rows in rows.values()
                    for a, r in kind_rows.items()})
  path = f'{study.name}/bits_vs_{"residual" if convex else "loss"}.png'
  outputs.save_figure(tradeoff(study, rows), workdir / path, dpi=FIGURE_DPI)
  return path


def _convex(rows: dict[str, dict]) -> bool:
  """Whether every point that did not diverge has a final residual (f*
  known): then they are compared by it, else by the final loss."""
  kept = [r for r in rows.values() if not metrics.row_diverged(r)]
  return bool(kept) and all(r['final_residual'] is not None for r in kept)


def _settings_section() -> list[str]:
  rows = []
  from configs import sweep_compressors  # pylint: disable=g-import-not-at-top
  for name in sweep_compressors.FAMILY:
    a = hyper_lib.ALGORITHMS[name]
    kind = 'minibatch' if a.stochastic else 'full batch'
    parts = [a.compressor, 'innovation' if a.innovation else 'gradient',
             a.trigger]
    if a.error_feedback:
      parts.append('error feedback')
    if a.downlink:
      parts.append('quantized broadcast (b bits)')
    rows.append([name, kind, ', '.join(parts), a.reference])
  full, mini = compressors_config.FULL_BATCH, compressors_config.MINIBATCH
  net = compressors_config.NETWORK_MINIBATCH
  return [
      '## Settings', '',
      'Each preset runs at the settings of its kind of gradient '
      '(`configs/compressors.py`, the published ones where there are any): '
      f'full batch alpha = {full["step_size"]}, b = {full["bits"]} '
      '(b = 8 on the network), D = 10, xi = 0.8, c_e = '
      f'{full["err_weight"]}, tbar = 100 (the LAQ paper\'s); minibatch '
      f'{mini["batch_size"]} samples per worker, alpha = '
      f'{mini["step_size"]}, b = {mini["bits"]}, c_e = '
      f'{mini["err_weight"]}, c_0 = {mini["threshold_offset"]} (the '
      'authors\' SLAQ settings, NeurIPS SLAQ.py) on logistic regression and '
      f'on the network their network script\'s (SGD/lasterrsgdDNN.py): '
      f'alpha = {net["step_size"]}, b = {net["bits"]}, xi = {net["xi"]:g} '
      f'with xi_schedule {net["xi_schedule"]!r}, c_e = {net["err_weight"]:g}, '
      f'c_0 = {net["threshold_offset"]:g}, and alpha = '
      f'{compressors_config.NETWORK_SIGN_STEP} for '
      f'{" and ".join(compressors_config.SIGN_PRESETS)} (as that script runs '
      'its sign and ternary methods); QSGD s = 10,000 levels and SSGD p = 0.5 '
      '(the authors\' script), top-k k = 1% of p, CLAG zeta = 20 (its '
      'threshold then equals LAG\'s xi / (alpha^2 M^2) for one history '
      'term; `clag` tests ||g - Qhat||^2 against zeta times the last '
      'parameter step, the suite\'s proxy: the 3PC paper\'s CLAG tests it '
      'against the worker\'s own gradient change zeta ||g - y||^2, which '
      'the preset `tpc_clag` runs, docs/algorithm.md, "The trigger"), '
      'two-way LAQ\'s broadcast at b bits. Bits are exact '
      '(docs/algorithm.md): uplink per upload, downlink per worker per step '
      '(32 p for a full-precision broadcast).', '',
      table(['preset', 'gradient', 'parts', 'reference'], rows, 'llll'), '']


def pareto_presets(rows: dict[str, dict], convex: bool) -> list[str]:
  """The presets on the Pareto front of (total bits, final quality); a
  diverged one is never on it."""
  labels = [a for a, r in rows.items() if not metrics.row_diverged(r)]
  cost = [rows[a]['total_bits'] + rows[a]['total_bits_down'] for a in labels]
  value = [_lower(rows[a], convex) for a in labels]
  return [labels[i] for i in sweep_metrics.pareto_front(cost, value,
                                                  maximize=False)]


def study_section(study: Study, rows: dict[str, dict],
                  infos: dict[str, dict], figure_path: str) -> list[str]:
  lines = [f'## {study.title}', '']
  for kind, label, lazy in (('full', 'Full batch', 'laq'),
                            ('minibatch', 'Minibatch', 'slaq')):
    info = infos[kind]
    convex = study.convex and kind == 'full'
    images = (f', {info["num_train"]:,} training images'
              if 'num_train' in info else '')
    lines += [f'### {label}: {info["num_points"]} presets, '
              f'{info["num_iters"]:,} iterations, {info["precision"]}, '
              f'{info["dataset"]}{images} ({info["test_set"]})', '']
    if convex:
      lines += [f'At the target residual f(θ^k) − f* ≤ '
                f'{info["target_residual"]:g} (f* = '
                f'{info["fstar"][0]["fstar"]:.12g}).', '']
    lines += [_table(rows[kind], COLUMNS, convex), '']
    wall = [f'Wall time {info["wall_time_s"]:.0f} s, '
            f'{info["programs_compiled"]} program(s) compiled.', '']
    others = named({a: r for a, r in rows[kind].items() if a != lazy})
    if others:
      lines += ['Diverged, so ranked nowhere (not in "beat", the Pareto '
                'front, the times to target or the crossovers): '
                + others + '.', '']
    ours = rows[kind].get(lazy)
    if ours is None:
      lines += [f'No {lazy.upper()} in this sweep: nothing is compared '
                'with it.', ''] + wall
      continue
    if metrics.row_diverged(ours):
      seen = (f'; final loss {fmt(ours["final_loss"], "sci")} against the '
              f'{fmt(ours.get("initial_loss"), "sci")} it started from, test '
              f'accuracy {fmt(ours.get("final_test_accuracy"), "pct")}'
              if ours.get('final_loss') is not None else '')
      lines += [f'{lazy.upper()} {metrics.row_divergence(ours)}{seen}. A '
                'run that diverged is no benchmark: nothing is compared with '
                'it.',
                ''] + wall
      continue
    better = beats_laq(rows[kind], convex, lazy)
    if convex and ours['target_bits'] is not None:
      rule = (f'reached the target with fewer uplink bits than '
              f'{lazy.upper()}')
    else:
      rule = (f'used no more uplink bits than {lazy.upper()} for a lower '
              f'final {"residual" if convex else "loss"}, or fewer for one '
              'no higher')
    if better:
      lines += [f'Beat {lazy.upper()} here ({rule}): ' + '; '.join(
          f'**{a}** ({why})' for a, why in better) + '.', '']
    else:
      lines += [f'None beat {lazy.upper()} here ({rule}).', '']
    lines += wall
  everything = {a: r for kind_rows in rows.values()
                for a, r in kind_rows.items()}
  convex = _convex(everything)
  away = [f'{a} ({diverged_cell(r)})' for a, r in everything.items()
          if metrics.row_diverged(r)]
  front = pareto_presets(everything, convex)
  left_out = (' Left out, as they diverged: ' + ', '.join(away) + '.'
              if away else '')
  if front:
    lines += [f'On the Pareto front of total bits (up + down) against the '
              f'final {"residual" if convex else "loss"}, over both kinds: '
              + ', '.join(f'**{a}**' for a in front) + '.' + left_out, '']
  else:
    lines += ['No Pareto front: every preset diverged.' + left_out, '']
  lines += [f'![{study.name}: bits against quality]({figure_path})', '']
  return lines


def report(studies: Sequence[Study], workdir: pathlib.Path, quick: bool,
           command: str, notes: Sequence[str] = (),
           values: dict | None = None) -> str:
  """Writes the figures and WORKDIR/REPORT.md; returns the text.

  Args:
    studies: the problems and their sweeps.
    workdir: where the sweeps are and the report goes.
    quick: a reduced budget (--quick or --tiny), said at the top.
    command: the command that produced it.
    notes: paragraphs said at the top (e.g. a reduced network budget).
    values: where given, receives the time-to-target numbers per profile
      for results.json (`family_time.section`).
  """
  lines = ['# The communication-efficient family on the LAQ paper\'s problems'
           + (' — quick budget' if quick else ''), '',
           f'Produced by `{command}` (laq-jax). Every preset of the family '
           '(`laq_jax.ALGORITHMS` but the LAQ authors\' follow-ups LASG and '
           'CADA, which configs/lasg.py runs) runs on the same data, M = 10 '
           'workers in '
           'file order; full-batch and minibatch presets are two compiled '
           'programs per problem. Every number is read from the sweeps\' '
           'results.csv (simulated time from their curves.npz); which '
           'methods beat LAQ, and which is fastest where, is computed from '
           'them.', '']
  if quick:
    lines += ['**Reduced budget** (`--quick`: 6,000 training images and '
              'short runs; `--tiny`: 600 images, 30 iterations): the shape '
              'of the comparison, not its numbers.', '']
  for note in notes:
    lines += [note, '']
  missing = []
  for study in studies:
    rows = load_rows(workdir, study)
    if rows is None:
      missing.append(study.name)
      lines += [f'## {study.title}', '', f'**Missing**: no finished sweeps '
                f'in `{study.name}/`.', '']
      continue
    infos = {kind: json.loads((workdir / study.name / folder /
                               'sweep.json').read_text())
             for kind, (_, folder) in study.sweeps.items()}
    path = figure(study, rows, workdir)
    lines += study_section(study, rows, infos, path)
    lines += family_time.section(study, workdir, values)
  lines += _settings_section()
  if missing:
    lines += [f'**Missing**: {", ".join(missing)}.', '']
  text = '\n'.join(lines)
  outputs.atomic_write(workdir / REPORT, text)
  return text
