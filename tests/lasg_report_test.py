"""experiments.lasg (experiments/studies/lasg/report.py): a tiny sweep of
configs/lasg.py and its report, every cell checked against the sweep's
results.csv, and the replayed seconds on the sweep's own profile against the
times the compiled program computed in the loop."""

import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
import numpy as np
import pytest

from experiments.run import markdown
from experiments.run import outputs
from experiments.studies.lasg import report
from tests import common

pytestmark = pytest.mark.slow


class TinyReportTest(absltest.TestCase):

  def test_tables_and_replayed_times(self):
    where = pathlib.Path(tempfile.mkdtemp(prefix='laq_lasg_report_'))
    env = {'PYTHONPATH': common.ROOT, 'LAQ_JAX_DATA': common.mnist_dir() or '',
           'PATH': '/usr/bin:/bin'}
    run = lambda *a: subprocess.run([sys.executable, '-m', *a], cwd=common.ROOT,
                                    env=env, capture_output=True, text=True,
                                    timeout=900, check=False)
    proc = run('experiments.sweep', '--config=configs/lasg.py:network,tiny',
               f'--workdir={where / "network"}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    proc = run('experiments.lasg', f'--sweeps={where / "network"}',
               f'--out={where / "REPORT.md"}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    text = (where / 'REPORT.md').read_text()
    rows = {r['algo']: r for r in outputs.read_results(
        where / 'network' / 'results.csv')}
    sweep = report.load(where / 'network')
    timed = dict(zip([r['algo'] for r in sweep['rows']],
                     report.times(sweep)))
    curves = sweep['curves']
    self.assertIn('grads', curves)  # LASG's pairs: not one per step
    table = [line for line in text.splitlines() if line.startswith('| ')][1:]
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
      # The program timed every round on cross_silo in the loop; the
      # replay of its bits, downloads and gradients gives the same.
      np.testing.assert_allclose(timed[algo]['cross_silo'],
                                 float(r['total_time_s']), rtol=1e-9)
    # Two gradients a step for the pairs (WK2: one when forced); PS's idle
    # workers none.
    wk2 = curves['grads'][list(rows).index('lasg_wk2')]
    self.assertTrue(set(np.unique(wk2)) <= {1, 2} and (wk2 == 2).any())
    ps = curves['grads'][list(rows).index('lasg_ps')]
    np.testing.assert_array_equal(
        ps, curves['uploads'][list(rows).index('lasg_ps')].astype(int))
    self.assertIn('LASG with SLAQ', text)


if __name__ == '__main__':
  absltest.main()
