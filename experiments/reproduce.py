r"""Reproduces the LAQ paper's experiments with one command, and reports.

    python -m experiments.reproduce --workdir runs/paper            # hours
    python -m experiments.reproduce --workdir runs/paper_quick --quick

The experiments are `configs/paper.py`'s: per experiment, its algorithms
(gd/qgd/lag/laq or sgd/qsgd/ssgd/slaq) run as a grid axis of ONE compiled
program (`experiments.sweep.sweep_and_evaluate`), each experiment in a fresh
subprocess (so a float64 run does not leave jax_enable_x64 on for the next).
WORKDIR receives, per experiment NAME:
  NAME/config.json, results.csv, curves.npz, sweep.json   (experiments.sweep)
  NAME/reproduce.json       hardware, software, wall time of the experiment
  NAME/loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png
                            the algorithms overlaid: the exact residual
                            f - f* when f* is known, else the paper's
                            residual (average loss minus the smallest)
  NAME/grad_norm_vs_*.png   the squared gradient norm (the network's figures)
  NAME/upload_raster_ALGO.png   who uploaded when, for laq / slaq
  crosscheck/single, crosscheck/devices   the convex LAQ row run alone
                            (experiments.main) and with its workers on 2
                            CPU devices, compared step by step with the row
                            of the grid program
and WORKDIR/REPORT.md: the paper-style tables, the figures, the claims of the
paper checked against the numbers, the cross-check, hardware, wall times and
the command that redoes each row.

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
  flags.DEFINE_integer('mlp_iters', None, 'Iterations of the full-batch MLP '
                       '(default: the authors\' 8,000 with a GPU/TPU, '
                       '1,000 on a CPU-only machine; with --report_only, '
                       'those of the results in --workdir).')
  flags.DEFINE_bool('crosscheck', True, 'Also run the convex LAQ row alone '
                    'and on 2 CPU devices and compare it with the grid '
                    'program step by step.')
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
  config = paper.sweep_config(experiment)
  try:
    old = json.loads((out / 'config.json').read_text())
  except (OSError, ValueError):
    old = None
  # The folder is reproduce's own: results of an earlier config of this
  # experiment (another budget, older code) are replaced, not refused.
  stale = old is not None and old != _as_json(train.config_to_dict(config))
  if stale:
    logging.warning('%s: replacing the results of an earlier config in %s',
                    experiment.name, out)
  sweep_main.sweep_and_evaluate(config, out, overwrite=stale)
  info['wall_time_s'] = round(time.perf_counter() - start, 1)
  info['finished_utc'] = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())
  train.write_json(out / INFO, info)


def run_all(selected: Sequence[paper.Experiment], workdir: pathlib.Path,
            quick: bool, mlp_iters: int) -> list[str]:
  """Runs the experiments not yet done; returns the names that failed."""
  failed = []
  for experiment in selected:
    if is_done(experiment, workdir):
      logging.info('%s: results already in %s, not run again',
                   experiment.name, workdir / experiment.name)
      continue
    logging.info('%s: running %s on %s', experiment.name,
                 ', '.join(experiment.algos), experiment.config)
    command = [sys.executable, '-m', 'experiments.reproduce',
               f'--workdir={workdir}', f'--only={experiment.name}',
               f'--mlp_iters={mlp_iters}', '--in_process',
               '--alsologtostderr']
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
  """The experiment's results, or None when not (completely) there or when
  they are another config's.

  Returns:
    {'rows': {algo: results.csv row (numbers parsed)}, 'curves': curves.npz
    arrays, 'config': config.json, 'sweep': sweep.json, 'info':
    reproduce.json}.
  """
  if not is_done(experiment, workdir):
    return None  # missing, incomplete, or another config's (stale) results
  out = workdir / experiment.name
  rows = [{k: _number(v) for k, v in row.items()}
          for row in sweep_main.read_results(out / 'results.csv')]
  with np.load(out / 'curves.npz') as npz:
    curves = {k: npz[k] for k in npz.files}
  return {'rows': {r['algo']: r for r in rows}, 'curves': curves,
          'config': json.loads((out / 'config.json').read_text()),
          'sweep': json.loads((out / 'sweep.json').read_text()),
          'info': json.loads((out / INFO).read_text())}


def curve(result: dict[str, Any], algo: str, quantity: str):
  """`laq_jax.metrics.Curve` of one algorithm from curves.npz.

  Args:
    result: from `load_results`.
    algo: the row.
    quantity: 'residual' (f - f*), 'paper_residual' (the average worker
      loss minus the smallest any algorithm reached), 'loss' or
      'grad_norm_sq'.
  """
  c = result['curves']
  g = list(c['algo']).index(algo)
  uploads = np.diff(c['cum_uploads'][g], prepend=0)
  bits = np.diff(c['cum_bits'][g], prepend=0)
  loss = np.append(c['loss'][g], c['final_loss'][g])
  if quantity == 'grad_norm_sq':
    value = c['grad_norm_sq'][g]
  elif quantity == 'residual':
    value = loss - result['rows'][algo]['fstar']
  elif quantity == 'paper_residual':
    value, _ = metrics.paper_residual(loss, result['sweep']['num_workers'],
                                      float(c['paper_reference'][g]))
  else:
    value = loss
  return metrics.value_curve(algo, value, uploads, bits, quantity)


def main_quantity(result: dict[str, Any]) -> str:
  """What the loss figures show: the exact residual when f* is known for
  every row, else the paper's residual."""
  if all(r['fstar'] is not None for r in result['rows'].values()):
    return 'residual'
  return 'paper_residual'


def write_figures(experiment: paper.Experiment, result: dict[str, Any],
                  workdir: pathlib.Path) -> dict[str, str]:
  """The overlaid loss figures (the squared gradient norm's too when f* is
  unknown, as the authors plot for the network) and the lazy algorithm's
  raster.

  Returns:
    {what: path relative to workdir}.
  """
  quantity = main_quantity(result)
  sets = [('', quantity, train.FIGURES)]
  if quantity != 'residual':
    sets.append(('grad_norm_', 'grad_norm_sq', train.GRAD_NORM_FIGURES))
  out = {}
  for prefix, what, names in sets:
    curves = [curve(result, a, what) for a in experiment.algos]
    for x, fig in plotting.loss_figures(curves,
                                        title=experiment.title).items():
      path = f'{experiment.name}/{names[x]}'
      train.save_figure(fig, workdir / path, dpi=FIGURE_DPI)
      out[prefix + x] = path
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


def _combine(verdicts) -> bool | None:
  """False if any is False, else None if any is None, else True."""
  return False if False in verdicts else None if None in verdicts else True


def claims(experiment: paper.Experiment, result: dict[str, Any]
           ) -> list[dict[str, Any]]:
  """The paper's claims for one experiment, checked against its results.

  Convex full-batch: at the target residual (exact definition), the lazy
  algorithm spends far fewer uploads than `uploads_vs` and far fewer bits
  than `bits_vs`, and it and the baseline converge linearly. The other
  experiments compare fixed budgets: totals over the same iterations, at
  similar accuracy. Every experiment: similar test accuracy.

  Returns:
    [{'claim': words, 'holds': True / False / None, 'evidence': numbers}].
  """
  rows = result['rows']
  lazy, base = experiment.lazy, experiment.baseline
  out = []
  target = rows[lazy]['target_residual']
  convex_full = experiment.convex and not experiment.stochastic
  if convex_full:
    for what, column, others in (
        ('uploads', 'target_uploads', experiment.uploads_vs),
        ('bits', 'target_bits', experiment.bits_vs)):
      if rows[lazy][column] is None:
        verdicts = [False]
        evidence = [f'{lazy} never reached the target within '
                    f'{rows[lazy]["iterations"]:,} iterations (final '
                    f'residual {_fmt(rows[lazy]["final_residual"], "sci")})']
      else:
        verdicts, evidence = zip(*(
            _fewer(rows[lazy][column], lazy, rows[other][column], other,
                   rows[other]['total_' + what]) for other in others))
      out.append({
          'claim': (f'{lazy.upper()} reaches residual {target:g} with far '
                    f'fewer {what} (at most {FAR_FEWER:g}x) than '
                    f'{", ".join(o.upper() for o in others)}'),
          'holds': _combine(verdicts), 'evidence': '; '.join(evidence)})
    for algo in (lazy, base):
      fit = linear_fit(curve(result, algo, 'residual').value, target)
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
    for what, others in (('uploads', experiment.uploads_vs),
                         ('bits', experiment.bits_vs)):
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
          'holds': _combine(verdicts), 'evidence': '; '.join(evidence)})
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
RESIDUAL_COLUMNS = (('final residual f − f*', 'final_residual', 'sci'),)
LOSS_COLUMNS = (('final loss', 'final_loss', 'sci'),
                ('last ‖∇f‖²', 'last_grad_norm_sq', 'sci'))
TARGET_COLUMNS = (
    # (definition, results.csv prefix)
    ('exact f(θ^k) − f*', ''),
    ("paper's f(θ^k)/M − min", 'paper_'),
)


def table_columns(result: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
  """The totals table's columns: with f*, the final residual; else the
  final loss and squared gradient norm."""
  has_fstar = all(r['fstar'] is not None for r in result['rows'].values())
  return TABLE_COLUMNS + (RESIDUAL_COLUMNS if has_fstar else LOSS_COLUMNS)


def _table(algos, rows, columns) -> list[str]:
  lines = ['| algorithm | ' + ' | '.join(h for h, _, _ in columns) + ' |',
           '|---|' + '---:|' * len(columns)]
  for algo in algos:
    lines.append(f'| {algo} | ' + ' | '.join(
        _fmt(rows[algo][key], kind) for _, key, kind in columns) + ' |')
  return lines


def markdown_table(experiment: paper.Experiment, result: dict[str, Any]
                   ) -> str:
  """The paper-style table, one row per algorithm (results.csv's numbers)."""
  return '\n'.join(_table(experiment.algos, result['rows'],
                          table_columns(result)))


def target_table(experiment: paper.Experiment, result: dict[str, Any]
                 ) -> str:
  """Iteration, uploads and bits at the target, under both residuals (the
  exact one only where f* is known)."""
  rows = result['rows']
  has_fstar = all(r['fstar'] is not None for r in rows.values())
  columns = []
  for name, prefix in TARGET_COLUMNS:
    if prefix == '' and not has_fstar:
      continue
    columns += [(f'{what} ({name})', f'{prefix}target_{key}', 'int')
                for what, key in (('iteration', 'iteration'),
                                  ('uploads', 'uploads'), ('bits', 'bits'))]
  return '\n'.join(_table(experiment.algos, rows, columns))


def _hardware_line(info: dict[str, Any]) -> str:
  hw = info['hardware']
  return (f'{hw["cpu"]}, {hw["cores_available"]} core(s) available; '
          f'JAX {hw["jax"]} (jaxlib {hw["jaxlib"]}), backend '
          f'{hw["backend"]}, Python {hw["python"]}, {hw["platform"]}')


def experiment_section(experiment: paper.Experiment, result: dict[str, Any],
                       figures: dict[str, str], workdir_name: str,
                       quick: bool) -> list[str]:
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
           + (f', minibatch {c["batch_size"]} per worker, QSGD s = '
              f'{c["levels"]:,} levels, SSGD p = {c["keep_prob"]:g}'
              if experiment.stochastic else ', full batch') + '.')
  lines += [settings, '', hyper, '']
  if experiment.name == 'mlp' and not quick and (
      sweep['num_iters'] < paper.MLP_FULL_ITERS):
    lines += [f'**Shorter budget**: {sweep["num_iters"]:,} iterations, not '
              f'the authors\' {paper.MLP_FULL_ITERS:,}: this report ran on '
              'a CPU-only machine, where one full-batch iteration of the '
              'four algorithms takes seconds (see the wall time). On a GPU '
              'or TPU `experiments.reproduce` runs the full budget.', '']
  if fstar.get('fstar') is not None:
    source = ('read from the f* cache, where an earlier run solved it the '
              'same way' if fstar['fstar_source'].startswith('cache')
              else fstar['fstar_source'])
    lines += [f'f* = {fstar["fstar"]:.15g}, the minimum of the full '
              f'objective, solved in float64: {fstar["fstar_method"]} '
              f'({source}).'
              + (' Minibatch gradients stall at a noise floor above the '
                 'target, so this experiment compares fixed budgets.'
                 if experiment.stochastic else ''), '']
  lines += [markdown_table(experiment, result), '']
  lines += [f'At the target residual {sweep["target_residual"]:g} under both '
            'definitions: the first iterate k at or below it and the uploads '
            'and bits spent before it (— never reached). The paper\'s '
            'residual subtracts the smallest average worker loss any '
            'algorithm of this experiment reached, so some algorithm '
            'reaches 0 by construction.', '',
            target_table(experiment, result), '']
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
    for prefix in ('', 'grad_norm_'):
      shown = [f'![{experiment.name} {what}]({path})'
               for what, path in figures.items()
               if what != 'raster' and what.startswith(prefix)
               and (prefix or not what.startswith('grad_norm_'))]
      if shown:
        lines += [' '.join(shown), '']
    if 'raster' in figures:
      lines += [f'![{experiment.lazy} uploads]({figures["raster"]})', '']
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


# ----------------------------------------------------------------------------
# The cross-check: one row in three program shapes.

CROSSCHECK = 'crosscheck'
CROSSCHECK_EXPERIMENT = 'logreg'
CROSSCHECK_DEVICES = 2
CROSSCHECK_RUNS = {
    # name: (words, extra experiments.main arguments, extra environment)
    'single': ('run alone (experiments.main, workers vmapped)', (), {}),
    'devices': (f'workers on {CROSSCHECK_DEVICES} CPU devices (shard_map)',
                ('--config.workers_on=devices',),
                {'XLA_FLAGS': '--xla_force_host_platform_device_count='
                              f'{CROSSCHECK_DEVICES}',
                 'JAX_PLATFORMS': 'cpu'}),
}


def _crosscheck_config(experiment: paper.Experiment, name: str) -> dict:
  config = train.config_to_dict(paper.run_config(experiment,
                                                 experiment.lazy))
  if name == 'devices':
    config['workers_on'] = 'devices'
  return _as_json(config)


def run_crosscheck(experiment: paper.Experiment, workdir: pathlib.Path
                   ) -> list[str]:
  """Runs the lazy row of `experiment` alone and on devices (subprocesses of
  experiments.main, as a user would); returns the names that failed. Runs
  already in WORKDIR/crosscheck with the same config are kept."""
  failed = []
  arg = ','.join(a for a in (f'algo={experiment.lazy}', experiment.arg) if a)
  for name, (_, extra, env) in CROSSCHECK_RUNS.items():
    out = workdir / CROSSCHECK / name
    try:
      done = (json.loads((out / 'config.json').read_text())
              == _crosscheck_config(experiment, name)
              and (out / 'summary.json').is_file())
    except (OSError, ValueError):
      done = False
    if done:
      logging.info('cross-check %s: results already in %s', name, out)
      continue
    logging.info('cross-check %s: %s', name, CROSSCHECK_RUNS[name][0])
    command = [sys.executable, '-m', 'experiments.main',
               f'--config=configs/{experiment.config}.py:{arg}', *extra,
               f'--workdir={out}', '--overwrite', '--alsologtostderr']
    if subprocess.run(command, check=False,
                      env=dict(os.environ, **env)).returncode:
      failed.append(f'{CROSSCHECK}/{name}')
  return failed


def crosscheck(experiment: paper.Experiment, result: dict[str, Any],
               workdir: pathlib.Path) -> list[dict[str, Any]] | None:
  """Compares the grid program's lazy row with the cross-check runs.

  Returns:
    One dict per run found: name, words, uploads, first step with other
    upload decisions (None: none), max relative loss difference, final loss;
    None when no run is there.
  """
  c = result['curves']
  g = list(c['algo']).index(experiment.lazy)
  if 'uploads' not in c:
    return None
  grid_sent, grid_loss = c['uploads'][g], c['loss'][g]
  out = []
  for name, (words, _, _) in CROSSCHECK_RUNS.items():
    run_dir = workdir / CROSSCHECK / name
    try:
      run = train.load_run(run_dir)
    except FileNotFoundError:
      continue
    if run.config != _crosscheck_config(experiment, name):
      continue
    sent, loss = run.sent_TxM, run.metrics['loss']
    if sent.shape != grid_sent.shape:
      continue
    differ = np.flatnonzero((sent != grid_sent).any(axis=1))
    out.append({
        'name': name, 'words': words, 'uploads': int(sent.sum()),
        'first_other_upload': int(differ[0]) if differ.size else None,
        'max_relative_loss_difference': float(
            np.max(np.abs(loss - grid_loss) / np.abs(grid_loss))),
        'final_loss': run.summary['final_loss']})
  return out or None


def crosscheck_section(experiment: paper.Experiment, result: dict[str, Any],
                       checks: list[dict[str, Any]] | None) -> list[str]:
  """The report's cross-check table."""
  lines = [f'### Cross-check: the {experiment.lazy} row in three program '
           'shapes', '']
  if not checks:
    return lines + ['**Missing**: no cross-check runs in '
                    f'`{CROSSCHECK}/` (run without --report_only).', '']
  row = result['rows'][experiment.lazy]
  lines += ['The row above comes from the grid program (vmapped over the '
            'algorithms). The same run alone, and with its workers split '
            'over devices, orders its floating-point sums differently; the '
            'quantizer treats innovations within κR of zero as zero (κ = '
            '1e-9 in float64), so rounding noise cannot flip a code, and the '
            'upload decisions must agree at every step:', '',
            '| program | uploads | final loss | first step with other upload '
            'decisions | max relative loss difference |',
            '|---|---:|---:|---:|---:|',
            f'| grid program (the table) | {_fmt(row["total_uploads"])} | '
            f'{_fmt(row["final_loss"], "full")} | — | — |']
  for check in checks:
    first = check['first_other_upload']
    lines.append(f'| {check["words"]} | {_fmt(check["uploads"])} | '
                 f'{_fmt(check["final_loss"], "full")} | '
                 f'{"none" if first is None else _fmt(first)} | '
                 f'{check["max_relative_loss_difference"]:.1e} |')
  return lines + ['']


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
            'first iterate at the target). Residuals, two definitions: the '
            'exact f(θ^k) − f* (f = Σ_m f_m, f* solved in float64) and the '
            'paper\'s, the average worker loss f(θ^k)/M minus the smallest '
            'value any algorithm of the experiment reached (the authors\' '
            'scripts; their 1e-6 is on that average). Bits are exact: '
            'b*p + 32 per quantized upload, 32*p per full-precision one, '
            'for QSGD 32 plus a sign bit and the Elias-gamma code of each '
            'nonzero level, for SSGD 32 per kept value plus 32 for the '
            'seed of its mask (p parameters). Every worker uploads at '
            'k = 0 (Algorithm 1\'s initialization).', '']
  mlp = next((e for e in selected if e.name == 'mlp'), None)
  budget = ''
  if mlp is not None and results['mlp'] is not None and not quick:
    iters = results['mlp']['sweep']['num_iters']
    budget = (f' The full-batch MLP runs {iters:,} iterations'
              + (' (the authors\' budget).' if iters >= paper.MLP_FULL_ITERS
                 else f', not the authors\' {paper.MLP_FULL_ITERS:,}: this '
                 'report ran on a CPU-only machine (see its section).'))
  lines += ['Settings: the authors\' (`configs/*.py`; each section lists '
            'its hyperparameters): logistic regression at b = 4, the network '
            'at b = 8 (their network script), the minibatch experiments '
            'with their SLAQ settings on both models against SGD, QSGD and '
            'SSGD, as the paper does. Logistic regression in float64 (a '
            'residual of 1e-6 on f* ~ 5.6 is below float32\'s resolution), '
            'the MLP in float32.' + budget, '']
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
    sections += experiment_section(e, result, figures, workdir.name, quick)
    if e.name == CROSSCHECK_EXPERIMENT:
      checks = crosscheck(e, result, workdir)
      sections += crosscheck_section(e, result, checks)
      if checks:
        train.write_json(workdir / CROSSCHECK / 'crosscheck.json', checks)
        agree = all(c['first_other_upload'] is None for c in checks)
        summary.append(f'| {e.name} | the same uploads at every step in the '
                       'grid program, alone and on devices | '
                       f'{_verdict(agree)} |')
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


def select(only: Sequence[str] | None, quick: bool, mlp_iters: int
           ) -> list[paper.Experiment]:
  """configs/paper.py's experiments, or those named in `only`."""
  everything = paper.experiments(quick, mlp_iters)
  if not only:
    return list(everything)
  names = [e.name for e in everything]
  unknown = [n for n in only if n not in names]
  if unknown:
    raise app.UsageError(f'--only={",".join(only)}: unknown experiment(s) '
                         f'{", ".join(unknown)}; allowed: {", ".join(names)}')
  return [e for e in everything if e.name in only]


def mlp_iterations(workdir: pathlib.Path, report_only: bool) -> int:
  """The full-batch MLP's budget: --mlp_iters; else, rewriting a report,
  the budget of the results there; else by the machine (the authors'
  8,000 iterations with a GPU/TPU, paper.MLP_CPU_ITERS on a CPU)."""
  if FLAGS.mlp_iters:
    return FLAGS.mlp_iters
  if report_only:
    try:
      return int(json.loads((workdir / 'mlp' / 'config.json').read_text())
                 ['num_iters'])
    except (OSError, ValueError, KeyError):
      pass
  return paper.mlp_budget(jax.default_backend() != 'cpu')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  workdir = pathlib.Path(FLAGS.workdir)
  mlp_iters = mlp_iterations(workdir, FLAGS.report_only)
  selected = select(FLAGS.only, FLAGS.quick, mlp_iters)
  if FLAGS.in_process and not FLAGS.report_only:
    for experiment in selected:
      if not is_done(experiment, workdir):
        run_experiment(experiment, workdir, FLAGS.quick)
    return
  failed = []
  if not FLAGS.report_only:
    failed = run_all(selected, workdir, FLAGS.quick, mlp_iters)
    check = next((e for e in selected if e.name == CROSSCHECK_EXPERIMENT),
                 None)
    if check is not None and FLAGS.crosscheck:
      failed += run_crosscheck(check, workdir)
  report(paper.experiments(FLAGS.quick, mlp_iters), workdir, FLAGS.quick)
  logging.info('report: %s', workdir / REPORT)
  if FLAGS.copy_to:
    copied = copy_report(workdir, pathlib.Path(FLAGS.copy_to))
    logging.info('copied %d files to %s', len(copied), FLAGS.copy_to)
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  app.run(main)
