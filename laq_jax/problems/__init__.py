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

from laq_jax import registry
from laq_jax.problems.logreg import (_logreg_value,  # noqa: F401
                                     _logreg_value_and_grad)


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
# char_lstm, pfl_cnn) when imported, as the package's `__init__` does: it builds on
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
  'resnet20', 'char_lstm', 'pfl_cnn', or one registered);
  ValueError naming the allowed ones. `options` (e.g. hidden=200) go to the
  factories that take them."""
  factory = REGISTRY.get(name)
  params = inspect.signature(factory).parameters
  takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())
  kept = {k: v for k, v in options.items() if takes_all or k in params}
  if 'init' not in kept:  # never silently flax's
    check_model_init(name, options.get('init', 'default'))
  return factory(input_dim=input_dim, num_classes=num_classes, **kept)
