"""The successors study (configs/successors.py, experiments/successors.py,
experiments/studies/successors/): its settings, and its report's numbers
against the sweeps' own files."""

import csv
import pathlib
import tempfile

from absl.testing import absltest
import numpy as np
import pytest

from experiments.run import config as config_lib
from experiments.studies.successors import report
from experiments.studies.successors import sections
from experiments.studies.successors import study
from tests import common

_ENV = common.IsolatedEnv('laq_successors_test_')


def setUpModule():
  _ENV.enter()


def tearDownModule():
  _ENV.exit()


def _csv(folder: pathlib.Path) -> list[dict]:
  with open(folder / 'results.csv') as f:
    return list(csv.DictReader(f))


@pytest.mark.slow
class StudyTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.TemporaryDirectory()
    cls.workdir = pathlib.Path(cls.tmp.name)
    cls.failed = study.run(cls.workdir, ['fednova', 'ef21_p'], size='tiny')
    cls.text = (cls.workdir / report.REPORT).read_text()

  @classmethod
  def tearDownClass(cls):
    cls.tmp.cleanup()
    super().tearDownClass()

  def test_settings(self):
    """Every section validates at every size; the data-derived settings
    are theory's on the section's own shards."""
    from configs import successors  # pylint: disable=g-import-not-at-top
    from laq_jax.round import theory  # pylint: disable=g-import-not-at-top
    for name in successors.SECTIONS:
      for size in ('tiny', 'quick', 'cpu', 'full'):
        with self.subTest(section=name, size=size):
          points = config_lib.points_from_config(
              successors.get_config(f'{name},{size}' if size != 'cpu'
                                    else name))
          self.assertEqual(sorted({p['algo'] for p in points}),
                           sorted(successors.ALGOS[name]))
    config = sections.sweep_config('scaffnew', 'tiny')
    x, y = common.mnist_shards(1, 600, dtype=np.float64)
    x = x[0][np.argsort(y[0], kind='stable')].reshape(10, 60, -1)
    want = theory.scaffnew_settings(x, 0.01)
    self.assertAlmostEqual(config.algo_settings.scaffnew.scaffnew.p,
                           want['scaffnew.p'], places=12)
    self.assertEqual(config.algo_settings.fedavg.local.steps,
                     round(1 / want['scaffnew.p']))
    self.assertEqual(config.batch_size, 60)  # the shard: full gradients
    l_minus, _ = theory.smoothness(
        common.mnist_shards(10, 60, dtype=np.float64)[0], 0.01)
    self.assertEqual(sections.sweep_config('ef21_p', 'tiny').sweep.step_size,
                     tuple(2.0**j / l_minus / 10 for j in successors.EF21P_J))
    # The CLAG heatmap: one sweep per k, each stepping 2^j x the theory's
    # step at zeta = 0 for its k.
    x = common.mnist_shards(20, 30, dtype=np.float64)[0]
    l_minus, l_plus = theory.smoothness(x, 0.1, model='binary_nonconvex')
    clag = dict(sections.sweep_configs('clag', 'tiny'))
    self.assertEqual(list(clag), [f'k{k}' for k in successors.CLAG_KS])
    for k in (1, 315):
      want = theory.step_size('tpc_clag', l_minus, l_plus, 20, 785,
                              **{'top_k.k': float(k), 'tpc_lazy.zeta': 0.0})
      np.testing.assert_allclose(
          clag[f'k{k}'].sweep.step_size,
          [2.0**j * want for j in successors.CLAG_J], rtol=1e-12)
      self.assertEqual(clag[f'k{k}'].params.top_k.k, k)
    with self.assertRaisesRegex(ValueError, "section 'nope' is not known: "
                                'use one of scaffnew, fednova'):
      sections.sweep_config('nope')

  def test_the_report_reads_the_files(self):
    self.assertEqual(self.failed, [])
    rows = {r['fednova.normalize']: r for r in _csv(self.workdir / 'fednova')}
    nova, avg = (float(rows[k]['final_residual']) for k in ('1', '0'))
    self.assertIn(f'{nova:.4g} against FedAvg\'s {avg:.4g} with the same '
                  'drawn work', self.text)
    for r in _csv(self.workdir / 'ef21_p'):
      self.assertIn(f'| {r["algo"]} (alpha {float(r["step_size"]):.4g}) | '
                    f'{int(r["iterations"])} |', self.text)
    # Each sweep says where and when it ran (run.json), and the report too.
    import json  # pylint: disable=g-import-not-at-top
    run = json.loads((self.workdir / 'fednova' / 'run.json').read_text())
    self.assertEqual(set(run), {'commit', 'uncommitted_changes', 'started',
                                'finished'})
    self.assertIn(f'run at {(run["commit"] or "no git checkout")[:10]}',
                  self.text)
    # Each finished section's figure is written beside the report.
    for name in ('fednova', 'ef21_p'):
      self.assertIn(f']({name}.png)', self.text)
      self.assertTrue((self.workdir / f'{name}.png').is_file())
    # Missing sections are named, never silently dropped.
    self.assertIn('**Missing**: no finished sweep `scaffnew/`', self.text)
    self.assertIn('**Missing**: no finished sweep `feddyn/`', self.text)

  def test_reach_and_the_best_step(self):
    """What a point took to a target, against its curves; a diverged point
    is never the best."""
    sweep = report.load(self.workdir / 'ef21_p')
    c = sweep['curves']
    g = 2
    res = c['loss'][g] - float(sweep['rows'][g]['fstar'])
    level = res[5]  # theta^5, after 5 rounds (the residual falls)
    got = report.reach(sweep, g, res <= level)
    self.assertEqual(got['rounds'], 5)
    # what those 5 rounds spent, as metrics.at_target counts it
    self.assertEqual(got['bits'], c['cum_bits'][g, 4] + c['cum_bits_down'][g, 4])
    rows = _csv(self.workdir / 'ef21_p')
    for i, row in enumerate(rows):  # the suite's own count where it has one
      if row['target_iteration']:
        hit = report.reach(sweep, i, report.residuals(sweep, i)
                           <= float(row['target_residual']))
        self.assertEqual(hit['rounds'], int(row['target_iteration']))
    self.assertGreater(got['mobile'], got['datacenter'])
    # Every point reaches a loose target; the best (fewest bits) EF21-P
    # point diverged: the verdict takes the next best.
    for row in sweep['rows']:
      row['target_residual'] = 1e3
    diana = [i for i, r in enumerate(sweep['rows'])
             if r['algo'] == 'ef21_p_diana']
    lines = '\n'.join(report.ef21_p_verdict(sweep))
    first = sweep['rows'][diana[0]]['step_size']
    self.assertIn(f'ef21_p_diana alpha {first:.4g}:', lines)
    sweep['rows'][diana[0]].update(diverged=True, diverged_at=3)
    lines = '\n'.join(report.ef21_p_verdict(sweep))
    self.assertNotIn(f'ef21_p_diana alpha {first:.4g}:', lines)
    self.assertIn(f'ef21_p_diana alpha {sweep["rows"][diana[1]]["step_size"]:.4g}:',
                  lines)


if __name__ == '__main__':
  absltest.main()
