r"""Reproduces the LAQ paper's experiments with one command, and reports.

    python -m experiments.reproduce --workdir runs/paper            # hours
    python -m experiments.reproduce --workdir runs/paper_quick --quick

The experiments are `configs/paper.py`'s: per experiment, its algorithms
(gd/qgd/lag/laq or sgd/qsgd/slag/slaq) run as a grid axis of ONE compiled
program (`experiments.sweep.sweep_and_evaluate`), each experiment in a fresh
subprocess (so a float64 run does not leave jax_enable_x64 on for the next).
WORKDIR receives, per experiment NAME:
  NAME/config.json, results.csv, curves.npz, sweep.json   (experiments.sweep)
  NAME/reproduce.json       hardware, software, wall time of the experiment
  NAME/loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png
                            the algorithms overlaid (residual when f* known)
  NAME/upload_raster_ALGO.png   who uploaded when, for laq / slaq
and WORKDIR/REPORT.md: the paper-style tables, the figures, the claims of the
paper checked against the numbers, hardware, wall times and the command that
redoes each row.

Resuming: an experiment whose results are in WORKDIR (reproduce.json written
last, with the same config) is not run again; run the same command after an
interruption and only the missing experiments run. `--only=NAME,...` runs a
subset; `--report_only` just rewrites REPORT.md from what is there (missing
experiments are listed as missing). `--copy_to=docs/paper` copies REPORT.md
and its figures there.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import time
from typing import Any, Sequence

from absl import app
from absl import flags
from absl import logging
import jax
import jaxlib
import numpy as np

from configs import paper
from experiments import sweep as sweep_main
from experiments import train
from laq_jax import metrics
from laq_jax import plotting

FLAGS = flags.FLAGS
if __name__ == '__main__':
  flags.DEFINE_string('workdir', None, 'Folder for the results and REPORT.md.')
  flags.DEFINE_bool('quick', False, 'Reduced budget (6,000 images, fewer '
                    'iterations, looser target): minutes on a 2-core CPU.')
  flags.DEFINE_list('only', None, 'Run only these experiments (default: all '
                    'of configs/paper.py).')
  flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md '
                    'from the results in --workdir.')
  flags.DEFINE_bool('in_process', False, 'Run the experiments in this '
                    'process instead of one subprocess each.')
  flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md and its figures '
                      'into this folder (e.g. docs/paper).')
  flags.mark_flags_as_required(['workdir'])

REPORT = 'REPORT.md'
INFO = 'reproduce.json'
RESULT_FILES = ('config.json', 'results.csv', 'curves.npz', 'sweep.json', INFO)
FIGURE_DPI = 80
# "Far fewer": at most this fraction of the other algorithm's count.
FAR_FEWER = 0.5
# "Similar accuracy": within this many percentage points of the baseline.
ACCURACY_POINTS = 1.0
# Linear convergence: a straight line fits log10(residual) against k with at
# least this R^2 and a negative slope.
LINEAR_R2 = 0.9


# ----------------------------------------------------------------------------
# Running.

def _as_json(obj) -> Any:
  """JSON round trip (tuples become lists), to compare configs."""
  return json.loads(json.dumps(obj))


def is_done(experiment: paper.Experiment, workdir: pathlib.Path) -> bool:
  """Whether `workdir/NAME` holds this experiment's finished results."""
  out = workdir / experiment.name
  if not all((out / f).is_file() for f in RESULT_FILES):
    return False
  wanted = _as_json(train.config_to_dict(paper.sweep_config(experiment)))
  return json.loads((out / 'config.json').read_text()) == wanted


def hardware() -> dict[str, Any]:
  """The machine and software the experiment runs on."""
  cpu = platform.processor() or platform.machine()
  try:
    for line in pathlib.Path('/proc/cpuinfo').read_text().splitlines():
      if line.startswith('model name'):
        cpu = line.split(':', 1)[1].strip()
        break
  except OSError:
    pass
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:
    cores = os.cpu_count()
  return {
      'cpu': cpu, 'cores_available': cores, 'cpu_count': os.cpu_count(),
      'load_average_at_start': (list(os.getloadavg())
                                if hasattr(os, 'getloadavg') else None),
      'platform': platform.platform(), 'python': platform.python_version(),
      'jax': jax.__version__, 'jaxlib': jaxlib.__version__,
      'backend': jax.default_backend(),
      'devices': [str(d) for d in jax.devices()],
  }


def run_experiment(experiment: paper.Experiment, workdir: pathlib.Path,
                   quick: bool) -> None:
  """Runs one experiment in this process; reproduce.json is written last."""
  out = workdir / experiment.name
  info = {'experiment': experiment.name, 'quick': quick,
          'started_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
          'hardware': hardware()}
  start = time.perf_counter()
  sweep_main.sweep_and_evaluate(paper.sweep_config(experiment), out)
  info['wall_time_s'] = round(time.perf_counter() - start, 1)
  info['finished_utc'] = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
  train.write_json(out / INFO, info)


def run_all(selected: Sequence[paper.Experiment], workdir: pathlib.Path,
            quick: bool, in_process: bool) -> list[str]:
  """Runs the experiments not yet done; returns the names that failed."""
  failed = []
  for experiment in selected:
    if is_done(experiment, workdir):
      logging.info('%s: results already in %s, not run again',
                   experiment.name, workdir / experiment.name)
      continue
    logging.info('%s: running %s on %s', experiment.name,
                 ', '.join(experiment.algos), experiment.config)
    if in_process:
      run_experiment(experiment, workdir, quick)
      continue
    command = [sys.executable, '-m', 'experiments.reproduce',
               f'--workdir={workdir}', f'--only={experiment.name}',
               '--in_process', '--alsologtostderr']
    if quick:
      command.append('--quick')
    if subprocess.run(command, check=False).returncode:
      logging.error('%s failed; its results are missing from the report',
                    experiment.name)
      failed.append(experiment.name)
  return failed


# ----------------------------------------------------------------------------
# Reading the results.

def _number(text: str):
  """A results.csv cell as int, float, bool, str or None (empty)."""
  if text == '':
    return None
  if text in ('True', 'False'):
    return text == 'True'
  try:
    return int(text)
  except ValueError:
    pass
  try:
    return float(text)
  except ValueError:
    return text


def load_results(experiment: paper.Experiment, workdir: pathlib.Path
                 ) -> dict[str, Any] | None:
  """The experiment's results, or None when not (completely) there.

  Returns:
    {'rows': {algo: results.csv row (numbers parsed)}, 'curves': curves.npz
    arrays, 'config': config.json, 'sweep': sweep.json, 'info':
    reproduce.json}.
  """
  out = workdir / experiment.name
  if not all((out / f).is_file() for f in RESULT_FILES):
    return None
  rows = [{k: _number(v) for k, v in row.items()}
          for row in sweep_main.read_results(out / 'results.csv')]
  with np.load(out / 'curves.npz') as npz:
    curves = {k: npz[k] for k in npz.files}
  return {'rows': {r['algo']: r for r in rows}, 'curves': curves,
          'config': json.loads((out / 'config.json').read_text()),
          'sweep': json.loads((out / 'sweep.json').read_text()),
          'info': json.loads((out / INFO).read_text())}


def curve(result: dict[str, Any], algo: str, residual: bool):
  """`laq_jax.metrics.Curve` of one algorithm from curves.npz."""
  c = result['curves']
  g = list(c['algo']).index(algo)
  per_step = lambda cum: np.diff(cum[g], prepend=0)
  fstar = result['rows'][algo]['fstar'] if residual else None
  return metrics.make_curve(algo, c['loss'][g], c['final_loss'][g],
                            per_step(c['cum_uploads']),
                            per_step(c['cum_bits']), fstar)


def write_figures(experiment: paper.Experiment, result: dict[str, Any],
                  workdir: pathlib.Path) -> dict[str, str]:
  """The overlaid loss figures and the lazy algorithm's raster.

  Returns:
    {what: path relative to workdir}.
  """
  residual = all(r['fstar'] is not None for r in result['rows'].values())
  curves = [curve(result, a, residual) for a in experiment.algos]
  out = {}
  for x, fig in plotting.loss_figures(curves, title=experiment.title).items():
    path = f'{experiment.name}/{train.FIGURES[x]}'
    train.save_figure(fig, workdir / path, dpi=FIGURE_DPI)
    out[x] = path
  uploads = result['curves'].get('uploads')
  if uploads is not None:
    g = list(result['curves']['algo']).index(experiment.lazy)
    path = f'{experiment.name}/upload_raster_{experiment.lazy}.png'
    train.save_figure(plotting.upload_raster(uploads[g],
                                             title=experiment.lazy),
                      workdir / path, dpi=FIGURE_DPI)
    out['raster'] = path
  return out


# ----------------------------------------------------------------------------
# Claims.

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


def _fmt(x, kind: str = 'int') -> str:
  if x is None or (isinstance(x, float) and not math.isfinite(x)):
    return '—'
  if kind == 'int':
    return f'{int(x):,}'
  if kind == 'pct':
    return f'{100 * x:.2f}%'
  if kind == 'full':
    return f'{x:.12g}'
  return f'{x:.3e}'


def _verdict(holds: bool | None) -> str:
  return {True: 'holds', False: 'does not hold', None: 'not tested'}[holds]


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
      return True, (f'{ours_name} {_fmt(ours)} vs {theirs_name} more than '
                    f'{_fmt(theirs_total)} ({theirs_name} never reached the '
                    'target)')
    return None, f'{theirs_name} never reached the target'
  ratio = ours / theirs if theirs else math.inf
  return ratio <= FAR_FEWER, (f'{ours_name} {_fmt(ours)} vs {theirs_name} '
                              f'{_fmt(theirs)} (ratio {ratio:.3f})')


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


def _upload_note(result: dict[str, Any], algo: str) -> str:
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
  notes = [_upload_note(result, algo)]
  c = result['curves']
  g = list(c['algo']).index(algo)
  first, last = float(c['loss'][g][0]), float(c['final_loss'][g])
  if not last <= first:
    notes.append(f'its loss rose from f(θ^0) = {first:.4g} to '
                 f'f(θ^T) = {last:.4g}')
  return '; '.join(n for n in notes if n)


def claims(experiment: paper.Experiment, result: dict[str, Any]
           ) -> list[dict[str, Any]]:
  """The paper's claims for one experiment, checked against its results.

  Returns:
    [{'claim': words, 'holds': True / False / None, 'evidence': numbers}].
  """
  rows = result['rows']
  lazy, base = experiment.lazy, experiment.baseline
  quantized = [a for a in experiment.algos if a not in (lazy, base)
               and a.startswith('q')]
  lag = [a for a in experiment.algos if a not in (lazy, base, *quantized)]
  out = []
  target = rows[lazy]['target_residual']
  convex_full = experiment.convex and not experiment.stochastic
  if convex_full:
    # At the target residual.
    for what, column, others in (
        ('uploads', 'target_uploads', [base, *quantized]),
        ('bits', 'target_bits', [base, *quantized, *lag])):
      if rows[lazy][column] is None:
        verdicts = [False]
        evidence = [f'{lazy} never reached the target within '
                    f'{rows[lazy]["iterations"]:,} iterations (final '
                    f'residual {_fmt(rows[lazy]["final_residual"], "sci")})']
      else:
        verdicts, evidence = zip(*(
            _fewer(rows[lazy][column], lazy, rows[other][column], other,
                   rows[other]['total_' + what]) for other in others))
      holds = (False if False in verdicts else
               None if None in verdicts else True)
      out.append({
          'claim': (f'{lazy.upper()} reaches residual {target:g} with far '
                    f'fewer {what} (at most {FAR_FEWER:g}x) than '
                    f'{", ".join(o.upper() for o in others)}'),
          'holds': holds, 'evidence': '; '.join(evidence)})
    for algo in (lazy, base):
      fit = linear_fit(curve(result, algo, True).value, target)
      if fit is None:
        holds, text = None, 'too few positive residuals to fit'
      else:
        holds = fit['slope'] < 0 and fit['r2'] >= LINEAR_R2
        text = (f'log10 residual vs k over k = 0..{fit["last_k"]}: slope '
                f'{fit["slope"]:.3e}/iteration, rate {fit["rate"]:.5f} per '
                f'iteration, R^2 = {fit["r2"]:.3f}')
      out.append({'claim': (f'{algo.upper()} converges linearly (straight '
                            'line in log residual vs k, R^2 >= '
                            f'{LINEAR_R2:g})'),
                  'holds': holds, 'evidence': text})
  else:
    # Fixed budget: totals over the whole run, at similar accuracy.
    gap = 100 * (rows[lazy]['final_test_accuracy']
                 - rows[base]['final_test_accuracy'])
    for what, others in (('uploads', [base, *quantized]),
                         ('bits', [base, *quantized, *lag])):
      verdicts, evidence = zip(*(
          _fewer(rows[lazy]['total_' + what], lazy,
                 rows[other]['total_' + what], other, None)
          for other in others))
      evidence = list(evidence)
      if abs(gap) > ACCURACY_POINTS:
        verdicts += (False,)
        evidence.append(f'but not at similar accuracy: {lazy} is '
                        f'{gap:+.2f} pp from {base}')
      out.append({
          'claim': (f'{lazy.upper()} uses far fewer {what} (at most '
                    f'{FAR_FEWER:g}x) than '
                    f'{", ".join(o.upper() for o in others)} over the same '
                    f'{rows[lazy]["iterations"]:,} iterations, at similar '
                    'accuracy'),
          'holds': False not in verdicts, 'evidence': '; '.join(evidence)})
  # Accuracy.
  reference = rows[base]['final_test_accuracy']
  gaps = {a: 100 * (rows[a]['final_test_accuracy'] - reference)
          for a in experiment.algos if a != base}
  far = [a for a, g in gaps.items() if abs(g) > ACCURACY_POINTS]
  why = [_why_behind(result, a) for a in far]
  out.append({
      'claim': (f'similar test accuracy: every algorithm within '
                f'{ACCURACY_POINTS:g} percentage point of {base.upper()}'),
      'holds': not far,
      'evidence': f'{base} {_fmt(reference, "pct")}; ' + '; '.join(
          f'{a} {_fmt(rows[a]["final_test_accuracy"], "pct")} ({g:+.2f} pp)'
          for a, g in gaps.items()) + ''.join(f'; {w}' for w in why if w)})
  return out


# ----------------------------------------------------------------------------
# The report.

TABLE_COLUMNS = (
    # (header, results.csv column, format)
    ('iterations', 'iterations', 'int'),
    ('uploads', 'total_uploads', 'int'),
    ('bits', 'total_bits', 'int'),
    ('test accuracy', 'final_test_accuracy', 'pct'),
)
TARGET_COLUMNS = (
    ('final residual', 'final_residual', 'sci'),
    ('iteration at target', 'target_iteration', 'int'),
    ('uploads at target', 'target_uploads', 'int'),
    ('bits at target', 'target_bits', 'int'),
)
LOSS_COLUMNS = (('final loss', 'final_loss', 'sci'),)


def table_columns(result: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
  """The table's columns: with f*, the at-target ones; else the final loss."""
  has_fstar = all(r['fstar'] is not None for r in result['rows'].values())
  return TABLE_COLUMNS + (TARGET_COLUMNS if has_fstar else LOSS_COLUMNS)


def markdown_table(experiment: paper.Experiment, result: dict[str, Any]
                   ) -> str:
  """The paper-style table, one row per algorithm (results.csv's numbers)."""
  columns = table_columns(result)
  lines = ['| algorithm | ' + ' | '.join(h for h, _, _ in columns) + ' |',
           '|---|' + '---:|' * len(columns)]
  for algo in experiment.algos:
    row = result['rows'][algo]
    lines.append(f'| {algo} | ' + ' | '.join(
        _fmt(row[key], kind) for _, key, kind in columns) + ' |')
  return '\n'.join(lines)


def _hardware_line(info: dict[str, Any]) -> str:
  hw = info['hardware']
  return (f'{hw["cpu"]}, {hw["cores_available"]} core(s) available; '
          f'JAX {hw["jax"]} (jaxlib {hw["jaxlib"]}), backend '
          f'{hw["backend"]}, Python {hw["python"]}, {hw["platform"]}')


ROW_CHECKS = (('uploads', 'total_uploads'), ('bits', 'total_bits'),
              ('final loss', 'final_loss'),
              ('iteration at target', 'target_iteration'),
              ('uploads at target', 'target_uploads'))


def row_checks(experiment: paper.Experiment, result: dict[str, Any],
               rows_dir: pathlib.Path) -> list[str]:
  """Compares the rows with single runs found in `rows_dir/NAME/ALGO`.

  The runs are those of the commands the report prints (experiments.main
  writes summary.json); none are run here. Returns Markdown lines, [] when
  no single run is there.
  """
  lines = []
  for algo in experiment.algos:
    path = rows_dir / experiment.name / algo / 'summary.json'
    if not path.is_file():
      continue
    single = json.loads(path.read_text())
    if single.get('iterations') != result['rows'][algo]['iterations']:
      continue  # another budget: not comparable
    cells = []
    for label, key in ROW_CHECKS:
      ours, theirs = result['rows'][algo].get(key), single.get(key)
      kind = 'full' if key == 'final_loss' else 'int'
      same = ours == theirs or (kind == 'full' and ours is not None and
                                theirs is not None and
                                abs(ours - theirs) <= 1e-12 * abs(theirs))
      cells.append(_fmt(theirs, kind) + ('' if same else
                                         f' (here {_fmt(ours, kind)})'))
    if not lines:
      lines = ['Cross-check: single runs of the commands below, found in '
               f'`{rows_dir.name}/`, against this program\'s rows '
               '(values differing from the table in parentheses). Both run '
               'the same algorithm, but the grid program (vmapped over the '
               'algorithms) rounds differently; the quantizer and the '
               'trigger are discontinuous, so rounding differences can grow '
               'into other upload decisions:', '',
               '| single run | ' + ' | '.join(l for l, _ in ROW_CHECKS)
               + ' | first step with another loss | first step with other '
               'upload decisions |',
               '|---|' + '---:|' * (len(ROW_CHECKS) + 2)]
    lines.append(f'| {algo} | ' + ' | '.join(cells) + ' | '
                 + _first_difference(result, algo, path.parent) + ' |')
  return lines + [''] if lines else []


def _first_difference(result: dict[str, Any], algo: str,
                      run_dir: pathlib.Path) -> str:
  """First steps where the loss / the upload decisions differ from a run's."""
  c = result['curves']
  g = list(c['algo']).index(algo)
  out = []
  for name, ours, theirs in (
      ('loss', c['loss'][g], lambda: train.read_metrics(
          run_dir / 'metrics.csv')['loss']),
      ('uploads', c.get('uploads', [None] * (g + 1))[g],
       lambda: np.load(run_dir / 'uploads.npy'))):
    try:
      theirs = theirs()
    except OSError:
      out.append('—')
      continue
    if ours is None or np.shape(ours) != np.shape(theirs):
      out.append('—')
      continue
    differ = np.flatnonzero(np.reshape(ours != theirs, (len(ours), -1))
                            .any(axis=1))
    out.append('none' if not differ.size else f'{int(differ[0]):,}')
  return ' | '.join(out)


def experiment_section(experiment: paper.Experiment, result: dict[str, Any],
                       figures: dict[str, str], workdir_name: str,
                       quick: bool, rows_dir: pathlib.Path | None = None
                       ) -> list[str]:
  """The report's section of one experiment."""
  sweep = result['sweep']
  info = result['info']
  lines = [f'## {experiment.title}', '']
  fstar = sweep['fstar'][0] if sweep.get('fstar') else {}
  settings = (f'`configs/{experiment.config}.py'
              f'{":" + experiment.arg if experiment.arg else ""}`: '
              f'{sweep["model"]} ({sweep["num_params"]:,} parameters), '
              f'M = {sweep["num_workers"]} workers, {sweep["precision"]}, '
              f'{sweep["num_iters"]:,} iterations, '
              f'algorithms {", ".join(experiment.algos)} as one compiled '
              f'program ({sweep["num_points"]} grid points, '
              f'{sweep.get("programs_compiled")} program(s) compiled). '
              f'Test set: {sweep["test_set"]}.')
  c = result['config']
  hyper = (f'Hyperparameters: alpha = {c["step_size"]:g}, b = {c["bits"]}, '
           f'D = {c["memory"]}, xi = {c["xi"]:g}, c_e = {c["err_weight"]:g}, '
           f'c_0 = {c["threshold_offset"]:g}, tbar = {c["max_staleness"]}, '
           f'lam = {c["l2"]:g}, split {c["split"]}, training images '
           f'{c["train_subset"] or "all 60,000"}'
           + (f', minibatch {c["batch_size"]} per worker'
              if experiment.stochastic else ', full batch') + '.')
  lines += [settings, '', hyper, '']
  if fstar.get('fstar') is not None:
    source = ('read from the f* cache, where an earlier run solved it the '
              'same way' if fstar['fstar_source'].startswith('cache')
              else fstar['fstar_source'])
    lines += [f'f* = {fstar["fstar"]:.15g}, the minimum of the full '
              f'objective, solved in float64: {fstar["fstar_method"]} '
              f'({source}). Target residual f(θ^k) − f* ≤ '
              f'{sweep["target_residual"]:g}; '
              '"at target": the first iterate k at or below it and the '
              'uploads/bits spent before it.'
              + (' Minibatch gradients stall at a noise floor above it, so '
                 'this experiment compares fixed budgets instead.'
                 if experiment.stochastic else ''), '']
  lines += [markdown_table(experiment, result), '']
  notes = [_upload_note(result, a) for a in experiment.algos]
  if all(notes):
    lines += ['Uploads after the k = 0 initialization (every worker uploads '
              'at k = 0): ' + '; '.join(notes) + '.', '']
  lines += [f'Wall time: {info["wall_time_s"]:.0f} s for the experiment '
            f'({sweep["run_time_s"]:.0f} s in the compiled program, '
            f'{sweep["point_iterations_per_s"]:g} algorithm-iterations/s), '
            f'started {info["started_utc"]}.', '']
  lines += ['Claims:', '', '| claim | verdict | numbers |', '|---|---|---|']
  for c in claims(experiment, result):
    lines.append(f'| {c["claim"]} | **{_verdict(c["holds"])}** | '
                 f'{c["evidence"]} |')
  lines.append('')
  if figures:
    lines.append(' '.join(f'![{experiment.name} {what}]({path})'
                          for what, path in figures.items()
                          if what != 'raster'))
    if 'raster' in figures:
      lines += ['', f'![{experiment.lazy} uploads]({figures["raster"]})']
    lines.append('')
  lines += row_checks(experiment, result,
                      rows_dir or pathlib.Path(f'runs/{workdir_name}_rows'))
  lines += ['Redo this experiment (all rows, one program; a finished '
            f'`{experiment.name}/` is kept, so move it away first), or one '
            'row alone with `experiments.main` (the same settings; it writes '
            'metrics.csv, summary.json and figures):', '', '```',
            f'python -m experiments.reproduce --workdir runs/{workdir_name} '
            f'--only={experiment.name}{" --quick" if quick else ""}']
  lines += [paper.main_command(experiment, a,
                               f'runs/{workdir_name}_rows/{experiment.name}/'
                               f'{a}') for a in experiment.algos]
  lines += ['```', '']
  return lines


def timing_section(selected: Sequence[paper.Experiment],
                   results: dict[str, Any]) -> list[str]:
  """Where and how long each experiment ran."""
  lines = ['## Hardware and wall time', '',
           '| experiment | wall time (s) | in the compiled program (s) | '
           'started (UTC) | load average at start |',
           '|---|---:|---:|---|---:|']
  total, machines = 0.0, []
  for e in selected:
    result = results[e.name]
    if result is None:
      lines.append(f'| {e.name} | missing | | | |')
      continue
    info = result['info']
    total += info['wall_time_s']
    load = info['hardware'].get('load_average_at_start')
    lines.append(f'| {e.name} | {info["wall_time_s"]:.0f} | '
                 f'{result["sweep"]["run_time_s"]:.0f} | '
                 f'{info["started_utc"]} | '
                 f'{"—" if not load else f"{load[0]:.1f}"} |')
    if _hardware_line(info) not in machines:
      machines.append(_hardware_line(info))
  lines += ['', f'Total: {total:.0f} s. The wall time includes loading '
            'MNIST, compiling, f* (cached after its first solve) and the '
            'test accuracy; the algorithms of an experiment share one program, '
            'so their times are not separable. The machine may have been '
            'shared (see the load average).', '']
  lines += [f'Hardware: {m}.' for m in machines] + ['']
  return lines


def report(selected: Sequence[paper.Experiment], workdir: pathlib.Path,
           quick: bool) -> str:
  """Writes the figures and WORKDIR/REPORT.md; returns the report's text."""
  results = {e.name: load_results(e, workdir) for e in selected}
  command = ('python -m experiments.reproduce --workdir '
             f'{workdir}{" --quick" if quick else ""}')
  lines = ['# LAQ (Sun, Chen, Giannakis, Yang, NeurIPS 2019) reproduced on '
           'MNIST' + (' — quick budget' if quick else ''), '',
           f'Produced by `{command}` (laq-jax). Every number below is read '
           'from the per-experiment results (`NAME/results.csv`, '
           '`NAME/curves.npz`); the claims are computed from them, not '
           'written by hand.', '']
  if quick:
    lines += [f'**Quick budget**: the first 6,000 training images, few '
              f'iterations, target residual {paper.QUICK_TARGET:g} instead '
              'of 1e-6. What it shows is the shape of the comparison, not '
              "the paper's numbers; run without `--quick` for those.", '']
  lines += [f'Definitions: "far fewer" = at most {FAR_FEWER:g}x the other '
            f'algorithm\'s count; "similar accuracy" = within '
            f'{ACCURACY_POINTS:g} percentage point of the unquantized, '
            'non-lazy baseline (GD or SGD); "linear convergence" = a '
            f'least-squares line through log10 residual against k with '
            f'R^2 >= {LINEAR_R2:g} and negative slope (fitted up to the '
            'first iterate at the target). Bits are exact: b*p + 32 per '
            'quantized upload, 32*p per unquantized one (p parameters). '
            'Every worker uploads at k = 0 (Algorithm 1\'s initialization).',
            '']
  lines += ['Settings: the spec\'s (`configs/*.py`; each section lists '
            'its hyperparameters). The minibatch experiments use the '
            'authors\' SLAQ settings on both models, as the paper does. '
            'Logistic regression in float64 (a residual of 1e-6 on f* ~ 5.6 '
            'is below float32\'s resolution), the MLP in float32. '
            + ('' if quick else
               f'The full-batch MLP runs {paper.MLP_ITERS} iterations, a '
               'budget that fits a session on a 2-core CPU (see the wall '
               'times), not the paper\'s longer runs.'), '']
  missing = [e.name for e in selected if results[e.name] is None]
  summary = ['## Summary of the claims', '',
             '| experiment | claim | verdict |', '|---|---|---|']
  sections = []
  for e in selected:
    result = results[e.name]
    if result is None:
      sections += [f'## {e.title}', '',
                   f'**Missing**: no finished results in `{e.name}/` '
                   '(not run, interrupted, or failed). Rerun the command '
                   'above: finished experiments are kept.', '']
      continue
    figures = write_figures(e, result, workdir)
    for c in claims(e, result):
      summary.append(f'| {e.name} | {c["claim"]} | {_verdict(c["holds"])} |')
    sections += experiment_section(
        e, result, figures, workdir.name, quick,
        rows_dir=workdir.parent / f'{workdir.name}_rows')
  if missing:
    summary += ['', f'**Missing experiments**: {", ".join(missing)}.']
  lines += summary + [''] + timing_section(selected, results) + sections
  text = '\n'.join(lines)
  train.atomic_write(workdir / REPORT, text)
  return text


def copy_report(workdir: pathlib.Path, dest: pathlib.Path) -> list[str]:
  """Copies REPORT.md and the PNGs it links into `dest` (same layout)."""
  text = (workdir / REPORT).read_text()
  paths = re.findall(r'!\[[^\]]*\]\(([^)]+\.png)\)', text)
  dest.mkdir(parents=True, exist_ok=True)
  for path in paths:
    (dest / path).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(workdir / path, dest / path)
  shutil.copyfile(workdir / REPORT, dest / REPORT)
  return [REPORT] + paths


def select(only: Sequence[str] | None, quick: bool
           ) -> list[paper.Experiment]:
  """configs/paper.py's experiments, or those named in `only`."""
  everything = paper.experiments(quick)
  if not only:
    return list(everything)
  names = [e.name for e in everything]
  unknown = [n for n in only if n not in names]
  if unknown:
    raise app.UsageError(f'--only={",".join(only)}: unknown experiment(s) '
                         f'{", ".join(unknown)}; allowed: {", ".join(names)}')
  return [e for e in everything if e.name in only]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  workdir = pathlib.Path(FLAGS.workdir)
  selected = select(FLAGS.only, FLAGS.quick)
  if FLAGS.in_process and not FLAGS.report_only:
    for experiment in selected:
      if not is_done(experiment, workdir):
        run_experiment(experiment, workdir, FLAGS.quick)
    return
  failed = [] if FLAGS.report_only else run_all(
      selected, workdir, FLAGS.quick, in_process=False)
  report(paper.experiments(FLAGS.quick), workdir, FLAGS.quick)
  logging.info('report: %s', workdir / REPORT)
  if FLAGS.copy_to:
    copied = copy_report(workdir, pathlib.Path(FLAGS.copy_to))
    logging.info('copied %d files to %s', len(copied), FLAGS.copy_to)
  if failed:
    sys.exit(f'error: experiment(s) {", ".join(failed)} failed; the report '
             'lists them as missing')


if __name__ == '__main__':
  app.run(main)
