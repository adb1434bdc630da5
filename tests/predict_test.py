"""experiments.run.predict: a sweep's time before it starts, from its floor."""
from unittest import mock

from absl.testing import absltest
import ml_collections
import pytest

import configs
from experiments.run import build as build_lib
from experiments.run import config as config_lib
from experiments.run import predict
from tests import common

RATES = {'matmul_flops_per_s': {'float32': 1e11, 'float64': 5e10},
         'read_bytes_per_s': 1e10}


def built_sweep(algos):
  config = configs.load('mnist_logreg', 'tiny')
  config.data_dir = common.mnist_dir()
  config.sweep = ml_collections.ConfigDict({'algo': list(algos)})
  config.sweep_batch_size = 0
  config.batch_size = 20
  points = config_lib.points_from_config(config)
  return build_lib.build(config_lib.point_config(config, points[0])), points


class PredictTest(absltest.TestCase):

  def test_floor_times_the_measured_ratio_per_kind(self):
    built, points = built_sweep(['gd', 'laq', 'sgd'])
    seconds, words = predict.predict(built, points, 30, 'auto', RATES)
    # 600 images, float64: 2 full-batch points vmapped (one pass of 8-byte
    # pixels; 4NDC FLOPs each) and 1 minibatch point (10 x 20 images'
    # gradient and one read of their rows, the loss on all 600 every 10
    # iterations; RATES has no draw rate, so no draw time).
    n, d, c = 600, 784, 10
    full = max(2 * 4 * n * d * c / 5e10, n * d * 8 / 1e10)
    mini = max((4 * 200 * d * c + 2 * n * d * c / 10) / 5e10,
               (n * d * 8 / 10 + 200 * d * 8) / 1e10)
    want = 30 * (full * predict.WALL_OVER_FLOOR['logreg', 'full', 'vmap']
                 + mini * predict.WALL_OVER_FLOOR['logreg', 'minibatch',
                                                  'map'])
    self.assertAlmostEqual(seconds, want, delta=1e-9 * want)
    self.assertIn('2 full-batch point(s), vmap', words)
    self.assertIn('1 minibatch point(s), map', words)
    mapped, _ = predict.predict(built, points, 30, 'map', RATES)
    self.assertGreater(mapped, seconds)  # two passes over the data

  def test_an_accelerator_gets_the_floor_as_a_lower_bound(self):
    built, points = built_sweep(['laq'])
    with mock.patch('jax.default_backend', lambda: 'gpu'):
      seconds, words = predict.predict(built, points, 30, 'auto', RATES)
    self.assertIsNone(seconds)
    self.assertIn('at least', words)

  def test_gradients_per_step(self):
    self.assertEqual(predict.gradients_per_step({'algo': 'sgd'}), 1)
    self.assertEqual(predict.gradients_per_step({'algo': 'lasg_wk2'}), 2)
    self.assertEqual(predict.gradients_per_step({'algo': 'cada2'}), 2)
    # K from the grid, else the preset's; each client part its own group.
    self.assertEqual(predict.gradients_per_step({'algo': 'fedavg'}), 10)
    self.assertEqual(predict.gradients_per_step(
        {'algo': 'fedavg', 'local.steps': 3, 'scaffold.steps': 1}), 3)
    self.assertEqual(predict.gradients_per_step(
        {'algo': 'scaffold', 'local.steps': 1, 'scaffold.steps': 7}), 7)

  def test_local_work_evaluations_and_a_device(self):
    built, points = built_sweep(['sgd'])
    one, _ = predict.predict(built, points, 30, 'auto', RATES)
    fedavg = [{**points[0], 'algo': 'fedavg', 'local.steps': 4}]
    four, words = predict.predict(built, fedavg, 30, 'auto', RATES)
    # K = 4 gradients of 10 x 20 images a step (and 4 reads of their rows);
    # the loss term unchanged.
    n, d, c = 600, 784, 10
    loss = 2 * n * d * c / 10

    def step(k):
      return max((k * 4 * 200 * d * c + loss) / 5e10,
                 (n * d * 8 / 10 + k * 200 * d * 8) / 1e10)

    self.assertAlmostEqual(four / one, step(4) / step(1), places=9)
    self.assertIn('4 gradients a step', words)
    evals, words = predict.predict(built, points, 30, 'auto', RATES,
                                   num_evals=3)
    test = 3 * built.test_x.shape[0] * 2 * d * c / 5e10  # forward passes
    self.assertAlmostEqual(evals - one, test * predict.WALL_OVER_FLOOR[
        'logreg', 'minibatch', 'map'], delta=1e-9)
    self.assertIn('3 test evaluation(s)', words)
    h200 = predict.H200
    gpu, words = predict.predict(built, points, 30, 'auto', device=h200)
    step = max((4 * 200 * d * c + loss) / (h200['matmul_efficiency']
                                           * h200['float64_flops']),
               (n * d * 8 / 10 + 200 * d * 8)
               / (h200['bandwidth_efficiency'] * h200['bandwidth']))
    # beyond the floor: the fitted cost of a step and of its kernels
    # (minibatch logistic regression's, counted by benchmarks/kernels.py:
    # gpu_test checks the count against its committed output)
    step += (h200['seconds_per_iteration']
             + predict.KERNELS['logreg', True] * h200['seconds_per_kernel'])
    self.assertAlmostEqual(gpu, 30 * step, delta=1e-12)
    self.assertIn('NVIDIA H200', words)

  @pytest.mark.slow  # two launcher processes, end to end
  def test_the_launcher_prints_both_and_names_a_bad_device(self):
    import os  # pylint: disable=g-import-not-at-top
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top
    env = dict(os.environ, PYTHONPATH=common.ROOT, JAX_PLATFORMS='cpu')
    env.pop('XLA_FLAGS', None)
    base = [sys.executable, '-m', 'experiments.predict',
            '--config=configs/mnist_logreg.py:tiny',
            f'--config.data_dir={common.mnist_dir()}']
    out = subprocess.run(base, capture_output=True, text=True, env=env,
                         cwd=common.ROOT, timeout=300, check=False)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertIn('here: predicted: about', out.stdout)
    self.assertIn('h200: predicted on one NVIDIA H200', out.stdout)
    bad = subprocess.run(base + ['--devices=tpu9'], capture_output=True,
                         text=True, env=env, cwd=common.ROOT, timeout=300,
                         check=False)
    self.assertNotEqual(bad.returncode, 0)
    self.assertIn('--devices=tpu9', bad.stderr)
    self.assertIn('h200', bad.stderr)


if __name__ == '__main__':
  absltest.main()
