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

pytestmark = pytest.mark.slow  # a launcher's pipeline end to end

CONFIG = '''
from configs import default, workloads
VARIANTS = dict(default.VARIANTS, tiny=dict(num_iters=6))
ETA = 0.5
def get_config(arg=None):
  config = workloads.workload_config(
      arg, VARIANTS, ETA, dataset='mnist', model='logreg', num_workers=4,
      train_subset=400, participation=0.5, batch_size=10, num_iters=9,
      eval_every=3, loss_every=3, data_dir=%r)
  return workloads.family_sweep(config, ('sgd', 'fedavg'), client_lr=ETA)
'''


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
    for g, row in enumerate(loaded['rows']):
      line = next(l for l in text.splitlines()
                  if l.startswith(f'| {row["algo"]} |'))
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
