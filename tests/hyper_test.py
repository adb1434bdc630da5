"""laq_jax.hyper: the presets, the Hyper pytree, and the rules of every field."""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import hyper
from tests import reference

TABLE = reference.FAMILY  # docs/algorithm.md's presets


class ModulesTest(absltest.TestCase):
  """hyper serves the names of fields.py and presets.py, the same objects:
  a preset registered through either module is the other's too."""

  def test_one_table_served_by_three_modules(self):
    from laq_jax import fields, presets, registry  # pylint: disable=g-import-not-at-top
    for name in ('FIELDS', 'FIELD', 'DEFAULTS', 'ARRAYS', 'Field',
                 'check_value', 'validate', 'hyper_keys'):
      self.assertIs(getattr(hyper, name), getattr(fields, name), name)
    for name in ('ALGORITHMS', 'SLOTS', 'Algorithm', 'compose',
                 'get_algorithm', 'register_algorithm'):
      self.assertIs(getattr(hyper, name), getattr(presets, name), name)
    with registry.scoped():
      presets.register_algorithm(dataclasses.replace(
          presets.get_algorithm('laq'), name='laq_again'))
      again = hyper.make_hyper('laq_again', bits=3)
      self.assertIn('laq_again', lj.ALGORITHMS)
    self.assertNotIn('laq_again', hyper.ALGORITHMS)
    want = hyper.make_hyper('laq', bits=3)
    for a, b in zip(again, want):
      if not isinstance(a, dict):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with self.assertRaisesRegex(ValueError, 'bits=0 is not allowed'):
      fields.check_value('bits', 0)


class ComposeTest(absltest.TestCase):
  """A preset with other parts in its slots ('laq+server=adam')."""

  def test_a_composed_preset_runs_as_the_same_preset_registered(self):
    # One grid, one program: composed presets beside plain ones; each runs
    # bit for bit as the Algorithm with those parts registered by hand
    # (dataclasses.replace of the preset), and adam really steps.
    from laq_jax import registry, sweep  # pylint: disable=g-import-not-at-top
    from tests import common  # pylint: disable=g-import-not-at-top
    x, y = common.mnist_shards(common.SMALL_M, common.SMALL_N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), common.SMALL_M)
    base = dict(hyper.DEFAULTS, algo='lag', step_size=0.01)
    composed = ['lag', 'laq+server=adam', 'lag+compressor=uniform']
    points = sweep.expand_grid({'algo': composed}, base)
    self.assertEqual([p['algo'] for p in points], composed)
    got = sweep.run_sweep(spec, data, points, 12)
    with registry.scoped():
      for name, preset, slots in (('laq_adam', 'laq', dict(server='adam')),
                                  ('lag_uniform', 'lag',
                                   dict(compressor='uniform'))):
        hyper.register_algorithm(dataclasses.replace(
            hyper.ALGORITHMS[preset], name=name, **slots))
      want = sweep.run_sweep(spec, data, sweep.expand_grid(
          {'algo': ['lag', 'laq_adam', 'lag_uniform']}, base), 12)
    for field in ('loss_GxT', 'sent_GxTxM', 'bits_GxTxM'):
      np.testing.assert_array_equal(getattr(got, field),
                                    getattr(want, field), field)
    plain = sweep.run_sweep(spec, data, sweep.expand_grid(
        {'algo': ['laq']}, base), 12)
    self.assertFalse(np.array_equal(plain.loss_GxT[0], got.loss_GxT[1]))
    # 32-bit uploads where LAG sends floats; b-bit ones with uniform
    self.assertEqual(set(got.bits_GxTxM[0].ravel()) - {0}, {32 * 7850})
    self.assertEqual(set(got.bits_GxTxM[2].ravel()) - {0}, {4 * 7850 + 32})

  def test_error_feedback_wraps_any_compressor(self):
    # 'ef(top_k)' in the compressor slot is top_k with the error memory:
    # bit for bit the preset registered by hand with error_feedback=True,
    # in one program beside top_k without it, which differs
    from laq_jax import registry, sweep  # pylint: disable=g-import-not-at-top
    from tests import common  # pylint: disable=g-import-not-at-top
    x, y = common.mnist_shards(common.SMALL_M, common.SMALL_N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), common.SMALL_M)
    base = dict(hyper.DEFAULTS, algo='gd', step_size=0.01,
                **{'top_k.k': 0.05})
    names = ['gd+compressor=ef(top_k)', 'gd+compressor=top_k']
    got = sweep.run_sweep(spec, data, sweep.expand_grid({'algo': names},
                                                        base), 12)
    with registry.scoped():
      for name, ef in (('gd_topk_ef', True), ('gd_topk', False)):
        hyper.register_algorithm(dataclasses.replace(
            hyper.ALGORITHMS['gd'], name=name, compressor='top_k',
            error_feedback=ef))
      want = sweep.run_sweep(spec, data, sweep.expand_grid(
          {'algo': ['gd_topk_ef', 'gd_topk']}, base), 12)
    np.testing.assert_array_equal(got.loss_GxT, want.loss_GxT)
    self.assertFalse(np.array_equal(got.loss_GxT[0], got.loss_GxT[1]))
    # a preset with it holds 'ef(...)' in its slot; a plain name drops it
    self.assertEqual(hyper.compose('topk_ef', compressor='ef(top_k)').name,
                     'topk_ef')
    plain = hyper.compose('topk_ef', compressor='top_k')
    self.assertEqual((plain.compressor, plain.error_feedback),
                     ('top_k', False))
    self.assertEqual(hyper.slot_value(hyper.get_algorithm('ef_signsgd'),
                                      'compressor'), 'ef(sign)')
    with self.assertRaisesRegex(ValueError, r"compressor='ef\(nope\)' in "
                                "'gd': a compressor is one of identity"):
      hyper.get_algorithm('gd+compressor=ef(nope)')

  def test_a_grid_over_a_slot_composes_each_preset(self):
    from laq_jax import sweep  # pylint: disable=g-import-not-at-top
    base = dict(hyper.DEFAULTS, algo='lag')
    points = sweep.expand_grid({'algo': ['laq', 'lag'],
                                'server': ['sgd', 'adam'], 'bits': [3, 4]},
                               base)
    self.assertEqual([(p['algo'], p['bits']) for p in points], [
        ('laq', 3), ('laq', 4), ('laq+server=adam', 3),
        ('laq+server=adam', 4), ('lag', 3), ('lag', 4), ('lag+server=adam', 3),
        ('lag+server=adam', 4)])
    self.assertEqual([p['algo'] for p in sweep.expand_grid(
        {'compressor': ['top_k']}, base)], ['lag+compressor=top_k'])
    with self.assertRaisesRegex(ValueError, r"sweep\['server'\] value "
                                "'adagrad' is not allowed: a server is one "
                                'of sgd'):
      sweep.expand_grid({'server': ['adagrad']}, base)

  def test_names_and_refusals(self):
    a = hyper.get_algorithm('sgd+trigger=laq+compressor=top_k')
    self.assertEqual((a.name, a.compressor, a.trigger, a.server),
                     ('sgd+compressor=top_k+trigger=laq', 'top_k', 'laq',
                      'sgd'))
    self.assertEqual(hyper.compose('fedavg', server='fedadam').name,
                     'fedavg+server=fedadam')
    for name, message in (
        ('laq+server=nope', "server='nope' in 'laq': a server is one of sgd"),
        ('laq+slot=x', "slot 'slot' in 'laq': the slots are compressor"),
        ('laq+server', "'\\+slot=part' once per slot"),
        ('laq+server=adam+server=sgd', 'once per slot'),
        ('nope+server=adam', "unknown algorithm 'nope'")):
      with self.assertRaisesRegex(ValueError, message):
        hyper.get_algorithm(name)


class PresetTest(parameterized.TestCase):

  def test_the_table(self):
    self.assertEqual(sorted(hyper.ALGORITHMS), sorted(TABLE))
    for name, f in TABLE.items():
      a = hyper.get_algorithm(name)
      self.assertEqual(a.stochastic, f['minibatch'], name)
      self.assertEqual(a.compressor, f['compressor'], name)
      self.assertEqual(a.innovation, f['innovation'], name)
      self.assertEqual(a.trigger, f['trigger'], name)
      self.assertEqual(a.error_feedback, f['error_feedback'], name)
      self.assertEqual(a.downlink, f['downlink'], name)
      self.assertEqual(a.server, f['server'], name)
      self.assertEqual(a.client, f['client'], name)
      self.assertEqual(a.absent, f['absent'], name)
      self.assertEqual(a.weighting, f['weighting'], name)
      self.assertEqual(a.lazy, f['trigger'] != 'eager', name)
      self.assertEqual(a.quantize, f['compressor'] == 'uniform', name)

  @parameterized.parameters(*TABLE)
  def test_make_hyper_carries_the_preset_as_data(self, name):
    f = TABLE[name]
    h = hyper.make_hyper(name, dtype=jnp.float64, bits=5)
    self.assertEqual(int(h.compressor),
                     lj.COMPRESSORS.index(f['compressor']))
    self.assertEqual(bool(h.innovation), f['innovation'])
    self.assertEqual(int(h.trigger), lj.trigger.index(f["trigger"]))
    self.assertEqual(bool(h.error_feedback), f['error_feedback'])
    self.assertEqual(bool(h.lazy), f['trigger'] != 'eager')
    self.assertEqual(int(h.downlink_bits), 5 if f['downlink'] else 0)
    self.assertFalse(bool(h.authors_code))

  def test_broadcast_bits(self):
    # 0 asks for the uplink's b; a preset without a quantized broadcast
    # ignores the request.
    self.assertEqual(int(hyper.make_hyper('two_laq', bits=4).downlink_bits), 4)
    self.assertEqual(int(hyper.make_hyper('two_laq', bits=4,
                                          downlink_bits=8).downlink_bits), 8)
    self.assertEqual(int(hyper.make_hyper('laq', downlink_bits=8)
                         .downlink_bits), 0)

  def test_unknown_algorithm_lists_the_choices(self):
    with self.assertRaisesRegex(ValueError, "'lax'.*gd, qgd, lag, laq, sgd"):
      hyper.get_algorithm('lax')


class HyperTest(absltest.TestCase):

  def test_dtypes_and_values(self):
    h = hyper.make_hyper('slaq', dtype=jnp.float64, bits=3, step_size=0.008,
                         authors_code=True, **{'qsgd.levels': 50,
                                               'rand_p.keep_prob': 0.25})
    for name in hyper.FLOAT_FIELDS:
      self.assertEqual(getattr(h, name).dtype, jnp.float64, name)
    for name in hyper.INT_FIELDS + ('compressor',):
      self.assertEqual(getattr(h, name).dtype, jnp.int32, name)
    self.assertEqual(int(h.bits), 3)
    self.assertAlmostEqual(float(h.step_size), 0.008)
    self.assertEqual(h.params['qsgd']['levels'].dtype, jnp.int32)
    self.assertEqual(h.params['rand_p']['keep_prob'].dtype, jnp.float64)
    self.assertEqual(int(h.params['qsgd']['levels']), 50)
    self.assertAlmostEqual(float(h.params['rand_p']['keep_prob']), 0.25)
    self.assertTrue(bool(h.authors_code))
    defaults = hyper.make_hyper('laq')
    self.assertEqual(defaults.step_size.dtype, jnp.float32)
    for name, value in hyper.DEFAULTS.items():
      if name in hyper.SCHEDULE_FIELDS + hyper.NETWORK_FIELDS + (
          'absent', 'weighting', 'server_lr'):  # (resolved: below)
        continue
      self.assertAlmostEqual(float(getattr(defaults, name)), value, 6, name)
    # The network: the default profile's values, float64 (x64 is on here)
    # whatever the run's precision.
    self.assertEqual(float(defaults.network.up_bps), 1e9)
    self.assertEqual(defaults.network.up_bps.dtype, jnp.float64)
    self.assertEqual(int(defaults.absent), 0)  # 'auto': laq's 'stale'
    self.assertEqual(int(defaults.weighting), 0)  # 'auto': laq's 'sum'
    fedavg = hyper.make_hyper('fedavg')  # 'auto': drop, samples
    self.assertEqual((int(fedavg.absent), int(fedavg.weighting)), (1, 1))
    # Its server step eta_s is its settings' (server_lr 0: the preset's);
    # step_size, the rate on gradients, stays the default.
    self.assertEqual(float(fedavg.server_lr), 1.0)
    self.assertAlmostEqual(float(fedavg.step_size), 0.02)
    self.assertAlmostEqual(float(hyper.make_hyper('fedadam').server_lr), 0.01)
    self.assertAlmostEqual(float(hyper.make_hyper(
        'fedadam', server_lr=0.3).server_lr), 0.3)
    self.assertEqual(float(defaults.server_lr), 1.0)  # laq names none
    self.assertEqual(int(hyper.make_hyper('fedavg', absent='stale',
                                          weighting='uniform').weighting), 2)
    # No schedule: every slot unused (factor 1 at a step no run reaches).
    np.testing.assert_array_equal(defaults.xi_factors, np.ones(8))
    np.testing.assert_array_equal(defaults.xi_steps, np.full(8, 2**31 - 1))

  def test_unknown_override(self):
    with self.assertRaisesRegex(
        ValueError, "make_hyper: no hyperparameter 'bitz'; did you mean 'bits'"):
      hyper.make_hyper('laq', bitz=3)

  def test_stack_makes_a_grid_axis(self):
    grid = hyper.stack_hypers([hyper.make_hyper(a) for a in ('gd', 'laq',
                                                             'ssgd')])
    np.testing.assert_array_equal(grid.trigger, [0, 1, 0])
    self.assertEqual(grid.step_size.shape, (3,))
    np.testing.assert_array_equal(
        grid.compressor, [lj.COMPRESSORS.index(c)
                          for c in ('identity', 'uniform', 'rand_p')])


class RulesOfFieldsTest(parameterized.TestCase):
  """One case per rule: the message names the field, the value, what is
  allowed."""

  @parameterized.parameters(
      ('step_size', 0.0, '> 0'), ('step_size', float('inf'), '> 0'),
      ('bits', 0, '1..32'), ('bits', 33, '1..32'), ('bits', 2.5, '1..32'),
      ('xi', -0.1, '>= 0'), ('err_weight', -1.0, '>= 0'),
      ('threshold_offset', -1e-9, '>= 0'),
      ('max_staleness', -1, '0..2\\*\\*31-1'), ('l2', -0.01, '>= 0'),
      ('seed', -3, '0..2\\*\\*31-1'), ('qsgd.levels', 0, '1..16777216'),
      ('qsgd.levels', 2**24 + 1, '1..16777216'),
      ('rand_p.keep_prob', 0.0, '\\(0, 1\\]'),
      ('rand_p.keep_prob', 1.5, '\\(0, 1\\]'), ('top_k.k', 2.5, 'whole'),
      ('clag.zeta', -1.0, '>= 0'))
  def test_out_of_range(self, name, value, allowed):
    with self.assertRaisesRegex(ValueError,
                                f'{name}={value!r} is not allowed.*{allowed}'):
      hyper.validate(**{name: value})
    with self.assertRaisesRegex(ValueError, name):
      hyper.make_hyper('laq', **{name: value})

  @parameterized.parameters(('bits', 4.0), ('seed', True),
                            ('qsgd.levels', '10'), ('qsgd.levels', 10.0))
  def test_integers_must_be_integers(self, name, value):
    with self.assertRaisesRegex(ValueError, f'cfg.{name}=.*integer'):
      hyper.check_value(name, value, where=f'cfg.{name}')

  def test_numbers_must_be_finite_numbers(self):
    with self.assertRaisesRegex(ValueError, 'xi=nan.*finite number'):
      hyper.check_value('xi', float('nan'))
    with self.assertRaisesRegex(ValueError, 'xi=True.*finite number'):
      hyper.check_value('xi', True)
    hyper.check_value('xi', 0)  # an integer is a number
    hyper.check_value('bits', np.int64(8))

  def test_grids_are_checked_element_by_element(self):
    hyper.validate(bits=np.array([1, 8, 32]))
    with self.assertRaisesRegex(ValueError, 'bits=.*1..32'):
      hyper.validate(bits=np.array([1, 8, 33]))


class FieldsTest(absltest.TestCase):
  """Each field is declared once (hyper.FIELDS); the rest derives from it."""

  def test_everything_derives_from_the_table(self):
    from configs import default  # pylint: disable=g-import-not-at-top
    config = default.get_config()
    for field in hyper.CONFIG_FIELDS:
      self.assertEqual(config[field.name], field.default, field.name)
      self.assertEqual(hyper.DEFAULTS[field.name], field.default)
      hyper.check_value(field.name, field.default)  # defaults are allowed
    self.assertEqual(hyper.Hyper._fields, hyper.ARRAYS)
    self.assertEqual(hyper.ARRAYS[-1], 'network')
    h = hyper.cast(hyper.make_hyper('laq'), jnp.float64)
    for name, value in zip(h._fields, h):
      if name == 'network':
        self.assertIsInstance(value, hyper.network_lib.Network)
        continue
      if name == 'params':  # each part's own, in the run's precision
        self.assertEqual(value['momentum']['momentum'].dtype, jnp.float64)
        continue
      want = (jnp.float64 if name in hyper.FLOAT_ARRAYS
              else jnp.bool_ if name in ('error_feedback', 'warm_start',
                                         'authors_code') else jnp.int32)
      self.assertEqual(value.dtype, want, name)
    self.assertIn('xi_factors', hyper.FLOAT_ARRAYS)
    for field in hyper.FIELDS:
      self.assertIn(field.name, hyper.describe())

  def test_one_validator_for_scalars_and_grids(self):
    for value in (4, np.int64(4), np.array([2, 4]), jnp.array([2, 4])):
      hyper.check_value('bits', value)
    for value in (4.0, np.array([2.0, 4.0]), True, '4', None, [],
                  np.array([2, 40])):
      with self.assertRaisesRegex(ValueError, 'bits=.*1..32'):
        hyper.check_value('bits', value)
    with self.assertRaisesRegex(
        ValueError, "no hyperparameter 'bitz'; did you mean 'bits'"):
      hyper.check_value('bitz', 4)


if __name__ == '__main__':
  absltest.main()
