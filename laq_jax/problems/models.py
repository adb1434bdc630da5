"""Convolutional models of the papers this suite compares (flax), as
Problems with their FLOPs per sample.

    problem = get_problem('cnn', input_dim=784)        # McMahan et al.'s CNN
    problem = get_problem('lasg_cnn', input_dim=784)   # the LASG code's CNN
    problem = get_problem('pfl_cnn', input_dim=3072)   # pfl-research's CNN

A sample arrives flat ([N, D], as every dataset kind loads it) and is
reshaped to an image by its feature count: 784 = 28x28x1 (MNIST,
Fashion-MNIST), 3072 = 32x32x3 (CIFAR-10, channels last). Any other D is
refused naming the model, D and the shapes it knows (`image_shape`).

  cnn        McMahan et al. 2017 (Sec. 3): 5x5 conv 32 -> 2x2 max pool ->
             5x5 conv 64 -> 2x2 max pool -> 512 ReLU -> softmax ('SAME'
             convolutions, ReLU: 1,663,370 parameters on 28x28x1, the
             paper's count).
  lasg_cnn   The LASG authors' code (sunyuejiao/lasg, mnist.py `Net`): 5x5
             conv 20 -> 2x2 max pool -> 5x5 conv 50 -> 2x2 max pool -> 500
             -> 10, 'VALID' convolutions, ELU (431,080 parameters on
             28x28x1).
  pfl_cnn    pfl-research's benchmark CNN (apple/pfl-research,
             benchmarks/model/pytorch/cnn.py `simple_cnn`, its CIFAR-10
             benchmark's model): 3x3 conv 32 -> ReLU -> 3x3 conv 64 -> ReLU
             -> 2x2 max pool -> 128 ReLU -> softmax, 'VALID' convolutions
             (1,626,442 parameters on 32x32x3), without its two dropout
             layers (0.25 after the pool, 0.5 after the hidden layer): a
             Problem's gradient is a function of the parameters and the
             samples alone, so no model here has dropout. Its pfl side
             starts from Glorot-uniform kernels; here `init` as the others.
  resnet20   He et al. 2016's CIFAR ResNet-20 (3x3 conv 16, three stages of
             three basic blocks of 16, 32, 64 channels, stride 2 at the
             second and third, parameter-free shortcuts (option A: a
             strided identity, zero-padded channels), global average pool,
             a dense read-out) with group normalization (2 groups) where
             the original has batch normalization: batch statistics are
             computed over one client's minibatch and differ between
             clients and between training and test, a known failure under
             non-IID clients (Hsieh et al. 2020, "The Non-IID Data
             Quagmire", who replace it by GroupNorm); GroupNorm normalizes
             each sample by itself, so a gradient stays a function of the
             parameters and the sample only (269,722 parameters on
             32x32x3).
  char_lstm  McMahan et al. 2017's and LEAF's Shakespeare model: each of
             80 characters (indices, as floats, in the sample's D = 80
             features) embedded in 8 dimensions, two LSTM layers of 256,
             a dense softmax over the vocabulary from the last position
             (LEAF's target: the next character).

FLOPs count multiply-adds twice, the convolutions' and dense layers' only
(pooling and activations are memory-bound and left out, as the MLP's
count leaves out its ReLU): a sample's loss is the forward pass F; its
gradient F (forward) + F (weights' gradients) + F minus the first layer's
share (the inputs' gradients, not needed for the first layer).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from laq_jax import problems

IMAGE_SHAPES = {784: (28, 28, 1), 3072: (32, 32, 3)}


def image_shape(model: str, input_dim: int) -> tuple[int, int, int]:
  """(H, W, C) of a flat sample of `input_dim` features, or ValueError
  naming the model, the feature count and the shapes it takes."""
  if input_dim not in IMAGE_SHAPES:
    known = ', '.join(f'{d} = {"x".join(map(str, s))}'
                      for d, s in IMAGE_SHAPES.items())
    raise ValueError(
        f'model={model!r} takes images ({known} features per sample, '
        f'height x width x channels); these data have {input_dim} features '
        'per sample: use a dataset of images (mnist, fashion_mnist, '
        'cifar10), or a model for vectors (logreg, mlp) or for character '
        'sequences (char_lstm)')
  return IMAGE_SHAPES[input_dim]


# A convolution whose patches take at most this many bytes per call (per
# client under vmap: McMahan's CNN's second convolution, 627 kB a sample,
# up to about 100 samples) runs as one matrix product over its patches
# (`PatchConv`); a larger one (a whole shard's objective) as XLA's
# convolution, whose memory is the activations'.
PATCHES_MAX_BYTES = 64 * 2**20


class PatchConv(nn.Module):
  """A k x k convolution with `nn.Conv`'s parameters (the same names,
  shapes, initializers: the same initial parameters) and its 'SAME' or
  'VALID' padding and strides, computed on a small batch as im2col: the k^2
  shifted (strided) views of the padded input side by side, [N, H', W',
  k^2 C], times the kernel as [k^2 C, F]. Vmapped over clients that each
  hold their own kernel (a round's local steps), XLA makes of a
  convolution a grouped one, which XLA:CPU runs at 3-6 GFLOP/s (the FedAvg
  CNN's second convolution on a 2-core EPYC), and of the product a batched
  matrix product; the views' gradients are slices and pads. A batch whose
  patches would take more than `PATCHES_MAX_BYTES` runs
  `lax.conv_general_dilated` as `nn.Conv` does (a whole shard's
  objective), so memory stays that of the activations. The two agree to
  rounding (tests/models_test.py)."""
  features: int
  kernel_size: int
  padding: str  # 'SAME' or 'VALID'
  strides: int = 1
  use_bias: bool = True
  init_scheme: str = 'default'  # problems.INITS (`init` is flax's method)

  @nn.compact
  def __call__(self, x):
    k, s, channels = self.kernel_size, self.strides, x.shape[-1]
    kernel_init, bias_init = problems.layer_inits(self.init_scheme,
                                                   k * k * channels)
    kernel = self.param('kernel', kernel_init,
                        (k, k, channels, self.features), jnp.float32)
    bias = (self.param('bias', bias_init,
                       (self.features,), jnp.float32)  # (nn.Conv's dtype)
            if self.use_bias else jnp.zeros((), jnp.float32))
    dtype = jnp.result_type(x, kernel, bias)  # (nn.Conv's promotion)
    x, kernel, bias = x.astype(dtype), kernel.astype(dtype), bias.astype(dtype)
    if self.padding == 'SAME':  # XLA's: out = ceil(in / s), more at the end
      pads = []
      for size in x.shape[1:3]:
        total = max((-(-size // s) - 1) * s + k - size, 0)
        pads.append((total // 2, total - total // 2))
      x = jnp.pad(x, ((0, 0), *pads, (0, 0)))
    n = x.shape[0]
    height, width = (x.shape[1] - k) // s + 1, (x.shape[2] - k) // s + 1
    patch_bytes = n * height * width * k * k * channels * x.dtype.itemsize
    if patch_bytes > PATCHES_MAX_BYTES:
      y = jax.lax.conv_general_dilated(
          x, kernel, (s, s), 'VALID',
          dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
      return y + bias
    # (kh, kw, C) order, as the kernel's HWIO rows
    patches = jnp.concatenate(
        [x[:, i:i + s * (height - 1) + 1:s, j:j + s * (width - 1) + 1:s, :]
         for i in range(k) for j in range(k)], axis=-1)
    return patches @ kernel.reshape(k * k * channels, self.features) + bias


def max_pool_2x2(x):
  """2x2 max pooling of NHWC `x` (stride 2, odd rows and columns dropped,
  as `nn.max_pool`'s 'VALID'), as a max over a reshape: its gradient is a
  comparison and a select, where `nn.max_pool`'s is XLA's select-and-
  scatter, which XLA:CPU runs about 3x slower (the pool of pfl-research's
  CNN vmapped over 50 clients: 3.3 against 10.0 ms a client-step on a
  2-core EPYC). The same values; the same gradient but where a window
  holds its maximum twice (select-and-scatter gives it to the first, this
  splits it evenly), which after a ReLU is a window of zeros, whose
  gradient the ReLU stops."""
  n, h, w, c = x.shape
  x = x[:, :h // 2 * 2, :w // 2 * 2, :]
  return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


class TwoConvCNN(nn.Module):
  """Two 5x5 convolutions, each followed by 2x2 max pooling, a hidden dense
  layer and the read-out: McMahan et al.'s CNN and the LASG code's differ
  only in the fields (`CNN`, `LASG_CNN`)."""
  channels: tuple[int, int]
  padding: str
  hidden: int
  activation: str
  num_classes: int = 10
  shape: tuple[int, int, int] = (28, 28, 1)
  init_scheme: str = 'default'  # problems.INITS (`init` is flax's method)

  @nn.compact
  def __call__(self, x):
    act = {'relu': nn.relu, 'elu': nn.elu}[self.activation]
    x = x.reshape((x.shape[0],) + tuple(self.shape))
    for i, channels in enumerate(self.channels):
      x = act(PatchConv(channels, 5, self.padding,
                        init_scheme=self.init_scheme,
                        name=f'conv{i + 1}')(x))
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = act(problems.dense(self.hidden, x.shape[-1], self.init_scheme, 'fc')(x))
    return problems.dense(self.num_classes, self.hidden, self.init_scheme,
                          'out')(x)


class SimpleCNN(nn.Module):
  """pfl-research's `simple_cnn`: two 3x3 'VALID' convolutions (32, 64
  channels), one 2x2 max pool after the second, a hidden dense layer of
  128 and the read-out, ReLU throughout (no dropout: see the module's
  docstring). Its flattening is NHWC's (h, w, c) order; PyTorch's is
  (c, h, w): benchmarks/peers_pfl.py permutes `fc`'s kernel rows."""
  num_classes: int = 10
  shape: tuple[int, int, int] = (32, 32, 3)
  init_scheme: str = 'default'  # problems.INITS (`init` is flax's method)

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0],) + tuple(self.shape))
    for i, channels in enumerate(PFL_CNN['channels']):
      x = nn.relu(PatchConv(channels, 3, 'VALID',
                            init_scheme=self.init_scheme,
                            name=f'conv{i + 1}')(x))
    x = max_pool_2x2(x)
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(problems.dense(PFL_CNN['hidden'], x.shape[-1],
                               self.init_scheme, 'fc')(x))
    return problems.dense(self.num_classes, PFL_CNN['hidden'],
                          self.init_scheme, 'out')(x)


PFL_CNN = dict(channels=(32, 64), hidden=128)
PFL_CNN_LAYERS = [('conv', 32, 3, 'VALID'), ('conv', 64, 3, 'VALID'),
                  ('pool',), ('dense', 128)]


# McMahan et al. 2017's CNN and the LASG code's (`Net`, ELU, 'VALID').
CNN = dict(channels=(32, 64), padding='SAME', hidden=512, activation='relu')
LASG_CNN = dict(channels=(20, 50), padding='VALID', hidden=500,
                activation='elu')


def layer_flops(shape, layers) -> list[float]:
  """Forward FLOPs (2 x multiply-adds) of each conv / dense layer.

  Args:
    shape: (H, W, C) of the input.
    layers: ('conv', out_channels, kernel, padding) | ('pool',) |
      ('dense', units), in order.
  """
  h, w, c = shape
  out = []
  for layer in layers:
    if layer[0] == 'conv':
      _, cout, k, padding = layer
      if padding == 'VALID':
        h, w = h - k + 1, w - k + 1
      out.append(2.0 * h * w * k * k * c * cout)
      c = cout
    elif layer[0] == 'pool':
      h, w = h // 2, w // 2
    else:
      units = layer[1]
      out.append(2.0 * h * w * c * units)
      h, w, c = 1, 1, units
  return out


def _flops(shape, layers) -> tuple[float, float]:
  """(gradient, loss) FLOPs per sample from `layer_flops`."""
  forward = layer_flops(shape, layers)
  total = sum(forward)
  return 3 * total - forward[0], total


def cnn_layers(spec: dict, num_classes: int) -> list[tuple]:
  """A `TwoConvCNN` spec's layers as `layer_flops` reads them."""
  conv = [(('conv', c, 5, spec['padding']), ('pool',))
          for c in spec['channels']]
  return [l for pair in conv for l in pair] + [('dense', spec['hidden']),
                                               ('dense', num_classes)]


def _as_problem(name, module, input_dim, num_classes, flops):
  """The flax `module` as a Problem ((gradient, loss) FLOPs per sample)."""

  def init(key):
    return module.init(key, jnp.zeros((1, input_dim)))['params']

  def apply(params, x):
    return module.apply({'params': params}, x)

  return problems.Problem(name, init, apply, num_classes,
                          grad_flops_per_sample=flops[0],
                          loss_flops_per_sample=flops[1])


def _cnn_problem(name, spec, input_dim, num_classes, init='default'):
  shape = image_shape(name, input_dim)
  return _as_problem(name, TwoConvCNN(**spec, num_classes=num_classes,
                                      shape=shape,
                                      init_scheme=problems.check_init(init)),
                     input_dim, num_classes,
                     _flops(shape, cnn_layers(spec, num_classes)))


class _Block(nn.Module):
  """A basic residual block: 3x3 conv, GN, ReLU, 3x3 conv, GN, + shortcut."""
  channels: int
  stride: int

  @nn.compact
  def __call__(self, x):
    # (the names flax gave the nn.Conv these replace)
    y = PatchConv(self.channels, 3, 'SAME', strides=self.stride,
                  use_bias=False, name='Conv_0')(x)
    y = nn.relu(nn.GroupNorm(num_groups=2)(y))
    y = PatchConv(self.channels, 3, 'SAME', use_bias=False,
                  name='Conv_1')(y)
    y = nn.GroupNorm(num_groups=2)(y)
    if self.stride != 1 or x.shape[-1] != self.channels:  # option A
      x = x[:, ::self.stride, ::self.stride]
      pad = self.channels - x.shape[-1]
      x = jnp.pad(x, ((0, 0), (0, 0), (0, 0), (pad // 2, pad - pad // 2)))
    return nn.relu(x + y)


class ResNet20(nn.Module):
  """He et al. 2016's CIFAR ResNet-20 with GroupNorm (module docstring)."""
  num_classes: int = 10
  shape: tuple[int, int, int] = (32, 32, 3)

  @nn.compact
  def __call__(self, x):
    x = x.reshape((x.shape[0],) + tuple(self.shape))
    x = PatchConv(16, 3, 'SAME', use_bias=False, name='Conv_0')(x)
    x = nn.relu(nn.GroupNorm(num_groups=2)(x))
    for stage, channels in enumerate((16, 32, 64)):
      for block in range(3):
        x = _Block(channels, 2 if stage and not block else 1)(x)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes)(x)


def resnet20_layers(shape) -> list[tuple]:
  """ResNet-20's convolutions and read-out as `layer_flops` sees them
  (the shortcuts, normalizations and pooling are not matmuls)."""
  h, w, _ = shape
  layers = [('conv3', h, w, shape[2], 16)]
  c = 16
  for stage, channels in enumerate((16, 32, 64)):
    for block in range(3):
      if stage and not block:
        h, w = (h + 1) // 2, (w + 1) // 2
      layers += [('conv3', h, w, c, channels),
                 ('conv3', h, w, channels, channels)]
      c = channels
  return layers


def _resnet_flops(shape, num_classes) -> tuple[float, float]:
  forward = [2.0 * h * w * 9 * cin * cout
             for _, h, w, cin, cout in resnet20_layers(shape)]
  forward.append(2.0 * 64 * num_classes)
  total = sum(forward)
  return 3 * total - forward[0], total


# How `CharLSTM` runs its layers over time: 'flax' (nn.RNN of
# nn.OptimizedLSTMCell, autodiff through the scan) or 'fused' (`lstm_layer`:
# the same parameters and function, the input products of every position in
# one product, a gradient of its own: fewer kernels a step).
LSTM_IMPLS = ('flax', 'fused')


@jax.custom_vjp
def lstm_layer(x_BxTxI, wi_Ix4H, wh_Hx4H, b_4H):
  """h [B, T, H] of one LSTM layer over T positions from zero state, gates
  (i, f, g, o) in that order of the 4H columns (nn.OptimizedLSTMCell's
  order: z = h W_h + b + x W_i; c' = f c + i g; h' = o tanh(c')).

  The input products x W_i of every position are one product before the
  scan; the gradient (`jax.custom_vjp`) runs one scan back over time that
  keeps only the pre-activations' gradient of each position, and takes the
  weights' gradients from them after it, in three products: each step of
  either scan is a product and a few elementwise passes (the kernels a GPU
  launches per step), where autodiff through nn.RNN saves and reads a dozen
  arrays a step. The same function; not the same bits (the products and
  sums run in another order)."""
  return _lstm_forward(x_BxTxI, wi_Ix4H, wh_Hx4H, b_4H)[0]


def _gates(z_Bx4H):
  """[B, 4, H]: sigmoid of the i, f, o blocks and tanh of the g block, as
  one elementwise pass (no per-gate slices: one kernel)."""
  z = z_Bx4H.reshape(z_Bx4H.shape[:-1] + (4, -1))
  is_g = (jnp.arange(4) == 2)[:, None]
  return jnp.where(is_g, jnp.tanh(z), jax.nn.sigmoid(z))


def _lstm_forward(x_BxTxI, wi_Ix4H, wh_Hx4H, b_4H):
  hidden = wh_Hx4H.shape[0]
  xw_TxBx4H = jnp.einsum('bti,ij->tbj', x_BxTxI, wi_Ix4H)
  zeros = jnp.zeros(x_BxTxI.shape[:1] + (hidden,), x_BxTxI.dtype)

  def step(carry, xw_Bx4H):
    c, h = carry
    z = (h @ wh_Hx4H + b_4H) + xw_Bx4H
    a = _gates(z)
    c_new = a[..., 1, :] * c + a[..., 0, :] * a[..., 2, :]
    h_new = a[..., 3, :] * jnp.tanh(c_new)
    return (c_new, h_new), (h_new, z, c_new)

  _, (h_TxBxH, z_TxBx4H, c_TxBxH) = jax.lax.scan(step, (zeros, zeros),
                                                 xw_TxBx4H)
  residuals = (x_BxTxI, wi_Ix4H, wh_Hx4H, h_TxBxH, z_TxBx4H, c_TxBxH)
  return jnp.swapaxes(h_TxBxH, 0, 1), residuals


def _lstm_backward(residuals, dh_BxTxH):
  x_BxTxI, wi_Ix4H, wh_Hx4H, h_TxBxH, z_TxBx4H, c_TxBxH = residuals
  dh_TxBxH = jnp.swapaxes(dh_BxTxH, 0, 1)
  zeros = jnp.zeros_like(dh_TxBxH[0])
  c_prev_TxBxH = jnp.concatenate([zeros[None], c_TxBxH[:-1]], 0)
  gate = jnp.arange(4)[:, None]

  def step(carry, inputs):
    dc_next, dh_next = carry
    dh_out, z, c_prev, c = inputs
    a = _gates(z)
    i, f, g, o = a[..., 0, :], a[..., 1, :], a[..., 2, :], a[..., 3, :]
    tc = jnp.tanh(c)
    dh = dh_out + dh_next
    dc = dc_next + dh * o * (1 - tc * tc)
    # d(loss)/d(gate activations), each gate's block in place (selects,
    # not a concatenation: one elementwise pass), then through them
    da = jnp.where(gate == 0, (dc * g)[..., None, :],
                   jnp.where(gate == 1, (dc * c_prev)[..., None, :],
                             jnp.where(gate == 2, (dc * i)[..., None, :],
                                       (dh * tc)[..., None, :])))
    dz = (da * jnp.where(gate == 2, 1 - a * a, a * (1 - a))).reshape(
        z.shape)
    return (dc * f, dz @ wh_Hx4H.T), dz

  _, dz_TxBx4H = jax.lax.scan(step, (zeros, zeros),
                              (dh_TxBxH, z_TxBx4H, c_prev_TxBxH, c_TxBxH),
                              reverse=True)
  h_prev_TxBxH = jnp.concatenate([zeros[None], h_TxBxH[:-1]], 0)
  dwh = jnp.einsum('tbh,tbj->hj', h_prev_TxBxH, dz_TxBx4H)
  dwi = jnp.einsum('bti,tbj->ij', x_BxTxI, dz_TxBx4H)
  db = jnp.sum(dz_TxBx4H, axis=(0, 1))
  dx = jnp.einsum('tbj,ij->bti', dz_TxBx4H, wi_Ix4H)
  return dx, dwi, dwh, db


lstm_layer.defvjp(_lstm_forward, _lstm_backward)


def fused_layer(module: nn.Module, cell: nn.OptimizedLSTMCell, x_BxTxI):
  """nn.RNN(cell)(x_BxTxI) by `lstm_layer`, inside `module`'s compact call
  where `cell` was made: the cell's parameters (names, shapes, initial
  values: the cell creates them, called once at init as nn.RNN calls it)."""
  if module.is_initializing():
    cell(cell.initialize_carry(jax.random.key(0), x_BxTxI[:, 0].shape),
         x_BxTxI[:, 0])
  p = module.variables['params'][cell.name]
  gates = 'ifgo'
  wi = jnp.concatenate([p[f'i{g}']['kernel'] for g in gates], -1)
  wh = jnp.concatenate([p[f'h{g}']['kernel'] for g in gates], -1)
  b = jnp.concatenate([p[f'h{g}']['bias'] for g in gates], -1)
  dtype = x_BxTxI.dtype
  return lstm_layer(x_BxTxI, wi.astype(dtype), wh.astype(dtype),
                    b.astype(dtype))


class CharLSTM(nn.Module):
  """Embedding 8, two LSTM layers of 256, a dense read-out of the last
  position (McMahan et al. 2017; LEAF's Shakespeare model). `impl`:
  LSTM_IMPLS (the same parameters either way)."""
  vocab: int
  num_classes: int
  embed: int = 8
  hidden: int = 256
  impl: str = 'flax'

  @nn.compact
  def __call__(self, x):
    tokens = jnp.clip(x.astype(jnp.int32), 0, self.vocab - 1)
    h = nn.Embed(self.vocab, self.embed)(tokens)
    for layer in range(2):
      cell = nn.OptimizedLSTMCell(self.hidden)
      if self.impl == 'fused':
        h = fused_layer(self, cell, h)
      else:
        h = nn.RNN(cell, name=f'lstm{layer}')(h)
    return nn.Dense(self.num_classes)(h[:, -1])


def lstm_flops(length, vocab_classes, embed=8, hidden=256
               ) -> tuple[float, float]:
  """(gradient, loss) FLOPs per sample: per position 2 x 4 gates x (inputs
  + hidden) x hidden per layer, the read-out once; backpropagation through
  time twice the forward (the first layer's input gradient included: the
  embedding's gradient needs it)."""
  per_step = sum(2.0 * 4 * (n_in + hidden) * hidden
                 for n_in in (embed, hidden))
  forward = length * per_step + 2.0 * hidden * vocab_classes
  return 3 * forward, forward


@functools.cache
def cnn(input_dim: int = 784, num_classes: int = 10, init: str = 'default'):
  """McMahan et al. 2017's CNN (`TwoConvCNN` with `CNN`); `init`:
  problems.INITS."""
  return _cnn_problem('cnn', CNN, input_dim, num_classes, init)


@functools.cache
def lasg_cnn(input_dim: int = 784, num_classes: int = 10,
             init: str = 'default'):
  """The LASG code's CNN (`TwoConvCNN` with `LASG_CNN`); `init`:
  problems.INITS ('torch': the authors' PyTorch defaults)."""
  return _cnn_problem('lasg_cnn', LASG_CNN, input_dim, num_classes, init)


@functools.cache
def pfl_cnn(input_dim: int = 3072, num_classes: int = 10,
            init: str = 'default'):
  """pfl-research's benchmark CNN (`SimpleCNN`), on 32x32x3 or 28x28x1;
  `init`: problems.INITS."""
  shape = image_shape('pfl_cnn', input_dim)
  return _as_problem('pfl_cnn', SimpleCNN(
      num_classes=num_classes, shape=shape,
      init_scheme=problems.check_init(init)), input_dim, num_classes,
                     _flops(shape, PFL_CNN_LAYERS + [('dense', num_classes)]))


@functools.cache
def resnet20(input_dim: int = 3072, num_classes: int = 10):
  """ResNet-20 with GroupNorm (`ResNet20`), on 32x32x3 or 28x28x1."""
  shape = image_shape('resnet20', input_dim)
  return _as_problem('resnet20', ResNet20(num_classes=num_classes,
                                          shape=shape), input_dim,
                     num_classes, _resnet_flops(shape, num_classes))


@functools.cache
def char_lstm(input_dim: int = 80, num_classes: int = 80, lstm: str = 'flax'):
  """The Shakespeare character model (`CharLSTM`): a sample is `input_dim`
  character indices, the classes the vocabulary (its size: num_classes).
  `lstm`: LSTM_IMPLS, how its layers run over time (the same parameters)."""
  if lstm not in LSTM_IMPLS:
    raise ValueError(f'lstm={lstm!r} is not one of '
                     f'{", ".join(map(repr, LSTM_IMPLS))}')
  if input_dim < 2 or input_dim in IMAGE_SHAPES:
    raise ValueError(
        f"model='char_lstm' takes sequences of character indices (e.g. "
        f'Shakespeare: 80 per sample); these data have {input_dim} features '
        'per sample, an image or vector set: use logreg, mlp, cnn, '
        'lasg_cnn or resnet20 for them')
  return _as_problem('char_lstm', CharLSTM(vocab=num_classes,
                                           num_classes=num_classes,
                                           impl=lstm),
                     input_dim, num_classes, lstm_flops(input_dim,
                                                        num_classes))


# The models' names in `problems.REGISTRY` (get_problem('cnn', ...)), in
# this order after logreg and mlp.
for _name, _factory in (('cnn', cnn), ('lasg_cnn', lasg_cnn),
                        ('resnet20', resnet20), ('char_lstm', char_lstm),
                        ('pfl_cnn', pfl_cnn)):
  problems.REGISTRY.register(_name, _factory)
del _name, _factory
