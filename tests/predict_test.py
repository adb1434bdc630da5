"""experiments.run.predict: a sweep's time before it starts, from its floor."""
from unittest import mock

from absl.testing import absltest
import ml_collections

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
    # gradient, the loss on all 600 every 10 iterations).
    n, d, c = 600, 784, 10
    full = max(2 * 4 * n * d * c / 5e10, n * d * 8 / 1e10)
    mini = max((4 * 200 * d * c + 2 * n * d * c / 10) / 5e10,
               n * d * 8 / 10 / 1e10)
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


if __name__ == '__main__':
  absltest.main()
