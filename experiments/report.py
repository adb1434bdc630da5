"""The report of `experiments.reproduce`: REPORT.md, its tables and figures.

    text = report(experiments, workdir, quick)    # writes WORKDIR/REPORT.md

Every number is read from the per-experiment results
(`experiments.paper_results`); the claims are computed
(`experiments.claims`), not written by hand.
"""

from __future__ import annotations

import pathlib
import re
import shutil
from typing import Any, Sequence

from configs import paper
from experiments import claims as claims_lib
from experiments import config as config_lib
from experiments import outputs
from experiments import paper_results as results_lib
from experiments import roofline
from experiments.markdown import columns_table, fmt, table
from laq_jax import data as data_lib
from laq_jax import plotting
from laq_jax import schedule as schedule_lib

REPORT = 'REPORT.md'
FIGURE_DPI = 80


def write_figures(experiment: paper.Experiment, result: dict[str, Any],
                  workdir: pathlib.Path) -> dict[str, str]:
  """The overlaid loss figures (the squared gradient norm's too when f* is
  unknown, as the authors plot for the network) and the lazy algorithm's
  raster.

  Returns:
    {what: path relative to workdir}.
  """
  quantity = results_lib.main_quantity(result)
  sets = [('', quantity, outputs.FIGURES)]
  if quantity != 'residual':
    sets.append(('grad_norm_', 'grad_norm_sq', outputs.GRAD_NORM_FIGURES))
  out = {}
  for prefix, what, names in sets:
    curves = [results_lib.curve(result, a, what) for a in experiment.algos]
    for x, fig in plotting.loss_figures(curves,
                                        title=experiment.title).items():
      path = f'{experiment.name}/{names[x]}'
      outputs.save_figure(fig, workdir / path, dpi=FIGURE_DPI)
      out[prefix + x] = path
  uploads = result['curves'].get('uploads')
  if uploads is not None:
    g = list(result['curves']['algo']).index(experiment.lazy)
    path = f'{experiment.name}/upload_raster_{experiment.lazy}.png'
    outputs.save_figure(plotting.upload_raster(uploads[g],
                                             title=experiment.lazy),
                      workdir / path, dpi=FIGURE_DPI)
    out['raster'] = path
  return out


TABLE_COLUMNS = (
    # (header, results.csv column, format)
    ('iterations', 'iterations', 'int'),
    ('uploads', 'total_uploads', 'int'),
    ('bits', 'total_bits', 'int'),
    ('test accuracy', 'final_test_accuracy', 'pct'),
)
RESIDUAL_COLUMNS = (('final residual f − f*', 'final_residual', 'sci'),
                    ('final training loss f(θ^T)', 'final_loss', 'sci'))
LOSS_COLUMNS = (('final training loss f(θ^T)', 'final_loss', 'sci'),
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


def _table(algos, rows, columns) -> str:
  return columns_table([rows[a] for a in algos], columns,
                       ('algorithm', 'algo'))


def markdown_table(experiment: paper.Experiment, result: dict[str, Any]
                   ) -> str:
  """The paper-style table, one row per algorithm (results.csv's numbers)."""
  return _table(experiment.algos, result['rows'], table_columns(result))


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
  return _table(experiment.algos, rows, columns)


def _hardware_line(info: dict[str, Any]) -> str:
  hw = info['hardware']
  return (f'{hw["cpu"]}, {hw["cores_available"]} core(s) available; '
          f'JAX {hw["jax"]} (jaxlib {hw["jaxlib"]}), backend '
          f'{hw["backend"]}, Python {hw["python"]}, {hw["platform"]}')

def loss_every(result: dict[str, Any]) -> int:
  """The experiment's logged-loss interval (1 for results written before
  `loss_every` existed)."""
  values = {int(r.get('loss_every') or 1)
            for r in result.get('rows', {}).values()}
  return max(values) if values else 1


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
  schedule = c.get('xi_schedule') or ''
  xi_text = (f'xi = {c["xi"]:g}' + (f' with xi_schedule {schedule!r} ('
                                    + ', '.join(
                                        f'{factor:g}x from k = {step:,}'
                                        for step, factor in
                                        schedule_lib.parse(schedule)) + ')'
                                    if schedule else ''))
  every = loss_every(result)
  if experiment.source:
    settings += f' Settings from the authors\' script: {experiment.source}.'
  hyper = (f'Hyperparameters: alpha = {c["step_size"]:g}, b = {c["bits"]}, '
           f'D = {c["memory"]}, {xi_text}, c_e = {c["err_weight"]:g}, '
           f'c_0 = {c["threshold_offset"]:g}, tbar = {c["max_staleness"]}, '
           f'lam = {c["l2"]:g}, split {c["split"]}, training images '
           f'{c["train_subset"] or "all 60,000"}'
           + (f', minibatch {c["batch_size"]} per worker, QSGD s = '
              f'{c["levels"]:,} levels, SSGD p = {c["keep_prob"]:g}'
              if experiment.stochastic else ', full batch')
           + ('; Algorithm 1 as written (authors_code off)'
              if not c.get('authors_code') else '; authors_code on')
           + '.')
  if every > 1:
    hyper += (f' The full training objective f(θ^k) is logged every {every} '
              'iterations (`loss_every`; f(θ^T) after the run): targets are '
              'the first logged iterate at or below them, and the figures '
              'draw the logged iterates.')
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
  notes = [claims_lib.upload_note(result, a) for a in experiment.algos]
  if all(notes):
    lines += ['Uploads after the k = 0 initialization (every worker uploads '
              'at k = 0): ' + '; '.join(notes) + '.', '']
  lines += [f'Wall time: {info["wall_time_s"]:.0f} s for the experiment '
            f'({sweep["run_time_s"]:.0f} s in the compiled program, '
            f'{sweep["point_iterations_per_s"]:g} algorithm-iterations/s), '
            f'started {info["started_utc"]}.', '']
  lines += ['Claims:', '', table(
      ['claim', 'verdict', 'numbers'],
      [[c['claim'], f'**{claims_lib.verdict(c["holds"])}**', c['evidence']]
       for c in claims_lib.claims(experiment, result)], 'lll'), '']
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


def floor_seconds(result: dict[str, Any], rates: dict[str, Any]) -> float:
  """What the machine's measured limits allow for an experiment's
  iterations (`experiments.roofline`): every grid point's matrix products
  at the dense-matmul rate, or the passes over the training features at the
  read bandwidth (one per point and iteration when the points are mapped,
  the default; one per iteration when vmapped), whichever is longer."""
  config, sweep = result['config'], result['sweep']
  num_train = sweep.get('num_train') or config.get('train_subset') or (
      config_lib.MNIST_TRAIN_SIZE)
  stochastic = config['algo'] in paper.STOCHASTIC or bool(
      set(config['sweep'].get('algo', ())) & set(paper.STOCHASTIC))
  precision = config['precision']
  cost = roofline.cost(
      config['model'], num_train, sweep['num_points'], stochastic=stochastic,
      batch_samples=config['batch_size'] * config['num_workers'],
      feature_bytes=roofline.feature_bytes(
          config['model'], precision, data_lib.REGISTRY.get(
              config_lib.parse_dataset(config['dataset'])[0]
          ).integer_scale is not None),
      passes=(sweep['num_points']
              if config_lib.grid_axis(config) == 'map' else 1),
      hidden=config['hidden'], loss_every=loss_every(result))
  return sweep['num_iters'] * roofline.floor_seconds(cost, rates, precision)


def timing_section(selected: Sequence[paper.Experiment],
                   results: dict[str, Any]) -> list[str]:
  """Where and how long each experiment ran, against what the machine's
  measured limits allow."""
  # Measured limits by machine: an experiment that ran before the report
  # measured them borrows those of another run on the same machine.
  measured = {}
  for r in results.values():
    if r is not None and 'roofline' in r['info']:
      measured.setdefault(_hardware_line(r['info']), r['info']['roofline'])
  rows, machines = [], []
  total = {'wall': 0.0, 'program': 0.0, 'floor': 0.0}
  borrowed = []
  for e in selected:
    result = results[e.name]
    if result is None:
      rows.append([e.name, 'missing', '', '', '', '', ''])
      continue
    info = result['info']
    rates = info.get('roofline') or measured.get(_hardware_line(info))
    if 'roofline' not in info and rates is not None:
      borrowed.append(e.name)
    floor = floor_seconds(result, rates) if rates else None
    total['wall'] += info['wall_time_s']
    total['program'] += result['sweep']['run_time_s']
    total['floor'] += floor or 0.0
    load = info['hardware'].get('load_average_at_start')
    rows.append([e.name, fmt(info['wall_time_s'], '.0f'),
                 fmt(result['sweep']['run_time_s'], '.0f'),
                 fmt(floor, '.0f'),
                 fmt(info['wall_time_s'] / floor if floor else None, '.2f'),
                 info['started_utc'], fmt(load[0] if load else None, '.1f')])
    if _hardware_line(info) not in machines:
      machines.append(_hardware_line(info))
  if total['floor']:
    rows.append(['**total**', fmt(total['wall'], '.0f'),
                 fmt(total['program'], '.0f'), fmt(total['floor'], '.0f'),
                 fmt(total['wall'] / total['floor'], '.2f'), '', ''])
  lines = ['## Hardware and wall time', '', table(
      ['experiment', 'wall time (s)', 'in the compiled program (s)',
       'floor (s)', 'wall / floor', 'started (UTC)', 'load average at start'],
      rows, 'lrrrrlr')]
  lines += ['', f'Total: {total["wall"]:.0f} s. The wall time includes '
            'loading MNIST, compiling, f* (cached after its first solve) and '
            'the test accuracy; the algorithms of an experiment share one '
            'program, so their times are not separable. The machine may have '
            'been shared (see the load average).', '']
  if measured:
    lines += [
        'The floor is what this machine\'s limits allow for the '
        'experiment\'s iterations: per iteration, every algorithm\'s '
        'gradient matrix products (and in the minibatch experiments the '
        'loss on all training images at the iterations the trace logs it, '
        'every `loss_every`) at the dense-matmul rate, or one pass per algorithm '
        'over the training features at the read bandwidth, whichever is '
        'longer, both measured '
        'on the machine at the start of the experiment '
        '(`experiments/roofline.py`; here '
        f'{"; ".join(fmt_rate(r) for r in measured.values())}). Not in the '
        'floor: compiling, loading, f*, the test accuracy, the elementwise '
        'work (softmax, ReLU, the quantizer and the trigger, O(M p) per '
        'algorithm and iteration) and, in the minibatch experiments, '
        'drawing the minibatches.'
        + (f' {", ".join(borrowed)} ran before the report measured its own '
           'limits: its floor uses those measured for the other '
           'experiments on the same machine.' if borrowed else ''), '']
  lines += [f'Hardware: {m}.' for m in machines] + ['']
  return lines


def fmt_rate(rates: dict[str, Any]) -> str:
  """'dense matmul 201 GFLOP/s in float32, 90 GFLOP/s in float64; read
  bandwidth 12.3 GB/s'."""
  flops = rates['matmul_flops_per_s']
  parts = [f'{flops[d] / 1e9:.0f} GFLOP/s in {d}' for d in flops]
  return (f'dense matmul {", ".join(parts)}; read bandwidth '
          f'{rates["read_bytes_per_s"] / 1e9:.1f} GB/s')


def authors_section(experiment: paper.Experiment, result: dict[str, Any],
                    run, workdir: pathlib.Path) -> list[str]:
  """The lazy row beside the same row run as the authors' scripts run it
  (`authors_code`), with the baseline, and a loss figure of the three."""
  lazy, base = experiment.lazy, experiment.baseline
  lines = [f'### {lazy} as the authors\' scripts run it (`authors_code`)',
           '']
  if run is None:
    return lines + [f'Not run: `authors_code/{experiment.name}/` holds no '
                    'finished run of this config (`experiments.reproduce` '
                    'runs it unless `--noauthors_code`).', '']
  rows = result['rows']
  s = run.summary
  entries = [(f'{base} (the table)', rows[base]),
             (f'{lazy} (the table: Algorithm 1)', rows[lazy]),
             (f'{lazy}, authors_code', s)]
  body = [[name, fmt(r['total_uploads'], 'int'), fmt(r['total_bits'], 'int'),
           fmt(r['final_loss'], 'sci'), fmt(r['final_test_accuracy'], 'pct')]
          for name, r in entries]
  lines += ['The table\'s row follows Algorithm 1 (every worker uploads at '
            'k = 0; xi_d = xi / D on the D newest steps from k = 1 on; '
            'minibatches drawn from the whole shard; b p + 32 bits). The '
            'authors\' minibatch scripts differ (docs/algorithm.md, "where '
            'this implementation reads the paper"): no forced upload at '
            'k = 0, a history window read from a rolling buffer that is '
            'empty for k <= D/2 and holds D - 1 steps later, one of the '
            'shard\'s fixed blocks per step, b p bits. The same settings '
            'with `authors_code=True`:', '',
            table(['run', 'uploads', 'bits', 'final training loss f(θ^T)',
                   'test accuracy'], body, 'lrrrr'), '']
  ratio = lambda a, b: a / b if b else float('nan')
  upload_ratio = ratio(s['total_uploads'], rows[base]['total_uploads'])
  bit_ratio = ratio(s['total_bits'], rows[base]['total_bits'])
  acc = (None if s['final_test_accuracy'] is None
         or rows[base]['final_test_accuracy'] is None else
         100 * (s['final_test_accuracy'] - rows[base]['final_test_accuracy']))
  lines += [f'With authors_code {lazy} uses {upload_ratio:.3f}x {base}\'s '
            f'uploads and {bit_ratio:.4f}x its bits, at '
            + (f'{acc:+.2f} percentage points of test accuracy'
               if acc is not None else 'no accuracy (diverged)')
            + f' (the claims\' thresholds: at most '
            f'{claims_lib.FAR_FEWER:g}x, within '
            f'{claims_lib.ACCURACY_POINTS:g} point).', '']
  uploads = result['curves'].get('uploads')
  if uploads is not None:
    table_sent = uploads[list(result['curves']['algo']).index(lazy)]
    edges = [0] + [k for k, _ in schedule_lib.parse(
        result['config'].get('xi_schedule') or '')] + [len(table_sent)]
    edges = sorted(set(e for e in edges if e <= len(table_sent)))
    spans = list(zip(edges[:-1], edges[1:]))
    rate = lambda sent, a, b: (100 * sent[a:b].sum() / max(b - a, 1)
                               / sent.shape[1])
    lines += ['Uploads per worker per 100 iterations, by the phases of xi\'s '
              'schedule (tbar = 100 forces at least 1):', '',
              table(['run'] + [f'k = {a:,}..{b - 1:,}' for a, b in spans],
                    [[name] + [f'{rate(sent, a, b):.1f}' for a, b in spans]
                     for name, sent in ((f'{lazy} (Algorithm 1)', table_sent),
                                        (f'{lazy}, authors_code',
                                         run.sent_TxM))],
                    'l' + 'r' * len(spans)), '']
  curves = [results_lib.curve(result, a, 'loss') for a in (base, lazy)]
  curves.append(outputs.run_curve(run, f'{lazy}, authors_code',
                                  residual=False))
  path = f'{experiment.name}/authors_code_loss_vs_iterations.png'
  outputs.save_figure(plotting.loss_figure(
      curves, 'iterations', title=f'{experiment.name}: Algorithm 1 vs '
      'authors_code'), workdir / path, dpi=FIGURE_DPI)
  lines += [f'![{experiment.name} authors_code]({path})', '']
  return lines


def crosscheck_section(experiment: paper.Experiment, result: dict[str, Any],
                       checks: list[dict[str, Any]] | None) -> list[str]:
  """The report's cross-check table."""
  lines = [f'### Cross-check: the {experiment.lazy} row in three program '
           'shapes', '']
  if not checks:
    return lines + ['**Missing**: no cross-check runs in '
                    f'`{results_lib.CROSSCHECK}/` (run without '
                    '--report_only).', '']
  row = result['rows'][experiment.lazy]
  lines += ['The row above comes from the grid program (the four '
            'algorithms one after another inside one compiled program, '
            '`grid_axis=\'map\'`). The same run alone compiles only its own '
            'parts, and with its workers split over devices it sums their '
            'messages across devices; the quantizer treats innovations '
            'within κR of zero as zero (κ = 1e-9 in float64), so rounding '
            'noise cannot flip a code. The upload decisions must agree at '
            'every step:', '']
  rows = [['grid program (the table)', fmt(row['total_uploads']),
           fmt(row['final_loss'], 'full'), fmt(None), fmt(None)]]
  for check in checks:
    first = check['first_other_upload']
    rows.append([check['words'], fmt(check['uploads']),
                 fmt(check['final_loss'], 'full'),
                 'none' if first is None else fmt(first),
                 fmt(check['max_relative_loss_difference'], '.1e')])
  return lines + [table(['program', 'uploads', 'final loss',
                         'first step with other upload decisions',
                         'max relative loss difference'], rows), '']


def report(selected: Sequence[paper.Experiment], workdir: pathlib.Path,
           quick: bool) -> str:
  """Writes the figures and WORKDIR/REPORT.md; returns the report's text."""
  results = {e.name: results_lib.load_results(e, workdir) for e in selected}
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
  lines += [f'Definitions: "far fewer" = at most {claims_lib.FAR_FEWER:g}x the other '
            f'algorithm\'s count; "similar accuracy" = within '
            f'{claims_lib.ACCURACY_POINTS:g} percentage point of the unquantized, '
            'non-lazy baseline (GD or SGD); "linear convergence" = a '
            f'least-squares line through log10 residual against k with '
            f'R^2 >= {claims_lib.LINEAR_R2:g} and negative slope (fitted up to the '
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
            'its hyperparameters and the script they come from): logistic '
            'regression at b = 4 (`LAQ.py`), the network at b = 8 (their '
            'network script, `GD/lasterrtwiceDNN.py`), the minibatch '
            'experiments against SGD, QSGD and SSGD as the paper does, each '
            'model at its own script\'s settings: logistic regression at '
            'the NeurIPS `SLAQ.py`\'s (b = 3, alpha = 0.008, c_e = 1.5, '
            'c_0 = 0.2), the network at `SGD/lasterrsgdDNN.py`\'s (b = 6, '
            'alpha = 0.02, c_e = 3, c_0 = 0, xi = 3 doubled from k = 300 and '
            '6x from k = 500). Logistic regression in float64 (a residual '
            'of 1e-6 on f* ~ 5.6 is below float32\'s resolution), the MLP '
            'in float32.' + budget, '']
  missing = [e.name for e in selected if results[e.name] is None]
  summary = []  # (experiment, claim, verdict)
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
    for c in claims_lib.claims(e, result):
      summary.append([e.name, c['claim'], claims_lib.verdict(c['holds'])])
    sections += experiment_section(e, result, figures, workdir.name, quick)
    if e.name in results_lib.AUTHORS_EXPERIMENTS:
      sections += authors_section(e, result,
                                  results_lib.authors_run(e, workdir),
                                  workdir)
    if e.name == results_lib.CROSSCHECK_EXPERIMENT:
      checks = results_lib.crosscheck(e, result, workdir)
      sections += crosscheck_section(e, result, checks)
      if checks:
        outputs.write_json(
            workdir / results_lib.CROSSCHECK / 'crosscheck.json', checks)
        agree = all(c['first_other_upload'] is None for c in checks)
        summary.append([e.name, 'the same uploads at every step in the grid '
                        'program, alone and on devices',
                        claims_lib.verdict(agree)])
  lines += ['## Summary of the claims', '',
            table(['experiment', 'claim', 'verdict'], summary, 'lll')]
  if missing:
    lines += ['', f'**Missing experiments**: {", ".join(missing)}.']
  lines += [''] + timing_section(selected, results) + sections
  text = '\n'.join(lines)
  outputs.atomic_write(workdir / REPORT, text)
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
