"""experiments.studies.family.family_report: who beats LAQ, computed from
numbers by hand; and (slow) the whole launcher at a tiny budget, its tables
checked against the sweeps' results.csv, its time-to-target part present for
both problems (experiments.studies.family.family_time has its own tests)."""

import json
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest.mock

from absl.testing import absltest
import numpy as np
import pytest

from configs import sweep_compressors
from experiments.run import markdown
from experiments.run import outputs
from experiments.studies.family import family_report
from experiments.studies.lasg import report as lasg_report
from experiments.studies.paper import claims
import laq_jax as lj
from laq_jax import metrics
from tests import common


def row(bits, residual=None, loss=1.0, target_bits=None):
  return dict(total_bits=bits, final_residual=residual, final_loss=loss,
              target_bits=target_bits)


class BeatsLaqTest(absltest.TestCase):

  def test_convex_at_the_target(self):
    rows = {'laq': row(100, 1e-7, target_bits=50),
            'ef21': row(300, 1e-7, target_bits=40),     # fewer to target
            'gd': row(900, 1e-8, target_bits=500),      # more
            'clag': row(10, 1e-3, target_bits=None)}    # never reached it
    self.assertEqual([a for a, _ in family_report.beats_laq(rows, True,
                                                            'laq')],
                     ['ef21'])

  def test_fixed_budget_is_pareto_dominance(self):
    rows = {'slaq': row(100, loss=2.0),
            'a': row(100, loss=1.5),   # same bits, lower loss: beats
            'b': row(50, loss=2.0),    # fewer bits, same loss: beats
            'c': row(50, loss=2.5),    # cheaper but worse: does not
            'd': row(200, loss=1.0),   # better but dearer: does not
            'e': row(100, loss=2.0)}   # a tie: does not
    got = [a for a, _ in family_report.beats_laq(rows, False, 'slaq')]
    self.assertEqual(got, ['a', 'b'])

  def test_a_diverged_run_is_no_benchmark(self):
    # SLAQ on the minibatch network at Algorithm 1's reading: the fewest
    # bits and a final loss of 1.08e7 from 2.3 (docs/compressors/REPORT.md
    # used to say "None beat SLAQ here"). The one rule (metrics.diverged_at)
    # at a row's two ends where it carries no marks.
    away = dict(row(10, loss=1.08e7), initial_loss=2.3)
    self.assertTrue(metrics.row_diverged(away))
    self.assertTrue(metrics.row_diverged(dict(row(10, loss=None),
                                                initial_loss=2.3)))
    self.assertTrue(metrics.row_diverged(dict(row(10, loss=1.0),
                                                initial_loss=2.3,
                                                diverged=True)))
    self.assertFalse(metrics.row_diverged(dict(row(10, loss=0.5),
                                                 initial_loss=2.3)))
    # Above where it started but not 10x: no divergence, still ranked
    # (claims.ran_away, the LASG claim's "does not run away", counts it).
    up = dict(row(10, loss=3.0), initial_loss=2.3)
    self.assertFalse(metrics.row_diverged(up))
    self.assertTrue(claims.ran_away(up))
    self.assertEqual(metrics.row_divergence(dict(away, diverged_at=12)),
                     'diverged at k=12 (loss NaN/inf or above 10x '
                     'f(theta^0))')
    # A diverged reference is beaten by nobody, and a diverged preset beats
    # nobody.
    rows = {'slaq': dict(row(100, loss=2.0), initial_loss=2.3),
            'sign': dict(row(10, loss=0.1), initial_loss=2.3, diverged=True,
                         diverged_at=4)}
    self.assertEqual(family_report.beats_laq(rows, False, 'slaq'), [])
    rows['slaq'] = away
    rows['sign'] = dict(row(10, loss=0.1), initial_loss=2.3)
    self.assertEqual(family_report.beats_laq(rows, False, 'slaq'), [])
    # The section says so in place of "None beat SLAQ here".
    info = dict(num_points=2, num_iters=10, precision='float32',
                dataset='mnist', test_set='MNIST test set', wall_time_s=1.0,
                programs_compiled=1)
    study = family_report.Study('mlp', 'MLP', {}, False)
    rows = {'full': {'laq': dict(row(5, loss=1.0), initial_loss=2.0,
                                 total_bits_down=0, final_test_accuracy=0.9)},
            'minibatch': {
                'slaq': dict(row(5, loss=1.08e7), initial_loss=2.3,
                             total_bits_down=0, final_test_accuracy=0.1141,
                             diverged=True, diverged_at=12),
                'sgd': dict(row(50, loss=0.5), initial_loss=2.3,
                            total_bits_down=0, final_test_accuracy=0.9)}}
    with unittest.mock.patch.object(family_report, '_table',
                                    return_value='(table)'):
      text = '\n'.join(family_report.study_section(
          study, rows, {'full': info, 'minibatch': info}, 'f.png'))
    self.assertIn('SLAQ diverged at k=12 (loss NaN/inf or above 10x '
                  'f(theta^0)); final loss 1.080e+07 against the 2.300e+00 '
                  'it started from, test accuracy 11.41%. A run that '
                  'diverged is no benchmark', text)
    self.assertNotIn('beat SLAQ', text)
    self.assertIn('Left out, as they diverged: slaq (at k=12).', text)
    # Every preset diverged: the section is still written, no front.
    for kind_rows in rows.values():
      for r in kind_rows.values():
        r.update(diverged=True, diverged_at=3)
    with unittest.mock.patch.object(family_report, '_table',
                                    return_value='(table)'):
      text = '\n'.join(family_report.study_section(
          study, rows, {'full': info, 'minibatch': info}, 'f.png'))
    self.assertIn('LAQ diverged at k=3', text)
    self.assertIn('No Pareto front: every preset diverged. Left out, as they '
                  'diverged: laq (at k=3), slaq (at k=3), sgd (at k=3).', text)
    self.assertNotRegex(text, 'Beat|None beat')
    fig = family_report.tradeoff(study, rows)  # nothing drawn, named
    self.assertIn('diverged, not drawn: laq (at k=3)',
                  fig.axes[0].texts[-1].get_text())

  def test_pareto_presets(self):
    rows = {'x': dict(row(100, loss=2.0), total_bits_down=0),
            'y': dict(row(50, loss=3.0), total_bits_down=0),
            'z': dict(row(200, loss=2.5), total_bits_down=0)}
    self.assertEqual(family_report.pareto_presets(rows, False), ['y', 'x'])


def write_sweep(folder, points, *, info=None):
  """A finished sweep's files by hand: results.csv (every point marked
  `diverged` False, as results written before the one rule did for a finite
  loss), curves.npz (each point's logged losses) and sweep.json.

  Args:
    folder: where.
    points: [(algo, loss_T, final_loss, results.csv fields)].
    info: sweep.json's fields beyond the report's defaults.
  """
  folder.mkdir(parents=True)
  rows = []
  for g, (algo, _, final, fields) in enumerate(points):
    rows.append(dict(dict(
        point=g, algo=algo, total_uploads=10 * (g + 1), total_bits=100,
        total_bits_down=0, final_test_accuracy=0.9, final_loss=final,
        final_residual=None, target_iteration=None, target_bits=None,
        target_bits_down=None, diverged=False, diverged_at=None), **fields))
  outputs.atomic_write(folder / 'results.csv', outputs.results_csv(rows))
  outputs.write_npz(folder / 'curves.npz', {
      'algo': np.asarray([a for a, _, _, _ in points]),
      'loss': np.asarray([l for _, l, _, _ in points], np.float64),
      'final_loss': np.asarray([f for _, _, f, _ in points], np.float64),
      'loss_every': np.ones(len(points), np.int64)})
  outputs.write_json(folder / 'sweep.json', {
      'num_points': len(points), 'num_iters': 5, 'precision': 'float32',
      'dataset': 'mnist', 'test_set': 'MNIST test set', 'wall_time_s': 1.0,
      'programs_compiled': 1, **(info or {})})


def cells(text, algo):
  """The cells of `algo`'s row in the first table of `text` with one."""
  line = next(l for l in text.splitlines() if l.startswith(f'| {algo} |'))
  return [c.strip() for c in line.strip('|').split('|')]


class DivergedReportTest(absltest.TestCase):
  """Whole reports over hand-made sweeps (no training, no compiling; the
  time-to-target part has its own tests in family_time_test) where points
  diverged by the one rule that results.csv did not mark."""

  def setUp(self):
    super().setUp()
    tmp = tempfile.TemporaryDirectory(prefix='laq_family_report_')
    self.addCleanup(tmp.cleanup)
    self.dir = pathlib.Path(tmp.name)

  def report(self, study):
    with unittest.mock.patch.object(family_report.family_time, 'section',
                                    return_value=[]):
      return family_report.report([study], self.dir, True, 'cmd')

  def test_budget_study(self):
    study = family_report.Study('mlp', 'MLP', {'full': ('', 'full'),
                                               'minibatch': ('', 'mini')},
                                False)
    down = [2.0, 1.8, 1.5, 1.2, 1.1]
    write_sweep(self.dir / 'mlp' / 'full', [
        ('laq', down, 1.0, dict(total_bits=100)),
        ('gd', down, 0.8, dict(total_bits=1000)),
        # Above 10x f(theta^0) at k = 2, then back to the lowest loss for
        # the fewest bits: ranked, it would beat LAQ and lead the front.
        ('ef21', [2.0, 1.9, 30.0, 1.0, 0.5], 0.4, dict(total_bits=10))])
    write_sweep(self.dir / 'mlp' / 'mini', [
        ('slaq', [2.3, 2.0, 1e3, 1e5, 1e6], 1.08e7,
         dict(total_bits=5, final_test_accuracy=0.1141)),
        ('sgd', [2.3, 2.0, 1.5, 1.0, 0.7], 0.5, dict(total_bits=50)),
        ('qsgd', [2.3, 2.0, 1.5, np.nan, np.nan], np.nan,
         dict(total_bits=20, final_loss=None, final_test_accuracy=None,
              diverged=True))])
    text = self.report(study)
    self.assertEqual((self.dir / family_report.REPORT).read_text(), text)
    note = '(loss NaN/inf or above 10x f(theta^0))'
    self.assertIn(f'SLAQ diverged at k=2 {note}; final loss 1.080e+07 '
                  'against the 2.300e+00 it started from, test accuracy '
                  '11.41%. A run that diverged is no benchmark', text)
    self.assertIn('Diverged, so ranked nowhere (not in "beat", the Pareto '
                  'front, the times to target or the crossovers): **ef21** '
                  f'(diverged at k=2 {note}).', text)
    self.assertIn(f'**qsgd** (diverged at k=3 {note})', text)
    self.assertIn('None beat LAQ here', text)
    self.assertNotIn('beat SLAQ', text)
    self.assertIn('over both kinds: **sgd**. Left out, as they diverged: '
                  'ef21 (at k=2), slaq (at k=2), qsgd (at k=3).', text)
    self.assertEqual(cells(text, 'slaq')[-1], 'at k=2')
    self.assertEqual(cells(text, 'sgd')[-1], '')
    # The figure: the diverged points are named, drawn nowhere, and set no
    # axis (slaq's 1.08e7 would stretch it).
    self.assertTrue((self.dir / 'mlp' / 'bits_vs_loss.png').is_file())
    fig = family_report.tradeoff(study, family_report.load_rows(self.dir,
                                                                study))
    ax = fig.axes[0]
    self.assertLess(ax.get_ylim()[1], 10)
    named = [t.get_text() for t in fig.legends[0].get_texts()]
    self.assertEqual(sorted(n.split(' ')[0] for n in named[1:]),
                     ['gd', 'laq', 'sgd'])  # [0]: the front's line
    self.assertLen(ax.texts, 1)  # no label on the plot but the note
    self.assertEqual(ax.texts[-1].get_text(), 'diverged, not drawn: ef21 '
                     '(at k=2), slaq (at k=2), qsgd (at k=3)')

  def test_convex_reference_diverged_after_the_target(self):
    # LAQ reached the target (k = 3, 50 bits) and then ran away: it is no
    # reference, and no time or bits to its target are shown.
    study = family_report.Study('logreg', 'LR', {'full': ('', 'full'),
                                                 'minibatch': ('', 'mini')},
                                True)
    target = dict(target_residual=1e-2, fstar=[{'l2': 0.0, 'fstar': 0.5}])
    write_sweep(self.dir / 'logreg' / 'full', [
        ('laq', [2.0, 1.0, 0.6, 0.505, 40.0], 50.0,
         dict(final_residual=49.5, target_iteration=3, target_bits=50,
              target_bits_down=0)),
        ('gd', [2.0, 1.0, 0.6, 0.55, 0.505], 0.501,
         dict(final_residual=1e-3, total_bits=1000, target_iteration=4,
              target_bits=500, target_bits_down=0))], info=target)
    # Every minibatch point diverged.
    write_sweep(self.dir / 'logreg' / 'mini', [
        ('slaq', [2.0, np.inf, np.nan, np.nan, np.nan], np.nan,
         dict(final_loss=None, diverged=True)),
        ('sgd', [2.0, 1.0, 25.0, 30.0, 40.0], 50.0, dict(final_residual=49.5))
    ], info=target)
    text = self.report(study)
    self.assertIn('LAQ diverged at k=4', text)
    self.assertIn('SLAQ diverged at k=1', text)
    self.assertNotRegex(text, 'Beat|None beat')
    self.assertEqual(cells(text, 'laq')[-5:], ['4.950e+01', '—', '—', '—',
                                              'at k=4'])
    self.assertEqual(cells(text, 'gd')[-4:-1], ['4', '5.000e+02', '0.000e+00'])
    self.assertIn('**sgd** (diverged at k=2', text)
    self.assertIn('against the final residual, over both kinds: **gd**. Left '
                  'out, as they diverged: laq (at k=4), slaq (at k=1), sgd '
                  '(at k=2).', text)


class RunStudyTest(absltest.TestCase):

  def test_a_stopped_sweep_resumes_and_an_older_one_is_replaced(self):
    # The study's sweeps checkpoint; the same config without results
    # resumes (overwrite=False), another config's folder is replaced, a
    # finished one is not run again.
    from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
    from experiments.run import grid  # pylint: disable=g-import-not-at-top
    from experiments.studies.family import study as study_lib  # pylint: disable=g-import-not-at-top
    study = study_lib.studies('tiny', 500, 0)[0]
    calls = []
    with tempfile.TemporaryDirectory() as tmp, unittest.mock.patch.object(
        grid, 'sweep_and_evaluate',
        lambda config, out, overwrite: calls.append(
            (out.name, overwrite, config.checkpoint_every))):
      workdir = pathlib.Path(tmp)
      configs = {}
      for arg, folder in study.sweeps.values():
        config = sweep_compressors.get_config(arg)
        config.checkpoint_every = min(study_lib.CHECKPOINT_EVERY,
                                      config.num_iters)
        configs[folder] = config
      full, minibatch = (workdir / study.name / f
                         for f in ('full', 'minibatch'))
      full.mkdir(parents=True)
      minibatch.mkdir(parents=True)
      (full / 'config.json').write_text(json.dumps(outputs.as_json(
          config_lib.to_dict(configs['full']))))  # stopped mid-sweep
      (minibatch / 'config.json').write_text('{"other": 1}')
      self.assertEqual(study_lib.run_study(study, workdir), [])
      (full / 'sweep.json').write_text('{}')  # finished
      study_lib.run_study(study, workdir)
    self.assertEqual(calls, [
        ('full', False, configs['full'].checkpoint_every),
        ('minibatch', True, configs['minibatch'].checkpoint_every),
        ('minibatch', True, configs['minibatch'].checkpoint_every)])
    self.assertGreater(configs['full'].checkpoint_every, 0)


class LasgReportTest(absltest.TestCase):
  """experiments/studies/lasg/report.py (its end-to-end test is in
  tests/reproduce_test.py): a diverged point is marked with its iteration
  and compared with nothing; the verdict's words fit its numbers."""

  def test_hand_made_sweep(self):
    tmp = tempfile.TemporaryDirectory(prefix='laq_lasg_report_')
    self.addCleanup(tmp.cleanup)
    folder = pathlib.Path(tmp.name, 'network')
    steps, workers = 5, 2
    down = [33.6, 20.0, 10.0, 6.0, 5.5]
    points = [('sgd', 0.9378, down, 5.1), ('lasg_wk2', 0.9489, down, 5.0),
              ('lasg_ps', 0.9342, down, 5.2),
              ('lasg_wk1', 0.9258, down, 5.3),  # -1.20 points
              ('slaq', 0.1141, [33.6, 20.0, 400.0, 1e5, 1e6], 1.079e7),
              ('lasg_wk1_laq', None, [33.6, 20.0, 10.0, np.nan, np.nan],
               np.nan)]
    write_sweep(folder, [
        (a, loss, final, dict(
            iterations=steps, seed=0, final_test_accuracy=acc,
            final_loss=None if np.isnan(final) else final,
            total_uploads=[1000, 500, 400, 450, 30, 40][g]))
        for g, (a, acc, loss, final) in enumerate(points)])
    outputs.write_json(folder / 'config.json', {})
    outputs.write_npz(folder / 'curves.npz', dict(
        np.load(folder / 'curves.npz'),
        bits=np.ones((len(points), steps, workers))))
    with unittest.mock.patch.object(
        lasg_report, 'times',
        lambda sweep: [dict.fromkeys(lasg_report.PROFILES, 1.0)] * len(
            sweep['rows'])):
      text = lasg_report.report([folder], 'cmd')
    row = lambda a: cells(text, a)
    self.assertEqual(row('slaq')[-1], 'at k=2')
    self.assertEqual(row('lasg_wk1_laq')[-1], 'at k=3')
    self.assertEqual(row('sgd')[-1], '')
    note = '(loss NaN/inf or above 10x f(theta^0))'
    self.assertIn(
        f'LASG where SLAQ (Algorithm 1) diverged at k=2 {note}; 11.41%, '
        'final loss 1.079e+07: at most 1 point below SGD\'s test accuracy '
        '(93.78%) and not diverged: lasg_wk2 (94.89%, +1.11 points, 500 '
        'uploads), lasg_ps (93.42%, -0.36 points, 400 uploads); not: '
        f'lasg_wk1 (92.58%, -1.20 points), lasg_wk1_laq (diverged at k=3 '
        f'{note}).', text)
    self.assertNotIn('within', text)
    # A diverged SGD is no benchmark.
    rows = {r['algo']: r for r in lasg_report.load(folder)['rows']}
    rows['sgd'] = dict(rows['sgd'], diverged=True, diverged_at=7)
    self.assertEqual(
        lasg_report.verdict(rows),
        f'LASG where SLAQ (Algorithm 1) diverged at k=2 {note}; 11.41%, '
        f'final loss 1.079e+07: SGD diverged at k=7 {note}, so it is no '
        'benchmark and no LASG preset is compared with it; diverged: '
        f'lasg_wk1_laq (diverged at k=3 {note}).')


  def test_cada_against_its_authors_mnist_runs(self):
    # Uploads as a share of Adam's against the authors' saved 39.6% and
    # 18.4%, within 25% of theirs (29.7-49.5%, 13.8-23.0%) or not; a
    # diverged preset named, not compared; no Adam, no line.
    row = lambda uploads, **kw: dict(total_uploads=uploads, diverged=False,
                                     **kw)
    rows = {'cada_adam': row(100_000), 'cada1_mnist': row(49_400),
            'cada2_mnist': row(23_100)}
    self.assertEqual(
        lasg_report.cada_verdict(rows),
        'CADA against its authors\' MNIST runs: cada1_mnist 49.4% of '
        'Adam\'s uploads against the authors\' 39.6% (within 25% of theirs, '
        '29.7-49.5%: **holds**); cada2_mnist 23.1% of Adam\'s uploads '
        'against the authors\' 18.4% (within 25% of theirs, 13.8-23.0%: '
        '**does not hold**).')
    rows['cada1_mnist'] = dict(rows['cada1_mnist'], diverged=True,
                               diverged_at=40)
    self.assertIn('cada1_mnist diverged at k=40',
                  lasg_report.cada_verdict(rows))
    self.assertEqual(lasg_report.cada_verdict({'sgd': row(10)}), '')

  def test_cadas_own_sweep_alone(self):
    # docs/cada: the cada_mnist sweep alone is titled CADA's, its uploads
    # a share of Adam's (no SGD in it), and has no LASG verdict line
    tmp = tempfile.TemporaryDirectory(prefix='laq_cada_report_')
    self.addCleanup(tmp.cleanup)
    folder = pathlib.Path(tmp.name, 'cada_mnist')
    steps, workers = 5, 2
    down = [23.0, 10.0, 5.0, 2.0, 1.0]
    points = [('cada_adam', 1000), ('cada1_mnist', 400), ('cada2_mnist', 250)]
    write_sweep(folder, [
        (a, down, 1.0, dict(iterations=steps, seed=0,
                            final_test_accuracy=0.98, final_loss=1.0,
                            total_uploads=uploads))
        for a, uploads in points])
    outputs.write_json(folder / 'config.json', {})
    outputs.write_npz(folder / 'curves.npz', dict(
        np.load(folder / 'curves.npz'),
        bits=np.ones((len(points), steps, workers))))
    with unittest.mock.patch.object(
        lasg_report, 'times',
        lambda sweep: [dict.fromkeys(lasg_report.PROFILES, 1.0)] * len(
            sweep['rows'])):
      text = lasg_report.report([folder], 'cmd')
    self.assertTrue(text.startswith(
        '# CADA at its authors\' MNIST setting, beside Adam\n'))
    self.assertIn('| preset | uploads | of Adam\'s |', text)
    self.assertEqual(cells(text, 'cada1_mnist')[2], '40.00%')
    self.assertEqual(cells(text, 'cada2_mnist')[2], '25.00%')
    self.assertNotIn('LASG ', text.split('## ')[1])
    self.assertIn('cada1_mnist 40.0% of Adam\'s uploads', text)

  def test_the_typo_sweep_takes_adam_from_cadas_own(self):
    # docs/cada: the typo's sweep has no Adam; its shares are of the
    # cada_mnist sweep's Adam at the same steps and workers (named), and the
    # running counts of both sweeps stand beside the authors' saved ones.
    tmp = tempfile.TemporaryDirectory(prefix='laq_cada_typo_report_')
    self.addCleanup(tmp.cleanup)
    steps, workers = 10_000, 2
    rng = np.random.default_rng(1)
    sweeps = {'cada_mnist': [('cada_adam', 1.0), ('cada2_mnist', 0.12)],
              'cada_mnist_typo': [('cada2_mnist_typo', 0.18)]}
    uploads = {}
    for name, points in sweeps.items():
      folder = pathlib.Path(tmp.name, name)
      sent = np.stack([rng.random((steps, workers)) < p for _, p in points])
      uploads[name] = sent
      write_sweep(folder, [
          (a, [23.0, 1.0], 1.0, dict(iterations=steps, seed=0,
                                     final_test_accuracy=0.98, final_loss=1.0,
                                     total_uploads=int(sent[g].sum())))
          for g, (a, _) in enumerate(points)])
      outputs.write_json(folder / 'config.json', {})
      outputs.write_npz(folder / 'curves.npz', dict(
          np.load(folder / 'curves.npz'),
          bits=np.ones((len(points), steps, workers)),
          cum_uploads=np.cumsum(sent.sum(-1), axis=1)))
    with unittest.mock.patch.object(
        lasg_report, 'times',
        lambda sweep: [dict.fromkeys(lasg_report.PROFILES, 1.0)] * len(
            sweep['rows'])):
      text = lasg_report.report(
          [pathlib.Path(tmp.name, n) for n in sweeps], 'cmd')
    self.assertTrue(text.startswith(
        '# CADA at its authors\' MNIST setting, beside Adam\n'))
    adam = uploads['cada_mnist'][0].sum()
    typo = uploads['cada_mnist_typo'][0].sum()
    self.assertEqual(cells(text, 'cada2_mnist_typo')[2],
                     f'{100 * typo / adam:.2f}%')
    self.assertIn('CADA against its authors\' MNIST runs (Adam\'s uploads '
                  'from the cada_mnist sweep at the same setting', text)
    self.assertIn(f'cada2_mnist_typo {100 * typo / adam:.1f}% of Adam\'s '
                  'uploads against the authors\' 18.4%', text)
    marks = (500, 1000, 2000, 4000, 6000, 8000, 9990)
    for name, g, algo in (('cada_mnist', 1, 'cada2_mnist'),
                          ('cada_mnist_typo', 0, 'cada2_mnist_typo')):
      by_hand = [f'{int(uploads[name][g, :k + 1].sum()):,}' for k in marks]
      self.assertEqual(cells(text, f'{algo} ({name})')[1:], by_hand)
    self.assertEqual(cells(text, 'the authors\' CADA2 (comm_wk2adam.txt)')[-1],
                     '18,361')
    # The typo's effect: totals through 9,990 with and without it, and the
    # running count's largest distance from the authors', by hand.
    typo_k = [uploads['cada_mnist_typo'][0, :k + 1].sum() for k in marks]
    plain = uploads['cada_mnist'][1, :9991].sum()
    theirs = (1943, 3200, 5410, 9067, 12323, 15287, 18361)
    far = max(abs(a - b) / b for a, b in zip(typo_k, theirs))
    self.assertIn(
        f'cada2_mnist_typo {typo_k[-1]:,} against cada2_mnist\'s {plain:,} '
        f'({100 * (typo_k[-1] / plain - 1):+.1f}%), its running count within '
        f'{100 * far:.1f}% of the authors\' CADA2 (comm_wk2adam.txt) at every '
        'mark.', text)
    # A sweep of other lengths takes no Adam from it.
    short = lasg_report.load(pathlib.Path(tmp.name, 'cada_mnist_typo'))
    short['curves'] = dict(short['curves'], bits=np.ones((1, 5, workers)))
    self.assertIsNone(lasg_report.adam_elsewhere(
        'cada_mnist_typo', short,
        {'cada_mnist': lasg_report.load(pathlib.Path(tmp.name, 'cada_mnist')),
         'cada_mnist_typo': short}))

  def test_uploads_per_window_and_the_model(self):
    # Uploads of all workers per 100 steps in the first five windows, the
    # middle and the last, against sums by hand; the model line names the
    # initialization.
    steps, workers = 1000, 3
    rng = np.random.default_rng(0)
    uploads = (rng.random((2, steps, workers)) < [[[0.9]], [[0.2]]])
    sweep = {'rows': [{'algo': 'sgd'}, {'algo': 'lasg_wk2'}],
             'curves': {'uploads': uploads.astype(np.int32)},
             'config': {'model': 'lasg_cnn', 'init': 'torch'},
             'info': {'num_train': 60000}}
    self.assertEqual(lasg_report.windows(steps),
                     [(0, 100), (100, 200), (200, 300), (300, 400),
                      (400, 500), (500, 600), (900, 1000)])
    text = '\n'.join(lasg_report.window_section(sweep))
    for g, algo in enumerate(('sgd', 'lasg_wk2')):
      want = [f'{int(uploads[g, a:a + 100].sum()):,}'
              for a in (0, 100, 200, 300, 400, 500, 900)]
      self.assertEqual(cells(text, algo), [algo] + want)
    self.assertIn('at most 300', text)
    with unittest.mock.patch.object(
        lasg_report.replay_lib, 'flops_per_worker_step',
        lambda config, num_train: (1.0, 431_080)):
      line = lasg_report.model_line(sweep)[0]
    self.assertEqual(line, "Model: `lasg_cnn` (431,080 parameters), started "
                     "as PyTorch starts it (`init='torch'`: torch.nn's "
                     "default uniform initializers, as the authors' code "
                     'does).')
    self.assertEqual(lasg_report.window_section(
        dict(sweep, curves={'uploads': uploads[:, :150]})), [])
    # Past EARLY steps, each preset's share of SGD's uploads in the first
    # EARLY, by hand.
    long = np.concatenate([uploads] * 3, axis=1)  # 3,000 steps
    share = 100.0 * long[1, :2000].sum() / long[0, :2000].sum()
    self.assertIn(f"In the first 2,000 steps, of SGD's uploads: lasg_wk2 "
                  f'{share:.2f}%.', '\n'.join(lasg_report.window_section(
                      dict(sweep, curves={'uploads': long}))))


# `python -m experiments.family` with two more presets, one of each kind,
# registered from user code as a user's join the family (one more grid point
# in each compiled program), at a huge step size: they diverge.
DIVERGING = {'diverge_gd': 'gd', 'diverge_sgd': 'sgd'}
DRIVER = f'''
import dataclasses, runpy
import ml_collections
import laq_jax as lj
for name, like in {DIVERGING!r}.items():
  lj.register_algorithm(dataclasses.replace(
      lj.ALGORITHMS[like], name=name, reference='a test: step size 1e4'))
from configs import sweep_compressors
get_config = sweep_compressors.get_config
def huge_step(arg=None):
  config = get_config(arg)
  for name in {list(DIVERGING)!r}:
    settings = dict(config.algo_settings.get(name, {{}}), step_size=1e4)
    config.algo_settings[name] = ml_collections.ConfigDict(settings)
  return config
sweep_compressors.get_config = huge_step
runpy.run_module('experiments.family', run_name='__main__', alter_sys=True)
'''


@pytest.mark.slow
class TinyReportTest(absltest.TestCase):

  def test_every_preset_and_table_cell(self):
    env = common.IsolatedEnv('laq_family_test_')
    env.enter()
    self.addCleanup(env.exit)
    workdir = pathlib.Path(env.name, 'family')
    done = subprocess.run(
        [sys.executable, '-c', DRIVER, f'--workdir={workdir}', '--tiny'],
        cwd=common.ROOT, capture_output=True, text=True, timeout=1200,
        check=False)
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    report = (workdir / family_report.REPORT).read_text()
    for problem, title in (('logreg', 'Logistic regression'),
                           ('mlp', 'The 200-ReLU network')):
      section = next(s for s in report.split('\n## ') if s.startswith(title))
      for kind, label in (('full', '### Full batch'),
                          ('minibatch', '### Minibatch')):
        table = section.split(label)[1].split('\n### ')[0]
        rows = outputs.read_results(workdir / problem / kind /
                                    'results.csv')
        self.assertLen(rows, 1 + sum(  # and its diverging preset
            lj.ALGORITHMS[a].stochastic == (kind == 'minibatch')
            for a in sweep_compressors.FAMILY))
        for r in rows:  # every preset is a row of its table, as in the csv
          cells = next(l for l in table.splitlines()
                       if l.startswith(f'| {r["algo"]} |'))
          self.assertIn(f'| {int(r["total_uploads"]):,} |', cells)
          self.assertIn(f'| {int(r["total_bits"]):.3e} |', cells)
          self.assertIn(f'| {markdown.fmt(float(r["total_bits_down"]), "sci")}'
                        ' |', cells)
      self.assertNotEmpty(list((workdir / problem).glob('bits_vs_*.png')))
      # Where each method wins: profiles, the bandwidth figure, crossovers.
      timed = section.split('### Time to target on modeled networks')[1]
      self.assertTrue((workdir / problem / 'time_vs_bandwidth.png').is_file())
      self.assertIn(f'({problem}/time_vs_bandwidth.png)', timed)
      for kind, lazy, eager in (('Full batch', 'LAQ', 'GD'),
                                ('Minibatch', 'SLAQ', 'SGD')):
        self.assertIn(f'**{kind}.** Target: ', timed)
        self.assertIn(f'- {kind}, the fastest of all presets: ', timed)
        self.assertIn(f'- {kind}, {lazy} against {eager} on its faster '
                      'topology: ', timed)
      self.assertRegex(timed, r'Fastest to the target: datacenter \*\*')
      # results.json carries the time table's seconds per profile.
      values = json.loads((workdir / 'results.json').read_text())['values']
      for kind, algo in (('full', 'laq'), ('minibatch', 'slaq')):
        seconds = values[f'{problem}/{kind}/{algo}/seconds/datacenter']
        line = next(l for l in timed.splitlines()
                    if l.startswith(f'| {algo} |'))
        self.assertIn(markdown.fmt(seconds, '.3g'), line)
      for algo in DIVERGING:  # untimed: no seconds
        self.assertFalse([k for k in values if f'/{algo}/seconds/' in k])
    self.assertLen(re.findall(r'^(Beat S?LAQ|None beat S?LAQ|S?LAQ diverged)',
                              report, re.MULTILINE), 4)
    # Every preset: a row in each problem's table and its time table, and
    # one in the settings.
    for algo in sweep_compressors.FAMILY + tuple(DIVERGING):  # (LASG and
      # CADA: configs/lasg.py)
      self.assertLen(re.findall(rf'^\| {algo} \|', report, re.MULTILINE), 5,
                     algo)
    # The diverging presets: named with the iteration in every table and
    # list of the diverged, in no ranking.
    for algo in DIVERGING:
      rows = re.findall(rf'^\| {algo} \|.*$', report, re.MULTILINE)
      self.assertLen([r for r in rows if re.search(
          r'\| (at k=\d+|diverged at k=\d+) \|$', r)], 4, rows)
      self.assertLen(re.findall(rf'\*\*{algo}\*\* \(diverged at k=\d+ ',
                                report), 2)  # under each problem's table
      self.assertLen(re.findall(rf'\*\*{algo}\*\* \(diverged at k=\d+\)',
                                report), 2)  # under each time table
      for line in report.splitlines():
        if line.startswith(('Beat ', 'Fastest to the target', '- ')):
          self.assertNotIn(algo, line)
        if line.startswith('On the Pareto front'):
          self.assertNotIn(algo, line.split('Left out')[0])
          self.assertRegex(line, rf'Left out, as they diverged: .*{algo} '
                           r'\(at k=\d+\)')


if __name__ == '__main__':
  absltest.main()
