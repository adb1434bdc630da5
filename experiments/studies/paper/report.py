"""The report of `experiments.reproduce`: REPORT.md, its tables and figures.

    text = report(experiments, workdir, budget)   # writes WORKDIR/REPORT.md

Every number is read from the per-experiment results
(`experiments.studies.paper.paper_results`); the claims are computed
(`experiments.studies.paper.claims`), not written by hand. A point that
diverged (the one rule, `laq_jax.metrics.diverged_at`: a logged loss NaN/inf
or above 10x f(theta^0)) is named with its iteration in its tables' rows, in
a sentence under them, in the summary and in the figures' legends (a curve
that ran away drawn dashed and clipped), and left out of every comparison
and claim.
"""

from __future__ import annotations

import pathlib
from typing import Any, Sequence

from configs import paper
from experiments.run import outputs
from experiments.run.markdown import columns_table, table
from experiments.studies.paper import claims as claims_lib
from experiments.studies.paper import paper_results as results_lib
# (floor_seconds and fmt_rate are also read from here)
from experiments.studies.paper.report_sections import (  # noqa: F401
    FIGURE_DPI, authors_section, crosscheck_section, floor_seconds, fmt_rate,
    labelled, loss_every, program_seconds, timing_section)
from laq_jax import metrics
from laq_jax import plotting
from laq_jax import schedule as schedule_lib

REPORT = 'REPORT.md'
# The summary's two readings of the lazy rows.
ALGORITHM_1 = 'Algorithm 1'
AUTHORS_SCRIPTS = "the authors' scripts"
LASG_READING = 'LASG, CADA (their code\'s settings)'


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
    curves = [labelled(results_lib.curve(result, a, what), result['rows'][a])
              for a in experiment.algos]
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


def divergence_column(rows: dict[str, dict], algos: Sequence[str]
                      ) -> tuple[dict[str, dict], tuple[str, str, str]] | None:
  """The tables' 'diverged' column (rows with its cell added, the column),
  only when some row diverged; None when none did."""
  notes = {a: claims_lib.diverged_short(rows[a]) for a in algos}
  if not any(notes.values()):
    return None
  return ({a: {**rows[a], '_diverged': notes[a].replace('diverged ', '')}
           for a in algos}, ('diverged', '_diverged', 's'))


def diverged(rows: dict[str, dict], algos: Sequence[str]) -> list[str]:
  """The algorithms whose rows diverged (`metrics.row_divergence`)."""
  return [a for a in algos if metrics.row_divergence(rows[a])]


def divergence_lines(rows: dict[str, dict], algos: Sequence[str]
                     ) -> list[str]:
  """The sentence under a table naming the rows that diverged."""
  away = diverged(rows, algos)
  if not away:
    return []
  return [f'**Diverged**: '
          + '; '.join(f'{a} {metrics.row_divergence(rows[a])}' for a in away)
          + ('. Its row is' if len(away) == 1 else '. Their rows are')
          + ' shown as run, but left out of every comparison and claim: no '
          'figure of a diverged row is compared, not even a target reached '
          'before it diverged. The figures\' legends name it, and a curve '
          'that ran away is drawn dashed and clipped.', '']


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
  """One line per algorithm; a 'diverged' column when some row diverged."""
  marked = divergence_column(rows, algos)
  if marked is not None:
    rows, column = marked
    columns = tuple(columns) + (column,)
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


def experiment_section(experiment: paper.Experiment, result: dict[str, Any],
                       figures: dict[str, str], workdir_name: str,
                       budget: str) -> list[str]:
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
              f'{c["params"]["qsgd"]["levels"]:,} levels, SSGD p = '
              f'{c["params"]["rand_p"]["keep_prob"]:g}'
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
  if experiment.name == 'mlp' and budget == 'full' and (
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
  lines += divergence_lines(result['rows'], experiment.algos)
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
  compiling = (f', {sweep["compile_time_s"]:.0f} s compiling'
               if sweep.get('compile_time_s') is not None else '')
  lines += [f'Wall time: {info["wall_time_s"]:.0f} s for the experiment '
            f'({program_seconds(sweep):.0f} s in the '
            f'compiled program{compiling}, '
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
            f'--only={experiment.name}{paper.budget_flag(budget)}']
  lines += [paper.main_command(experiment, a,
                               f'runs/{workdir_name}_rows/{experiment.name}/'
                               f'{a}') for a in experiment.algos]
  lines += ['```', '']
  return lines


def lasg_section(sweep: dict[str, Any] | None, budget: str) -> list[str]:
  """LASG and CADA beside sgd and slaq at the minibatch network's settings
  (WORKDIR/lasg_network, configs/lasg.py), with the simulated seconds."""
  from experiments.studies.lasg import report as lasg_report  # pylint: disable=g-import-not-at-top
  title = ('### LASG and CADA at these settings: do the same-sample '
           'triggers survive where SLAQ runs away?')
  variant = results_lib.lasg_variant(budget)
  if sweep is None:
    return [title, '', f'Not run: `{results_lib.LASG}/` holds no finished '
            f'sweep of `configs/lasg.py:{variant}` (`experiments.reproduce` '
            'runs it unless `--nolasg`).', '']
  lines = lasg_report.section('', sweep)[2:]  # its table and verdict
  lines += divergence_lines({r['algo']: r for r in sweep['rows']},
                            [r['algo'] for r in sweep['rows']])
  return [title, '',
          f'`configs/lasg.py:{variant}` (`{results_lib.LASG}/`): sgd and '
          'slaq at the settings above, run again in one program beside '
          'LASG\'s triggers at the constants of their authors\' code '
          '(sunyuejiao/lasg: xi = 1, a forced upload after 49 skips, no '
          'error terms; PS\'s L = 10), the same with LAQ\'s quantizer at '
          'b = 6 and c_e = 3 (`_laq`, our combination), and CADA at its '
          'code\'s Adam settings (step 5e-4; ChrisYZZ/CADA-master). LASG '
          'and CADA compare two gradients on the SAME minibatch, so their '
          'test carries no sampling noise (docs/algorithm.md, "LASG and '
          'CADA"). "gradients": what the workers computed (two per pair); '
          'the seconds replay each run\'s per-worker bits, downloads and '
          'gradients on the three network profiles.', ''] + lines + [
              'Redo it alone: `python -m experiments.sweep '
              f'--config=configs/lasg.py:{variant} '
              '--workdir=runs/lasg/network`.', '']


def _checked(checks) -> str:
  return f'{", ".join(c["name"] for c in checks)} against the grid'


def report(selected: Sequence[paper.Experiment], workdir: pathlib.Path,
           budget: str) -> str:
  """Writes the figures and WORKDIR/REPORT.md; returns the report's text."""
  results = {e.name: results_lib.load_results(e, workdir) for e in selected}
  command = ('python -m experiments.reproduce --workdir '
             f'{workdir}{paper.budget_flag(budget)}')
  lines = ['# LAQ (Sun, Chen, Giannakis, Yang, NeurIPS 2019) reproduced on '
           'MNIST' + ('' if budget == 'full' else f' — {budget} budget'), '',
           f'Produced by `{command}` (laq-jax). Every number below is read '
           'from the per-experiment results (`NAME/results.csv`, '
           '`NAME/curves.npz`); the claims are computed from them, not '
           'written by hand.', '']
  if budget == 'quick':
    lines += [f'**Quick budget**: the first 6,000 training images, few '
              f'iterations, target residual {paper.QUICK_TARGET:g} instead '
              'of 1e-6. What it shows is the shape of the comparison, not '
              "the paper's numbers; run without `--quick` for those.", '']
  elif budget == 'tiny':
    lines += ['**Tiny budget** (the test suite\'s): the first 600 training '
              'images, 30 iterations (the convex run 200, target residual '
              f'{paper.TINY_TARGET:g}), minibatches of 20. It checks the '
              'pipeline and the report, not the paper: run without `--tiny` '
              'for the comparison.', '']
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
  mlp_note = ''
  if mlp is not None and results['mlp'] is not None and budget == 'full':
    iters = results['mlp']['sweep']['num_iters']
    mlp_note = (f' The full-batch MLP runs {iters:,} iterations'
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
            'in float32.' + mlp_note, '']
  missing = [e.name for e in selected if results[e.name] is None]
  summary = []  # (experiment, claim, verdict)
  away = []  # 'experiment: algo diverged at k=…'
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
    away += [f'{e.name}: {a} '
             f'{claims_lib.diverged_short(result["rows"][a])}'
             for a in diverged(result['rows'], e.algos)]
    for c in claims_lib.claims(e, result):
      summary.append([e.name, ALGORITHM_1, c['claim'],
                      claims_lib.verdict(c['holds']), c['brief']])
    sections += experiment_section(e, result, figures, workdir.name, budget)
    if e.name in results_lib.AUTHORS_EXPERIMENTS:
      run = results_lib.authors_run(e, workdir)
      # Every claim once more, the lazy row read as the authors' scripts
      # run it: which reading fails, and why, in the summary itself.
      if run is None:
        summary.append([e.name, AUTHORS_SCRIPTS, f'(no finished '
                        f'authors_code run of {e.lazy})',
                        claims_lib.verdict(None), ''])
      else:
        reading = results_lib.authors_reading(e, result, run)
        if metrics.row_divergence(reading['rows'][e.lazy]):
          away.append(f'{e.name}: {e.lazy} with authors_code '
                      + claims_lib.diverged_short(reading['rows'][e.lazy]))
        for c in claims_lib.claims(e, reading):
          summary.append([e.name, AUTHORS_SCRIPTS, c['claim'],
                          claims_lib.verdict(c['holds']), c['brief']])
      sections += authors_section(e, result, run, workdir)
    if e.name == results_lib.LASG_EXPERIMENT:
      sweep = results_lib.lasg_sweep(workdir, budget)
      sections += lasg_section(sweep, budget)
      if sweep:
        by_algo = {r['algo']: r for r in sweep['rows']}
        away += [f'{results_lib.LASG}: {a} '
                 f'{claims_lib.diverged_short(by_algo[a])}'
                 for a in diverged(by_algo, list(by_algo))]
      for c in claims_lib.lasg_claims(sweep) if sweep else []:
        summary.append([e.name, LASG_READING, c['claim'],
                        claims_lib.verdict(c['holds']), c['brief']])
    if e.name == results_lib.CROSSCHECK_EXPERIMENT:
      checks = results_lib.crosscheck(e, result, workdir)
      sections += crosscheck_section(e, result, checks)
      if checks:
        outputs.write_json(
            workdir / results_lib.CROSSCHECK / 'crosscheck.json', checks)
        axis = results_lib.grid_axis_of(result)
        if axis == 'map':  # the grid's points have the single run's
          # arithmetic: all three must agree
          agree = all(c['first_other_upload'] is None for c in checks)
          summary.append([e.name, ALGORITHM_1, 'the same uploads at every '
                          'step in the grid program, alone and on devices',
                          claims_lib.verdict(agree),
                          _checked(checks)])
        else:  # vmapped points agree with their run alone to rounding
          agree = all(c.get('first_other_upload_vs_single') is None
                      for c in checks if c['name'] != 'single')
          summary.append([e.name, ALGORITHM_1, 'the same uploads at every '
                          'step alone and on devices',
                          claims_lib.verdict(agree),
                          _checked(checks)])
  lines += ['## Summary of the claims', '',
            'Each claim of a minibatch experiment twice: with the lazy row '
            f'as Algorithm 1 reads it ("{ALGORITHM_1}", the tables) and as '
            f'the authors\' scripts run it ("{AUTHORS_SCRIPTS}", '
            '`authors_code`; each section\'s subsection says how they '
            'differ). Beside the minibatch network, LASG\'s and CADA\'s '
            f'claims ("{LASG_READING}", `{results_lib.LASG}/`). "numbers": '
            'the comparison that decides the claim.',
            '',
            table(['experiment', 'reading', 'claim', 'verdict', 'numbers'],
                  summary, 'lllll')]
  if away:
    lines += ['', f'**Diverged** (a logged loss NaN/inf or above '
              f'{metrics.DIVERGENCE_FACTOR:g}x f(θ^0); named, left out of '
              f'every comparison): {"; ".join(away)}.']
  if missing:
    lines += ['', f'**Missing experiments**: {", ".join(missing)}.']
  lines += [''] + timing_section(selected, results, workdir) + sections
  text = '\n'.join(lines)
  outputs.atomic_write(workdir / REPORT, text)
  return text
