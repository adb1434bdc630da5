"""laq_jax.loop: a grid point equals its run alone bit for bit over 600 steps.

On shards whose bias gradients are exact quantizer ties at theta^0, the laq
point of a mapped grid and the same run compiled with its own parts alone
upload at the same steps and log the same bits. Its own module because the
comparison holds with XLA's default CPU code generator only: its older loop
emitters (tests/conftest.py) put one of the two programs' losses a unit in
the last place apart, so this module runs at the defaults.
"""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import sweep
from tests import common

M, N = common.SMALL_M, common.SMALL_N
XLA_DEFAULT_EMITTERS = True


class LongRunTest(absltest.TestCase):

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


if __name__ == '__main__':
  absltest.main()
