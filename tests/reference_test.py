"""laq_jax against the NumPy oracle (tests/reference.py) on the MLP.

tests/loop_test.py checks every algorithm on logistic regression; this file
checks the oracle's second model, one hidden layer of ReLU units started from
laq_jax's own initialization, and that the oracle's parameter layout, model
gradients and preset table are laq_jax's. Real MNIST, 4 workers x 40 images,
8 hidden units (P = 6,370).
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

import laq_jax as lj
from laq_jax import loop
from laq_jax import parts
from laq_jax import randomness
from tests import common
from tests import reference

M, N, H = 4, 40, 8
STEPS = 50


def run_both(algo, dtype=np.float64, steps=STEPS, batch_size=10, **hyper):
  """The same run through laq_jax and through the oracle, from laq_jax's
  initial MLP parameters. Returns (final laq_jax state, laq_jax trace, oracle
  output)."""
  x, y = common.mnist_shards(M, N, dtype=dtype)
  data = lj.Data(jnp.asarray(x), jnp.asarray(y))
  stochastic = reference.PRESETS[algo][0]
  # Compile only the compressors a test meets: one program per dtype for the
  # full-batch runs, one for the stochastic ones.
  names = lj.COMPRESSORS if stochastic else ('identity', 'uniform')
  spec = lj.RunSpec(lj.get_problem('mlp', hidden=H), M, stochastic=stochastic,
                    batch_size=batch_size, compressors=names,
                    loss_every=1)  # the oracle logs every step
  authors_code = hyper.pop('authors_code', False)
  h = lj.make_hyper(algo, dtype=dtype, authors_code=authors_code, **hyper)
  state0 = lj.init_state(spec, h, dtype)
  state, trace = lj.run(spec, data, h, steps, state=state0)
  num_params = state0.theta_P.size
  seed = hyper.get('seed', 0)
  batches = uniforms = None
  if stochastic:  # the documented draws: fold_in(seed, stream, step, worker)
    batches = [[common.batch_rows(randomness.batch_key(seed, k, m), N,
                                batch_size)
                for m in range(M)] for k in range(steps)]
    uniforms = [[np.asarray(jax.random.uniform(
        randomness.compress_key(seed, k, m), (num_params,), dtype))
                 for m in range(M)] for k in range(steps)]
  d = lj.hyper.DEFAULTS
  get = lambda k: hyper.get(
      k, d[k] if k in d else parts.split_key(k)[1].default)
  ref = reference.run(
      x, y, steps=steps, alpha=get('step_size'), bits=get('bits'),
      lam=get('l2'), xi=get('xi'), c_e=get('err_weight'),
      c_0=get('threshold_offset'), tbar=get('max_staleness'),
      levels=get('qsgd.levels'), keep_prob=get('rand_p.keep_prob'),
      authors_code=authors_code, batches=batches, uniforms=uniforms,
      model='mlp', hidden=H, theta0=np.asarray(state0.theta_P),
      **reference.preset(algo))
  return state, trace, ref


class OracleMatchesLaqJaxTest(parameterized.TestCase):
  """Identical uploads at every step, float64 values to ~1e-10."""

  def check(self, state, trace, ref, rtol=1e-10):
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=rtol)
    np.testing.assert_allclose(trace.grad_norm_sq, ref['grad_norm_sq'],
                               rtol=100 * rtol)
    np.testing.assert_allclose(trace.innovation_M, ref['innovation'],
                               rtol=100 * rtol, atol=1e-300)
    theta = np.asarray(state.theta_P)
    np.testing.assert_allclose(theta, ref['theta'], rtol=rtol,
                               atol=rtol * np.max(np.abs(ref['theta'])))

  @parameterized.named_parameters(
      ('gd', 'gd', {}),
      ('qgd', 'qgd', dict(bits=3)),
      ('lag', 'lag', {}),
      ('laq', 'laq', {}),
      ('laq_authors_code', 'laq', dict(authors_code=True)))
  def test_full_batch(self, algo, extra):
    hyper = {**dict(step_size=0.05, bits=8, max_staleness=20), **extra}
    state, trace, ref = run_both(algo, **hyper)
    self.assertEqual(ref['theta'].dtype, np.float64)
    self.check(state, trace, ref)
    self.assertLess(trace.loss[-1], 0.5 * trace.loss[0])  # it learns
    if reference.PRESETS[algo][3]:  # lazy: the trigger really skipped
      self.assertLess(trace.sent_M.sum(), 0.9 * trace.sent_M.size)

  @parameterized.parameters('slaq', 'qsgd', 'ssgd')
  def test_stochastic(self, algo):
    state, trace, ref = run_both(algo, step_size=0.03, bits=8, seed=3,
                                 err_weight=1.5, threshold_offset=0.01,
                                 **{'qsgd.levels': 50,
                                    'rand_p.keep_prob': 0.3})
    self.check(state, trace, ref)

  @parameterized.parameters('gd', 'lag', 'qgd', 'laq')
  def test_float32(self, algo):
    # float32 on both sides. Without a quantizer the two agree to float32
    # rounding (~1e-7 relative) and upload alike. With one, a coordinate whose
    # scaled innovation lands within rounding noise of a half-way point
    # between two levels can round either way (one level, 2 tau R, apart);
    # that happens now and then over 6,370 coordinates, and the trajectories
    # then part at ~1e-3 relative. So the quantized runs are held only to
    # that, and to nearly the same uploads.
    state, trace, ref = run_both(algo, np.float32, step_size=0.05, bits=8,
                                 max_staleness=20)
    self.assertEqual(ref['theta'].dtype, np.float32)
    self.assertEqual(ref['loss'].dtype, np.float32)
    self.assertEqual(ref['innovation'].dtype, np.float32)
    if reference.PRESETS[algo][1] == 'identity':
      np.testing.assert_array_equal(trace.sent_M, ref['sent'])
      np.testing.assert_allclose(trace.loss, ref['loss'], rtol=2e-6)
      np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                                 rtol=1e-4, atol=1e-5)
    else:
      agree = np.mean(trace.sent_M == ref['sent'])
      self.assertGreaterEqual(agree, 0.95)
      np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-2)


class OracleModelTest(parameterized.TestCase):

  @parameterized.parameters('logreg', 'mlp')
  def test_layout_is_laq_jax_flat_params(self, model):
    problem = lj.get_problem(model, hidden=H)
    params = problem.init(jax.random.key(1))
    flat, _ = ravel_pytree(params)
    shapes = reference.layout(model, 784, 10, H)
    self.assertEqual(reference.num_params(model, 784, 10, H), flat.size)
    self.assertEqual(problem.num_params(), flat.size)
    unpacked = reference.unpack(np.asarray(flat), shapes)
    for name, value in unpacked.items():
      leaf = params
      for part in name.split('.'):
        leaf = leaf[part]
      np.testing.assert_array_equal(value, np.asarray(leaf))

  @parameterized.parameters('logreg', 'mlp')
  def test_loss_and_gradient_match_autodiff(self, model):
    x, y = common.mnist_shards(1, 64, dtype=np.float64)
    x, y = x[0], y[0]
    problem = lj.get_problem(model, hidden=H)
    theta, unravel = ravel_pytree(jax.tree.map(
        lambda p: jnp.asarray(p, jnp.float64),
        problem.init(jax.random.key(2))))
    # Away from zero (logreg starts there), and with some ReLUs off.
    theta = theta + 0.05 * jax.random.normal(jax.random.key(3), theta.shape,
                                             jnp.float64)
    want_loss, want_grad = jax.jit(jax.value_and_grad(
        lambda th: loop.worker_objective(problem, unravel, th, jnp.asarray(x),
                                         jnp.asarray(y), 0.01)))(theta)
    loss, grad = reference.shard_loss_and_grad(
        np.asarray(theta), x, y, 0.01, 10, model=model, hidden=H)
    self.assertAlmostEqual(float(loss), float(want_loss), delta=1e-13)
    np.testing.assert_allclose(grad, np.asarray(want_grad), rtol=1e-10,
                               atol=1e-14)
    theta32 = np.asarray(theta, np.float32)
    loss32, grad32 = reference.shard_loss_and_grad(
        theta32, x.astype(np.float32), y, 0.01, 10, model=model, hidden=H)
    self.assertEqual(loss32.dtype, np.float32)
    self.assertEqual(grad32.dtype, np.float32)

  def test_presets_are_laq_jax_algorithms(self):
    self.assertEqual(set(reference.FAMILY), set(lj.ALGORITHMS))
    for name, f in reference.FAMILY.items():
      a = lj.ALGORITHMS[name]
      self.assertEqual(
          (a.stochastic, a.compressor, a.innovation, a.error_feedback,
           a.trigger, a.downlink, a.server, a.warm_start, a.estimator,
           a.compressor_b),
          (f['minibatch'], f['compressor'], f['innovation'],
           f['error_feedback'], f['trigger'], f['downlink'], f['server'],
           f['warm_start'], f['estimator'], f['compressor_b']),
          name)
    self.assertEqual(reference.COMPRESSORS, lj.COMPRESSORS)

  def test_mlp_needs_theta0(self):
    x, y = common.mnist_shards(2, 10)
    with self.assertRaisesRegex(ValueError, 'theta0'):
      reference.run(x, y, steps=1, alpha=0.1, bits=4, model='mlp', hidden=H)


if __name__ == '__main__':
  absltest.main()
