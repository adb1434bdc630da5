"""Tests of laq_jax/problems/optimum.py: f* checked against independent minimizers.

On 600 MNIST images (M = 10 shards of 60), f* must match scipy's L-BFGS-B on
an objective written here in NumPy, a long GD run must never go below it,
and the certificate ||grad||^2 / (2 M lam) must be the hand formula. Without
float64 the solver refuses to run.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax
from laq_jax import optimum
from tests import common
from tests import reference

WORKERS, PER_WORKER, L2 = 10, 60, 0.01


class SolveTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    x, y = common.mnist_shards(WORKERS, PER_WORKER, np.float64)
    cls.x, cls.y = x, y
    cls.data = laq_jax.Data(jnp.asarray(x), jnp.asarray(y))
    cls.problem = laq_jax.get_problem('logreg')
    cls.opt = optimum.solve(cls.problem, cls.data, L2)

  def test_against_scipy(self):
    import scipy.optimize  # pylint: disable=g-import-not-at-top
    f_and_grad = lambda theta: reference.objective(theta, self.x, self.y, L2)
    ref = scipy.optimize.minimize(f_and_grad, np.zeros(7850), jac=True,
                                  method='L-BFGS-B',
                                  options=dict(maxiter=5000, gtol=1e-11,
                                               ftol=1e-16))
    opt = self.opt
    self.assertLessEqual(opt.value, ref.fun + 1e-12)
    self.assertAlmostEqual(opt.value, ref.fun, delta=1e-9)
    # The value reported is f at the theta reported, and its gradient is
    # tiny, by the NumPy objective too.
    value, grad = f_and_grad(np.asarray(opt.theta_P, np.float64))
    self.assertAlmostEqual(opt.value, value, delta=1e-11)
    self.assertLess(np.linalg.norm(grad), 1e-9)
    self.assertLess(opt.grad_norm, 1e-9)
    self.assertEqual(opt.theta_P.dtype, np.float64)

  def test_certificate(self):
    opt = self.opt
    # (M lam)-strong convexity: f - f* <= ||grad f||^2 / (2 M lam).
    self.assertAlmostEqual(opt.gap_bound,
                           opt.grad_norm**2 / (2 * WORKERS * L2),
                           delta=1e-30)
    self.assertGreater(opt.iterations, 0)
    self.assertIn('L-BFGS', opt.method)
    self.assertIn('Newton-CG', opt.method)

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_gd_never_goes_below(self):
    spec = laq_jax.RunSpec(self.problem, WORKERS)
    # alpha = 0.05: 1,000 steps come within ~1e-6 of f*.
    _, trace = laq_jax.run(spec, self.data,
                           laq_jax.make_hyper('gd', dtype=jnp.float64,
                                              step_size=0.05, l2=L2), 1000)
    self.assertGreaterEqual(trace.loss.min(), self.opt.value - 1e-12)
    self.assertLess(trace.loss[-1] - self.opt.value, 1e-5)
    # And jax.grad of the loop's own objective agrees at the optimum.
    grad = jax.grad(lambda th: laq_jax.objective(
        self.problem, th, self.data, L2))(jnp.asarray(self.opt.theta_P))
    self.assertLess(float(jnp.linalg.norm(grad)), 1e-9)


class Float64Test(absltest.TestCase):

  def test_needs_float64(self):
    code = ('import numpy as np, jax, laq_jax; from laq_jax import optimum\n'
            'assert not jax.config.jax_enable_x64\n'
            'd = laq_jax.Data(np.zeros((2, 3, 4), np.float32), '
            'np.zeros((2, 3), np.int32))\n'
            "optimum.solve(laq_jax.get_problem('logreg', 4, 2), d, 0.1)\n")
    result = common.run_script(code, JAX_ENABLE_X64='0', JAX_PLATFORMS='cpu')
    self.assertEqual(result.returncode, 1, result.stderr[-3000:])
    self.assertIn('ValueError: f* needs float64', result.stderr)
    self.assertIn("jax.config.update('jax_enable_x64', True)", result.stderr)


if __name__ == '__main__':
  absltest.main()
