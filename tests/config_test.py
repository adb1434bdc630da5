"""Tests of the config layer: experiments/run/config.py and configs/*.py.

Every config file validates; `:ARG` arguments (variants, name=value) apply
left to right; the stochastic configs hold the LAQ authors' SLAQ settings and
the network config their b = 8 script's. One parameterized suite has one case
per validation rule, each asserting that the message names the field, the
value given and what is allowed. Nothing here loads MNIST or compiles.
"""

import math
import re
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_collections

import configs
from configs import default as default_config
from configs import paper
from configs import sweep_algos
from configs import sweep_bits_xi
from experiments.run import build
from experiments.run import config as config_lib
from laq_jax import schedule
from tests import common

ALGORITHMS = ('gd', 'qgd', 'lag', 'laq', 'sgd', 'sqgd', 'slag', 'slaq',
              'qsgd', 'ssgd')


def tiny_config(**overrides):
  """600 images, M = 10 (60 each), 30 iterations, chunks of 10."""
  config = configs.load('mnist_logreg', 'tiny')
  config.update(overrides)
  return config


class ConfigFilesTest(absltest.TestCase):

  def test_every_config_validates(self):
    for name in configs.NAMES:
      for arg in (None, 'quick', 'tiny'):
        with self.subTest(name=name, arg=arg):
          config_lib.validate_config(configs.load(name, arg))

  def test_every_sweep_config_validates(self):
    for module in (sweep_bits_xi, sweep_algos):
      for arg in (None, 'quick', 'tiny'):
        with self.subTest(module=module.__name__, arg=arg):
          points = config_lib.points_from_config(module.get_config(arg))
          self.assertNotEmpty(points)
    self.assertLen(config_lib.points_from_config(sweep_bits_xi.get_config()),
                   4 * 4)  # bits x xi
    self.assertEqual([p['algo'] for p in config_lib.points_from_config(
        sweep_algos.get_config())], ['gd', 'qgd', 'lag', 'laq'])
    stochastic = config_lib.points_from_config(
        sweep_bits_xi.get_config('stochastic'))
    self.assertEqual({p['algo'] for p in stochastic}, {'slaq'})
    self.assertEqual({p['seed'] for p in stochastic}, {0, 1, 2})

  def test_every_paper_experiment_validates(self):
    # Every budget (the README's --quick; --tiny is reproduce_test's).
    iters = {'full': 1500, 'quick': 300, 'tiny': 30}  # the minibatch runs
    for budget in paper.BUDGETS:
      for experiment in paper.experiments(budget):
        with self.subTest(name=experiment.name, budget=budget):
          config = paper.sweep_config(experiment)
          points = config_lib.points_from_config(config)
          self.assertEqual([p['algo'] for p in points],
                           list(experiment.algos))
          if experiment.stochastic:
            self.assertEqual(config.num_iters, iters[budget])
    with self.assertRaisesRegex(ValueError, "'huge'.*full, quick, tiny"):
      paper.experiments('huge')

  def test_lasgs_own_setting_is_its_authors(self):
    # configs/lasg.py:lasg_mnist: the authors' CNN as PyTorch starts it,
    # PS's L = 0.1 M^2 on lasg_ps's points alone, and a sweep without
    # lasg_ps is a sweep (it was refused: L was set in config.params).
    from configs import lasg  # pylint: disable=g-import-not-at-top
    config = lasg.get_config('lasg_mnist')
    self.assertEqual((config.model, config.init, config.num_workers),
                     ('lasg_cnn', 'torch', 20))
    points = config_lib.points_from_config(config)
    self.assertEqual({p['algo']: p['lasg_ps.L'] for p in points},
                     {'sgd': 10.0, 'lasg_wk2': 10.0, 'lasg_wk1': 10.0,
                      'lasg_ps': 40.0})  # 10: the part's default, unused
    config.sweep.algo = ('sgd', 'lasg_wk2')
    self.assertEqual([p['algo'] for p in
                      config_lib.points_from_config(config)],
                     ['sgd', 'lasg_wk2'])
    self.assertEqual(lasg.get_config('network').model, 'mlp')

  def test_stochastic_configs_hold_the_authors_settings(self):
    # NeurIPS SLAQ.py (logistic regression).
    c = configs.load('mnist_logreg_stochastic')
    self.assertEqual(
        (c.algo, c.bits, c.step_size, c.xi, c.xi_schedule, c.err_weight,
         c.threshold_offset, c.num_iters, c.batch_size, c.precision),
        ('slaq', 3, 0.008, 0.8, '', 1.5, 0.2, 1500, 500, 'float32'))
    # TPAMI-LAQ SGD/lasterrsgdDNN.py (the network): b=6 and alpha=0.02
    # overwrite its b=8 and alpha=0.008; ck = 3 (xi_d = 3/D), x2 from
    # k = 300, x6 from k = 500; ec*3 = 3; no c_0.
    c = configs.load('mnist_mlp_stochastic')
    self.assertEqual(
        (c.algo, c.model, c.hidden, c.bits, c.step_size, c.xi,
         c.xi_schedule, c.err_weight, c.threshold_offset, c.memory,
         c.max_staleness, c.l2, c.num_iters, c.batch_size, c.precision,
         c.loss_every, c.authors_code),
        ('slaq', 'mlp', 200, 6, 0.02, 3.0, '300:2,500:6', 3.0, 0.0, 10, 100,
         0.01, 1500, 500, 'float32', 10, False))
    self.assertEqual(schedule.parse(c.xi_schedule), ((300, 2.0), (500, 6.0)))

  def test_the_familys_network_minibatch_presets_share_the_settings(self):
    from configs import compressors, sweep_compressors  # pylint: disable=g-import-not-at-top
    sweep = sweep_compressors.get_config('minibatch,mlp')
    for algo in ('slaq', 'sgd', 'qsgd', 'ef_signsgd', 'terngrad'):
      s = sweep.algo_settings[algo]
      want = 0.0006 if algo in ('ef_signsgd', 'terngrad') else 0.02
      self.assertEqual((s.step_size, s.bits, s.xi, s.xi_schedule,
                        s.err_weight, s.threshold_offset),
                       (want, 6, 3.0, '300:2,500:6', 3.0, 0.0), algo)
      one = compressors.get_config(f'algo={algo},mlp')
      self.assertEqual((one.step_size, one.bits, one.xi_schedule),
                       (want, 6, '300:2,500:6'), algo)
    self.assertEqual(sweep_compressors.get_config('minibatch,mlp,quick'
                                                  ).batch_size, 50)
    # Logistic regression keeps the NeurIPS SLAQ.py settings.
    s = sweep_compressors.get_config('minibatch').algo_settings['slaq']
    self.assertEqual((s.step_size, s.bits), (0.008, 3))
    config_lib.points_from_config(sweep)

  def test_the_network_config_holds_the_authors_settings(self):
    # TPAMI-LAQ GD/lasterrtwiceDNN.py: 200 ReLUs, b = 8, 8,000 iterations.
    c = configs.load('mnist_mlp')
    self.assertEqual(
        (c.model, c.hidden, c.bits, c.step_size, c.err_weight, c.xi,
         c.memory, c.max_staleness, c.l2, c.num_iters, c.precision, c.fstar),
        ('mlp', 200, 8, 0.02, 3.0, 0.8, 10, 100, 0.01, 8000, 'float32',
         'none'))
    mlp = next(e for e in paper.experiments() if e.name == 'mlp')
    self.assertEqual(paper.run_config(mlp, 'laq').bits, 8)

  def test_the_convex_config_holds_the_papers_settings(self):
    c = configs.load('mnist_logreg')
    self.assertEqual(
        (c.model, c.num_workers, c.split, c.l2, c.step_size, c.bits,
         c.memory, c.xi, c.err_weight, c.max_staleness, c.precision,
         c.num_iters, c.target_residual),
        ('logreg', 10, 'contiguous', 0.01, 0.02, 4, 10, 0.8, 3.0, 100,
         'float64', 4000, 1e-6))

  def test_schema_is_the_default_config(self):
    self.assertEqual(set(config_lib.FIELDS),
                     set(default_config.get_config().keys()))
    for name in configs.NAMES:
      self.assertEqual(set(configs.load(name).keys()),
                       set(config_lib.FIELDS), name)


class ArgumentTest(absltest.TestCase):
  """`configs/NAME.py:ARG`: variants and name=value, left to right."""

  def test_variants_and_values(self):
    c = configs.load('mnist_logreg', 'algo=lag,quick,bits=3,step_size=0.01')
    self.assertEqual((c.algo, c.bits, c.step_size, c.num_iters, c.eval_every),
                     ('lag', 3, 0.01, 300, 50))
    self.assertIsInstance(c.step_size, float)
    self.assertIsInstance(c.bits, int)
    tiny = configs.load('mnist_logreg', 'tiny')
    self.assertEqual((tiny.train_subset, tiny.num_iters, tiny.eval_every),
                     (600, 30, 10))
    # A config's own variant wins over the default one of the same name.
    self.assertEqual(configs.load('mnist_mlp', 'quick').train_subset, 6000)
    self.assertEqual(configs.load('mnist_logreg_stochastic', 'tiny'
                                  ).batch_size, 20)

  def test_items_apply_left_to_right(self):
    self.assertEqual(configs.load('mnist_logreg', 'tiny,num_iters=7'
                                  ).num_iters, 7)
    self.assertEqual(configs.load('mnist_logreg', 'num_iters=7,tiny'
                                  ).num_iters, 30)

  def test_network_fields_from_the_command_line(self):
    # The network is a nested group: config.network.up_bps.
    c = configs.load('mnist_logreg', 'network.profile=mobile,'
                     'network.up_bps=5e6,network.server_in_bps=inf,'
                     'network.topology=star')
    self.assertEqual((c.network.profile, c.network.up_bps,
                      c.network.topology), ('mobile', 5e6, 'star'))
    self.assertEqual(c.network.server_in_bps, math.inf)
    self.assertIsNone(c.network.down_bps)  # the profile's
    config_lib.validate_config(c)
    gd = configs.load('mnist_logreg', 'algo=gd,network.topology=ring')
    config_lib.validate_config(gd)  # gd can all-reduce
    with self.assertRaisesRegex(
        config_lib.ConfigError, "^config.network.topology='ring' is not "
        "allowed for 'laq': .*gd, sgd"):
      config_lib.validate_config(configs.load(
          'mnist_logreg', 'network.topology=ring'))
    with self.assertRaisesRegex(ValueError, "did you mean 'up_bps'"):
      configs.load('mnist_logreg', 'network.up_bpz=5e6')

  def test_participation_fields_together(self):
    with self.assertRaisesRegex(config_lib.ConfigError,
                                '^config.participation=0.5 and config.'
                                'clients_per_round=3 are not allowed '
                                'together'):
      config_lib.validate_config(configs.load(
          'mnist_logreg', 'participation=0.5,clients_per_round=3'))
    with self.assertRaisesRegex(config_lib.ConfigError,
                                "config.algo='two_laq' is not allowed with "
                                'partial participation'):
      config_lib.validate_config(configs.load(
          'mnist_logreg', 'algo=two_laq,participation=0.5'))
    config_lib.validate_config(configs.load(
        'mnist_logreg', 'participation=0.1,absent=drop'))

  def test_value_types(self):
    c = configs.load('mnist_logreg', 'authors_code=true,train_subset=6e3,'
                     'fstar=none')
    self.assertIs(c.authors_code, True)
    self.assertEqual(c.train_subset, 6000)
    self.assertIsInstance(c.train_subset, int)
    self.assertEqual(c.fstar, 'none')

  def test_errors(self):
    with self.assertRaisesRegex(ValueError,
                                "no field 'bitz'; did you mean 'bits'"):
      configs.load('mnist_logreg', 'bitz=3')
    with self.assertRaisesRegex(ValueError, "'tinyy': unknown variant; did "
                                "you mean 'tiny'"):
      configs.load('mnist_logreg', 'tinyy')
    with self.assertRaisesRegex(ValueError, "'fast': unknown variant.*quick"):
      configs.load('mnist_logreg', 'fast')
    with self.assertRaisesRegex(ValueError, "bits='three'.*an integer"):
      default_config.apply_arg(default_config.get_config(), 'bits=three')
    with self.assertRaisesRegex(ValueError, "step_size='x'.*a number"):
      default_config.apply_arg(default_config.get_config(), 'step_size=x')
    with self.assertRaisesRegex(ValueError, "authors_code='maybe'.*true"):
      default_config.apply_arg(default_config.get_config(),
                               'authors_code=maybe')
    with self.assertRaisesRegex(ValueError, "unknown config 'cifar'"):
      configs.load('cifar')


def _case(name, overrides, field, value, allowed):
  return (name, overrides, field, value, allowed)


class SlotFieldsTest(absltest.TestCase):
  """--config.server=adam: a preset's slot filled by the config."""

  def test_slot_fields_compose_the_preset(self):
    c = default_config.get_config()
    c.server, c.compressor = 'adam', 'top_k'
    self.assertEqual(config_lib.algorithm_of(c).name,
                     'laq+compressor=top_k+server=adam')
    config_lib.validate_config(c)
    folded = config_lib.with_slots_in_algo(c)
    self.assertEqual((folded.algo, folded.server, folded.compressor),
                     ('laq+compressor=top_k+server=adam', '', ''))
    self.assertEqual((c.algo, c.server), ('laq', 'adam'))  # a copy
    # the same run as the composed name (what the build runs)
    named = default_config.get_config()
    named.algo = 'laq+compressor=top_k+server=adam'
    self.assertEqual(config_lib.algorithm_of(named),
                     config_lib.algorithm_of(c))
    # a sweep: every point's preset with the config's part in the slot
    sweep = sweep_algos.get_config()
    sweep.server = 'adam'
    self.assertEqual(
        [p['algo'] for p in config_lib.points_from_config(sweep)],
        [f'{a}+server=adam' for a in sweep.sweep.algo])
    c.server = 'adagrad'
    with self.assertRaisesRegex(config_lib.ConfigError,
                                "config.server='adagrad' is not allowed: it "
                                "must be one of '', 'sgd', 'momentum'"):
      config_lib.validate_config(c)


class ValidationTest(parameterized.TestCase):
  """One case per rule of validate_config; nothing is loaded."""

  @parameterized.named_parameters(
      # Choices.
      _case('algo', dict(algo='adam'), 'algo', "'adam'",
            'one of ' + ', '.join(repr(a) for a in ALGORITHMS)),
      _case('model', dict(model='resnet'), 'model', "'resnet'",
            "one of 'logreg', 'mlp'"),
      _case('init', dict(init='he'), 'init', "'he'",
            "one of 'default', 'torch'"),
      # logistic regression starts at zero: no PyTorch initializers for it
      _case('init_model', dict(init='torch'), 'init', "'torch'",
            r"'default' for model='logreg' \(model 'logreg' has no init "
            r"option; init='torch' is for 'mlp', 'cnn', 'lasg_cnn', 'pfl_cnn'\)"),
      _case('lstm', dict(lstm='cudnn'), 'lstm', "'cudnn'",
            "one of 'flax', 'fused'"),
      _case('lstm_model', dict(lstm='fused'), 'lstm', "'fused'",
            "'flax' for model='logreg'"),
      _case('split', dict(split='shuffled'), 'split', "'shuffled'",
            "one of 'contiguous', 'iid', 'label_sorted', 'dirichlet', "
            "'shards', 'dirichlet_unequal'"),
      _case('precision', dict(precision='float16'), 'precision',
            "'float16'", "one of 'float32', 'float64'"),
      _case('workers_on', dict(workers_on='tpu'), 'workers_on', "'tpu'",
            "one of 'vmap', 'devices'"),
      # Integers with a lower bound.
      _case('num_workers', dict(num_workers=0), 'num_workers', '0',
            'an integer >= 1'),
      _case('num_iters', dict(num_iters=0), 'num_iters', '0',
            r'an integer >= 1 and <= 2,147,483,647 \(the step counter is '
            r'int32\)'),
      _case('num_iters_float', dict(num_iters=2.5), 'num_iters', '2.5',
            'an integer >= 1'),
      # Past the int32 step counter (a run that printed nothing for 90 s).
      _case('num_iters_past_int32', dict(num_iters=3 * 10**9), 'num_iters',
            '3000000000', r'an integer >= 1 and <= 2,147,483,647'),
      _case('memory', dict(memory=0), 'memory', '0',
            r'an integer >= 1 and <= 100,000 \(D, the history length\)'),
      # An 80 GB history (was XLA's RESOURCE_EXHAUSTED).
      _case('memory_huge', dict(memory=10**10), 'memory', '10000000000',
            r'an integer >= 1 and <= 100,000'),
      _case('batch_size', dict(batch_size=0), 'batch_size', '0',
            'an integer >= 1'),
      _case('hidden', dict(hidden=0), 'hidden', '0', 'an integer >= 1'),
      _case('data_seed', dict(data_seed=-1), 'data_seed', '-1',
            'an integer >= 0'),
      _case('train_subset_negative', dict(train_subset=-1), 'train_subset',
            '-1', r'an integer >= 0 \(0 uses every training sample\)'),
      _case('eval_every', dict(eval_every=0), 'eval_every', '0',
            'an integer >= 1'),
      _case('checkpoint_negative', dict(checkpoint_every=-10),
            'checkpoint_every', '-10', r'an integer >= 0 and <= 2,147,483,647 '
            r'\(0 turns'),
      _case('checkpoint_not_a_multiple_of_chunk', dict(checkpoint_every=15),
            'checkpoint_every', '15',
            r'0 \(off\) or a multiple of eval_every=10.*e\.g\. 10 or 20'),
      # The hyperparameters.
      _case('bits_below_1', dict(bits=0), 'bits', '0', r'1\.\.32'),
      _case('bits_above_32', dict(bits=33), 'bits', '33', r'1\.\.32'),
      _case('bits_not_an_integer', dict(bits=2.5), 'bits', '2.5',
            'an integer'),
      _case('step_size_zero', dict(step_size=0.0), 'step_size', '0.0',
            'a finite number > 0'),
      _case('step_size_negative', dict(step_size=-0.5), 'step_size', '-0.5',
            'a finite number > 0'),
      _case('xi', dict(xi=-0.1), 'xi', '-0.1', 'a finite number >= 0'),
      _case('err_weight', dict(err_weight=-1.0), 'err_weight', '-1.0',
            'a finite number >= 0'),
      _case('threshold_offset', dict(threshold_offset=-1.0),
            'threshold_offset', '-1.0', 'a finite number >= 0'),
      _case('max_staleness', dict(max_staleness=-1), 'max_staleness', '-1',
            r'an integer in 0\.\.'),
      _case('l2_negative', dict(l2=-1.0), 'l2', '-1.0',
            'a finite number >= 0'),
      _case('l2_nan', dict(l2=float('nan')), 'l2', 'nan', 'a finite number'),
      _case('seed', dict(seed=-1), 'seed', '-1', r'an integer in 0\.\.'),
      # The parts' own parameters (config.params.<part>.<param>).
      _case('top_k_zero', {'params.top_k.k': 0.0}, 'params.top_k.k', '0.0',
            'a fraction'),
      _case('top_k_not_whole', {'params.top_k.k': 2.5}, 'params.top_k.k',
            '2.5', 'a whole count'),
      _case('zeta', {'params.clag.zeta': -1.0}, 'params.clag.zeta', '-1.0',
            'a finite number >= 0'),
      _case('downlink_bits', dict(downlink_bits=33), 'downlink_bits', '33',
            r'0\.\.32'),
      _case('levels', {'params.qsgd.levels': 0}, 'params.qsgd.levels', '0',
            r'an integer in 1\.\.16777216'),
      _case('keep_prob_zero', {'params.rand_p.keep_prob': 0.0},
            'params.rand_p.keep_prob', '0.0', r'a number in \(0, 1\]'),
      _case('keep_prob_above_1', {'params.rand_p.keep_prob': 1.5},
            'params.rand_p.keep_prob', '1.5', r'a number in \(0, 1\]'),
      # Other fields.
      _case('authors_code', dict(authors_code=1), 'authors_code', '1',
            'True or False'),
      _case('dirichlet_alpha', dict(dirichlet_alpha=0.0), 'dirichlet_alpha',
            '0.0', 'a finite number > 0'),
      _case('target_residual', dict(target_residual=0.0), 'target_residual',
            '0.0', 'a finite number > 0'),
      _case('data_dir_type', dict(data_dir=3), 'data_dir', '3',
            r"a path, or '' to search \$LAQ_JAX_DATA"),
      _case('data_dir_missing', dict(data_dir='/no/such/dir'), 'data_dir',
            "'/no/such/dir'", 'an existing directory holding the MNIST'),
      _case('fstar', dict(fstar='abc'), 'fstar', "'abc'",
            "'auto'.*'none', or a finite number"),
      _case('dataset', dict(dataset='cifar'), 'dataset', "'cifar'",
            "'mnist', .*'builtin:NAME'.*heart_scale.*'libsvm:/path/file'"),
      _case('dataset_builtin', dict(dataset='builtin:iris'), 'dataset',
            "'builtin:iris'", 'builtin:NAME with NAME one of heart_scale'),
      _case('dataset_libsvm', dict(dataset='libsvm:/no/such/file'),
            'dataset', "'libsvm:/no/such/file'",
            'libsvm:PATH with PATH an existing LIBSVM file'),
      # How the data are split.
      _case('subset_not_a_multiple_of_workers', dict(train_subset=605),
            'train_subset', '605', r'0 or a multiple of num_workers=10.*'
            r'e\.g\. 600'),
      _case('subset_larger_than_mnist', dict(train_subset=70000),
            'train_subset', '70000', 'at most 60000'),
      # More workers than samples: the workers are named, not a subset
      # that would itself be refused (it suggested train_subset=10**7).
      _case('more_workers_than_the_subset', dict(num_workers=10**7),
            'num_workers', '10000000', r'at most the 600 training samples '
            r'\(train_subset=600\): every worker needs its own'),
      _case('more_workers_than_mnist',
            dict(num_workers=10**7, train_subset=0), 'num_workers',
            '10000000', 'at most the 60,000 training samples'),
      _case('workers_do_not_divide_mnist',
            dict(num_workers=7, train_subset=0), 'num_workers', '7',
            'a divisor of the 60000 training samples'),
      _case('unequal_more_clients_than_samples',
            dict(split='dirichlet_unequal', num_workers=700),
            'num_workers', '700', 'at most the training samples'),
      _case('dirichlet_size_alpha', dict(dirichlet_size_alpha=-1.0),
            'dirichlet_size_alpha', '-1.0', 'a finite number > 0'),
      _case('batch_larger_than_shard', dict(algo='slaq', batch_size=61),
            'batch_size', '61', "at most the shard size 60 .*'slaq'"),
      # Schedules and the logged objective.
      _case('xi_schedule_not_increasing', dict(xi_schedule='500:2,300:6'),
            'xi_schedule', "'500:2,300:6'", 'K1:C1,K2:C2'),
      _case('xi_schedule_text', dict(xi_schedule='from 300 on'),
            'xi_schedule', "'from 300 on'", 'up to 8 breakpoints'),
      _case('xi_schedule_type', dict(xi_schedule=3), 'xi_schedule', '3',
            'K1:C1'),
      _case('loss_every_negative', dict(loss_every=-1), 'loss_every', '-1',
            'an integer >= 0 .0: 1 for full-batch runs, 10 for minibatch'),

      # Partial participation.
      _case('participation_zero', dict(participation=0.0), 'participation',
            '0.0', r'a number in \(0, 1\]'),
      _case('clients_per_round_above_workers', dict(clients_per_round=11),
            'clients_per_round', '11', 'at most num_workers=10'),
      _case('absent', dict(absent='gone'), 'absent', "'gone'",
            'one of auto, stale, drop'),
      _case('deadline_on_a_ring',
            {'algo': 'gd', 'network.topology': 'ring', 'deadline_s': 1.0},
            'deadline_s', '1.0', "0 with network.topology='ring'"),
      # The modeled network.
      _case('network_profile', {'network.profile': 'lan'}, 'network.profile',
            "'lan'",
            'one of datacenter, cross_silo, mobile'),
      _case('network_bandwidth_zero', {'network.up_bps': 0.0},
            'network.up_bps', '0.0', r'a number > 0 \(inf: no limit\)'),
      _case('network_bandwidth_nan', {'network.down_bps': float('nan')},
            'network.down_bps', 'nan', 'not NaN'),
      _case('network_latency_negative', {'network.up_latency_s': -0.01},
            'network.up_latency_s', '-0.01', 'a finite number >= 0'),
      _case('network_latency_inf', {'network.down_latency_s': math.inf},
            'network.down_latency_s', 'inf', 'a finite number >= 0'),
      _case('network_topology', {'network.topology': 'tree'},
            'network.topology', "'tree'", 'one of star, ring'),
      _case('network_straggler', {'network.straggler': 'gamma'},
            'network.straggler', "'gamma'", 'none, exp, lognormal'),
  )
  def test_rule(self, overrides, field, value, allowed):
    # A plain dict: ConfigDict's own type checks would catch some first.
    config = tiny_config().to_dict()
    for key, given in overrides.items():  # network.up_bps: nested
      config_lib.set_path(config, key, given)
    with self.assertRaises(config_lib.ConfigError) as raised:
      config_lib.validate_config(config)
    message = str(raised.exception)
    self.assertRegex(message, rf'^config\.{field}='
                     rf'{re.escape(value)} is not allowed: it must be .*'
                     rf'{allowed}')

  def test_a_client_s_epochs_together(self):
    # FedNova's E_m in epochs_min..epochs_max: refused before anything runs
    config = tiny_config(algo='fednova', batch_size=10)
    config.params.fednova.epochs_min = 5  # above the preset's epochs_max 4
    with self.assertRaisesRegex(
        config_lib.ConfigError, r'^config\.params: fednova\.epochs_max=4 is '
        r'not allowed with fednova\.epochs_min=5'):
      config_lib.validate_config(config)
    config.params.fednova.epochs_max = 6
    config_lib.validate_config(config)

  def test_full_batch_algorithms_ignore_the_batch_size(self):
    config_lib.validate_config(tiny_config(algo='laq', batch_size=61))

  def test_the_tiny_config_is_valid(self):
    config_lib.validate_config(tiny_config())
    config_lib.validate_config(tiny_config(checkpoint_every=20))
    config_lib.validate_config(tiny_config().to_dict())  # a dict works too

  def test_workers_do_not_divide_devices(self):
    config = tiny_config(workers_on='devices').to_dict()
    with mock.patch.object(jax, 'device_count', return_value=4):
      with self.assertRaisesRegex(config_lib.ConfigError,
                                  'config.num_workers / config.workers_on: '
                                  'num_workers=10 cannot be split over '
                                  'num_devices=4.*1, 2, 5, 10'):
        config_lib.validate_config(config)
    with mock.patch.object(jax, 'device_count', return_value=5):
      config_lib.validate_config(config)

  def test_unknown_and_missing_fields(self):
    config = tiny_config()
    config.bitz = 3
    with self.assertRaisesRegex(config_lib.ConfigError,
                                "no field 'bitz'; did you mean 'bits'"):
      config_lib.validate_config(config)
    config.qqqq = 1  # nothing near: the fields are listed
    with self.assertRaisesRegex(config_lib.ConfigError,
                                "no field 'qqqq'; fields: absent, algo, "):
      config_lib.validate_config(config, allow_extra=('bitz',))
    del config['qqqq']
    config_lib.validate_config(config, allow_extra=('bitz',))
    del config['bitz']
    del config['fstar']
    with self.assertRaisesRegex(config_lib.ConfigError,
                                'lacks field.*fstar.*configs/default.py'):
      config_lib.validate_config(config)
    # A sweep config given to the single run's launcher: which launcher.
    with self.assertRaisesRegex(config_lib.ConfigError,
                                r'^this is a sweep config .* python -m '
                                r'experiments.sweep'):
      config_lib.validate_config(sweep_bits_xi.get_config('tiny'))


class HelpersTest(absltest.TestCase):

  def test_parse_dataset(self):
    self.assertEqual(config_lib.parse_dataset('mnist'), ('mnist', ''))
    self.assertEqual(config_lib.parse_dataset('builtin:heart_scale'),
                     ('builtin', 'heart_scale'))
    self.assertEqual(config_lib.parse_dataset('libsvm:/a:b'),
                     ('libsvm', '/a:b'))
    for bad in ('libsvm:', 'builtin', 'csv:/x', ''):
      with self.assertRaisesRegex(config_lib.ConfigError,
                                  f'config.dataset={bad!r}'):
        config_lib.parse_dataset(bad)

  def test_fstar_value(self):
    self.assertIsNone(config_lib.fstar_value('auto'))
    self.assertIsNone(config_lib.fstar_value('none'))
    self.assertEqual(config_lib.fstar_value(3), 3.0)
    self.assertIsInstance(config_lib.fstar_value(3), float)
    # A number given on the command line arrives as text.
    self.assertEqual(config_lib.fstar_value('5.551'), 5.551)
    for bad in ('abc', float('inf'), True, None):
      with self.assertRaisesRegex(config_lib.ConfigError,
                                  f'config.fstar={bad!r}'):
        config_lib.fstar_value(bad)

  def test_check_batch_size(self):
    config_lib.check_batch_size('slaq', 60, 60)
    config_lib.check_batch_size('laq', 61, 60)  # full batch: not drawn
    with self.assertRaisesRegex(config_lib.ConfigError,
                                'config.batch_size=61.*shard size 60'):
      config_lib.check_batch_size('sgd', 61, 60)

  def test_accessors(self):
    config = tiny_config()

    class Attributes:
      algo = 'laq'

      def __init__(self):
        self.bits = 4
        self._hidden = 0

    for c in (config, config.to_dict()):
      self.assertEqual(config_lib.get(c, 'bits'), 4)
      self.assertEqual(sorted(config_lib.keys(c)), sorted(config_lib.FIELDS))
      self.assertEqual(config_lib.to_dict(c), config.to_dict())
    self.assertEqual(config_lib.keys(Attributes()), ['bits'])
    self.assertEqual(config_lib.get(Attributes(), 'algo'), 'laq')
    error = config_lib.bad('bits', 0, 'an integer')
    self.assertIsInstance(error, config_lib.ConfigError)
    self.assertIsInstance(error, ValueError)
    self.assertEqual(str(error), 'config.bits=0 is not allowed: it must be '
                     'an integer')


class SweepConfigTest(absltest.TestCase):
  """A sweep config: a run config plus config.sweep and sweep_batch_size."""

  def sweep(self, grid, **overrides):
    config = tiny_config(**overrides)
    config.sweep = ml_collections.ConfigDict(grid)
    config.sweep_batch_size = 0
    return config

  def test_points_and_point_config(self):
    config = self.sweep({'xi': [0.4, 0.8], 'bits': [2, 3]})
    points = config_lib.points_from_config(config)
    # GRID_KEYS order (bits before xi), the last key varying fastest.
    self.assertEqual([(p['bits'], p['xi']) for p in points],
                     [(2, 0.4), (2, 0.8), (3, 0.4), (3, 0.8)])
    for p in points:
      self.assertEqual((p['algo'], p['step_size'], p['seed']),
                       ('laq', 0.02, 0))
    run = config_lib.point_config(config, points[3])
    self.assertNotIn('sweep', run)
    self.assertNotIn('sweep_batch_size', run)
    self.assertEqual((run.bits, run.xi, run.num_iters), (3, 0.8, 30))
    config_lib.validate_config(run)

  def test_every_point_is_checked_as_a_single_run(self):
    # A grid value that a single run refuses is refused in one line, also
    # past each algorithm's first point (was a ValueError from the program's
    # spec once the sweep ran).
    workers = tiny_config().num_workers
    config = self.sweep({'algo': ['sgd'],
                         'clients_per_round': [2, workers + 1]},
                        batch_size=10)
    with self.assertRaisesRegex(
        config_lib.ConfigError, rf'^config.clients_per_round={workers + 1} '
        rf'is not allowed: it must be at most num_workers={workers}'):
      config_lib.points_from_config(config)

  def test_a_part_parameter_as_a_nested_group(self):
    # ConfigDict keys hold no dots: {'clag': {'zeta': ...}} is 'clag.zeta',
    # in the grid and in algo_settings; the run config of a point holds it
    # in config.params. The parts' parameters vary fastest (grid_keys()).
    config = self.sweep({'algo': ['laq', 'clag'],
                         'clag': {'zeta': [1.0, 5.0]},
                         'network': {'up_bps': [1e6, 1e7]}})
    config.algo_settings = ml_collections.ConfigDict(
        {'clag': {'top_k': {'k': 0.05}}})
    points = config_lib.points_from_config(config)
    self.assertEqual(
        [(p['algo'], p['clag.zeta'], p['network.up_bps'], p['top_k.k'])
         for p in points],
        [('laq', 20.0, 1e6, 0.01), ('laq', 20.0, 1e7, 0.01),
         ('clag', 1.0, 1e6, 0.05), ('clag', 5.0, 1e6, 0.05),
         ('clag', 1.0, 1e7, 0.05), ('clag', 5.0, 1e7, 0.05)])
    run = config_lib.point_config(config, points[-1])
    self.assertEqual((run.params.clag.zeta, run.params.top_k.k,
                      run.network.up_bps), (5.0, 0.05, 1e7))
    config_lib.validate_config(run)
    with self.assertRaisesRegex(config_lib.ConfigError,
                                "no sweep key 'clag.zetta'"):
      config_lib.points_from_config(self.sweep({'clag': {'zetta': [1.0]}}))

  def test_a_parameter_a_part_reads_of_another(self):
    # EF21-BC's broadcast and server read top_k_down's k (Part.reads): a
    # grid and config.params may set it for ef21_bc, not for laq.
    config = self.sweep({'algo': ['ef21_bc'], 'top_k_down': {'k': [2, 8]}})
    self.assertEqual([p['top_k_down.k'] for p in
                      config_lib.points_from_config(config)], [2, 8])
    run = tiny_config(algo='ef21_bc')
    run.params.top_k_down.k = 4
    config_lib.validate_config(run)
    run.algo = 'laq'
    with self.assertRaisesRegex(config_lib.ConfigError,
                                'params.top_k_down.k=4.0 is not allowed: '
                                'it must be its default'):
      config_lib.validate_config(run)

  def test_grid_axis(self):
    config = self.sweep({'bits': [2, 3]})
    self.assertEqual(config_lib.grid_axis(config), 'auto')  # the default
    config.sweep_grid_axis = 'vmap'
    self.assertEqual(config_lib.grid_axis(config), 'vmap')
    self.assertLen(config_lib.points_from_config(config), 2)
    self.assertNotIn('sweep_grid_axis',
                     config_lib.point_config(config, {
                         **config_lib.points_from_config(config)[0]}))
    config.sweep_grid_axis = 'pmap'
    with self.assertRaisesRegex(
        config_lib.ConfigError,
        "config.sweep_grid_axis='pmap' is not allowed: it must be 'auto' or "
        "'map' or 'vmap'"):
      config_lib.points_from_config(config)

  def test_errors(self):
    config = tiny_config()
    with self.assertRaisesRegex(config_lib.ConfigError,
                                "lacks field 'sweep'"):
      config_lib.points_from_config(config)
    with self.assertRaisesRegex(config_lib.ConfigError,
                                'config.sweep_batch_size=-1 is not allowed'):
      config_lib.points_from_config(self.sweep({'bits': [2]}).to_dict()
                                    | {'sweep_batch_size': -1})
    with self.assertRaisesRegex(config_lib.ConfigError,
                                "no sweep key 'bitz'; did you mean 'bits'"):
      config_lib.points_from_config(self.sweep({'bitz': [2]}))
    with self.assertRaisesRegex(config_lib.ConfigError,
                                r"config.sweep\['bits'\].*0"):
      config_lib.points_from_config(self.sweep({'bits': [0, 2]}))
    # A minibatch of 61 does not fit a shard of 60: checked per algorithm.
    with self.assertRaisesRegex(config_lib.ConfigError,
                                'config.batch_size=61'):
      config_lib.points_from_config(self.sweep({'algo': ['slag', 'slaq']},
                                               batch_size=61))


class AlgoSettingsTest(absltest.TestCase):
  """config.algo_settings: per-algorithm values of a sweep's points."""

  def sweep(self, settings, grid=None):
    config = tiny_config(batch_size=20)
    config.sweep = ml_collections.ConfigDict(
        grid or {'algo': ['laq', 'slaq', 'ef21']})
    config.sweep_batch_size = 0
    config.algo_settings = ml_collections.ConfigDict(settings)
    return config

  def test_applied_to_that_algorithms_points_only(self):
    points = config_lib.points_from_config(self.sweep(
        {'slaq': {'step_size': 0.008, 'bits': 3}}))
    got = {p['algo']: (p['step_size'], p['bits']) for p in points}
    self.assertEqual(got, {'laq': (0.02, 4), 'slaq': (0.008, 3),
                           'ef21': (0.02, 4)})
    run = config_lib.point_config(self.sweep({'slaq': {'bits': 3}}),
                                  points[1])
    self.assertNotIn('algo_settings', run)
    self.assertEqual(run.bits, 3)

  def test_errors_name_what_is_wrong(self):
    cases = [({'adam': {'bits': 3}}, "algo_settings='adam'.*keyed by"),
             ({'slaq': {'batch_size': 3}},
              'algo_settings.slaq.batch_size is not allowed: keys are'),
             ({'slaq': {'bits': 40}}, r'algo_settings.slaq.bits=40.*1\.\.32'),
             ({'laq': {'xi': 0.2}}, r'the grid \(config.sweep\) varies xi')]
    for settings, pattern in cases:
      with self.subTest(settings=settings):
        grid = {'algo': ['laq'], 'xi': [0.4, 0.8]} if 'xi' in str(
            settings) else None
        with self.assertRaisesRegex(config_lib.ConfigError, pattern):
          config_lib.points_from_config(self.sweep(settings, grid))


class BuildTest(absltest.TestCase):
  """The config's dataset and precision, as `experiments.run.build` sees
  them."""

  def test_builtin_dataset_builds(self):
    built = build.build(tiny_config(dataset='builtin:heart_scale',
                                    train_subset=0, num_workers=10))
    self.assertEqual(built.data.x_MxNxD.shape, (10, 27, 13))  # 270 samples
    self.assertEqual(built.num_params, 13 * 2 + 2)
    self.assertEqual(built.data.x_MxNxD.dtype, jnp.float64)
    self.assertEqual(built.test_x.shape, (270, 13))

  def test_float64_needs_x64(self):
    # A fresh process with x64 off: a float64 config is refused with a
    # ConfigError that says how to turn it on; a float32 one stays float32.
    code = '\n'.join([
        'import jax, configs',
        'from experiments.run import build, config',
        'assert not jax.config.jax_enable_x64',
        "c = configs.load('mnist_logreg', 'tiny,dataset=builtin:heart_scale,"
        "train_subset=0')",
        'try:',
        '  build.build(c)',
        'except config.ConfigError as e:',
        "  print('refused:', e)",
        "c.precision = 'float32'",
        "print('float32:', build.build(c).data.x_MxNxD.dtype)",
    ])
    out = common.run_script(code, JAX_ENABLE_X64='0', JAX_PLATFORMS='cpu')
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertRegex(out.stdout, "refused: config.precision='float64' needs "
                     "float64 turned on.*jax_enable_x64")
    self.assertIn('float32: float32', out.stdout)


if __name__ == '__main__':
  absltest.main()
