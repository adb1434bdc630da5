"""The registries: parts added from user code, chosen by data like the
built-in ones, checked with one-line errors."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import compressors
from laq_jax import data as data_lib
from laq_jax import problems
from laq_jax import registry
from laq_jax import trigger
from tests import common

M, N = common.SMALL_M, common.SMALL_N


class RegistryTest(absltest.TestCase):

  def test_order_errors_and_removal(self):
    r = registry.Registry('thing', [('a', 1), ('b', 2)])
    self.assertEqual(r.names, ('a', 'b'))
    self.assertEqual((r.index('b'), r.get('a')), (1, 1))
    with self.assertRaisesRegex(ValueError, "unknown thing 'c'; allowed: a, b"):
      r.get('c')
    with self.assertRaisesRegex(ValueError, "'a' is already registered"):
      r.register('a', 3)
    r.register('a', 3, replace=True)  # keeps its index
    self.assertEqual((r.index('a'), r.get('a')), (0, 3))
    with self.assertRaisesRegex(ValueError, 'not allowed'):
      r.register('no spaces', 0)
    self.assertEqual(r.check_names(['b', 'a']), ('a', 'b'))
    with self.assertRaisesRegex(ValueError, 'at least one thing'):
      r.check_names([])
    with self.assertRaisesRegex(ValueError, 'only the last'):
      r.unregister('a')
    r.unregister('b')
    self.assertEqual(r.names, ('a',))

  def test_scoped_undoes_every_registration(self):
    before = (compressors.REGISTRY.names, problems.REGISTRY.get('logreg'),
              dict(lj.ALGORITHMS))
    sign = compressors.REGISTRY.get('sign')
    with self.assertRaisesRegex(RuntimeError, 'inside'):
      with registry.scoped():
        compressors.REGISTRY.register('test_scoped', sign)
        compressors.REGISTRY.register('sign', sign.fn, replace=True)
        problems.REGISTRY.register('logreg', problems.mlp, replace=True)
        lj.register_algorithm(lj.Algorithm('test_scoped_gd', False,
                                           'test_scoped', False))
        self.assertIn('test_scoped_gd', lj.ALGORITHMS)
        self.assertIsNot(compressors.REGISTRY.get('sign'), sign)
        raise RuntimeError('inside')  # undone whatever raised
    self.assertEqual((compressors.REGISTRY.names,
                      problems.REGISTRY.get('logreg'), dict(lj.ALGORITHMS)),
                     before)
    self.assertIs(compressors.REGISTRY.get('sign'), sign)
    with self.assertRaisesRegex(ValueError, "unknown algorithm "
                                "'test_scoped_gd'"):
      lj.make_hyper('test_scoped_gd')


def _shards():
  x, y = common.mnist_shards(M, N)
  return lj.Data(jnp.asarray(x), jnp.asarray(y))


class UserPartsTest(absltest.TestCase):

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)

  def test_a_user_compressor_runs_by_data(self):
    # Halving the innovation, 16 bits a coordinate: the run's uploads are
    # exactly those, and the bits 16 p each.
    def halve(grad_P, ref_P, key, hyper):
      del key, hyper
      return compressors.Compressed(ref_P + 0.5 * (grad_P - ref_P),
                                    jnp.int32(16 * grad_P.shape[-1]))
    compressors.REGISTRY.register('test_halve', halve)
    self.addCleanup(compressors.REGISTRY.unregister, 'test_halve')
    self.assertIn('test_halve', lj.COMPRESSORS)
    problem = lj.get_problem('logreg')
    h = lj.make_hyper('qgd', dtype=jnp.float64)._replace(
        compressor=jnp.int32(compressors.index('test_halve')))
    spec = lj.RunSpec(problem, M, compressors=('uniform', 'test_halve'))
    state, trace = lj.run(spec, _shards(), h, 3)
    p = problem.num_params()
    np.testing.assert_array_equal(trace.bits_M, np.full((3, M), 16 * p))
    # Q^0 = g^0 / 2 for every worker: the first step moves by alpha/2 sum g.
    one, _ = lj.run(lj.RunSpec(problem, M), _shards(),
                    lj.make_hyper('gd', dtype=jnp.float64,
                                  step_size=0.5 * float(h.step_size)), 1)
    first, _ = lj.run(spec, _shards(), h, 1)
    np.testing.assert_allclose(np.asarray(first.theta_P),
                               np.asarray(one.theta_P), atol=1e-12)
    del state
    # Not compiled in: refused before compiling, naming it.
    with self.assertRaisesRegex(ValueError, 'test_halve.*RunSpec.compressors'):
      lj.run(lj.RunSpec(problem, M, compressors=('uniform',)), _shards(), h,
             1)

  def test_a_user_trigger_and_preset(self):
    # Never upload after the first, except at tbar: uploads at k = 0, 4, 8.
    def silent(i):
      return trigger.Decision(i.clock >= i.hyper.max_staleness,
                              i.compressed_sq, jnp.zeros_like(i.raw_sq))
    trigger.REGISTRY.register('test_silent', silent)
    self.addCleanup(trigger.REGISTRY.unregister, 'test_silent')
    preset = lj.Algorithm('test_silent_laq', False, 'uniform', True,
                          'test_silent')
    lj.register_algorithm(preset)
    self.addCleanup(lj.ALGORITHMS.pop, 'test_silent_laq')
    h = lj.make_hyper('test_silent_laq', dtype=jnp.float64, max_staleness=3)
    self.assertEqual(int(h.trigger), trigger.index('test_silent'))
    spec = lj.RunSpec(lj.get_problem('logreg'), M,
                      triggers=('laq', 'test_silent'))
    _, trace = lj.run(spec, _shards(), h, 10)
    np.testing.assert_array_equal(np.flatnonzero(trace.sent_M[:, 0]),
                                  [0, 4, 8])
    with self.assertRaisesRegex(ValueError, "unknown trigger 'nope'"):
      lj.register_algorithm(lj.Algorithm('x', False, 'uniform', True, 'nope'))

  def test_a_user_problem_and_dataset(self):
    def tiny(input_dim, num_classes, scale=1.0):
      base = problems.logistic_regression(input_dim, num_classes)
      return lj.Problem('tiny', base.init,
                        lambda params, x: scale * base.apply(params, x),
                        num_classes, convex=True, grad_flops_per_sample=1)
    problems.REGISTRY.register('test_tiny', tiny)
    self.addCleanup(problems.REGISTRY.unregister, 'test_tiny')
    problem = lj.get_problem('test_tiny', 4, 3, scale=2.0, hidden=7)
    self.assertTrue(problem.convex)
    x = np.ones((2, 4), np.float32)
    params = {'w': jnp.ones((4, 3)), 'b': jnp.zeros(3)}
    np.testing.assert_allclose(problem.apply(params, x), np.full((2, 3), 8.0))

    def load(argument, *, dtype, data_dir):
      del data_dir
      n = int(argument)
      x = np.arange(n * 2, dtype=dtype).reshape(n, 2)
      return data_lib.Loaded(x, np.arange(n) % 2, x, np.arange(n) % 2,
                             'the same')
    data_lib.REGISTRY.register('test_arrays', data_lib.DatasetKind(
        load, takes_argument=True, usage="'test_arrays:N'"))
    self.addCleanup(data_lib.REGISTRY.unregister, 'test_arrays')
    self.assertEqual(data_lib.kinds.parse('test_arrays:6'),
                     ('test_arrays', '6'))
    self.assertEqual(data_lib.kinds.load('test_arrays:6').x_train.shape,
                     (6, 2))
    with self.assertRaisesRegex(ValueError, "test_arrays:N"):
      data_lib.kinds.parse('test_arrays')


if __name__ == '__main__':
  absltest.main()
