"""The paper report's sections that are not one experiment's own: the
timing against the roofline floors, the authors' scripts and the
cross-check (`experiments.studies.paper.report` assembles them)."""

from __future__ import annotations

import json
import pathlib
from typing import Any, Sequence

from configs import paper
from experiments.run import config as config_lib
from experiments.run import outputs
from experiments.run import roofline
from experiments.run.markdown import fmt, table
from experiments.studies.paper import claims as claims_lib
from experiments.studies.paper import paper_results as results_lib
from laq_jax import data as data_lib
from laq_jax import metrics
from laq_jax import plotting
from laq_jax import schedule as schedule_lib

FIGURE_DPI = 80


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


def floor_seconds(result: dict[str, Any], rates: dict[str, Any]) -> float:
  """What the machine's measured limits allow for an experiment's
  iterations (`experiments.run.roofline`): every grid point's matrix products
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
          ).integer_scale is not None, sweep.get('layout')),
      passes=(1 if ('vmap' in sweep['grid_axes'].values()
                    if 'grid_axes' in sweep else
                    config_lib.grid_axis(config) == 'vmap')
              else sweep['num_points']),
      hidden=config['hidden'], loss_every=loss_every(result))
  return sweep['num_iters'] * roofline.floor_seconds(cost, rates, precision)


def program_seconds(run: dict) -> float | None:
  """A run's seconds in its compiled program: its `run_time_s` less its
  `compile_time_s` (runs written before the compile time was measured: all
  of `run_time_s`)."""
  if run.get('run_time_s') is None:
    return None
  return run['run_time_s'] - (run.get('compile_time_s') or 0.0)


def timing_row(label: str, wall: float, run: dict, floor: float | None,
               total: dict, unmeasured: list) -> list[str]:
  """The timing table's cells of one run, from its wall time through wall
  / floor (`run`: its sweep.json or summary.json), added to `total`; a run
  without `compile_time_s` joins `unmeasured`."""
  program = program_seconds(run)
  compiling = run.get('compile_time_s')
  if compiling is None:
    unmeasured.append(label)
  total['wall'] += wall
  total['compile'] += compiling or 0.0
  total['program'] += program or 0.0
  total['floor'] += floor or 0.0
  if floor:  # (program / floor over the runs that have a floor)
    total['floored_program'] += program or 0.0
  return [label, fmt(wall, '.0f'), fmt(compiling, '.0f'), fmt(program, '.0f'),
          fmt(floor, '.0f'),
          fmt(program / floor if floor and program is not None else None,
              '.2f'),
          fmt(wall / floor if floor else None, '.2f')]


def timing_section(selected: Sequence[paper.Experiment],
                   results: dict[str, Any],
                   workdir: pathlib.Path | None = None) -> list[str]:
  """Where and how long each experiment ran, against what the machine's
  measured limits allow, and (with `workdir`) the cross-check and
  authors_code runs alone (one point each)."""
  # Measured limits by machine: an experiment that ran before the report
  # measured them borrows those of another run on the same machine.
  measured = {}
  for r in results.values():
    if r is not None and 'roofline' in r['info']:
      measured.setdefault(_hardware_line(r['info']), r['info']['roofline'])
  rows, machines = [], []
  total = {'wall': 0.0, 'compile': 0.0, 'program': 0.0, 'floor': 0.0,
           'floored_program': 0.0}
  unmeasured = []  # runs whose files predate compile_time_s
  borrowed = []
  below = []  # a wall under its floor: rates measured on a busy machine
  for e in selected:
    result = results[e.name]
    if result is None:
      rows.append([e.name, 'missing'] + [''] * 7)
      continue
    info = result['info']
    rates = info.get('roofline') or measured.get(_hardware_line(info))
    if 'roofline' not in info and rates is not None:
      borrowed.append(e.name)
    floor = floor_seconds(result, rates) if rates else None
    load = info['hardware'].get('load_average_at_start')
    rows.append(timing_row(e.name, info['wall_time_s'], result['sweep'],
                           floor, total, unmeasured)
                + [info['started_utc'], fmt(load[0] if load else None, '.1f')])
    if floor and info['wall_time_s'] < floor:
      below.append(e.name)
    if _hardware_line(info) not in machines:
      machines.append(_hardware_line(info))
  for e in selected if workdir is not None else ():
    result = results[e.name]
    if result is None:
      continue
    runs = []
    if e.name == results_lib.CROSSCHECK_EXPERIMENT:
      words = {name: results_lib.crosscheck_words(name, workdir)
               for name in results_lib.CROSSCHECK_RUNS}
      runs += [(f'{e.name} cross-check: {words[name].split(" (")[0]}',
                workdir / results_lib.CROSSCHECK / name)
               for name in results_lib.CROSSCHECK_RUNS]
    if e.name in results_lib.AUTHORS_EXPERIMENTS:
      runs.append((f'{e.name}: {e.lazy} with authors_code',
                   workdir / results_lib.AUTHORS / e.name))
    info = result['info']
    rates = info.get('roofline') or measured.get(_hardware_line(info))
    one = dict(result, sweep=dict(result['sweep'], num_points=1,
                                  grid_axes={}))
    floor = floor_seconds(one, rates) if rates else None
    for label, folder in runs:
      try:
        summary = json.loads((folder / 'summary.json').read_text())
      except (OSError, ValueError):
        continue
      wall = summary.get('wall_time_s')
      if wall is None:
        continue
      rows.append(timing_row(label, wall, summary, floor, total, unmeasured)
                  + ['', ''])
      if floor and wall < floor:
        below.append(label)
  extra = []  # run beside the experiments, no floor measured: not in total
  lasg = workdir / results_lib.LASG / 'sweep.json' if workdir else None
  if lasg is not None and lasg.is_file() and any(
      e.name == results_lib.LASG_EXPERIMENT for e in selected):
    try:
      info = json.loads(lasg.read_text())
      extra.append([f'{results_lib.LASG_EXPERIMENT}: LASG and CADA beside '
                    'sgd and slaq (one program; not in the total)',
                    fmt(info['wall_time_s'], '.0f'),
                    fmt(info.get('compile_time_s'), '.0f'),
                    fmt(program_seconds(info), '.0f'), '', '', '', '', ''])
    except (OSError, ValueError, KeyError):
      pass
  if total['floor']:
    rows.append(['**total**', fmt(total['wall'], '.0f'),
                 fmt(total['compile'], '.0f') if not unmeasured else '',
                 fmt(total['program'], '.0f'), fmt(total['floor'], '.0f'),
                 fmt(total['floored_program'] / total['floor'], '.2f'),
                 fmt(total['wall'] / total['floor'], '.2f'), '', ''])
  lines = ['## Hardware and wall time', '', table(
      ['experiment', 'wall time (s)', 'compiling (s)',
       'in the compiled program (s)', 'floor (s)', 'program / floor',
       'wall / floor', 'started (UTC)', 'load average at start'],
      rows + extra, 'lrrrrrrlr')]
  lines += ['', f'Total: {total["wall"]:.0f} s. The wall time includes '
            'loading MNIST, compiling, f* (cached after its first solve) and '
            'the test accuracy; "compiling" is the time the run spent '
            'tracing, lowering and compiling its programs or loading them '
            'from the persistent cache (`jax.monitoring`), "in the compiled '
            'program" the rest of the run: its iterations and, between its '
            'chunks, the test accuracy. The algorithms of an experiment share '
            'one program, so their times are not separable. The machine may '
            'have been shared (see the load average).', '']
  if unmeasured:
    lines += [f'Runs made before the compile time was measured '
              f'({", ".join(unmeasured)}) count their compiling in the '
              'program\'s time and leave "compiling" empty (and the total '
              'with them).', '']
  if below:
    lines += [f'A wall time below its floor ({", ".join(below)}) is '
              'impossible on an idle machine: the rates behind that floor '
              'were measured at the start of its experiment while the '
              'machine was busy (its load average), so they are too low, the '
              'floors computed from them too high and those ratios too low; '
              'the wall times stand as measured.', '']
  if measured:
    lines += [
        'The floor is what this machine\'s limits allow for the '
        'experiment\'s iterations: per iteration, every algorithm\'s '
        'gradient matrix products (and in the minibatch experiments the '
        'loss on all training images at the iterations the trace logs it, '
        'every `loss_every`) at the dense-matmul rate, or one pass per algorithm '
        'over the training features (and one over its minibatch rows) at '
        'the read bandwidth, whichever is longer, plus, in the minibatch '
        'experiments, the minibatch draws at the draw\'s rate, all measured '
        'on the machine at the start of the experiment '
        '(`experiments/run/roofline.py`; here '
        f'{"; ".join(fmt_rate(r) for r in measured.values())}). Not in the '
        'floor: compiling, loading, f*, the test accuracy and the '
        'elementwise work (softmax, ReLU, the quantizer and the trigger, '
        'O(M p) per algorithm and iteration).'
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
  draw = rates.get('draw_rows_per_s')
  return (f'dense matmul {", ".join(parts)}; read bandwidth '
          f'{rates["read_bytes_per_s"] / 1e9:.1f} GB/s'
          + (f'; minibatch draw {draw / 1e6:.1f} M rows/s' if draw else ''))


def labelled(curve, row: dict[str, Any]):
  """A figure's curve, its label naming where its row diverged
  (`claims.diverged_short`)."""
  short = claims_lib.diverged_short(row)
  return curve._replace(label=f'{curve.label}, {short}') if short else curve


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
  at = results_lib.authors_diverged_at(run)
  authors = {**s, 'diverged': at is not None, 'diverged_at': at}
  entries = [(f'{base} (the table)', rows[base]),
             (f'{lazy} (the table: Algorithm 1)', rows[lazy]),
             (f'{lazy}, authors_code', authors)]
  away = [claims_lib.diverged_short(r) for _, r in entries]
  body = [[name, fmt(r['total_uploads'], 'int'), fmt(r['total_bits'], 'int'),
           fmt(r['final_loss'], 'sci'), fmt(r['final_test_accuracy'], 'pct')]
          + ([note.replace('diverged ', '')] if any(away) else [])
          for (name, r), note in zip(entries, away)]
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
                   'test accuracy'] + (['diverged'] if any(away) else []),
                  body, 'lrrrr' + ('l' if any(away) else '')), '']
  ratio = lambda a, b: a / b if b else float('nan')
  upload_ratio = ratio(s['total_uploads'], rows[base]['total_uploads'])
  bit_ratio = ratio(s['total_bits'], rows[base]['total_bits'])
  acc = claims_lib.accuracy_gap({lazy: authors, base: rows[base]}, lazy,
                                base)
  if metrics.row_divergence(authors) or metrics.row_divergence(rows[base]):
    lines += [f'With authors_code {lazy} is not compared with {base}: '
              + '; '.join(f'{name} {metrics.row_divergence(r)}'
                          for name, r in ((f'{lazy}, authors_code', authors),
                                          (base, rows[base]))
                          if metrics.row_divergence(r)) + '.', '']
  else:
    lines += [f'With authors_code {lazy} uses {upload_ratio:.3f}x '
              f'{base}\'s uploads and {bit_ratio:.4f}x its bits, at '
              + (f'{acc:+.2f} percentage points of test accuracy'
                 if acc is not None else 'no accuracy to compare')
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
  curves = [labelled(results_lib.curve(result, a, 'loss'), rows[a])
            for a in (base, lazy)]
  curves.append(labelled(outputs.run_curve(run, f'{lazy}, authors_code',
                                           residual=False), authors))
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
  common = ('The same run alone compiles only its own parts, and with its '
            'workers split over devices it sums their messages across '
            'devices; the quantizer treats innovations within κR of zero as '
            'zero (κ = 1e-9 in float64), so rounding noise cannot flip a '
            'code.')
  if results_lib.grid_axis_of(result) == 'map':
    lines += ['The row above comes from the grid program (the four '
              'algorithms one after another inside one compiled program, '
              '`grid_axis=\'map\'`). ' + common + ' The upload decisions '
              'must agree at every step:', '']
  else:
    lines += ['The row above comes from the grid program with its four '
              'points vmapped (`grid_axis=\'auto\'`, which vmaps full-batch '
              'logistic regression: one pass over the data for all four '
              'points, their logits one product against the stacked '
              'weights). Its matrix products are wider than a single run\'s, '
              'so they add in another order, and a point agrees with its run '
              'alone to rounding, not bit for bit: an upload decision at its '
              'threshold can go the other way, after which the runs part. '
              + common + ' The run alone and the run on devices must agree '
              'at every step; the grid row is compared with them below '
              '(`grid_axis=\'map\'` gives a grid whose points equal their '
              'runs alone bit for bit, tests/sweep_test.py):', '']
  checks = [dict(c) for c in checks]
  for c in checks:
    if c['name'] != 'single' and 'first_other_upload_vs_single' in c:
      c['words'] += (' (vs run alone: ' + (
          'the same uploads at every step' if
          c['first_other_upload_vs_single'] is None else
          f"other upload decisions from step "
          f"{c['first_other_upload_vs_single']}") + ')')
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


