"""A grid point equals its run alone, bit for bit, where that is promised.

A mapped grid (grid_axis='map') computes each point with the arithmetic of
its run alone, though the run alone compiles only its own parts: over 600
steps on shards whose bias gradients are exact quantizer ties at theta^0,
and for the user's parts of notebooks/user_parts.py (a compressor with
state, a stateful trigger, optax servers) beside the library's. Its own
module because such a comparison of two different programs holds with XLA's
default CPU code generator only: its older loop emitters
(tests/conftest.py) put one of the two programs' losses a unit in the last
place apart, so this module runs at the defaults.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import sweep
from tests import common

M, N = common.SMALL_M, common.SMALL_N
XLA_DEFAULT_EMITTERS = True


class LongRunTest(absltest.TestCase):
  """(moved from loop_test)"""


  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_grid_point_equals_single_run_over_a_long_run(self):
    # The grid program maps its points (grid_axis='map'), so the laq point
    # computes exactly what the run alone does, though the run alone
    # compiles only its own parts: uploads, bits, losses and trigger
    # thresholds are equal bit for bit over 600 steps, on shards whose bias
    # gradients are exact ties at theta^0 (4 images of a digit out of 40).
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), M, grid_axis='map')
    laq = lj.make_hyper('laq', dtype=jnp.float64)
    grid = lj.stack_hypers([lj.make_hyper(a, dtype=jnp.float64)
                            for a in ('gd', 'qgd', 'lag')] + [laq])
    _, grid_trace = lj.run(spec, data, grid, 600)
    own = lj.RunSpec(lj.get_problem('logreg'), M, grid_axis='map',
                     **sweep.parts_of([{'algo': 'laq'}]))
    self.assertNotEqual(own.compressors, spec.compressors)
    _, alone = lj.run(own, data, laq, 600)
    self.assertLess(alone.sent_M.sum(), alone.sent_M.size / 2)  # lazy
    for field in alone._fields:
      if field == 'innovation_M':
        # The trigger's left-hand side as logged: the run alone compiles
        # LAQ's compressor only and XLA may fuse its norm differently, by
        # one unit in the last place (the decisions above are equal).
        np.testing.assert_allclose(grid_trace.innovation_M[3],
                                   alone.innovation_M, rtol=1e-15)
        continue
      np.testing.assert_array_equal(getattr(grid_trace, field)[3],
                                    getattr(alone, field), err_msg=field)
    # With the same parts compiled in, every field is the same bits.
    _, same = lj.run(spec, data, laq, 600)
    for field in same._fields:
      np.testing.assert_array_equal(getattr(grid_trace, field)[3],
                                    getattr(same, field), err_msg=field)


USER = ['laq', 'rand_k_gd', 'natural_gd', 'powersgd_ef', 'laq_ema',
        'gd_momentum']


class UserPartsTest(absltest.TestCase):

  @pytest.mark.slow  # (fast-tier budget: its module compiles at XLA's defaults)
  def test_user_parts_in_one_program_each_point_its_run_alone(self):
    # (moved from parts_test; the registrations are undone after the
    # module, tests/conftest.py)
    import notebooks.user_parts  # pylint: disable=g-import-not-at-top
    notebooks.user_parts.register()
    x, y = common.mnist_shards(3, 40, np.float32)
    x = x[..., ::40]  # 20 features: P = 21 x 10, PowerSGD's 21 x 10 matrix
    d = lj.Data(jnp.asarray(x), jnp.asarray(y))
    problem = lj.get_problem('logreg', input_dim=20, num_classes=10)

    def spec_for(algos, **kwargs):
      return lj.RunSpec(problem, 3, **{
          **sweep.parts_of([{'algo': a} for a in algos]), **kwargs})

    spec = spec_for(USER, grid_axis='map')
    grid = lj.stack_hypers([
        lj.make_hyper(a, step_size=0.05,
                      **({'rand_k.k': 60} if a == 'rand_k_gd' else {}))
        for a in USER])
    before = lj.run_chunk._cache_size()
    state = lj.init_state(spec, grid)
    state, trace = lj.run_chunk(spec, state, d, grid, 4)
    self.assertEqual(lj.run_chunk._cache_size() - before, 1)  # ONE program
    for g, algo in enumerate(USER):
      with self.subTest(algo):
        h = jax.tree.map(lambda a, g=g: a[g], grid)
        alone = spec_for([algo])
        _, want = lj.run(alone, d, h, 4)
        np.testing.assert_array_equal(trace.loss[g], want.loss)
        np.testing.assert_array_equal(trace.bits_M[g], want.bits_M)
        np.testing.assert_array_equal(trace.sent_M[g], want.sent_M)
    # The servers' and parts' state is in the loop state.
    self.assertIn('heavy_ball', state.rule.server)
    self.assertIn('powersgd_r2', state.rule.parts_M)
    self.assertIn('ema', state.rule.parts_M)


if __name__ == '__main__':
  absltest.main()
