"""laq_jax.points: a grid's declaration, its points and their Hyper.

The points of a grid against products written out by hand (the order of
GRID_KEYS, whatever order the grid lists its keys; duplicates made by a part
a point does not use listed once), where a part parameter's value comes
from (grid, config params, preset, default), the helpers (`batches`,
`programs`, `parts_of`, `varying_keys`, `point_label`) against hand-worked
lists, and the grid Hyper against each point's own `make_hyper`.
(tests/sweep_test.py and tests/parts_test.py hold the grid errors and the
first ownership rules; they are not repeated here.)
"""

import itertools

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import hyper as hyper_lib
from laq_jax import points
from laq_jax import servers
from laq_jax.hyper import DEFAULTS

# A preset of this module: GD with the momentum server, its preset value of
# momentum.momentum (0.5) not the part's default (0.9).
PRESET = 'test_points_momentum'


def setUpModule():
  lj.register_algorithm(lj.Algorithm(
      PRESET, False, 'identity', False, server='momentum',
      params={'momentum.momentum': 0.5}))


def tearDownModule():
  hyper_lib.ALGORITHMS.pop(PRESET, None)


def base(**overrides):
  return {**DEFAULTS, 'algo': 'laq', **overrides}


def project(pts, keys):
  return [tuple(p[k] for k in keys) for p in pts]


class ExpandGridTest(parameterized.TestCase):

  def test_no_grid_is_the_base_point(self):
    (point,) = points.expand_grid({}, base(bits=3))
    self.assertEqual(point, {k: base(bits=3)[k] for k in points.GRID_KEYS})
    self.assertEqual(list(point), list(points.GRID_KEYS))  # laq: no params

  def test_first_grid_key_varies_slowest_in_grid_keys_order(self):
    # Listed xi, seed, bits; GRID_KEYS puts bits before xi before seed.
    grid = {'xi': [0.4, 0.8], 'seed': [1, 2, 3], 'bits': [2, 4]}
    got = points.expand_grid(grid, base())
    want = list(itertools.product([2, 4], [0.4, 0.8], [1, 2, 3]))
    self.assertEqual(project(got, ('bits', 'xi', 'seed')), want)
    for p in got:  # the keys the grid does not vary keep the base's values
      self.assertEqual(p['step_size'], DEFAULTS['step_size'])
      self.assertEqual(p['algo'], 'laq')

  def test_a_field_one_part_reads_is_varied_only_where_used(self):
    # rand_p.keep_prob is read by rand_p (ssgd) alone: laq's points keep the
    # default 0.5, and the laq points that become equal are listed once, in
    # place. A nested group is the dotted key.
    grid = {'algo': ['laq', 'ssgd'], 'bits': [2, 4],
            'rand_p': {'keep_prob': [0.25, 0.75]}}
    got = points.expand_grid(grid, base())
    self.assertEqual(project(got, ('algo', 'bits', 'rand_p.keep_prob')), [
        ('laq', 2, 0.5), ('laq', 4, 0.5),
        ('ssgd', 2, 0.25), ('ssgd', 2, 0.75),
        ('ssgd', 4, 0.25), ('ssgd', 4, 0.75)])

  def test_a_part_parameter_from_grid_then_config_then_preset(self):
    key = 'momentum.momentum'
    # The preset's own value, not the part's default.
    (p,) = points.expand_grid({}, base(algo=PRESET))
    self.assertEqual(p[key], 0.5)
    # A config's params group overrides the preset.
    config = base(algo=PRESET, params={'momentum': {'momentum': 0.7}})
    (p,) = points.expand_grid({}, config)
    self.assertEqual(p[key], 0.7)
    # A grid overrides both, for the points using the part only.
    got = points.expand_grid({'algo': ['laq', PRESET], key: [0.1, 0.2]},
                             config)
    self.assertEqual(project(got, ('algo', key))[1:],
                     [(PRESET, 0.1), (PRESET, 0.2)])
    self.assertLen(got, 3)  # laq once: the parameter is not laq's
    self.assertEqual(got[0]['algo'], 'laq')
    # Only the parts the sweep uses bring their parameters in.
    self.assertIn(key, got[0])
    self.assertNotIn('adam.b1', got[0])

  def test_config_params_for_a_part_no_point_uses_are_refused(self):
    config = base(params={'adam': {'b1': 0.5}})
    with self.assertRaisesRegex(ValueError, r'config.params.adam.b1 is not '
                                r"allowed: no point of the run uses the part "
                                r"'adam'"):
      points.expand_grid({}, config)

  def test_numpy_values_are_plain_python(self):
    got = points.expand_grid({'bits': np.array([2, 4])}, base())
    self.assertEqual([type(p['bits']) for p in got], [int, int])
    self.assertEqual(project(got, ('bits',)), [(2,), (4,)])

  def test_a_grid_that_is_not_a_mapping_is_refused(self):
    with self.assertRaisesRegex(ValueError, r"sweep grid=\[\('bits', \[2\]\)\] "
                                'is not allowed: it must be a mapping'):
      points.expand_grid([('bits', [2])], base())

  def test_an_unknown_algorithm_lists_the_presets(self):
    with self.assertRaisesRegex(ValueError, r"config.algo value 'lqa' is not "
                                r'allowed: use one of gd, qgd, lag, laq'):
      points.expand_grid({}, base(algo='lqa'))


class PartValuesTest(absltest.TestCase):

  def test_only_values_that_differ_from_the_default(self):
    params = {'momentum': {'momentum': 0.9}, 'adam': {'b1': 0.8, 'b2': 0.999}}
    self.assertEqual(points.part_values({'params': params}), {'adam.b1': 0.8})
    self.assertEqual(points.part_values({}), {})

  def test_bad_groups_and_values_are_named(self):
    with self.assertRaisesRegex(ValueError, r'params.adam=0.5 is not allowed: '
                                'it must be a mapping'):
      points.part_values({'params': {'adam': 0.5}})
    with self.assertRaisesRegex(ValueError, r'config.params.adam.b1=1.5 is not '
                                r'allowed: it must be a number in \[0, 1\)'):
      points.part_values({'params': {'adam': {'b1': 1.5}}})


class ProgramsAndPartsTest(absltest.TestCase):

  def test_no_points_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'at least one grid point'):
      points.programs([])

  def test_participation_and_servers_come_from_the_points(self):
    laq = points.expand_grid({}, base())[0]
    mine = points.expand_grid({}, base(algo=PRESET))[0]
    self.assertFalse(points.parts_of([laq])['participation'])
    self.assertTrue(points.parts_of([{**laq, 'clients_per_round': 2}])[
        'participation'])
    self.assertTrue(points.parts_of([{**laq, 'deadline_s': 1.0}])[
        'participation'])
    self.assertEqual(points.parts_of([laq, mine])['servers'],
                     ('sgd', 'momentum'))
    self.assertEqual(points.algorithm_parts(PRESET),
                     ('identity', 'eager', 'momentum', 'gradient', 'direct',
                      'full', 'identity', 'off'))
    # then the parts those read (EF21-BC's broadcast and server: top_k_down)
    self.assertEqual(points.algorithm_parts('ef21_bc')[8:],
                     ('top_k_down', 'top_k_down'))
    fedavg = {**laq, 'algo': 'fedavg'}
    self.assertEqual(points.parts_of([laq, fedavg])['clients'],
                     ('gradient', 'local'))
    self.assertFalse(points.parts_of([laq])['weighting'])
    self.assertTrue(points.parts_of([laq, fedavg])['weighting'])
    self.assertTrue(points.parts_of([{**laq, 'weighting': 'uniform'}])[
        'weighting'])
    self.assertFalse(points.parts_of([{**fedavg, 'weighting': 'sum'}])[
        'weighting'])
    # the privacy parts a program compiles in: its points' own
    self.assertEqual(points.parts_of([laq, {**fedavg,
                                            'algo': 'fedavg+privacy=dp_local'}])[
        'privacy'], ('off', 'dp_local'))


class BatchesTest(parameterized.TestCase):

  @parameterized.parameters(*itertools.product(range(1, 8), [None, 0, 1, 2,
                                                             3, 10]))
  def test_every_point_once_in_equal_padded_batches(self, n, size):
    got = points.batches(n, size)
    width = n if not size else min(size, n)
    real = [i for r, _ in got for i in r]
    self.assertEqual(real, list(range(n)))  # every point once, in order
    for r, padded in got:
      self.assertLen(padded, width)
      self.assertEqual(padded[:len(r)], r)
      self.assertEqual(padded[len(r):], [r[-1]] * (width - len(r)))
    self.assertLen(got, -(-n // width))

  def test_no_points_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'at least one grid point'):
      points.batches(0, 4)


class LabelsTest(absltest.TestCase):

  def test_varying_keys_and_labels(self):
    got = points.expand_grid({'algo': [PRESET], 'step_size': [0.05, 0.1],
                              'momentum.momentum': [0.5, 0.75]}, base())
    keys = points.varying_keys(got)
    self.assertEqual(keys, ['step_size', 'momentum.momentum'])
    self.assertEqual(points.point_label(got[1], ['algo'] + keys),
                     f'algo={PRESET} step_size=0.05 momentum.momentum=0.75')
    self.assertEqual(points.point_label({'bits': 4, 'xi': 1e-7},
                                        ['bits', 'xi']), 'bits=4 xi=1e-07')


class StackPointsTest(absltest.TestCase):

  def test_each_row_is_the_points_own_hyper(self):
    got = points.expand_grid({'algo': ['laq', PRESET], 'bits': [2, 3],
                              'momentum.momentum': [0.25]}, base())
    grid = points.stack_points(got, jnp.float64)
    self.assertEqual(grid.step_size.shape, (len(got),))
    self.assertEqual(grid.step_size.dtype, jnp.float64)
    for g, p in enumerate(got):
      alone = lj.make_hyper(p['algo'], dtype=jnp.float64,
                            **{k: v for k, v in p.items() if k != 'algo'})
      for name in ('bits', 'compressor', 'trigger', 'server', 'estimator'):
        self.assertEqual(np.asarray(getattr(grid, name))[g],
                         np.asarray(getattr(alone, name)), (g, name))
      self.assertEqual(float(grid.params['momentum']['momentum'][g]),
                       float(alone.params['momentum']['momentum']))
    self.assertEqual(np.asarray(grid.server).tolist(), [
        servers.index(lj.get_algorithm(p['algo']).server) for p in got])
    self.assertEqual([float(v) for v in grid.params['momentum']['momentum']],
                     [0.9, 0.9, 0.25, 0.25])


if __name__ == '__main__':
  absltest.main()
