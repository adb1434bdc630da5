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
  missing (not run, or interrupted)."""
  out = {}
  for kind, (_, folder) in study.sweeps.items():
    path = workdir / study.name / folder
    if not (path / 'sweep.json').is_file():
      return None
    rows = [{k: outputs.parse_cell(v) for k, v in row.items()}
            for row in outputs.read_results(path / 'results.csv')]
    # Each point's first logged loss (where it started), for `ran_away`.
    with np.load(path / 'curves.npz') as curves:
      for row, loss_T in zip(rows, curves['loss']):
        finite = loss_T[np.isfinite(loss_T)]
        row['initial_loss'] = float(finite[0]) if finite.size else None
    out[kind] = {r['algo']: r for r in rows}
  return out


def ran_away(row: dict) -> bool:
  """A run that diverged (a non-finite loss) or ended above the loss it
  started from: reported as such, never anyone's benchmark to beat."""
  final, start = row.get('final_loss'), row.get('initial_loss')
  if row.get('diverged') or final is None or not math.isfinite(final):
    return True
  return start is not None and final > start


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
  loss, or fewer bits and no higher one.
  """
  ours = rows[lazy]
  out = []
  for algo, row in rows.items():
    if algo == lazy or (not convex and ran_away(row)):
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
  extra = TARGET_COLUMNS if convex else BUDGET_COLUMNS[:1]
  if not convex and all(r['final_residual'] is not None
                        for r in rows.values()):
    extra = BUDGET_COLUMNS
  header = ['preset'] + [h for h, _, _ in columns + extra]
  body = [[a] + [fmt(r[k], kind) for _, k, kind in columns + extra]
          for a, r in rows.items()]
  return table(header, body)


def figure(study: Study, rows: dict[str, dict], workdir: pathlib.Path
           ) -> str:
  """Final quality against total bits (up + down) of every preset, the
  Pareto front marked; returns the path relative to `workdir`."""
  everything = {a: r for kind_rows in rows.values()
                for a, r in kind_rows.items()}
  labels = list(everything)
  cost = [everything[a]['total_bits'] + everything[a]['total_bits_down']
          for a in labels]
  convex = all(r['final_residual'] is not None for r in everything.values())
  value = [_lower(everything[a], convex) for a in labels]
  what = 'final residual f - f*' if convex else 'final loss f'
  fig = plotting.tradeoff_figure(
      labels, cost, value, x_label='total bits, uplink + downlink',
      y_label=what, title=f'{study.title}: every preset')
  path = f'{study.name}/bits_vs_{"residual" if convex else "loss"}.png'
  outputs.save_figure(fig, workdir / path, dpi=FIGURE_DPI)
  return path


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
      'term), two-way LAQ\'s broadcast at b bits. Bits are exact '
      '(docs/algorithm.md): uplink per upload, downlink per worker per step '
      '(32 p for a full-precision broadcast).', '',
      table(['preset', 'gradient', 'parts', 'reference'], rows, 'llll'), '']


def pareto_presets(rows: dict[str, dict], convex: bool) -> list[str]:
  """The presets on the Pareto front of (total bits, final quality)."""
  labels = list(rows)
  cost = [rows[a]['total_bits'] + rows[a]['total_bits_down'] for a in labels]
  value = [_lower(rows[a], convex) for a in labels]
  return [labels[i] for i in metrics.pareto_front(cost, value,
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
    ours = rows[kind][lazy]
    if not convex and ran_away(ours):
      lines += [f'{lazy.upper()} ran away here: final loss '
                f'{fmt(ours["final_loss"], "sci")} against the '
                f'{fmt(ours["initial_loss"], "sci")} it started from, test '
                f'accuracy {fmt(ours["final_test_accuracy"], "pct")}. A run '
                'that diverged or ended above its initial loss is no '
                'benchmark: nothing is compared with it.', '']
      lines += [f'Wall time {info["wall_time_s"]:.0f} s, '
                f'{info["programs_compiled"]} program(s) compiled.', '']
      continue
    better = beats_laq(rows[kind], convex, lazy)
    if convex and rows[kind][lazy]['target_bits'] is not None:
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
    lines += [f'Wall time {info["wall_time_s"]:.0f} s, '
              f'{info["programs_compiled"]} program(s) compiled.', '']
  everything = {a: r for kind_rows in rows.values()
                for a, r in kind_rows.items()}
  convex = all(r['final_residual'] is not None for r in everything.values())
  away = [a for a, r in everything.items() if not convex and ran_away(r)]
  front = pareto_presets({a: r for a, r in everything.items()
                          if a not in away}, convex)
  lines += [f'On the Pareto front of total bits (up + down) against the '
            f'final {"residual" if convex else "loss"}, over both kinds: '
            + ', '.join(f'**{a}**' for a in front) + '.'
            + (' Left out, as they ran away (diverged, or ended above their '
               'initial loss): ' + ', '.join(away) + '.' if away else ''),
            '',
            f'![{study.name}: bits against quality]({figure_path})', '']
  return lines


def report(studies: Sequence[Study], workdir: pathlib.Path, quick: bool,
           command: str, notes: Sequence[str] = ()) -> str:
  """Writes the figures and WORKDIR/REPORT.md; returns the text.

  Args:
    studies: the problems and their sweeps.
    workdir: where the sweeps are and the report goes.
    quick: a reduced budget (--quick or --tiny), said at the top.
    command: the command that produced it.
    notes: paragraphs said at the top (e.g. a reduced network budget).
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
    lines += family_time.section(study, workdir)
  lines += _settings_section()
  if missing:
    lines += [f'**Missing**: {", ".join(missing)}.', '']
  text = '\n'.join(lines)
  outputs.atomic_write(workdir / REPORT, text)
  return text
