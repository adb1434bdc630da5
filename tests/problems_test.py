"""laq_jax.problems: the models, and logistic regression's fast full-batch
gradient (`Problem.workers_value_and_grad` over `loop.fast_layout`'s
layouts) against the NumPy oracle, in float64 and float32."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import laq_jax as lj
from laq_jax import loop
from tests import common
from tests import reference

M, N = 10, 120  # real MNIST, 1,200 images


def oracle(theta, x, y, lam):
  """[M] f_m and [M, P] gradients, NumPy float64."""
  out = [reference.shard_loss_and_grad(np.asarray(theta, np.float64),
                                       np.asarray(xm, np.float64), ym, lam, 10)
         for xm, ym in zip(x, y)]
  return np.array([o[0] for o in out]), np.stack([o[1] for o in out])


def fast(theta, data, lam):
  problem = lj.get_problem('logreg')
  template = jax.tree.map(lambda a: jnp.zeros(a.shape, theta.dtype),
                          problem.init(jax.random.key(0)))
  unravel = ravel_pytree(template)[1]
  return jax.jit(lambda th, d: problem.workers_value_and_grad(
      th, d, lam, unravel, lambda t: ravel_pytree(t)[0]))(theta, data)


class FastGradientTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(3)
    self.theta64 = rng.normal(scale=0.05, size=7850)
    self.x64, self.y = common.mnist_shards(M, N, dtype=np.float64)
    self.want = oracle(self.theta64, self.x64, self.y, 0.01)

  @parameterized.parameters('none', 'transposed')
  def test_float64_equals_the_oracle(self, which):
    data = lj.Data(jnp.asarray(self.x64), jnp.asarray(self.y))
    if which == 'transposed':
      data = lj.fast_layout(data)
      self.assertIsNotNone(data.xt_MxDxN)
      self.assertIsNone(data.xq_MxNxD)  # float64 keeps float64 features
    f_M, g_MxP = fast(jnp.asarray(self.theta64), data, 0.01)
    np.testing.assert_allclose(f_M, self.want[0], rtol=1e-13)
    np.testing.assert_allclose(g_MxP, self.want[1], rtol=1e-11,
                               atol=1e-14 * np.abs(self.want[1]).max())

  def test_float32_integers_as_accurate_as_a_float32_dot(self):
    # float32 pixels (bytes / 255 in float32); the integer layout reads the
    # bytes as bfloat16 and applies 1/255 once. Its error against the exact
    # float64 gradient is that of float32 arithmetic, no worse than
    # autodiff's on the float32 pixels.
    x32, _ = common.mnist_shards(M, N, dtype=np.float32)
    data = lj.fast_layout(lj.Data(jnp.asarray(x32), jnp.asarray(self.y)),
                          integer_scale=1 / 255)
    np.testing.assert_array_equal(
        np.asarray(data.xq_MxNxD, np.float64),
        np.rint(self.x64 * 255))  # the bytes, exactly
    self.assertEqual(data.xq_MxNxD.dtype, jnp.bfloat16)
    np.testing.assert_array_equal(data.xqt_MxDxN,
                                  jnp.swapaxes(data.xq_MxNxD, 1, 2))
    theta32 = jnp.asarray(self.theta64, jnp.float32)
    f_M, g_MxP = fast(theta32, data, 0.01)
    self.assertEqual(g_MxP.dtype, jnp.float32)
    scale = np.abs(self.want[1]).max()
    err_fast = np.abs(np.asarray(g_MxP, np.float64) - self.want[1]).max()
    plain = lj.Data(jnp.asarray(x32), jnp.asarray(self.y))
    problem = lj.get_problem('logreg')
    unravel = loop._unravel(problem, jnp.float32)
    _, g_auto = jax.vmap(jax.value_and_grad(
        lambda th, xm, ym: loop.worker_objective(problem, unravel, th, xm, ym,
                                                 0.01)),
                         in_axes=(None, 0, 0))(theta32, plain.x_MxNxD,
                                               plain.y_MxN)
    err_auto = np.abs(np.asarray(g_auto, np.float64) - self.want[1]).max()
    self.assertLess(err_fast / scale, 1e-6)
    self.assertLess(err_fast, 4 * err_auto + 1e-7 * scale)
    np.testing.assert_allclose(f_M, self.want[0], rtol=1e-6)

  def test_layout_refuses_features_that_are_not_integers(self):
    x32, _ = common.mnist_shards(2, 5, dtype=np.float32)
    data = lj.Data(jnp.asarray(x32 + 1e-3), jnp.asarray(self.y[:2, :5]))
    with self.assertRaisesRegex(ValueError, 'integer_scale=0.00392.*not '
                                'integers.*pass integer_scale=None'):
      lj.fast_layout(data, integer_scale=1 / 255)
    # Without a scale: the transposed copy, any values.
    self.assertIsNotNone(lj.fast_layout(data).xt_MxDxN)


FULL_BATCH = ('gd', 'qgd', 'lag', 'laq', 'ef21', 'clag', 'two_laq')


class RunsWithTheLayoutTest(parameterized.TestCase):
  """Whole runs through the fast gradient: the oracle's uploads, step by
  step, float64 (on the small shards of tests/common.py)."""

  @parameterized.parameters(*FULL_BATCH)
  def test_matches_the_oracle(self, algo):
    kwargs = dict(step_size=0.03, bits=3, threshold_offset=0.01,
                  err_weight=1.5, seed=7,
                  **{'top_k.k': 0.05, 'clag.zeta': 200.0})
    state, trace, (x, y) = common.small_run(algo, steps=30, layout=True,
                                            **kwargs)
    ref = reference.run(x, y, steps=30, alpha=0.03, bits=3, c_e=1.5,
                        c_0=0.01, top_k=0.05, zeta=200.0,
                        **reference.family(algo, 3))
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-10)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               atol=1e-10)

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_grid_equals_separate_runs(self):
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    data = lj.fast_layout(lj.Data(jnp.asarray(x), jnp.asarray(y)))
    spec = lj.RunSpec(lj.get_problem('logreg'), M)
    hypers = [lj.make_hyper(a, dtype=jnp.float64) for a in ('gd', 'laq')]
    _, grid = lj.run(spec, data, lj.stack_hypers(hypers), 40)
    for g, h in enumerate(hypers):
      _, alone = lj.run(spec, data, h, 40)
      np.testing.assert_array_equal(grid.sent_M[g], alone.sent_M)
      np.testing.assert_allclose(grid.loss[g], alone.loss, rtol=1e-12)


if __name__ == '__main__':
  absltest.main()


def _binary_oracle(kind, theta, x, digits, lam):
  """f_m and its gradient of `binary`'s kinds, NumPy float64: the score
  s = x w + b, y = +1 for an even digit, -1 for an odd one; theta = [b,
  w] (ravel_pytree's order of {'b', 'w'})."""
  b, w = theta[0], theta[1:]
  y = np.where(digits % 2 == 0, 1.0, -1.0)
  s = x @ w + b
  sig = lambda z: 1.0 / (1.0 + np.exp(-z))
  if kind.startswith('binary_sigmoid'):
    loss = (1.0 - sig(y * s)) ** 2
    dloss = -2.0 * (1.0 - sig(y * s)) ** 2 * sig(y * s) * y
  else:
    loss = np.log1p(np.exp(-y * s))
    dloss = -y * sig(-y * s)
  grad = np.concatenate([[dloss.sum()], x.T @ dloss]) / len(y)
  if kind.endswith('nonconvex'):
    reg = lam * np.sum(theta**2 / (1.0 + theta**2))
    grad = grad + lam * 2.0 * theta / (1.0 + theta**2) ** 2
  else:
    reg = 0.5 * lam * np.sum(theta**2)
    grad = grad + lam * theta
  return loss.mean() + reg, grad


@pytest.mark.slow  # (issue 54's fast-tier allowance is spent)
class BinaryTest(parameterized.TestCase):
  """`binary` (MNIST parity by a linear score; after-laq.md section 0)."""

  @parameterized.parameters('binary', 'binary_nonconvex', 'binary_sigmoid',
                            'binary_sigmoid_nonconvex')
  def test_objective_and_gradient_against_numpy(self, kind):
    from laq_jax.problems import objective  # pylint: disable=g-import-not-at-top
    problem = lj.get_problem(kind)
    self.assertEqual(problem.num_params(), 785)
    self.assertEqual(problem.convex, kind == 'binary')
    x, digits = common.mnist_shards(1, 200, dtype=np.float64)
    x, digits = x[0], digits[0]
    theta = np.random.default_rng(0).normal(0, 0.05, 785)
    unravel = ravel_pytree(problem.init(jax.random.key(0)))[1]
    labels = problem.labels(digits)
    np.testing.assert_array_equal(labels, digits % 2)
    f = lambda t: objective.worker_objective(
        problem, unravel, t, jnp.asarray(x), jnp.asarray(labels), 0.1)
    value, grad = jax.value_and_grad(f)(jnp.asarray(theta))
    want_value, want_grad = _binary_oracle(kind, theta, x, digits, 0.1)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-13)
    # Its prediction is the score's sign: the parity class.
    pred = objective.predict(problem, jnp.asarray(theta), x)
    np.testing.assert_array_equal(
        pred, np.where(x @ theta[1:] + theta[0] >= 0, 0, 1))

  def test_the_launchers_read_parity(self):
    """build maps the training shards (after the split, which sorts by
    digit) and the test labels to parity."""
    from configs import mnist_logreg  # pylint: disable=g-import-not-at-top
    from experiments.run import build  # pylint: disable=g-import-not-at-top
    config = mnist_logreg.get_config('tiny')
    config.update(model='binary', split='label_sorted', algo='gd')
    built = build.build(config)
    _, digits = common.mnist_shards(1, 600)
    np.testing.assert_array_equal(
        np.asarray(built.host_data.y_MxN),
        np.sort(digits[0], kind='stable').reshape(10, 60) % 2)
    test_digits = common.mnist(np.float64)['y_test']
    np.testing.assert_array_equal(built.test_y, test_digits % 2)
    self.assertEqual(built.num_params, 785)


@pytest.mark.slow  # (issue 54's fast-tier allowance is spent)
class AutoencoderTest(absltest.TestCase):
  """`autoencoder` (the 3PC poster's Fig. 1 model): mean ||D E a - a||^2."""

  def test_objective_and_gradient_against_numpy(self):
    from laq_jax.problems import objective  # pylint: disable=g-import-not-at-top
    problem = lj.get_problem('autoencoder')
    self.assertEqual(problem.num_params(), 2 * 784 * 16)
    self.assertFalse(problem.classifier or problem.convex)
    x, y = common.mnist_shards(1, 50, dtype=np.float64)
    x, y = x[0], y[0]
    params = jax.tree.map(lambda a: np.asarray(a, np.float64),
                          problem.init(jax.random.key(3)))
    theta, unravel = ravel_pytree(params)
    f = lambda t: objective.worker_objective(
        problem, unravel, t, jnp.asarray(x), jnp.asarray(y), 0.01)
    value, grad = jax.value_and_grad(f)(jnp.asarray(theta))
    e, d = params['encoder'], params['decoder']
    r = x @ e @ d - x
    want = np.mean(np.sum(r**2, axis=1)) + 0.005 * np.sum(theta**2)
    want_grad = ravel_pytree({
        'decoder': 2.0 / len(x) * (x @ e).T @ r + 0.01 * d,
        'encoder': 2.0 / len(x) * x.T @ (r @ d.T) + 0.01 * e})[0]
    np.testing.assert_allclose(value, want, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)
    # No classes: its accuracy is NaN, and the data's labels pass.
    self.assertTrue(np.isnan(objective.accuracy(problem, theta, x, y)))
    spec = lj.RunSpec(problem, 1)
    spec.check_data(lj.Data(jnp.asarray(x[None]), jnp.asarray(y[None])))
