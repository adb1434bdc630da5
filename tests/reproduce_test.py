"""Tests of `experiments.reproduce`: the --tiny report, checked independently.

One `--tiny` run (the suite's budget; about a minute on 2 cores) goes into a
temporary workdir. Its REPORT.md is parsed and every table cell is
recomputed from the per-experiment files by hand (NumPy on curves.npz, the
bit formulas b*p + 32 / 32*p, both residual definitions), the claims'
verdicts are recomputed from the same numbers, the cross-check's runs are
compared with the grid program, and every figure the report links must be
a PNG.
"""

import csv
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from configs import paper
from experiments.run import config as config_lib
from experiments.run import markdown
from experiments.run import outputs
from experiments.studies.lasg import report as lasg_report
from experiments.studies.paper import paper_results
from experiments.studies.paper import report
from tests import common

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
PARAMS = {'logreg': 784 * 10 + 10, 'mlp': 784 * 200 + 200 + 200 * 10 + 10}
QUANTIZED = ('qgd', 'laq', 'sqgd', 'slaq')  # b*p + 32 bits per upload
RANDOM = ('qsgd', 'ssgd')  # bits depend on the draws
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'

_tmp = None
_environ = None
_workdir = None


def _run(*args: str) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  return subprocess.run(
      [sys.executable, '-m', 'experiments.reproduce', *args], cwd=ROOT,
      env=env, capture_output=True, text=True, timeout=1500, check=False)


def setUpModule():
  global _tmp, _environ
  _tmp = tempfile.TemporaryDirectory(prefix='laq_reproduce_test_')
  # A fresh f* cache (never the user's), shared with the subprocesses.
  values = {'LAQ_JAX_CACHE': os.path.join(_tmp.name, 'cache')}
  if common.mnist_dir():
    values['LAQ_JAX_DATA'] = common.mnist_dir()
  _environ = mock.patch.dict(os.environ, values)
  _environ.start()


def tearDownModule():
  _environ.stop()
  _tmp.cleanup()


def _cell(text: str):
  """A report cell back to a number: 1,234 / 89.84% / 1.2e-03 / — (None)."""
  text = text.strip()
  if text == '—':
    return None
  if text.endswith('%'):
    return float(text[:-1]) / 100
  return float(text.replace(',', ''))


def _section(report: str, title: str) -> str:
  start = report.index(f'## {title}\n')
  end = report.find('\n## ', start + 1)
  return report[start:end if end >= 0 else None]


def _table(section: str, which: int = 0
           ) -> tuple[list[str], dict[str, list[str]]]:
  """The section's `which`-th algorithm table: header, {algo: cells}."""
  lines = section.splitlines()
  first = [i for i, l in enumerate(lines)
           if l.startswith('| algorithm |')][which]
  split = lambda l: [c.strip() for c in l.strip('|').split('|')]
  header = split(lines[first])
  rows = {}
  for line in lines[first + 2:]:
    if not line.startswith('|'):  # a table ends at its first other line
      break
    cells = split(line)
    if len(cells) != len(header):
      break
    rows[cells[0]] = cells
  return header, rows


def _expected(workdir: pathlib.Path, experiment: paper.Experiment
              ) -> dict[str, dict]:
  """Each algorithm's table figures, recomputed from the raw files."""
  out = workdir / experiment.name
  config = json.loads((out / 'config.json').read_text())
  sweep = json.loads((out / 'sweep.json').read_text())
  fstar = sweep['fstar'][0]['fstar']
  target = config['target_residual']
  p = PARAMS[config['model']]
  with np.load(out / 'curves.npz') as npz:
    curves = {k: npz[k] for k in npz.files}
  expected = {}
  workers = curves['uploads'].shape[-1]
  losses = np.concatenate([curves['loss'], curves['final_loss'][:, None]],
                          axis=1)
  # the paper's reference (NaN: iterations that do not log the loss)
  lowest = np.nanmin(losses) / workers
  for g, algo in enumerate(curves['algo']):
    sent_TxM = curves['uploads'][g]
    uploads_T = sent_TxM.sum(axis=1)
    if algo in RANDOM:  # per-upload bits vary; their sum is in curves
      bits_T = np.diff(curves['cum_bits'][g], prepend=0)
      per_upload = None
    else:
      per_upload = (config['bits'] * p + 32) if algo in QUANTIZED else 32 * p
      bits_T = uploads_T * per_upload
    row = {'iterations': sent_TxM.shape[0],
           'uploads': int(sent_TxM.sum()),
           'bits': int(bits_T.sum()),
           'final training loss f(θ^T)': curves['final_loss'][g]}
    if algo == 'ssgd':  # 32 per kept value + 32: at most 32 p + 32 each
      assert 32 * sent_TxM.sum() < bits_T.sum() <= (32 * p + 32) * (
          sent_TxM.sum()), algo
    paper = losses[g] / workers - lowest
    hits = np.flatnonzero(paper <= target)
    k = int(hits[0]) if hits.size else None
    row.update({
        "iteration (paper's f(θ^k)/M − min)": k,
        "uploads (paper's f(θ^k)/M − min)": (
            None if k is None else int(uploads_T[:k].sum())),
        "bits (paper's f(θ^k)/M − min)": (
            None if k is None else int(bits_T[:k].sum()))})
    if fstar is not None:
      residual = np.append(curves['loss'][g], curves['final_loss'][g]) - fstar
      hits = np.flatnonzero(residual <= target)
      k = int(hits[0]) if hits.size else None
      row.update({
          'final residual f − f*': residual[-1],
          'iteration (exact f(θ^k) − f*)': k,
          'uploads (exact f(θ^k) − f*)': (
              None if k is None else int(uploads_T[:k].sum())),
          'bits (exact f(θ^k) − f*)': (
              None if k is None else int(bits_T[:k].sum()))})
    expected[str(algo)] = row
  return expected


def _copy_as_full_budget(tiny: pathlib.Path, dest: pathlib.Path,
                         iters: int) -> int:
  """A copy of the --tiny run that the full budget's report reads as its
  own (every config.json the full budget's, at `iters` MLP iterations),
  with two points diverged (see the test); returns lasg_network's
  loss_every."""
  shutil.copytree(tiny, dest, ignore=shutil.ignore_patterns('*.png', '*.md'))
  write = lambda path, config: path.write_text(json.dumps(
      outputs.as_json(config)))
  for e in paper.experiments('full', iters):
    write(dest / e.name / 'config.json',
          config_lib.to_dict(paper.sweep_config(e)))
    if e.name in paper_results.AUTHORS_EXPERIMENTS:
      write(dest / paper_results.AUTHORS / e.name / 'config.json',
            config_lib.to_dict(paper_results.authors_config(e)))
    if e.name == paper_results.CROSSCHECK_EXPERIMENT:
      for name in paper_results.CROSSCHECK_RUNS:
        write(dest / paper_results.CROSSCHECK / name / 'config.json',
              paper_results.crosscheck_config(e, name))
  write(dest / paper_results.LASG / 'config.json',
        config_lib.to_dict(paper_results.lasg_config('full')))

  def alter(folder, algo, loss_from, value, cells):
    with np.load(folder / 'curves.npz') as npz:
      curves = {k: npz[k] for k in npz.files}
    g = list(curves['algo']).index(algo)
    curves['loss'][g, loss_from:] = value
    curves['final_loss'][g] = value
    np.savez(folder / 'curves.npz', **curves)
    rows = outputs.read_results(folder / 'results.csv')
    rows[g].update(cells)
    with open(folder / 'results.csv', 'w', newline='') as f:
      writer = csv.DictWriter(f, list(rows[0]), lineterminator='\n')
      writer.writeheader()
      writer.writerows(rows)
    return int(curves['loss_every'][g])

  with np.load(dest / 'logreg' / 'curves.npz') as npz:
    start = float(npz['loss'][list(npz['algo']).index('qgd'), 0])
  alter(dest / 'logreg', 'qgd', 160, 20 * start, {})
  return alter(dest / paper_results.LASG, 'lasg_wk1_laq', 11, np.nan,
               {'final_loss': '', 'final_test_accuracy': ''})


class TinyReportTest(absltest.TestCase):
  """The report of one `--tiny` run, run once for the class."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    global _workdir
    _workdir = pathlib.Path(_tmp.name, 'paper_tiny')
    done = _run(f'--workdir={_workdir}', '--tiny')
    if done.returncode:
      raise RuntimeError(f'--tiny failed ({done.returncode}):\n'
                         f'{(done.stdout + done.stderr)[-4000:]}')

  def setUp(self):
    super().setUp()
    self.report = (_workdir / report.REPORT).read_text()

  def test_tables_match_the_raw_files(self):
    for experiment in paper.experiments('tiny'):
      with self.subTest(experiment.name):
        section = _section(self.report, experiment.title)
        header, rows = _table(section)
        self.assertEqual(list(rows), list(experiment.algos))
        target_header, target_rows = _table(section, 1)
        self.assertEqual(list(target_rows), list(experiment.algos))
        checked = set()
        expected = _expected(_workdir, experiment)
        results = {r['algo']: r for r in paper_results.load_results(
            experiment, _workdir)['rows'].values()}
        for algo, cells in rows.items():
          shown = dict(zip(header, cells))
          shown.update(zip(target_header, target_rows[algo]))
          for column, value in expected[algo].items():
            if column not in shown:
              continue
            checked.add(column)
            got = _cell(shown[column])
            if value is None:
              self.assertIsNone(got, f'{algo} {column}')
            elif column.startswith('final'):
              # Printed with 4 significant digits.
              self.assertAlmostEqual(got / value, 1.0, delta=1e-3,
                                     msg=f'{algo} {column}')
            else:
              self.assertEqual(got, value, f'{algo} {column}')
          self.assertAlmostEqual(
              _cell(shown['test accuracy']),
              results[algo]['final_test_accuracy'], delta=5e-5)
        # Both residual definitions where f* is known, the paper's always.
        self.assertIn("iteration (paper's f(θ^k)/M − min)", checked)
        if experiment.convex:
          self.assertIn('iteration (exact f(θ^k) − f*)', checked)

  def test_claims_verdicts_recomputed(self):
    for experiment in paper.experiments('tiny'):
      expected = _expected(_workdir, experiment)
      lazy, base = experiment.lazy, experiment.baseline
      if experiment.convex and not experiment.stochastic:
        at = 'uploads (exact f(θ^k) − f*)'
        ours = expected[lazy][at]
        others = [expected[a][at] for a in experiment.uploads_vs]
        if ours is not None and None in others:
          continue  # compared with the whole run's uploads instead
        holds = ours is not None and all(ours <= 0.5 * o for o in others)
        claim = f'{lazy.upper()} reaches residual'
      else:
        ours = expected[lazy]['uploads']
        rows = paper_results.load_results(experiment, _workdir)['rows']
        accuracy = {a: rows[a]['final_test_accuracy'] for a in (lazy, base)}
        holds = all(ours <= 0.5 * expected[a]['uploads']
                    for a in experiment.uploads_vs) and abs(
                        accuracy[lazy] - accuracy[base]) <= 0.01
        claim = f'{lazy.upper()} uses far fewer uploads'
      with self.subTest(experiment.name):
        line = self._summary_line(experiment.name, report.ALGORITHM_1, claim)
        self.assertIn('| holds |' if holds else '| does not hold |', line)
      if experiment.name not in paper_results.AUTHORS_EXPERIMENTS:
        continue
      # The same claim with the lazy row as the authors' scripts run it.
      run = json.loads((_workdir / paper_results.AUTHORS / experiment.name
                        / 'summary.json').read_text())
      holds = all(run['total_uploads'] <= 0.5 * expected[a]['uploads']
                  for a in experiment.uploads_vs) and abs(
                      run['final_test_accuracy'] - accuracy[base]) <= 0.01
      with self.subTest(experiment.name, reading='authors'):
        line = self._summary_line(experiment.name, report.AUTHORS_SCRIPTS,
                                  claim)
        self.assertIn('| holds |' if holds else '| does not hold |', line)
        self.assertIn(f'{lazy} {run["total_uploads"]:,} = ', line)

  def _summary_line(self, name: str, reading: str, claim: str,
                    section: str | None = None) -> str:
    section = section or _section(self.report, 'Summary of the claims')
    return next(l for l in section.splitlines()
                if l.startswith(f'| {name} | {reading} | {claim}')
                and 'uploads' in l)

  def test_lasg_rows_and_claims_match_their_sweep(self):
    # LASG and CADA beside the minibatch network: the table's cells and
    # the summary's verdicts recomputed from the sweep's results.csv.
    out = _workdir / paper_results.LASG
    with open(out / 'results.csv', newline='') as f:
      rows = {r['algo']: r for r in csv.DictReader(f)}
    self.assertIn('lasg_wk2', rows)
    uploads = {a: int(r['total_uploads']) for a, r in rows.items()}
    accuracy = {a: float(r['final_test_accuracy']) for a, r in rows.items()}
    experiment = next(e for e in paper.experiments('tiny')
                      if e.name == paper_results.LASG_EXPERIMENT)
    section = _section(self.report, experiment.title)
    self.assertIn('### LASG and CADA at these settings', section)
    self._check_lasg_report(out, section[section.index('### LASG and CADA'):])
    with np.load(out / 'curves.npz') as npz:
      loss, final = npz['loss'], npz['final_loss']
    for algo in [a for a in rows if a.startswith('lasg')]:
      g = list(rows).index(algo)
      away = not np.isfinite(final[g]) or final[g] > loss[g][0]
      holds = (uploads[algo] <= 0.5 * uploads['sgd'] and not away
               and abs(accuracy[algo] - accuracy['sgd']) <= 0.01)
      with self.subTest(algo):
        line = self._summary_line(
            experiment.name, report.LASG_READING,
            f'{algo.upper()} uses far fewer uploads')
        self.assertIn('| holds |' if holds else '| does not hold |', line)

  def test_linear_fit_recomputed(self):
    experiment = paper.experiments('tiny')[0]
    self.assertEqual(experiment.name, 'logreg')
    section = _section(self.report, experiment.title)
    with np.load(_workdir / 'logreg' / 'curves.npz') as npz:
      loss, final = npz['loss'], npz['final_loss']
      algos = list(npz['algo'])
    sweep = json.loads((_workdir / 'logreg' / 'sweep.json').read_text())
    fstar, target = sweep['fstar'][0]['fstar'], sweep['target_residual']
    for algo in ('laq', 'gd'):
      residual = np.append(loss[algos.index(algo)],
                           final[algos.index(algo)]) - fstar
      hits = np.flatnonzero(residual <= target)
      end = hits[0] + 1 if hits.size else residual.size
      k = np.arange(end)
      y = np.log10(residual[:end])
      design = np.stack([k, np.ones_like(k)], axis=1).astype(np.float64)
      coef, *_ = np.linalg.lstsq(design, y, rcond=None)
      r2 = 1 - np.sum((y - design @ coef) ** 2) / np.sum((y - y.mean()) ** 2)
      line = next(l for l in section.splitlines()
                  if l.startswith(f'| {algo.upper()} converges linearly'))
      match = re.search(r'slope (\S+)/iteration.*R\^2 = (\S+) \|', line)
      self.assertIsNotNone(match, line)
      self.assertAlmostEqual(float(match[1]) / coef[0], 1.0, delta=1e-3)
      self.assertAlmostEqual(float(match[2]), r2, delta=1e-3)

  def test_figures_exist(self):
    links = re.findall(r'!\[[^\]]*\]\(([^)]+)\)', self.report)
    # Three loss figures and a raster per experiment, and three gradient
    # norm figures where f* is unknown (the networks).
    networks = [e for e in paper.experiments('tiny') if not e.convex]
    # And the authors_code comparison's figure of each minibatch experiment.
    self.assertLen(links, 4 * len(paper.experiments('tiny'))
                   + 3 * len(networks)
                   + len(paper_results.AUTHORS_EXPERIMENTS))
    self.assertLen([l for l in links if 'grad_norm_vs_' in l],
                   3 * len(networks))
    for link in links:
      self.assertFalse(pathlib.PurePath(link).is_absolute(), link)
      with open(_workdir / link, 'rb') as f:
        self.assertEqual(f.read(8), PNG_MAGIC, link)

  def test_report_states_budget_hardware_and_commands(self):
    self.assertIn('Tiny budget', self.report)
    self.assertIn(f'target residual {paper.TINY_TARGET:g}', self.report)
    self.assertIn('## Hardware and wall time', self.report)
    self.assertIn('backend cpu', self.report)
    # Each experiment measured the machine's limits; the table's floors are
    # recomputed from them.
    for experiment in paper.experiments('tiny'):
      result = paper_results.load_results(experiment, _workdir)
      rates = result['info']['roofline']
      self.assertGreater(rates['matmul_flops_per_s']['float64'], 0)
      floor = report.floor_seconds(result, rates)
      wall = result['info']['wall_time_s']
      # compiling apart: the program's time is the run's less it
      sweep = result['sweep']
      program = sweep['run_time_s'] - sweep['compile_time_s']
      self.assertGreater(sweep['compile_time_s'], 0)
      self.assertRegex(self.report, rf'\| {experiment.name} \| {wall:.0f} \| '
                       rf'{sweep["compile_time_s"]:.0f} \| {program:.0f} \| '
                       rf'{floor:.0f} \| {program / floor:.2f} \| '
                       rf'{wall / floor:.2f} \|')
    # The runs alone are rows too, and the total is the whole command's.
    walls = [paper_results.load_results(e, _workdir)['info']['wall_time_s']
             for e in paper.experiments('tiny')]
    for folder in ('crosscheck/single', 'crosscheck/devices',
                   'authors_code/logreg_stochastic',
                   'authors_code/mlp_stochastic'):
      walls.append(json.loads((_workdir / folder / 'summary.json')
                              .read_text())['wall_time_s'])
    self.assertIn('| logreg cross-check: run alone |', self.report)
    self.assertIn('| mlp_stochastic: slaq with authors_code |', self.report)
    self.assertIn(f'Total: {sum(walls):.0f} s.', self.report)
    for experiment in paper.experiments('tiny'):
      for algo in experiment.algos:
        self.assertIn(
            f'--config=configs/{experiment.config}.py:algo={algo},'
            f'{experiment.arg} ', self.report)

  def test_crosscheck_agrees_at_every_step(self):
    checks = json.loads((_workdir / paper_results.CROSSCHECK /
                         'crosscheck.json').read_text())
    self.assertEqual([c['name'] for c in checks], ['single', 'devices'])
    with np.load(_workdir / 'logreg' / 'curves.npz') as npz:
      grid = npz['uploads'][list(npz['algo']).index('laq')]
    sweep = json.loads((_workdir / 'logreg' / 'sweep.json').read_text())
    # full-batch logistic regression: 'auto' vmaps the grid on a CPU
    self.assertEqual(sweep['grid_axes'], {'full_batch': 'vmap'})
    alone, on_devices = (
        np.load(_workdir / paper_results.CROSSCHECK / name / 'uploads.npy')
        for name in ('single', 'devices'))
    np.testing.assert_array_equal(on_devices, alone)  # bit for bit
    self.assertIsNone(checks[1]['first_other_upload_vs_single'])
    for check in checks:  # the vmapped grid row: the same to rounding
      self.assertEqual(check['uploads'], int(alone.sum()))
      differ = np.flatnonzero((alone != grid).any(axis=1))
      self.assertEqual(check['first_other_upload'],
                       int(differ[0]) if differ.size else None)
    self.assertLess(abs(int(grid.sum()) - int(alone.sum())),
                    0.05 * alone.sum())
    config = json.loads((_workdir / paper_results.CROSSCHECK / 'devices' /
                         'config.json').read_text())
    self.assertEqual(config['workers_on'], 'devices')
    # this CPU-only machine: 2 forced CPU devices, recorded and reported
    self.assertEqual(json.loads(
        (_workdir / paper_results.CROSSCHECK / 'devices' /
         paper_results.DEVICES_FILE).read_text()),
                     {'platform': 'cpu', 'kind': 'cpu', 'count': 2})
    self.assertIn('| workers on 2 CPU devices (shard_map) (vs run alone: the '
                  'same uploads at every step) |', self.report)
    self.assertIn('| logreg | Algorithm 1 | the same uploads at every step '
                  'alone and on devices | holds |', self.report)

  def test_authors_code_rows_match_their_runs(self):
    for name in paper_results.AUTHORS_EXPERIMENTS:
      with self.subTest(name):
        experiment = next(e for e in paper.experiments('tiny')
                          if e.name == name)
        run_dir = _workdir / paper_results.AUTHORS / name
        config = json.loads((run_dir / 'config.json').read_text())
        self.assertTrue(config['authors_code'])
        self.assertEqual(config['algo'], experiment.lazy)
        summary = json.loads((run_dir / 'summary.json').read_text())
        section = _section(self.report, experiment.title)
        self.assertIn(f'### {experiment.lazy} as the authors\' scripts run '
                      'it', section)
        row = next(line for line in section.splitlines()
                   if line.startswith(f'| {experiment.lazy}, authors_code |'))
        cells = [c.strip() for c in row.strip('|').split('|')]
        self.assertEqual(_cell(cells[1]), summary['total_uploads'])
        self.assertEqual(_cell(cells[2]), summary['total_bits'])
        # The switch changes the run (no forced k = 0 uploads, b p bits).
        table = paper_results.load_results(experiment, _workdir)['rows']
        self.assertNotEqual(summary['total_bits'],
                            table[experiment.lazy]['total_bits'])

  def _check_lasg_report(self, out: pathlib.Path, section: str):
    """The LASG table of the report (experiments/studies/lasg/report.py)
    against the sweep's results.csv and curves, and the replayed seconds on
    the sweep's own profile against the times the compiled program computed
    in the loop."""
    rows = {r['algo']: r for r in outputs.read_results(out / 'results.csv')}
    sweep = lasg_report.load(out)
    timed = dict(zip([r['algo'] for r in sweep['rows']],
                     lasg_report.times(sweep)))
    curves = sweep['curves']
    self.assertIn('grads', curves)  # LASG's pairs: not one per step
    table = [line for line in section.splitlines()
             if line.startswith('| ') and line.split('|')[1].strip() in rows]
    self.assertLen(table, len(rows))
    for line in table:
      cells = [c.strip() for c in line.strip('|').split('|')]
      algo = cells[0]
      r = rows[algo]
      self.assertEqual(cells[1], markdown.fmt(int(r['total_uploads'])))
      self.assertEqual(cells[3], markdown.fmt(int(r['total_bits'])))
      g = list(rows).index(algo)
      self.assertEqual(cells[4], markdown.fmt(int(curves['grads'][g].sum())))
      self.assertEqual(cells[7], markdown.fmt(float(r['final_test_accuracy']),
                                              'pct'))
      self.assertEqual(cells[9], markdown.fmt(timed[algo]['cross_silo'],
                                              '.4g'))
      # The program timed every round on cross_silo in the loop (in the
      # run's float32); the replay of its bits, downloads and gradients
      # gives the same.
      np.testing.assert_allclose(timed[algo]['cross_silo'],
                                 float(r['total_time_s']), rtol=1e-6)
    # Two gradients a step for the pairs (WK2: one when forced); PS's idle
    # workers none.
    wk2 = curves['grads'][list(rows).index('lasg_wk2')]
    self.assertTrue(set(np.unique(wk2)) <= {1, 2} and (wk2 == 2).any())
    ps = curves['grads'][list(rows).index('lasg_ps')]
    np.testing.assert_array_equal(
        ps, curves['uploads'][list(rows).index('lasg_ps')].astype(int))
    # The launcher of the LASG report alone: a folder that is no finished
    # sweep is refused in one line.
    proc = subprocess.run(
        [sys.executable, '-m', 'experiments.lasg', f'--sweeps={out}_none',
         f'--out={out.parent / "LASG.md"}'], cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
        text=True, timeout=300, check=False)
    self.assertNotEqual(proc.returncode, 0)
    self.assertIn('is not a finished sweep', proc.stderr)
    self.assertNotIn('Traceback', proc.stderr)

  def test_full_budget_report_names_a_diverged_point(self):
    # The field's case: `experiments.reproduce --workdir W --mlp_iters 8000`
    # on a GPU ran everything, then died writing the report (LASG's
    # lasg_wk1_laq reached NaN; its accuracy None). Here the full budget's
    # report path (the LASG/CADA sweep `network`, its claims, the authors'
    # and cross-check runs) reads a copy of the tiny run, its configs
    # rewritten to the full budget's at the tiny iteration count, with
    # lasg_wk1_laq NaN from k = 11 (as results from before the divergence
    # rule: no mark in results.csv) and logreg's qgd above 10x f(theta^0)
    # from k = 160, after it reached its target.
    full = pathlib.Path(_tmp.name, 'paper_full_diverged')
    iters = json.loads((_workdir / 'mlp' / 'sweep.json').read_text())[
        'num_iters']
    lasg_every = _copy_as_full_budget(_workdir, full, iters)
    done = _run(f'--workdir={full}', '--report_only', f'--mlp_iters={iters}')
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    text = (full / report.REPORT).read_text()
    self.assertNotIn('Tiny budget', text)
    self.assertIn(f'**Shorter budget**: {iters} iterations', text)
    self.assertNotIn('**Missing**', text)  # every result read as full's
    self.assertNotIn('Not run', text)
    self.assertIn('`configs/lasg.py:network` (`lasg_network/`)', text)
    lasg_at = -(-11 // lasg_every) * lasg_every  # the first logged k >= 11
    rule = '(loss NaN/inf or above 10x f(theta^0))'
    summary = _section(text, 'Summary of the claims')
    self.assertIn(f'**Diverged** (a logged loss NaN/inf or above 10x f(θ^0); '
                  'named, left out of every comparison): logreg: qgd '
                  f'diverged at k=160; lasg_network: lasg_wk1_laq diverged '
                  f'at k={lasg_at}.', summary)
    # No claim compares them: no ratio, gap or target of theirs.
    self.assertNotRegex(summary, r"qgd's|qgd [0-9]|lasg_wk1_laq [0-9]")
    line = self._summary_line('mlp_stochastic', report.LASG_READING,
                              'LASG_WK1_LAQ uses far fewer uploads', summary)
    self.assertIn(f'| does not hold | lasg_wk1_laq diverged at k={lasg_at} '
                  f'{rule}: not compared |', line)
    logreg = paper.experiments('full')[0]
    rows = paper_results.load_results(logreg, full)['rows']
    self.assertEqual(rows['qgd']['diverged_at'], 160)
    self.assertIsNotNone(rows['qgd']['target_uploads'])  # reached, unused
    line = self._summary_line('logreg', report.ALGORITHM_1,
                              'LAQ reaches residual', summary)
    beats_gd = rows['laq']['target_uploads'] <= 0.5 * rows['gd'][
        'target_uploads']
    self.assertIn(('| not tested |' if beats_gd else '| does not hold |')
                  + f" laq {rows['laq']['target_uploads']:,} = ", line)
    self.assertIn('; qgd diverged at k=160, not compared |', line)
    self.assertIn('| logreg | Algorithm 1 | similar test accuracy: every '
                  'algorithm within 1 percentage point of GD | does not hold '
                  '|', summary)
    # The point's rows in both tables, the sentence under them.
    section = _section(text, logreg.title)
    for which in (0, 1):
      header, table = _table(section, which)
      self.assertEqual(header[-1], 'diverged')
      self.assertEqual([cells[-1] for cells in table.values()],
                       ['', 'at k=160', '', ''])
    self.assertIn(f'**Diverged**: qgd diverged at k=160 {rule}. Its row is '
                  'shown as run, but left out of every comparison', section)
    lasg = _section(text, next(e for e in paper.experiments('full') if
                               e.name == paper_results.LASG_EXPERIMENT).title)
    self.assertIn(f'**Diverged**: lasg_wk1_laq diverged at k={lasg_at} '
                  f'{rule}.', lasg)
    for link in re.findall(r'!\[[^\]]*\]\(([^)]+)\)', text):
      with open(full / link, 'rb') as f:
        self.assertEqual(f.read(8), PNG_MAGIC, link)

  def test_same_results_as_committed_and_published(self):
    # The run CI makes, against the committed summary of the same run
    # (tests/same_results/paper_tiny.json): a change that moves a result
    # fails here until the summary is regenerated in the same change.
    done = subprocess.run(
        [sys.executable, 'scripts/same_results.py', str(_workdir)], cwd=ROOT,
        capture_output=True, text=True, timeout=300, check=False)
    self.assertEqual(done.returncode, 0,
                     (done.stdout + done.stderr)[-4000:] +
                     '\nIf the change means to move results: python '
                     'scripts/same_results.py W --write, and say in the full '
                     'reports what moved.')
    # The report's numbers as data beside it, and its provenance line.
    data = json.loads((_workdir / 'results.json').read_text())
    self.assertEqual(data['study'], 'paper')
    self.assertIn('--tiny', data['command'])
    rows = {r['algo']: r for r in outputs.read_results(
        _workdir / 'logreg' / 'results.csv')}
    self.assertEqual(data['values']['logreg/laq/total_uploads'],
                     int(rows['laq']['total_uploads']))
    self.assertGreater(data['values']['logreg/wall_time_s'], 0)
    self.assertTrue(self.report.split('\n')[2].startswith('Generated on '))

  def test_devices_run_on_one_accelerator_is_the_run_alone(self):
    # What one GPU runs (crosscheck_layout: its one device divides the ten
    # workers): the sharded program over a mesh of one device, in the
    # launcher's own process; here on this machine's one CPU device.
    out = pathlib.Path(_tmp.name, 'one_device')
    proc = common.run_script(
        'import pathlib; import jax; '
        "jax.config.update('jax_enable_x64', True); "  # as the launcher
        'from configs import paper; '
        'from experiments.studies.paper import reproduce as r; '
        "e = next(e for e in paper.experiments('tiny') "
        "if e.name == 'logreg'); "
        f"print('finished', r.run_here(e, pathlib.Path({str(out)!r}), "
        "'devices'))")
    self.assertIn('finished True', proc.stdout, proc.stderr[-3000:])
    self.assertEqual(json.loads((out / 'config.json').read_text())
                     ['workers_on'], 'devices')
    alone = _workdir / paper_results.CROSSCHECK / 'single'
    np.testing.assert_array_equal(np.load(out / 'uploads.npy'),
                                  np.load(alone / 'uploads.npy'))
    here, there = (outputs.load_run(d).metrics['loss'] for d in (out, alone))
    np.testing.assert_allclose(here, there, rtol=1e-12)

  def test_resume_skips_finished_and_copy(self):
    results = _workdir / 'logreg_stochastic' / 'results.csv'
    before = results.stat().st_mtime_ns
    dest = pathlib.Path(_tmp.name, 'docs_copy')
    done = _run(f'--workdir={_workdir}', '--tiny',
                '--only=logreg_stochastic', f'--copy_to={dest}')
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    self.assertIn('not run again', done.stdout + done.stderr)
    self.assertEqual(results.stat().st_mtime_ns, before)
    both = _run(f'--workdir={_workdir}', '--quick', '--tiny')
    self.assertNotEqual(both.returncode, 0)
    self.assertIn('--quick and --tiny: choose one budget', both.stderr)
    self.assertNotIn('Traceback', both.stderr)
    copied = (dest / report.REPORT).read_text()
    for link in re.findall(r'!\[[^\]]*\]\(([^)]+)\)', copied):
      self.assertTrue((dest / link).is_file(), link)


class DevicesLayoutTest(absltest.TestCase):

  def test_accelerators_when_they_divide_the_workers_else_cpu(self):
    layout = paper_results.devices_layout
    self.assertEqual(layout('gpu', [('gpu', 'NVIDIA H200')], 10),
                     {'platform': 'gpu', 'kind': 'NVIDIA H200', 'count': 1})
    self.assertEqual(layout('tpu', [('tpu', 'TPU v5 lite')] * 2, 10)['count'],
                     2)
    for backend, devices in (('gpu', [('gpu', 'H100')] * 4),  # 10 % 4
                             ('cpu', [('cpu', 'cpu')] * 8)):
      self.assertEqual(layout(backend, devices, 10), paper_results.CPU_DEVICES)
    words = paper_results.devices_words
    self.assertEqual(words(paper_results.CPU_DEVICES),
                     'workers on 2 CPU devices (shard_map)')
    self.assertEqual(words(layout('gpu', [('gpu', 'NVIDIA H200')], 10)),
                     'workers on 1 GPU device (shard_map, NVIDIA H200)')
    workdir = pathlib.Path(tempfile.mkdtemp())
    run_dir = workdir / paper_results.CROSSCHECK / 'devices'
    run_dir.mkdir(parents=True)  # a run from before devices.json: 2 CPUs
    self.assertEqual(paper_results.crosscheck_words('devices', workdir),
                     'workers on 2 CPU devices (shard_map)')
    (run_dir / paper_results.DEVICES_FILE).write_text(json.dumps(
        {'platform': 'gpu', 'kind': 'NVIDIA H100', 'count': 1}))
    self.assertEqual(paper_results.crosscheck_words('devices', workdir),
                     'workers on 1 GPU device (shard_map, NVIDIA H100)')


if __name__ == '__main__':
  absltest.main()
