"""experiments.workloads: the workloads' sweeps run once, then the report's
tables from their files (on a small logistic-regression stand-in for a
workload config, so that the pipeline runs in seconds; the real configs are
checked in workload_configs_test.py)."""

import pathlib
import re
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from experiments.studies.federated import sweeps
from experiments.studies.workloads import report as report_lib
from tests import common


CONFIG = '''
import dataclasses
from configs import default, workloads
from laq_jax import hyper
# A preset made to diverge (SGD at a huge step; one more point of the same
# program): the report names it and ranks nothing with it (issue 50).
hyper.register_algorithm(dataclasses.replace(
    hyper.ALGORITHMS['sgd'], name='sgd_huge',
    settings=(('step_size', 1e4),)), replace=True)
VARIANTS = dict(default.VARIANTS, tiny=dict(num_iters=6))
ETA = 0.5
def get_config(arg=None):
  config = workloads.workload_config(
      arg, VARIANTS, ETA, dataset='mnist', model='logreg', num_workers=4,
      train_subset=400, participation=0.5, batch_size=10, num_iters=9,
      eval_every=3, loss_every=3, data_dir=%r)
  return workloads.family_sweep(config, ('sgd', 'fedavg', 'sgd_huge'),
                                client_lr=ETA)
'''


def _loaded(points):
  """A sweep as `sweeps.load_sweep` returns it, made by hand (no program
  compiled): each point (algo, [test accuracy at k = 3, 6], diverged_at)."""
  g, t, m = len(points), 6, 2
  bits = np.full((g, t, m), 8e5)
  return {
      'rows': [{'algo': a, 'diverged': at is not None, 'diverged_at': at}
               for a, _, at in points],
      'curves': {
          'test_accuracy': np.array([acc for _, acc, _ in points]),
          'test_accuracy_steps': np.array([3, 6]),
          'time_s': np.ones((g, t)), 'participants': np.ones((g, t, m), bool),
          'uploads': np.ones((g, t, m), bool), 'bits': bits,
          'cum_bits': np.cumsum(bits.sum(-1), -1),
          'cum_uploads': np.cumsum(np.full((g, t), m), -1)}}


class DivergedTablesTest(absltest.TestCase):
  """The report's tables and comparisons with diverged points (issue 50):
  named with their iteration, in no comparison, also when every point
  diverged or one reached the target before it diverged."""

  def test_a_diverged_point_is_named_and_ranks_nowhere(self):
    # 'huge' reached 50% first (k = 3) before it diverged at k = 6
    loaded = _loaded([('sgd', (0.3, 0.6), None), ('huge', (0.9, 0.1), 6),
                      ('fedavg', (0.55, 0.58), None)])
    summaries = report_lib._summaries(loaded, 0.5)
    rows = report_lib._rows(loaded, summaries)
    self.assertEqual(rows[1][:5], ['huge', '90.00%', '—', 'diverged', '—'])
    self.assertEqual(rows[1][-1], 'diverged at k=6 (loss NaN/inf or above '
                     '10x f(theta^0))')
    self.assertEqual(rows[0][-1], '')
    text = '\n'.join(report_lib._observations(summaries, 0.5))
    self.assertEqual(text, (
        'Highest final test accuracy: sgd (60.00%).\n'
        '2 of the 2 presets that did not diverge reach 50%; first (round 3, '
        'the evaluations\' resolution): fedavg; fewest uplink bits to it: '
        'fedavg (0.6 MB).\n'
        'Diverged (a logged loss NaN/inf or above 10x f(theta^0); in no '
        'comparison above): huge at k=6.'))

  def test_every_point_diverged(self):
    loaded = _loaded([('sgd', (0.6, 0.1), 3), ('fedavg', (0.7, 0.1), 5)])
    summaries = report_lib._summaries(loaded, 0.5)
    rows = report_lib._rows(loaded, summaries)
    self.assertEqual([r[3] for r in rows], ['diverged', 'diverged'])
    self.assertEqual(report_lib._observations(summaries, 0.5), [
        'Every preset diverged: nothing to compare.',
        'Diverged (a logged loss NaN/inf or above 10x f(theta^0); in no '
        'comparison above): sgd at k=3, fedavg at k=5.'])


@pytest.mark.slow  # a launcher's pipeline end to end
class WorkloadsReportTest(absltest.TestCase):

  def test_runs_once_then_reports_each_preset(self):
    with tempfile.TemporaryDirectory() as tmp:
      tmp = pathlib.Path(tmp)
      path = tmp / 'demo.py'
      path.write_text(CONFIG % common.mnist_dir())
      workloads = {'demo': (str(path), 'A stand-in', 0.5)}
      with mock.patch.dict(report_lib.WORKLOADS, workloads, clear=True):
        self.assertEqual(report_lib.run(tmp / 'w', ['demo'], 'tiny'), [])
        stamp = (tmp / 'w' / 'demo' / 'sweep.json').stat().st_mtime_ns
        self.assertEqual(report_lib.run(tmp / 'w', ['demo'], 'tiny'), [])
        self.assertEqual(
            (tmp / 'w' / 'demo' / 'sweep.json').stat().st_mtime_ns, stamp)
        text = report_lib.write_report(tmp / 'w', ['demo'], 'tiny',
                                       'the command').read_text()
      loaded = sweeps.load_sweep(tmp / 'w' / 'demo')
    self.assertIn('## A stand-in (`demo`)', text)
    self.assertIn('Command: `the command`', text)
    self.assertIn('M = 4 clients (400 training samples', text)
    self.assertIn('6 rounds', text)
    c = loaded['curves']
    self.assertEqual(list(c['test_accuracy_steps']), [3, 6])
    self.assertEqual([r['algo'] for r in loaded['rows']],
                     ['sgd', 'fedavg', 'sgd_huge'])
    # sgd_huge diverged by the one rule at its first logged loss after
    # k = 0 (loss_every = 3): named with it, no accuracy from it on, no
    # target, in no comparison
    self.assertEqual([r['diverged_at'] for r in loaded['rows']],
                     [None, None, 3])
    lines = text.splitlines()
    line = next(l for l in lines if l.startswith('| sgd_huge |'))
    cells = [x.strip() for x in line.strip('|').split('|')]
    self.assertEqual(cells[1:5], ['—', '—', 'diverged', '—'])
    self.assertEqual(cells[-1], 'diverged at k=3 (loss NaN/inf or above '
                     '10x f(theta^0))')
    self.assertIn('- Diverged (a logged loss NaN/inf or above 10x '
                  'f(theta^0); in no comparison above): sgd_huge at k=3.',
                  lines)
    ranked = [l for l in lines if l.startswith('- Highest')
              or ' reach 50%' in l]
    self.assertLen(ranked, 2)
    self.assertTrue(ranked[1].startswith(
        '- 1 of the 2 presets that did not diverge reach 50%'), ranked[1])
    for l in ranked:
      self.assertNotIn('sgd_huge', l)
    for g, row in enumerate(loaded['rows'][:2]):
      line = next(l for l in lines if l.startswith(f'| {row["algo"]} |'))
      cells = [x.strip() for x in line.strip('|').split('|')]
      acc = c['test_accuracy'][g]
      self.assertEqual(cells[1:3], [f'{100 * a:.2f}%' for a in acc])
      hit = np.flatnonzero(acc >= 0.5)
      self.assertEqual(cells[3], f'{[3, 6][hit[0]]:,}' if len(hit)
                       else 'not reached')
      present = int(c['participants'][g].sum())
      self.assertEqual(cells[5], f'{int(c["uploads"][g].sum()):,} / '
                       f'{present:,}')
      # FedAvg's participants take K = 10 local steps, SGD's one gradient.
      k = 10 if row['algo'] == 'fedavg' else 1
      self.assertEqual(cells[7], f'{k * present:,}')
    self.assertRegex(text, r'this machine: [\d,]+ s against [\d,]+ s')
    self.assertTrue(re.search(r'one H200: [\d.,]+ s', text))
    self.assertIn('Highest final test accuracy', text)


if __name__ == '__main__':
  absltest.main()
