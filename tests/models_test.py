"""laq_jax.models: the CNNs of McMahan et al. and of the LASG code.

Their logits against a NumPy forward pass written here (convolution by
explicit sums over the kernel, max pooling, ReLU / ELU), their parameter
counts against the papers' and the layer shapes', their FLOPs against
XLA's own count, a minibatch run through the loop with vmapped workers,
and the refusal of a model that does not fit the data.
"""

import json
import pathlib
import tempfile

from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.run import config as config_lib
from laq_jax import models
from laq_jax import problems


def _conv(x_NxHxWxC, w_KxKxCxO, b_O, padding):
  """2-D convolution (cross-correlation, as flax's) by sums over taps."""
  k = w_KxKxCxO.shape[0]
  if padding == 'SAME':
    p = (k - 1) // 2
    x_NxHxWxC = np.pad(x_NxHxWxC, ((0, 0), (p, k - 1 - p), (p, k - 1 - p),
                                   (0, 0)))
  n, h, w, _ = x_NxHxWxC.shape
  ho, wo = h - k + 1, w - k + 1
  out = np.zeros((n, ho, wo, w_KxKxCxO.shape[-1]))
  for i in range(k):
    for j in range(k):
      out += np.einsum('nhwc,co->nhwo', x_NxHxWxC[:, i:i + ho, j:j + wo],
                       w_KxKxCxO[i, j])
  return out + b_O


def _pool(x):
  n, h, w, c = x.shape
  x = x[:, :h // 2 * 2, :w // 2 * 2]
  return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def _elu(x):
  return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _reference(name, params, x_NxD, shape):
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  act, padding = ((lambda v: np.maximum(v, 0)), 'SAME') if name == 'cnn' \
      else (_elu, 'VALID')
  x = np.asarray(x_NxD, np.float64).reshape((-1,) + shape)
  x = _pool(act(_conv(x, p['conv1']['kernel'], p['conv1']['bias'],
                      padding)))
  x = _pool(act(_conv(x, p['conv2']['kernel'], p['conv2']['bias'],
                      padding)))
  x = x.reshape(len(x), -1)
  x = act(x @ p['fc']['kernel'] + p['fc']['bias'])
  return x @ p['out']['kernel'] + p['out']['bias']


def _sigmoid(v):
  return 1 / (1 + np.exp(-v))


def _lstm_reference(params, tokens_NxT):
  """The character model in NumPy: embedding, two LSTM layers (gates i, f,
  g, o; input kernels, hidden kernels with biases, zero initial state),
  the read-out of the last position."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  h_seq = p['Embed_0']['embedding'][tokens_NxT]
  for layer in range(2):
    cell = p[f'OptimizedLSTMCell_{layer}']
    n, t, _ = h_seq.shape
    h = np.zeros((n, 256))
    c = np.zeros((n, 256))
    out = []
    for k in range(t):
      x = h_seq[:, k]
      gate = {g: x @ cell[f'i{g}']['kernel'] + h @ cell[f'h{g}']['kernel']
              + cell[f'h{g}']['bias'] for g in 'ifgo'}
      c = _sigmoid(gate['f']) * c + _sigmoid(gate['i']) * np.tanh(gate['g'])
      h = _sigmoid(gate['o']) * np.tanh(c)
      out.append(h)
    h_seq = np.stack(out, 1)
  return h_seq[:, -1] @ p['Dense_0']['kernel'] + p['Dense_0']['bias']


class ModelTest(absltest.TestCase):

  def test_logits_against_numpy(self):
    rng = np.random.default_rng(0)
    for name in ('cnn', 'lasg_cnn'):
      for dim, shape in models.IMAGE_SHAPES.items():
        with self.subTest(name=name, dim=dim):
          problem = problems.get_problem(name, dim, 10)
          params = problem.init(jax.random.key(1))
          x = rng.random((3, dim)).astype(np.float32)
          got = np.asarray(jax.jit(problem.apply)(params, jnp.asarray(x)))
          want = _reference(name, params, x, shape)
          np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)

  def test_parameter_counts(self):
    # McMahan et al. 2017, Sec. 3: "1,663,370 total parameters".
    self.assertEqual(problems.get_problem('cnn', 784).num_params(),
                     1_663_370)
    # The LASG code's Net: conv 1->20 (5x5), conv 20->50, 800->500, 500->10.
    want = (25 * 20 + 20) + (25 * 20 * 50 + 50) + (800 * 500 + 500) + (
        500 * 10 + 10)
    self.assertEqual(problems.get_problem('lasg_cnn', 784).num_params(),
                     want)
    # 32x32x3: conv1 sees 3 channels; the flattened map is 8x8x64 / 5x5x50
    self.assertEqual(problems.get_problem('cnn', 3072).num_params(),
                     (75 * 32 + 32) + (800 * 64 + 64) + (4096 * 512 + 512)
                     + 5130)

  def test_pfl_cnn_against_numpy(self):
    # pfl-research's simple_cnn less dropout: 3x3 conv 32, ReLU, 3x3 conv
    # 64, ReLU, pool, 128 ReLU, 10 ('VALID'); its parameter count by hand
    problem = problems.get_problem('pfl_cnn', 3072, 10)
    self.assertEqual(problem.num_params(),
                     (27 * 32 + 32) + (288 * 64 + 64) + (14 * 14 * 64 * 128
                                                         + 128) + 1290)
    self.assertEqual(problem.num_params(), 1_626_442)
    params = problem.init(jax.random.key(1))
    x = np.random.default_rng(0).random((3, 3072)).astype(np.float32)
    relu = lambda v: np.maximum(v, 0)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    h = np.asarray(x, np.float64).reshape(-1, 32, 32, 3)
    for conv in ('conv1', 'conv2'):
      h = relu(_conv(h, p[conv]['kernel'], p[conv]['bias'], 'VALID'))
    h = relu(_pool(h).reshape(3, -1) @ p['fc']['kernel'] + p['fc']['bias'])
    want = h @ p['out']['kernel'] + p['out']['bias']
    got = np.asarray(jax.jit(problem.apply)(params, jnp.asarray(x)))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    # forward FLOPs by hand: 2 x multiply-adds of conv1, conv2, fc, out
    forward = 2 * (30 * 30 * 27 * 32 + 28 * 28 * 288 * 64 + 12544 * 128
                   + 1280)
    self.assertEqual(problem.loss_flops_per_sample, forward)
    self.assertEqual(problem.grad_flops_per_sample,
                     3 * forward - 2 * 30 * 30 * 27 * 32)

  def test_max_pool_2x2_is_flaxs(self):
    # the values and, without ties, the gradient of nn.max_pool (2x2,
    # stride 2; an odd last row and column dropped)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(
        (2, 7, 6, 3)).astype(np.float32))
    flax_pool = lambda v: nn.max_pool(v, (2, 2), strides=(2, 2))
    np.testing.assert_array_equal(models.max_pool_2x2(x), flax_pool(x))
    weights = jnp.arange(2 * 3 * 3 * 3, dtype=jnp.float32).reshape(
        2, 3, 3, 3)
    grad = lambda pool: jax.grad(lambda v: jnp.sum(pool(v) * weights))(x)
    np.testing.assert_array_equal(grad(models.max_pool_2x2),
                                  grad(flax_pool))
    # a window of equal values: flax gives the first its gradient, this
    # splits it evenly (after a ReLU only zeros tie, and the ReLU stops it)
    ties = jnp.ones((1, 2, 2, 1))
    self.assertEqual(float(jnp.sum(jax.grad(
        lambda v: jnp.sum(models.max_pool_2x2(v)))(ties))), 1.0)

  def test_torch_init_is_pytorchs(self):
    # init='torch': every weight and bias of the LASG CNN, McMahan's CNN
    # and the MLP from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as torch.nn's
    # Linear and Conv2d draw them (kaiming_uniform_(a=sqrt(5)): gain
    # sqrt(2 / 6), bound gain * sqrt(3 / fan_in)); fan_in by hand from the
    # layers (PyTorch: in_channels * k * k for a conv). 'default' stays
    # flax's: LeCun normal kernels (std 1/sqrt(fan_in)), zero biases.
    fan_ins = {'lasg_cnn': {'conv1': 25, 'conv2': 25 * 20, 'fc': 4 * 4 * 50,
                            'out': 500},
               'cnn': {'conv1': 25, 'conv2': 25 * 32, 'fc': 7 * 7 * 64,
                       'out': 512},
               'mlp': {'hidden': 784, 'out': 200}}
    for model, layers in fan_ins.items():
      torch_params = problems.get_problem(model, 784, init='torch').init(
          jax.random.key(1))
      flax_params = problems.get_problem(model, 784).init(jax.random.key(1))
      self.assertEqual(set(torch_params), set(layers))
      for layer, fan_in in layers.items():
        bound = (2 / 6) ** 0.5 * (3 / fan_in) ** 0.5
        for leaf in ('kernel', 'bias'):
          with self.subTest(model=model, layer=layer, leaf=leaf):
            a = np.asarray(torch_params[layer][leaf], np.float64)
            self.assertLessEqual(np.abs(a).max(), bound * (1 + 1e-6))
            # uniform: max near the bound, std bound / sqrt(3)
            self.assertGreater(np.abs(a).max(), 0.8 * bound)
            if a.size >= 500:
              self.assertAlmostEqual(a.std() / (bound / 3 ** 0.5), 1.0,
                                     delta=0.1)
        np.testing.assert_array_equal(flax_params[layer]['bias'], 0)
        kernel = np.asarray(flax_params[layer]['kernel'], np.float64)
        if kernel.size >= 500:  # truncated normal of std 1/sqrt(fan_in)
          self.assertAlmostEqual(kernel.std() * fan_in ** 0.5, 1.0,
                                 delta=0.1)
    with self.assertRaisesRegex(ValueError, "model 'resnet20' has no init "
                                "option; init='torch' is for 'mlp', 'cnn', "
                                "'lasg_cnn'"):
      problems.get_problem('resnet20', 3072, init='torch')

  def test_patch_convolution_is_flaxs(self):
    # models.PatchConv against nn.Conv: the same initial parameters, the
    # same outputs and gradients, on both of its paths (patches, and XLA's
    # convolution past PATCHES_MAX_BYTES), paddings and strides, under vmap over
    # clients that each hold their own kernel (a round's local steps)
    import flax.linen as nn  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(3, 6, 12, 12, 4)), jnp.float32)
    for padding, strides, bias, limit in (
        ('SAME', 1, True, models.PATCHES_MAX_BYTES), ('SAME', 1, True, 0),
        ('VALID', 1, True, models.PATCHES_MAX_BYTES), ('VALID', 1, True, 0),
        ('SAME', 2, False, models.PATCHES_MAX_BYTES), ('SAME', 2, False, 0),
        ('VALID', 3, True, models.PATCHES_MAX_BYTES)):
      with self.subTest(padding=padding, strides=strides, limit=limit):
        ours = models.PatchConv(5, 5, padding, strides=strides,
                                use_bias=bias)
        flax_conv = nn.Conv(5, (5, 5), padding=padding, strides=strides,
                            use_bias=bias)
        keys = jax.random.split(jax.random.key(0), 3)
        params = jax.vmap(lambda k: ours.init(k, x[0]))(keys)
        want_params = jax.vmap(lambda k: flax_conv.init(k, x[0]))(keys)
        jax.tree.map(np.testing.assert_array_equal, params, want_params)

        def loss(module, p, x_):
          return jnp.sum(jnp.sin(module.apply(p, x_)))
        old, models.PATCHES_MAX_BYTES = models.PATCHES_MAX_BYTES, limit
        try:
          got = jax.jit(jax.vmap(jax.value_and_grad(
              lambda p, x_: loss(ours, p, x_))))(params, x)
        finally:
          models.PATCHES_MAX_BYTES = old
        want = jax.vmap(jax.value_and_grad(
            lambda p, x_: loss(flax_conv, p, x_)))(params, x)
        # Agree to float32 rounding: an entry is a sum of hundreds of terms,
        # summed in orders XLA picks (and changes between releases), so the
        # two differ by up to a few 1e-6 of the leaf's largest entry (even
        # on entries near 0; 3.2e-5 on a leaf of entries below 10 with JAX
        # 0.12); a wrong view, pad or stride is off by that entry's order.
        jax.tree.map(lambda a, b: np.testing.assert_allclose(
            a, b, rtol=2e-5, atol=max(5e-5, 5e-6 * float(np.abs(b).max()))),
                     got, want)

  def test_flops_against_xla(self):
    x = jnp.zeros((8, 784))
    y = jnp.zeros((8,), jnp.int32)
    for name in ('cnn', 'lasg_cnn'):
      problem = problems.get_problem(name, 784)
      params = problem.init(jax.random.key(0))

      def cost(fn):
        c = jax.jit(fn).lower(params).compile().cost_analysis()
        return (c[0] if isinstance(c, list) else c)['flops'] / 8
      forward = cost(lambda th: problem.loss(th, x, y))
      grad = cost(jax.grad(lambda th: problem.loss(th, x, y)))
      # A batch of 8 runs the convolutions as products over their patches
      # (`models.PatchConv`), where XLA counts every tap, the 'SAME'
      # padding's too, as ours does.
      self.assertAlmostEqual(problem.loss_flops_per_sample / forward, 1,
                             delta=0.03, msg=name)
      self.assertAlmostEqual(problem.grad_flops_per_sample / grad, 1,
                             delta=0.05, msg=name)  # (XLA: ELU's derivative)
    # by hand: McMahan's CNN forward on 28x28x1
    self.assertEqual(problems.get_problem('cnn', 784).loss_flops_per_sample,
                     2 * (28 * 28 * 25 * 32 + 14 * 14 * 25 * 32 * 64
                          + 7 * 7 * 64 * 512 + 512 * 10))

  def test_resnet20_counts_and_per_sample_normalization(self):
    problem = problems.get_problem('resnet20', 3072)
    # by hand: bias-free 3x3 convs, GroupNorm's scale and bias per channel,
    # the read-out
    convs = 9 * (3 * 16 + 6 * 16 * 16 + (16 * 32 + 5 * 32 * 32)
                 + (32 * 64 + 5 * 64 * 64))
    norms = 2 * (16 + 6 * 16 + 6 * 32 + 6 * 64)
    self.assertEqual(problem.num_params(), convs + norms + 64 * 10 + 10)
    forward = 2 * 9 * (32 * 32 * (3 * 16 + 6 * 16 * 16)
                       + 16 * 16 * (16 * 32 + 5 * 32 * 32)
                       + 8 * 8 * (32 * 64 + 5 * 64 * 64)) + 2 * 64 * 10
    self.assertEqual(problem.loss_flops_per_sample, forward)
    # GroupNorm: a sample's logits do not depend on the rest of its batch
    # (batch normalization's would), the property that keeps a client's
    # gradient a function of its own samples.
    params = problem.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    a, b, c = (jnp.asarray(rng.random((1, 3072)), jnp.float32)
               for _ in range(3))
    apply = jax.jit(problem.apply)
    ab = apply(params, jnp.concatenate([a, b]))
    ac = apply(params, jnp.concatenate([a, c]))
    np.testing.assert_allclose(ab[0], ac[0], rtol=1e-5, atol=1e-6)
    self.assertGreater(float(jnp.abs(ab[1] - ac[1]).max()), 1e-4)

  def test_char_lstm_against_numpy(self):
    problem = problems.get_problem('char_lstm', 12, 80)
    params = problem.init(jax.random.key(2))
    # (4, 80) embedding, 2 x 4 gates, read-out: McMahan's 8 / 256 / 256
    self.assertEqual(problem.num_params(),
                     80 * 8 + 4 * (8 * 256 + 256 * 256 + 256)
                     + 4 * (256 * 256 + 256 * 256 + 256) + 256 * 80 + 80)
    tokens = np.random.default_rng(1).integers(0, 80, (3, 12))
    got = np.asarray(jax.jit(problem.apply)(params, jnp.asarray(
        tokens, jnp.float32)))
    np.testing.assert_allclose(got, _lstm_reference(params, tokens),
                               rtol=1e-4, atol=1e-5)
    grad, loss = models.lstm_flops(80, 80)
    self.assertEqual(loss, 80 * 2 * 4 * ((8 + 256) * 256 + 512 * 256)
                     + 2 * 256 * 80)
    self.assertEqual(grad, 3 * loss)
    with self.assertRaisesRegex(ValueError, "model='char_lstm' takes "
                                'sequences .* 784 features'):
      problems.get_problem('char_lstm', 784)

  def test_the_fused_lstm_is_flaxs_lstm(self):
    # lstm='fused' (models.lstm_layer, a gradient of its own) against
    # nn.RNN(nn.OptimizedLSTMCell) with autodiff: the same initial
    # parameters, outputs and gradients to float32's rounding
    flax_lstm = problems.get_problem('char_lstm', 12, 80)
    fused = problems.get_problem('char_lstm', 12, 80, lstm='fused')
    params = flax_lstm.init(jax.random.key(3))
    jax.tree.map(np.testing.assert_array_equal, params,
                 fused.init(jax.random.key(3)))
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(0, 80, (5, 12)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 80, 5))

    def loss(problem):
      return lambda p: -jnp.mean(jax.nn.log_softmax(problem.apply(
          p, tokens))[jnp.arange(5), labels])
    np.testing.assert_allclose(fused.apply(params, tokens),
                               flax_lstm.apply(params, tokens),
                               rtol=1e-5, atol=1e-6)
    want = jax.grad(loss(flax_lstm))(params)
    got = jax.grad(loss(fused))(params)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(
        g, w, rtol=1e-4, atol=1e-7), got, want)
    # vmapped over workers, as the round runs it
    grads = jax.vmap(jax.grad(loss(fused)))(
        jax.tree.map(lambda x: jnp.stack([x, 2 * x]), params))
    jax.tree.map(lambda g, w: np.testing.assert_allclose(
        g[0], w, rtol=1e-4, atol=1e-7), grads, want)
    with self.assertRaisesRegex(ValueError, "lstm='cudnn' is not one of "
                                "'flax', 'fused'"):
      problems.get_problem('char_lstm', 12, 80, lstm='cudnn')

  def test_a_model_that_does_not_fit_the_data_is_refused(self):
    with self.assertRaisesRegex(ValueError,
                                "model='cnn' takes images .* 13 features"):
      problems.get_problem('cnn', 13)
    from configs import default  # pylint: disable=g-import-not-at-top
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    config = default.get_config('dataset=builtin:heart_scale,model=lasg_cnn,'
                                'num_workers=10,num_iters=2,fstar=none,'
                                'train_subset=270')
    with tempfile.TemporaryDirectory() as where:
      with self.assertRaisesRegex(
          config_lib.ConfigError,
          r"model='lasg_cnn' is not allowed: .*dataset='builtin:heart_scale'"
          r'.*13 features'):
        train.train_and_evaluate(config, where)


@pytest.mark.slow
class RunTest(absltest.TestCase):

  def test_minibatch_sgd_and_fedavg_learn_in_one_program(self):
    # MNIST, 10 vmapped workers, the LASG CNN; SGD (step 0.01 on the sum)
    # and FedAvg (K = 2 local steps of 0.05, its server step 1) as one
    # sweep, one compiled program: both learn in 30 iterations (the test
    # set read once, at the end: 7 s a pass here), and the
    # flops per worker step are the model's times the minibatch.
    import ml_collections  # pylint: disable=g-import-not-at-top
    from configs import default  # pylint: disable=g-import-not-at-top
    from experiments.run import grid  # pylint: disable=g-import-not-at-top
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    config = default.get_config(
        'model=lasg_cnn,num_workers=10,train_subset=600,batch_size=10,'
        'num_iters=30,eval_every=30,fstar=none,precision=float32')
    default.add_sweep_fields(config, {'algo': ('sgd', 'fedavg')})
    config.params.local.steps = 2
    config.params.local.lr = 0.05
    config.algo_settings = ml_collections.ConfigDict(
        {'sgd': {'step_size': 0.01}})
    with tempfile.TemporaryDirectory() as where:
      grid.sweep_and_evaluate(config, where)
      where = pathlib.Path(where)
      info = json.loads((where / 'sweep.json').read_text())
      rows = outputs.read_results(where / 'results.csv')
      with np.load(where / 'curves.npz') as c:
        accuracy = c['test_accuracy']
    self.assertEqual(info['programs_compiled'], 1)
    for g, row in enumerate(rows):
      self.assertGreater(accuracy[g][-1], 0.5, row['algo'])
      self.assertEqual(float(row['flops_per_worker_step']),
                       10 * problems.get_problem('lasg_cnn')
                       .grad_flops_per_sample)


if __name__ == '__main__':
  absltest.main()
