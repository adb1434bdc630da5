"""benchmarks/peers.py's laq-jax side end to end (Flower's needs a venv of its
own with flwr, which the suite does not install): its table and JSON."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
import pytest

from tests import common

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parent.parent


class PeersTest(absltest.TestCase):

  def test_the_laq_jax_side_runs_and_learns(self):
    out = os.path.join(tempfile.mkdtemp(), 'peers.json')
    env = dict(os.environ, LAQ_JAX_DATA=str(common.mnist_dir()))
    env.pop('FLOWER_PYTHON', None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'benchmarks' / 'peers.py'),
         '--rounds', '3', '--target', '0.5', '--models', 'logreg', '--out',
         out], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=900, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('| laq-jax fedavg logreg |', proc.stdout)
    self.assertNotIn('Flower', proc.stdout)
    results = json.loads(pathlib.Path(out).read_text())['results']
    fedavg = results['laq-jax fedavg logreg']
    self.assertLen(fedavg['accuracy'], 3)
    # FedAvg from zeros: past chance after a round, better after three
    self.assertGreater(fedavg['accuracy'][0], 0.2)
    self.assertGreater(fedavg['accuracy'][-1], fedavg['accuracy'][0])
    self.assertGreater(fedavg['rounds_per_s'], 0)
    # both sides start logistic regression from zeros: chance, 9.8%
    self.assertAlmostEqual(fedavg['initial_accuracy'], 0.098, places=3)
    # the timed call runs the same rounds as the one-round calls
    self.assertLess(fedavg['call_against_rounds_max_difference'], 1e-5)

  def test_an_unknown_model_is_refused(self):
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'benchmarks' / 'peers.py'), '--models',
         'logreg,resnet'], cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=False)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('--models: unknown resnet; allowed: logreg, cnn',
                  proc.stderr)


if __name__ == '__main__':
  absltest.main()
