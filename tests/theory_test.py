"""laq_jax/round/theory.py: smoothness constants and the papers' steps."""

import math

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax.round import theory
from tests import common

M, N = 4, 40


class SmoothnessTest(absltest.TestCase):

  def test_scaffnew_settings(self):
    # gamma = 1 / L_max, p = 1 / sqrt(L_max / mu), L_max by eigvalsh
    x, _ = common.mnist_shards(M, N)
    l2 = 0.05
    got = theory.scaffnew_settings(x, l2)
    l_max = max(
        np.linalg.eigvalsh(np.concatenate(
            [x[m].reshape(N, -1), np.ones((N, 1))], axis=1).T
                           @ np.concatenate([x[m].reshape(N, -1),
                                             np.ones((N, 1))], axis=1)).max()
        / (2 * N) for m in range(M)) + l2
    self.assertAlmostEqual(got['scaffnew.lr'] * l_max, 1.0, delta=1e-8)
    self.assertAlmostEqual(got['scaffnew.p'], math.sqrt(l2 / l_max),
                           delta=1e-9)
    lj.make_hyper('scaffnew', **got)  # parameters it takes
    with self.assertRaisesRegex(ValueError, 'l2=0.0 is not allowed'):
      theory.scaffnew_settings(x, 0.0)

  def test_power_iteration_is_the_largest_eigenvalue(self):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 12))
    want = np.linalg.eigvalsh(a.T @ a).max()
    self.assertAlmostEqual(theory.power_max_eigenvalue(a.T @ a) / want, 1.0,
                           delta=1e-8)

  def test_constants_against_numpy_and_the_hessians(self):
    jax.config.update('jax_enable_x64', True)
    x, y = common.mnist_shards(M, N)
    l2 = 0.01
    l_minus, l_plus = theory.smoothness(x, l2)

    def bound(rows):  # lambda_max([X, 1]^T [X, 1]) / (2 n) + l2, eigvalsh
      xt = np.concatenate([rows.reshape(len(rows), -1),
                           np.ones((len(rows), 1))], axis=1)
      return np.linalg.eigvalsh(xt.T @ xt).max() / (2 * len(rows)) + l2

    l_m = np.array([bound(x[m]) for m in range(M)])
    np.testing.assert_allclose(l_minus, bound(x.reshape(M * N, -1)),
                               rtol=1e-8)
    np.testing.assert_allclose(l_plus, np.sqrt(np.mean(l_m ** 2)),
                               rtol=1e-8)
    # L_m bounds each worker's Hessian (its largest eigenvalue at random
    # theta, by power iteration on Hessian-vector products)
    problem = lj.get_problem('logreg')
    data = lj.Data(jnp.asarray(x[:1]), jnp.asarray(y[:1]))
    f = lambda th: lj.objective(problem, th, data, l2)
    hvp = jax.jit(lambda th, v: jax.jvp(jax.grad(f), (th,), (v,))[1])
    rng = np.random.default_rng(1)
    for scale in (0.0, 0.05):
      th = jnp.asarray(rng.normal(size=problem.num_params()) * scale)
      v = jnp.asarray(rng.normal(size=problem.num_params()))
      for _ in range(60):
        v = hvp(th, v)
        v = v / jnp.linalg.norm(v)
      top = float(v @ hvp(th, v))
      self.assertLessEqual(top, l_m[0] * (1 + 1e-9))
      self.assertGreater(top, 0.05 * l_m[0])  # (a bound, not a loose one)


  @pytest.mark.slow  # (issue 54's fast-tier allowance is spent)
  def test_binary_bounds_against_numpy_and_the_hessians(self):
    """`binary` (logistic: curvature 1/4) and `binary_nonconvex` (+ the
    regularizer's 2 lam): the bound, and it bounds each Hessian."""
    jax.config.update('jax_enable_x64', True)
    x, y = common.mnist_shards(M, N)
    l2 = 0.1
    for model, reg in (('binary', 1.0), ('binary_nonconvex', 2.0)):
      l_minus, l_plus = theory.smoothness(x, l2, model=model)

      def bound(rows, reg=reg):
        xt = np.concatenate([rows.reshape(len(rows), -1),
                             np.ones((len(rows), 1))], axis=1)
        return np.linalg.eigvalsh(xt.T @ xt).max() / (4 * len(rows)) + reg * l2

      l_m = np.array([bound(x[m]) for m in range(M)])
      np.testing.assert_allclose(l_minus, bound(x.reshape(M * N, -1)),
                                 rtol=1e-8)
      np.testing.assert_allclose(l_plus, np.sqrt(np.mean(l_m ** 2)),
                                 rtol=1e-8)
      problem = lj.get_problem(model)
      data = lj.Data(jnp.asarray(x[:1]), jnp.asarray(problem.labels(y[:1])))
      f = lambda th, problem=problem, data=data: lj.objective(
          problem, th, data, l2)
      hvp = jax.jit(lambda th, v, f=f: jax.jvp(jax.grad(f), (th,), (v,))[1])
      rng = np.random.default_rng(2)
      for scale in (0.0, 0.3):
        th = jnp.asarray(rng.normal(size=785) * scale)
        v = jnp.asarray(rng.normal(size=785))
        for _ in range(60):
          v = hvp(th, v)
          v = v / jnp.linalg.norm(v)
        self.assertLessEqual(abs(float(v @ hvp(th, v))), l_m[0] * (1 + 1e-9))
    with self.assertRaisesRegex(ValueError, "model 'binary_sigmoid' has no "
                                'smoothness bound here: the models with one '
                                'are logreg, binary, binary_nonconvex'):
      theory.smoothness(x, l2, model='binary_sigmoid')


class StepTest(absltest.TestCase):
  L_MINUS, L_PLUS, P = 2.0, 3.0, 7850

  def gamma(self, algo, **params):
    return theory.gamma(algo, self.L_MINUS, self.L_PLUS, M, self.P,
                        **params)

  def test_the_3pc_table(self):
    alpha = 79 / self.P  # top_k.k = 0.01 of 7,850: 79 values
    root = math.sqrt(1 - alpha)
    a, b = 1 - root, (1 - alpha) / (1 - root)
    self.assertAlmostEqual(self.gamma('tpc_ef21'),
                           1 / (2.0 + 3.0 * math.sqrt(b / a)), places=12)
    # CLAG: B = max(EF21's B, zeta)
    self.assertAlmostEqual(self.gamma('tpc_clag', **{'tpc_lazy.zeta': 1e4}),
                           1 / (2.0 + 3.0 * math.sqrt(1e4 / a)), places=12)
    # v2: A = alpha, B = (1 - alpha) omega of randk_b (0.01: 79 of P)
    omega = self.P / 79 - 1
    self.assertAlmostEqual(
        self.gamma('tpc_v2'),
        1 / (2.0 + 3.0 * math.sqrt((1 - alpha) * omega / alpha)), places=12)
    # v5 at p = k / P
    r5 = math.sqrt(1 - alpha)
    self.assertAlmostEqual(
        self.gamma('tpc_v5'),
        1 / (2.0 + 3.0 * math.sqrt((1 - alpha) ** 2 / (1 - r5) ** 2)),
        places=12)

  def test_where_the_compression_vanishes_it_is_gd(self):
    gd = 1 / self.L_MINUS
    self.assertAlmostEqual(self.gamma('tpc_ef21', **{'top_k.k': self.P}), gd)
    self.assertAlmostEqual(self.gamma('tpc_lag', **{'tpc_lazy.zeta': 0.0}),
                           gd)
    self.assertAlmostEqual(self.gamma('marina', **{'marina.p': 1.0}), gd)
    self.assertAlmostEqual(self.gamma('dasha', **{'randk.k': self.P}), gd)

  def test_marina_and_dasha(self):
    k = math.floor(0.09 * self.P + 0.5)
    omega, p = self.P / k - 1, k / self.P
    self.assertAlmostEqual(self.gamma('marina'), 1 / (2.0 + 3.0 * math.sqrt(
        (1 - p) * omega / (p * M))), places=12)
    self.assertAlmostEqual(self.gamma('dasha'), 1 / (2.0 + math.sqrt(
        16 * omega * (2 * omega + 1) / M) * 3.0), places=12)
    # the suite's step is on the sum: alpha = gamma / M
    self.assertAlmostEqual(
        theory.step_size('marina', 2.0, 3.0, M, self.P),
        self.gamma('marina') / M, places=14)

  def test_refusals_name_the_value(self):
    with self.assertRaisesRegex(ValueError, "algo='laq' has no encoded "
                                'theory step'):
      self.gamma('laq')
    with self.assertRaisesRegex(ValueError, 'must be > 0'):
      theory.gamma('tpc_ef21', 0.0, 1.0, M, self.P)
    with self.assertRaisesRegex(ValueError, 'unequal sizes'):
      theory.smoothness(np.zeros((2, 3, 4)), 0.1, counts_M=[3, 2])


if __name__ == '__main__':
  absltest.main()
