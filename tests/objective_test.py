"""laq_jax.objective: the workers' objectives, layouts and evaluation.

The full-batch objective and gradient (autodiff of `worker_objective`, and
the problem's fast path on `fast_layout`'s layouts) against a NumPy softmax
cross-entropy with the L2 term, written here, per worker, on small synthetic
shards; padding rows of unequal clients masked whatever they hold; the
layouts' refusals; `predict` and `accuracy` against a NumPy argmax.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
# `laq_jax.objective` is the function (re-exported by the package), so the
# module's names are imported from it directly.
from laq_jax.objective import accuracy
from laq_jax.objective import full_batch
from laq_jax.objective import predict
from laq_jax.objective import worker_objective

M, N, D, C = 3, 7, 5, 4
L2 = 0.03


def numpy_logreg(theta, x_NxD, y_N, l2):
  """f_m = mean softmax cross-entropy + (l2 / 2) ||theta||^2 and its
  gradient, for flat parameters [b (C), w (D x C) row-major]: the layout of
  ravel_pytree on {'b', 'w'} (keys sorted)."""
  d = x_NxD.shape[1]
  c = len(theta) // (d + 1)
  b, w = theta[:c], theta[c:].reshape(d, c)
  z = x_NxD @ w + b
  z = z - z.max(axis=1, keepdims=True)
  log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
  n = len(y_N)
  loss = -log_p[np.arange(n), y_N].mean() + 0.5 * l2 * theta @ theta
  r = (np.exp(log_p) - np.eye(c)[y_N]) / n
  grad = np.concatenate([r.sum(axis=0), (x_NxD.T @ r).ravel()]) + l2 * theta
  return loss, grad


def shards(seed=0, dtype=np.float64):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(M, N, D)).astype(dtype)
  y = rng.integers(0, C, size=(M, N)).astype(np.int32)
  return x, y


def random_theta(seed=1, dtype=np.float64):
  return (np.random.default_rng(seed).normal(size=C + D * C) * 0.5).astype(
      dtype)


class FullBatchTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.problem = lj.get_problem('logreg', D, C)

  def test_parameter_layout_is_bias_then_weights(self):
    # The NumPy objective below reads theta as [b, w]; pin that layout.
    theta = jnp.arange(C + D * C, dtype=jnp.float64)
    _, unravel = lj.flat_params(self.problem, 0, jnp.float64)
    params = unravel(theta)
    np.testing.assert_array_equal(params['b'], np.arange(C))
    np.testing.assert_array_equal(params['w'],
                                  np.arange(C, C + D * C).reshape(D, C))

  @parameterized.parameters('autodiff', 'fast_layout')
  def test_every_worker_against_numpy(self, path):
    x, y = shards()
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    if path == 'fast_layout':
      data = lj.fast_layout(data)
    self.assertEqual(data.has_fast_layout, path == 'fast_layout')
    theta = random_theta()
    value_and_grad, values = full_batch(self.problem, data, L2)
    f_M, g_MxP = jax.jit(value_and_grad)(jnp.asarray(theta))
    for m in range(M):
      want_f, want_g = numpy_logreg(theta, x[m], y[m], L2)
      self.assertAlmostEqual(float(f_M[m]), want_f, delta=1e-13)
      np.testing.assert_allclose(g_MxP[m], want_g, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(jax.jit(values)(jnp.asarray(theta)), f_M,
                               rtol=1e-14)
    # The convex target f is the sum of the workers' f_m.
    total = sum(numpy_logreg(theta, x[m], y[m], L2)[0] for m in range(M))
    self.assertAlmostEqual(
        float(lj.objective(self.problem, jnp.asarray(theta), data,
                           jnp.float64(L2))), total, delta=1e-12)

  def test_three_bfloat16_parts_sum_to_the_float32_exactly(self):
    # problems/logreg.py's split: every float32 factor is three bf16 parts
    # whose float32 sum is it, so products with integer features stay exact
    from laq_jax.problems import logreg  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.normal(size=(4, 7)) * 10.0 ** rng.integers(
        -10, 10, size=(4, 7)), np.zeros((4, 1))], 1).astype(np.float32)
    parts = np.asarray(logreg._split3(jnp.asarray(a)))
    self.assertEqual(parts.dtype, jnp.bfloat16)
    k = a.shape[-1]
    self.assertEqual(parts.shape, (4, 3 * k))
    p = parts.astype(np.float32)
    np.testing.assert_array_equal(p[:, :k] + p[:, k:2 * k] + p[:, 2 * k:], a)

  def test_float32_stays_float32(self):
    x, y = shards(dtype=np.float32)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    theta = random_theta(dtype=np.float32)
    f_M, g_MxP = jax.jit(full_batch(self.problem, data, L2)[0])(
        jnp.asarray(theta))
    self.assertEqual(f_M.dtype, jnp.float32)
    self.assertEqual(g_MxP.dtype, jnp.float32)
    want_f, want_g = numpy_logreg(theta.astype(np.float64),
                                  x[0].astype(np.float64), y[0], L2)
    self.assertAlmostEqual(float(f_M[0]), want_f, delta=1e-5)
    np.testing.assert_allclose(g_MxP[0], want_g, rtol=1e-4, atol=1e-6)

  @parameterized.parameters('autodiff', 'fast_layout')
  def test_padding_rows_are_masked_whatever_they_hold(self, path):
    # Clients of 7, 3 and 1 samples padded to N = 7. The padding rows hold
    # large features and real labels (not zeros, as split_clients writes):
    # the mask must drop them, not rely on them being zero.
    x, y = shards(seed=2)
    count = np.array([7, 3, 1], np.int32)
    for m, c in enumerate(count):
      x[m, c:] = 40.0 + np.arange((N - c) * D).reshape(N - c, D)
      y[m, c:] = C - 1
    data = lj.Data(jnp.asarray(x), jnp.asarray(y), count_M=jnp.asarray(count))
    if path == 'fast_layout':
      data = lj.fast_layout(data)
    np.testing.assert_array_equal(data.sample_counts(), [7, 3, 1])
    theta = random_theta(seed=3)
    value_and_grad, values = full_batch(self.problem, data, L2)
    f_M, g_MxP = jax.jit(value_and_grad)(jnp.asarray(theta))
    for m, c in enumerate(count):
      want_f, want_g = numpy_logreg(theta, x[m, :c], y[m, :c], L2)
      self.assertAlmostEqual(float(f_M[m]), want_f, delta=1e-12)
      np.testing.assert_allclose(g_MxP[m], want_g, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(jax.jit(values)(jnp.asarray(theta)), f_M,
                               rtol=1e-13)

  def test_worker_objective_with_a_count_is_the_mean_of_its_rows(self):
    x, y = shards(seed=4)
    theta = random_theta(seed=5)
    _, unravel = lj.flat_params(self.problem, 0, jnp.float64)
    f = jax.jit(lambda th, c: worker_objective(
        self.problem, unravel, th, jnp.asarray(x[0]), jnp.asarray(y[0]), L2,
        c))
    for count in (1, 4, N):
      want, _ = numpy_logreg(theta, x[0, :count], y[0, :count], L2)
      self.assertAlmostEqual(float(f(jnp.asarray(theta), count)), want,
                             delta=1e-13)

  def test_sample_counts_without_count_is_n_each(self):
    x, y = shards()
    counts = lj.Data(jnp.asarray(x), jnp.asarray(y)).sample_counts()
    np.testing.assert_array_equal(counts, [N] * M)
    self.assertEqual(counts.dtype, np.int64)


class FastLayoutTest(absltest.TestCase):

  def test_float64_keeps_x_transposed_even_with_a_scale(self):
    x, y = shards()
    data = lj.fast_layout(lj.Data(jnp.asarray(x), jnp.asarray(y)),
                          integer_scale=1 / 255)
    self.assertIsNone(data.xq_MxNxD)
    np.testing.assert_array_equal(data.xt_MxDxN, np.swapaxes(x, 1, 2))

  def test_float32_integers_become_exact_bfloat16(self):
    n = np.array([[[-256, 0, 3], [255, 17, -1]]], np.float32)  # |n| <= 256
    data = lj.fast_layout(lj.Data(jnp.asarray(n / 8), jnp.zeros((1, 2),
                                                               jnp.int32)),
                          integer_scale=1 / 8)
    self.assertEqual(data.xq_MxNxD.dtype, jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(data.xq_MxNxD, np.float32), n)
    np.testing.assert_array_equal(np.asarray(data.xqt_MxDxN, np.float32),
                                  np.swapaxes(n, 1, 2))
    self.assertEqual(float(data.xq_scale), 1 / 8)

  def test_integers_beyond_256_are_refused(self):
    # 257 is not a bfloat16 integer: refused, naming the largest magnitude.
    x = np.array([[[257.0, 1.0]]], np.float32)
    with self.assertRaisesRegex(ValueError, r'integer_scale=1: .*as large as '
                                r'257 in magnitude.*integer_scale=None'):
      lj.fast_layout(lj.Data(jnp.asarray(x), jnp.zeros((1, 1), jnp.int32)),
                     integer_scale=1)


class PredictTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.problem = lj.get_problem('logreg', D, C)
    rng = np.random.default_rng(6)
    self.x = rng.normal(size=(11, D))
    self.theta_GxP = rng.normal(size=(3, C + D * C))

  def numpy_predict(self, theta):
    return np.argmax(self.x @ theta[C:].reshape(D, C) + theta[:C], axis=1)

  def test_labels_in_batches_and_over_a_grid(self):
    theta = self.theta_GxP[0]
    want = self.numpy_predict(theta)
    np.testing.assert_array_equal(
        predict(self.problem, theta, self.x), want)
    # Batches of 4 (the last one of 3) give the same labels.
    np.testing.assert_array_equal(
        predict(self.problem, theta, self.x, batch=4), want)
    grid = predict(self.problem, self.theta_GxP, self.x, batch=4)
    self.assertEqual(grid.shape, (3, 11))
    for g in range(3):
      np.testing.assert_array_equal(grid[g],
                                    self.numpy_predict(self.theta_GxP[g]))

  def test_accuracy_is_the_fraction_predicted(self):
    theta = self.theta_GxP[1]
    labels = self.numpy_predict(theta)
    y = labels.copy()
    y[[0, 5, 9]] = (y[[0, 5, 9]] + 1) % C  # three of eleven wrong
    self.assertAlmostEqual(
        accuracy(self.problem, theta, self.x, y, batch=5), 8 / 11)


if __name__ == '__main__':
  absltest.main()
