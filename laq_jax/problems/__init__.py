"""Models: the paper's multinomial logistic regression and 200-ReLU MLP; the
CNNs of McMahan et al. and of the LASG code (`laq_jax.models`).

A `Problem` is a model as pure functions: `init(key) -> params` and
`apply(params, x_NxD) -> logits_NxC`. Losses are softmax cross-entropy; the
L2 term of the spec (lam / 2 ||theta||^2 per worker) is added by the loop, so
it can be a hyperparameter of a sweep. Problems are cached by their sizes so
the same object (and so the same compiled program) comes back every time.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from laq_jax import collectives
from laq_jax import registry


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
  """A model as pure functions. Compared and hashed by identity.

  Attributes:
    name: a label for reports.
    init: key -> params pytree (the dtype is cast by the loop).
    apply: (params, x_NxD) -> logits_NxC.
    num_classes: C.
    workers_value_and_grad: optional, every worker's full-batch objective
      and gradient at once, written for speed: (theta_P, data, l2, unravel,
      ravel) -> (f_M, grads_MxP), with data a `loop.Data` carrying the extra
      layouts of `loop.fast_layout`; the loop uses it for full-batch
      gradients when the data carry them (else autodiff of `loss`).
    workers_value: optional, the f_M alone from the same layouts.
    convex: whether the objective is convex (then the launchers solve for
      f* and report residuals f - f*; otherwise they report the loss).
    grad_flops_per_sample: matmul FLOPs of one sample's gradient (forward +
      backward), for the roofline floors and the network model's compute
      time; None if unknown.
    loss_flops_per_sample: matmul FLOPs of one sample's loss (forward).
    sample_loss: optional (params, x_NxD, y_N) -> losses_N, the loss of
      each sample in place of softmax cross-entropy on `apply`'s logits
      (`binary`'s sigmoid loss).
    regularizer: optional (theta_P, l2) -> the regularizer each worker's
      objective adds, in place of (l2 / 2) ||theta||^2 (`binary`'s
      nonconvex l2 sum_j theta_j^2 / (1 + theta_j^2)).
    labels: optional NumPy labels -> the labels the problem reads (MNIST's
      digits -> their parity for `binary`), which the launchers apply to
      the training shards (after the split, which sees the data's own
      labels) and to the test labels; a library user applies it to hers.
    classifier: whether `apply` gives class logits (num_classes of them)
      whose argmax is a prediction; False (the `autoencoder`): its output
      is no class, its loss reads no label, and its test accuracy is NaN.
  """
  name: str
  init: Callable[[jax.Array], Any]
  apply: Callable[[Any, jax.Array], jax.Array]
  num_classes: int
  workers_value_and_grad: Callable | None = None
  workers_value: Callable | None = None
  convex: bool = False
  grad_flops_per_sample: float | None = None
  loss_flops_per_sample: float | None = None
  sample_loss: Callable | None = None
  regularizer: Callable | None = None
  labels: Callable | None = None
  classifier: bool = True

  def sample_losses(self, params, x_NxD, y_N) -> jax.Array:
    """The loss of each sample [N] (no regularizer): softmax cross-entropy
    unless the problem has its own `sample_loss`."""
    if self.sample_loss is not None:
      return self.sample_loss(params, x_NxD, y_N)
    logits = self.apply(params, x_NxD)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y_N)

  def regularize(self, theta_P, l2) -> jax.Array:
    """The regularizer of one worker's objective at `theta_P`: (l2 / 2)
    ||theta||^2 unless the problem has its own."""
    if self.regularizer is not None:
      return self.regularizer(theta_P, l2)
    return 0.5 * l2 * jnp.sum(jnp.square(theta_P))

  def loss(self, params, x_NxD, y_N) -> jax.Array:
    """Mean softmax cross-entropy over the batch (no regularizer)."""
    return jnp.mean(self.sample_losses(params, x_NxD, y_N))

  def num_params(self) -> int:
    """P, the total number of parameters."""
    shapes = jax.eval_shape(self.init, jax.random.key(0))
    return sum(math.prod(s.shape) for s in jax.tree.leaves(shapes))

  def fingerprint(self, num_features: int) -> str:
    """A digest (16 hex digits) of the loss as XLA sees it: its lowered
    StableHLO at a batch of two samples of `num_features` features, in the
    widest float the process has. What caches keyed on the objective use
    (f*), never the name: a model registered again under its name with
    other logits gets another fingerprint."""
    import hashlib  # pylint: disable=g-import-not-at-top
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, dtype),
                          jax.eval_shape(self.init, jax.random.key(0)))
    text = jax.jit(self.loss).lower(
        params, jax.ShapeDtypeStruct((2, num_features), dtype),
        jax.ShapeDtypeStruct((2,), jnp.int32)).as_text()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# Initial parameters of the flax models' conv and dense layers (`init=`):
# 'default' flax's (LeCun normal kernels, zero biases); 'torch' PyTorch's
# torch.nn defaults (Linear and Conv2d: kaiming_uniform_(a=sqrt(5)) on the
# weight, i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias from the
# same U), what code written in PyTorch starts from (the LASG authors').
INITS = ('default', 'torch')


def check_init(init: str) -> str:
  """`init` if it is one of INITS, else ValueError naming them."""
  if init not in INITS:
    raise ValueError(f'init={init!r} is not one of '
                     f'{", ".join(map(repr, INITS))}')
  return init


def layer_inits(init: str, fan_in: int):
  """(kernel_init, bias_init) of a conv or dense layer with `fan_in` inputs
  per output (a k x k conv: k^2 x input channels) under `init` (INITS)."""
  if check_init(init) == 'default':
    return nn.initializers.lecun_normal(), nn.initializers.zeros_init()
  bound = 1.0 / float(fan_in) ** 0.5

  def uniform(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)

  return uniform, uniform


def dense(features: int, fan_in: int, init: str, name: str) -> nn.Dense:
  """nn.Dense with `layer_inits`' initializers."""
  kernel_init, bias_init = layer_inits(init, fan_in)
  return nn.Dense(features, kernel_init=kernel_init, bias_init=bias_init,
                  name=name)


class MLP(nn.Module):
  """One hidden layer of ReLU units, then a linear read-out to the logits."""
  hidden: int = 200
  num_classes: int = 10
  init_scheme: str = 'default'  # INITS (`init` is flax's method)

  @nn.compact
  def __call__(self, x):
    x = nn.relu(dense(self.hidden, x.shape[-1], self.init_scheme, 'hidden')(x))
    return dense(self.num_classes, self.hidden, self.init_scheme, 'out')(x)


@functools.cache
def logistic_regression(input_dim: int = 784, num_classes: int = 10) -> Problem:
  """Multinomial logistic regression, zero-initialized (convex; unique optimum)."""

  def init(key):
    del key
    return {'w': jnp.zeros((input_dim, num_classes)),
            'b': jnp.zeros((num_classes,))}

  def apply(params, x):
    return x @ params['w'] + params['b']

  # logits X W (2DC); dW = X^T dlogits (2DC).
  return Problem('logreg', init, apply, num_classes,
                 workers_value_and_grad=_logreg_value_and_grad,
                 workers_value=_logreg_value, convex=True,
                 grad_flops_per_sample=4 * input_dim * num_classes,
                 loss_flops_per_sample=2 * input_dim * num_classes)


# ----------------------------------------------------------------------------
# Logistic regression's full-batch gradient, written for speed.
#
# Autodiff of the loss reads X twice per iteration: X W for the logits, then
# X^T R (R = softmax - one-hot) contracting over the rows of a row-major X,
# a product XLA:CPU runs far below its matmul rate. Here the gradient is
# written out: the logits as one matrix product over every worker's rows
# (theta is the same for all), and X^T R from a transposed copy of X (a
# plain row-major product). When the features are integers times a scale
# (MNIST: bytes / 255), a float32 run reads them as bfloat16 integers (exact
# for |n| <= 256): half the bytes of float32, and the products run on the
# bf16 dot units with float32 accumulation. The float32 factor (W, or R) is
# split into three bf16 parts whose sum is it exactly (8 + 8 + 8 bits of a
# 24-bit significand), so every product n * part is exact in float32 and the
# sums accumulate in float32: a float32 dot's accuracy, with the scale
# applied once to the result instead of to every pixel.


def _split3(a_f32):
  """[..., K] float32 -> [..., 3K] bfloat16 parts; their sum is exact.

  The parts are rounded with `reduce_precision` in float32, which XLA keeps
  (a float32 -> bfloat16 -> float32 round trip may be folded away where the
  backend allows excess precision, as on GPUs), and cast once at the end,
  exactly.
  """
  to_bf16 = functools.partial(jax.lax.reduce_precision, exponent_bits=8,
                              mantissa_bits=7)
  hi = to_bf16(a_f32)
  rest = a_f32 - hi
  mid = to_bf16(rest)
  lo = rest - mid
  return jnp.concatenate([hi, mid, lo], axis=-1).astype(jnp.bfloat16)


def _sum3(parts, k: int):
  """[..., 3K] -> [..., K]: the three parts' products added."""
  shape = parts.shape[:-1]
  return jnp.sum(parts.reshape(*shape, 3, k), axis=-2)


def _x_times(data, w_DxK):
  """X [M N, D] @ w [D, K] over every worker's rows, one matrix product
  (the bf16 integers times w's three parts in float32 runs)."""
  num_workers, n, _ = data.x_MxNxD.shape
  if data.xq_MxNxD is not None:  # exact bf16 integers, float32 run
    xq = data.xq_MxNxD.reshape(num_workers * n, -1)
    parts = jax.lax.dot_general(xq, _split3(w_DxK), (((1,), (0,)), ((), ())),
                                preferred_element_type=jnp.float32)
    return _sum3(parts, w_DxK.shape[-1]) * data.xq_scale
  return data.x_MxNxD.reshape(num_workers * n, -1) @ w_DxK


def _xt_times(data, r_MxNxK):
  """Every worker's X_m^T R_m [M, D, K], from the layout the data carry."""
  if data.xqt_MxDxN is not None:
    parts = jax.lax.dot_general(
        data.xqt_MxDxN, _split3(r_MxNxK), (((2,), (1,)), ((0,), (0,))),
        preferred_element_type=jnp.float32)
    return _sum3(parts, r_MxNxK.shape[-1]) * data.xq_scale
  if data.xt_MxDxN is not None:
    return jnp.einsum('mdn,mnc->mdc', data.xt_MxDxN, r_MxNxK)
  return jnp.einsum('mnd,mnc->mdc', data.x_MxNxD, r_MxNxK)


def _logreg_logits(theta_params, data):
  """[M, N, C] logits of every worker's rows, one matrix product."""
  w, b = theta_params['w'], theta_params['b']
  num_workers, n, _ = data.x_MxNxD.shape
  return _x_times(data, w).reshape(num_workers, n, w.shape[-1]) + b


def _logreg_terms(logits_MxNxC, y_MxN, count_M=None):
  """(mean cross-entropy per worker [M], d(mean)/d(logits) [M, N, C]).

  With count_M, the mean is over each worker's first count_M[m] rows and
  the padding rows' terms are zero."""
  # A one-hot product, not a gather: XLA:CPU's gathers are slow.
  onehot = jax.nn.one_hot(y_MxN, logits_MxNxC.shape[-1],
                          dtype=logits_MxNxC.dtype)
  top = jnp.max(logits_MxNxC, axis=-1, keepdims=True)
  shifted = logits_MxNxC - jax.lax.stop_gradient(top)
  exp = jnp.exp(shifted)
  total = collectives.fixed_sum(exp)[..., None]
  loss_MxN = jnp.log(total[..., 0]) - collectives.fixed_sum(shifted * onehot)
  # Sums over a worker's samples in a fixed order: the same bits whether
  # the workers are vmapped on one device or split over several.
  r_MxNxC = exp / total - onehot
  if count_M is None:
    n = loss_MxN.shape[-1]
    return collectives.fixed_sum(loss_MxN) / n, r_MxNxC / n
  valid_MxN = (jnp.arange(loss_MxN.shape[-1], dtype=jnp.int32)
               < count_M[:, None])
  count_M = count_M.astype(loss_MxN.dtype)
  weight_MxN = jnp.where(valid_MxN, 1 / count_M[:, None], 0)
  return (collectives.fixed_sum(jnp.where(valid_MxN, loss_MxN, 0)) / count_M,
          r_MxNxC * weight_MxN[..., None].astype(r_MxNxC.dtype))


def _logreg_value(theta_P, data, l2, unravel):
  losses_M, _ = _logreg_terms(_logreg_logits(unravel(theta_P), data),
                              data.y_MxN, data.count_M)
  return losses_M + 0.5 * l2 * collectives.sum_sq(theta_P)


def _logreg_value_and_grad(theta_P, data, l2, unravel, ravel):
  """Every worker's f_m and its gradient (see the comment above).

  Vmapped over a grid of parameters with the data shared (a vmapped sweep),
  it runs as `_logreg_grid_value_and_grad`: one pass over the data for all
  G points (a `custom_vmap` rule)."""
  one = functools.partial(_logreg_one_value_and_grad, unravel=unravel,
                          ravel=ravel)
  fn = jax.custom_batching.custom_vmap(one)

  @fn.def_vmap
  def _rule(axis_size, in_batched, theta, data, l2):
    theta_b, data_b, l2_b = in_batched
    if theta_b and not any(jax.tree.leaves(data_b)):
      l2_G = l2 if l2_b else jnp.broadcast_to(l2, (axis_size,))
      return (_logreg_grid_value_and_grad(theta, data, l2_G, unravel, ravel),
              (True, True))
    axes = (0 if theta_b else None,
            jax.tree.map(lambda b: 0 if b else None, data_b),
            0 if l2_b else None)
    return (jax.vmap(one, in_axes=axes, axis_size=axis_size)(theta, data, l2),
            (True, True))

  return fn(theta_P, data, l2)


def _logreg_grid_value_and_grad(theta_GxP, data, l2_G, unravel, ravel):
  """`_logreg_value_and_grad` of G parameter vectors on shared data, with
  one pass over X for all of them: the logits of every point and worker are
  one product X [M N, D] @ [D, G C] against the stacked weights, and each
  worker's X_m^T R_m one product for all points ([D, N] @ [N, G C]), kept
  in an [M, N, G, C] layout throughout. Equal to the G separate calls to
  rounding (the products are wider, so they add in another order)."""
  params = jax.vmap(unravel)(theta_GxP)
  w_GxDxC, b_GxC = params['w'], params['b']
  g, d, c = w_GxDxC.shape
  m, n, _ = data.x_MxNxD.shape
  gc = g * c
  w_DxGC = jnp.transpose(w_GxDxC, (1, 0, 2)).reshape(d, gc)
  logits = _x_times(data, w_DxGC).reshape(m, n, g, c) + b_GxC
  onehot = jax.nn.one_hot(data.y_MxN, c, dtype=logits.dtype)[:, :, None, :]
  top = jnp.max(logits, axis=-1, keepdims=True)
  shifted = logits - jax.lax.stop_gradient(top)
  exp = jnp.exp(shifted)
  total = collectives.fixed_sum(exp)[..., None]
  loss_MxGxN = jnp.swapaxes(
      jnp.log(total[..., 0]) - collectives.fixed_sum(shifted * onehot), 1, 2)
  r = exp / total - onehot  # [M, N, G, C]
  if data.count_M is None:
    losses_MxG = collectives.fixed_sum(loss_MxGxN) / n
    r = r / n
  else:
    valid_MxN = jnp.arange(n, dtype=jnp.int32) < data.count_M[:, None]
    count_M = data.count_M.astype(loss_MxGxN.dtype)
    losses_MxG = (collectives.fixed_sum(
        jnp.where(valid_MxN[:, None, :], loss_MxGxN, 0)) / count_M[:, None])
    weight_MxN = jnp.where(valid_MxN, 1 / count_M[:, None], 0)
    r = r * weight_MxN[:, :, None, None].astype(r.dtype)
  dw = _xt_times(data, r.reshape(m, n, gc))
  dw_GxMxDxC = jnp.transpose(dw.reshape(m, d, g, c), (2, 0, 1, 3))
  bias_GxMxC = collectives.fixed_sum(jnp.transpose(r, (2, 0, 3, 1)))
  grads = jax.vmap(jax.vmap(ravel))({'b': bias_GxMxC, 'w': dw_GxMxDxC})
  # ||theta||^2 in a fixed order too: a reduce's order is XLA's, per
  # program (vmapped or on devices), and the loss would differ in its last
  # bits between them.
  sq_G = collectives.sum_sq(theta_GxP)
  return (losses_MxG.T + (0.5 * l2_G * sq_G)[:, None],
          grads + l2_G[:, None, None] * theta_GxP[:, None, :])


def _logreg_one_value_and_grad(theta_P, data, l2, unravel, ravel):
  """`_logreg_value_and_grad` of one parameter vector."""
  params = unravel(theta_P)
  losses_M, r_MxNxC = _logreg_terms(_logreg_logits(params, data), data.y_MxN,
                                    data.count_M)
  dw_MxDxC = _xt_times(data, r_MxNxC)
  bias_MxC = collectives.fixed_sum(jnp.swapaxes(r_MxNxC, 1, 2))
  grads_MxP = jax.vmap(ravel)({'b': bias_MxC, 'w': dw_MxDxC})
  return (losses_M + 0.5 * l2 * collectives.sum_sq(theta_P),
          grads_MxP + l2 * theta_P)


@functools.cache
def mlp(input_dim: int = 784, num_classes: int = 10, hidden: int = 200,
        init: str = 'default') -> Problem:
  """The paper's nonconvex model: input -> hidden ReLU -> softmax (flax);
  `init`: INITS."""
  module = MLP(hidden=hidden, num_classes=num_classes,
               init_scheme=check_init(init))

  def init(key):
    return module.init(key, jnp.zeros((1, input_dim)))['params']

  def apply(params, x):
    return module.apply({'params': params}, x)

  # X W1 (2DH), A W2 (2HC); dW2 = A^T dlogits (2HC), dA = dlogits W2^T
  # (2HC), dW1 = X^T dpre (2DH); no dX.
  return Problem(f'mlp{hidden}', init, apply, num_classes,
                 grad_flops_per_sample=(4 * input_dim * hidden
                                        + 6 * hidden * num_classes),
                 loss_flops_per_sample=(2 * input_dim * hidden
                                        + 2 * hidden * num_classes))


# ----------------------------------------------------------------------------
# `binary`: MNIST parity (even -> +1, odd -> -1) by a linear score a^T w + b
# (P = 785, started at 0), the 3PC / EF21 / DASHA papers' binary problems
# (docs/algorithm.md, "After LAQ"). The score s gives two-class logits
# [s, 0] with class 0 = even (y = +1): softmax cross-entropy on them is the
# logistic loss log(1 + exp(-y s)) exactly, and argmax is sign(s).


def parity(y):
  """MNIST digits -> the class `binary` reads: 0 even (y = +1), 1 odd."""
  return np.asarray(y) % 2


def _binary_margins(params, x_NxD, y_N):
  """(s, y s) with y = +1 for class 0, -1 for class 1."""
  s = x_NxD @ params['w'] + params['b']
  return s, (1 - 2 * y_N).astype(s.dtype) * s


def _sigmoid_sq(params, x_NxD, y_N):
  """DASHA's sigmoid loss (1 - sigmoid(y s))^2 of each sample."""
  _, ys = _binary_margins(params, x_NxD, y_N)
  return jnp.square(1.0 - jax.nn.sigmoid(ys))


def nonconvex_l2(theta_P, l2):
  """lam sum_j theta_j^2 / (1 + theta_j^2), the nonconvex regularizer of
  the 3PC / EF21 papers' logistic experiments."""
  sq = jnp.square(theta_P)
  return l2 * jnp.sum(sq / (1.0 + sq))


# name -> (sample loss: None = logistic, regularizer: None = l2 / 2)
BINARY = {'binary': (None, None),
          'binary_nonconvex': (None, nonconvex_l2),
          'binary_sigmoid': (_sigmoid_sq, None),
          'binary_sigmoid_nonconvex': (_sigmoid_sq, nonconvex_l2)}


@functools.cache
def binary(input_dim: int = 784, num_classes: int = 10, *,
           kind: str = 'binary') -> Problem:
  """MNIST parity by a linear score (see BINARY): the logistic loss
  (`binary`, convex with l2; `binary_nonconvex` with the nonconvex
  regularizer) or the sigmoid loss (`binary_sigmoid`, nonconvex), started
  at 0. `num_classes` is the data's (its labels map to their parity)."""
  del num_classes
  sample_loss, regularizer = BINARY[kind]

  def init(key):
    del key
    return {'w': jnp.zeros((input_dim,)), 'b': jnp.zeros(())}

  def apply(params, x):
    s = x @ params['w'] + params['b']
    return jnp.stack([s, jnp.zeros_like(s)], axis=-1)

  return Problem(kind, init, apply, 2,
                 convex=sample_loss is None and regularizer is None,
                 grad_flops_per_sample=4 * input_dim,
                 loss_flops_per_sample=2 * input_dim,
                 sample_loss=sample_loss, regularizer=regularizer,
                 labels=parity)


# ----------------------------------------------------------------------------
# `autoencoder`: the 3PC poster's MNIST autoencoder (Fig. 1), f_m = mean over
# its images of ||D E a - a||^2 with E 16 x 784 and D 784 x 16, no bias
# (P = 25,088; stored transposed, `encoder` 784 x 16 and `decoder` 16 x 784,
# for rows of images: x E^T D^T), Flax's LeCun-normal initialization under
# the run's seed.

AUTOENCODER_CODE = 16


def _reconstruction_error(params, x_NxD, y_N):
  """||D E a - a||^2 of each sample (no label read)."""
  del y_N
  recon = (x_NxD @ params['encoder']) @ params['decoder']
  return jnp.sum(jnp.square(recon - x_NxD), axis=-1)


@functools.cache
def autoencoder(input_dim: int = 784, num_classes: int = 10) -> Problem:
  """A linear autoencoder through a code of AUTOENCODER_CODE: no classes
  (`classifier=False`: its test accuracy is NaN), nonconvex."""
  del num_classes
  code = AUTOENCODER_CODE
  init_fn = nn.initializers.lecun_normal()

  def init(key):
    k_e, k_d = jax.random.split(key)
    return {'encoder': init_fn(k_e, (input_dim, code)),
            'decoder': init_fn(k_d, (code, input_dim))}

  def apply(params, x):
    return (x @ params['encoder']) @ params['decoder']

  return Problem('autoencoder', init, apply, input_dim,
                 grad_flops_per_sample=12 * input_dim * code,
                 loss_flops_per_sample=4 * input_dim * code,
                 sample_loss=_reconstruction_error, classifier=False)


# Every model: name -> factory(input_dim, num_classes, **options) -> Problem
# (options it does not take, such as another model's `hidden`, are not
# passed). Add one with `REGISTRY.register(name, factory)`. `laq_jax.models`
# registers its convolutional and recurrent ones (cnn, lasg_cnn, resnet20,
# char_lstm) when imported, as the package's `__init__` does: it builds on
# Problem, so this module does not import it (no circle).
REGISTRY: registry.Registry[Callable[..., Problem]] = registry.Registry(
    'model', [('logreg', logistic_regression), ('mlp', mlp),
              *((name, functools.partial(binary, kind=name))
                for name in BINARY), ('autoencoder', autoencoder)])


__getattr__ = registry.names_attribute(__name__, PROBLEMS=REGISTRY)


def check_model_init(name: str, init: str) -> None:
  """ValueError unless model `name` (REGISTRY) can start from `init`
  (INITS): 'default' any, another only a factory with an `init` option."""
  check_init(init)
  if init == 'default':
    return
  takes = [n for n in REGISTRY.names
           if 'init' in inspect.signature(REGISTRY.get(n)).parameters]
  if name not in takes:
    raise ValueError(f'model {name!r} has no init option; init={init!r} '
                     f'is for {", ".join(map(repr, takes))}')


def get_problem(name: str, input_dim: int = 784, num_classes: int = 10,
                **options) -> Problem:
  """Problem by name from REGISTRY ('logreg', 'mlp', 'cnn', 'lasg_cnn',
  'resnet20', 'char_lstm', or one registered);
  ValueError naming the allowed ones. `options` (e.g. hidden=200) go to the
  factories that take them."""
  factory = REGISTRY.get(name)
  params = inspect.signature(factory).parameters
  takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())
  kept = {k: v for k, v in options.items() if takes_all or k in params}
  if 'init' not in kept:  # never silently flax's
    check_model_init(name, options.get('init', 'default'))
  return factory(input_dim=input_dim, num_classes=num_classes, **kept)
