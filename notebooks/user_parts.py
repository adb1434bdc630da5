"""A user's own parts, written outside the library (notebooks/extend.ipynb).

Importing this module registers eight parts and presets for them, the way a
researcher adds methods from their own code, with no edit of `laq_jax`:

  rand_k      compressor with its OWN parameter k: k random coordinates,
              scaled p / k (unbiased; Stich et al. 2018's rand-k)
  natural     natural compression (Horvath et al. 2019): each coordinate
              rounded at random to one of the two nearest powers of two,
              unbiased, 9 bits per coordinate (sign and 8-bit exponent)
  powersgd_r2 PowerSGD (Vogels, Karimireddy, Jaggi 2019), rank 2, with its
              OWN STATE: each worker's warm-started Q
  ema         a trigger with state: upload iff the compressed innovation is
              at least `weight` times its running average (decay `decay`)
  local_adam  a client part: K local steps of Adam (optax.adam, fresh every
              round) on the client's minibatches, uploading the model change
  heavy_ball  a server part: heavy-ball momentum written out as an optax
              GradientTransformation, with its OWN parameter and state
  last_gradient  an estimator with state (3PC's v1, Richtarik et al. 2022,
              idealized): Q = y + C(g - y), y the worker's gradient of its
              previous round, kept whether it uploads or not

and the presets `rand_k_gd`, `natural_gd`, `powersgd_ef` (PowerSGD with
error feedback), `laq_ema` (LAQ's quantizer under the ema trigger) and
`gd_momentum` (GD with the heavy_ball server), `fedavg_adam` (FedAvg whose
clients run local_adam) and `tpc_v1_topk` (top-k through last_gradient).
Launchers see them through a config that names this module
(`config.modules = 'notebooks.user_parts'`, configs/user_parts.py).

PowerSGD here is Algorithm 1 of the paper (and `RankKReducer` with
`reuse_query=True` in epfml/powersgd's paper-code/gradient_reducers.py): one
power iteration per step from the last Q, P = M Q, P orthogonalized by
Gram-Schmidt (eps 1e-8, as that code), Q = M^T P, the upload P Q^T with 32
bits per entry of P and Q. The paper all-reduces P before orthogonalizing
and Q after; a worker of this suite compresses alone, so each worker keeps
its own P and Q (with one worker the two are the same computation). The
flat gradient is viewed as a matrix with `cols` columns, zero-padded (785 x 10
for MNIST's logistic regression: the weights' rows, then the bias).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

import laq_jax
from laq_jax import clients, compressors, estimators, parts, servers, trigger
from laq_jax.compressors import Compressed


# -- rand-k: a compressor that owns its parameter k -------------------------

def rand_k(grad_P, ref_P, key, hyper, *, params):
  v = grad_P - ref_P
  num_params = v.shape[-1]
  k = jnp.clip(params['k'], 1, num_params)
  # k distinct coordinates: the k smallest of p uniforms (k is data)
  rank = jnp.argsort(jnp.argsort(jax.random.uniform(key, v.shape)))
  keep = rank < k
  scale = (num_params / k).astype(v.dtype)
  value = ref_P + jnp.where(keep, scale * v, jnp.zeros_like(v))
  per_value = 32 + math.ceil(math.log2(num_params))
  return Compressed(value, k * per_value)


RAND_K = parts.compressor(
    'rand_k', rand_k,
    params=[parts.Param('k', 100, 'int', check=lambda a: a >= 1,
                        allowed='an integer >= 1 (at most p is used)',
                        doc='coordinates kept')],
    doc='rand-k, unbiased (p / k scaling)')


# -- natural compression (Horvath et al. 2019) ------------------------------

def natural(grad_P, ref_P, key, hyper):
  del hyper
  v = grad_P - ref_P
  magnitude = jnp.abs(v)
  safe = jnp.where(magnitude > 0, magnitude, 1)
  low = jnp.exp2(jnp.floor(jnp.log2(safe)))  # 2^floor(log2 |v|)
  up = jax.random.uniform(key, v.shape, v.dtype) < (safe - low) / low
  value = jnp.where(magnitude > 0, jnp.sign(v) * low * jnp.where(up, 2, 1), 0)
  return Compressed(ref_P + value.astype(v.dtype), jnp.int32(9 * v.shape[-1]))


NATURAL = parts.compressor('natural', natural,
                           doc='natural compression, 9 bits per coordinate')


# -- PowerSGD: a compressor that owns per-worker state ----------------------

def gram_schmidt(p, eps=1e-8):
  """The columns of p orthonormalized in order (epfml's `orthogonalize`)."""
  for i in range(p.shape[1]):
    col = p[:, i] / (jnp.sqrt(jnp.sum(p[:, i] ** 2)) + eps)
    p = p.at[:, i].set(col)
    if i + 1 < p.shape[1]:
      rest = p[:, i + 1:]
      p = p.at[:, i + 1:].set(rest - jnp.sum(col[:, None] * rest, 0) * col[:,
                                                                            None])
  return p


def powersgd(rank: int, cols: int) -> parts.Part:
  """PowerSGD of the given rank (static: it sets the state's shape) on the
  flat gradient viewed with `cols` columns."""

  def matrix_shape(num_params):
    return -(-num_params // cols), cols

  def init(num_params, dtype):
    _, m = matrix_shape(num_params)
    return jax.random.normal(jax.random.key(0), (m, rank), dtype)

  def compress(grad_P, ref_P, key, hyper, *, state):
    del key, hyper
    v = grad_P - ref_P
    num_params = v.shape[-1]
    n, m = matrix_shape(num_params)
    matrix = jnp.pad(v, (0, n * m - num_params)).reshape(n, m)
    p = gram_schmidt(matrix @ state)
    q = matrix.T @ p
    approx = (p @ q.T).reshape(-1)[:num_params]
    bits = jnp.int32(32 * rank * (n + m))
    return Compressed(ref_P + approx, bits), q

  return parts.compressor(f'powersgd_r{rank}', compress, init=init,
                          doc=f'PowerSGD, rank {rank}, warm-started Q')


POWERSGD = powersgd(rank=2, cols=10)


# -- a trigger with state ---------------------------------------------------

def ema(inputs, *, params, state):
  lhs = inputs.compressed_sq
  rhs = params['weight'] * state
  first = inputs.clock >= trigger.NEVER_UPLOADED
  sent = first | (lhs >= rhs)
  decay = params['decay']
  new = jnp.where(first, lhs, decay * state + (1 - decay) * lhs)
  return trigger.Decision(sent, lhs, rhs), new


EMA = parts.trigger(
    'ema', ema, init=lambda num_params, dtype: jnp.zeros((), dtype),
    params=[parts.Param('weight', 1.0, check=lambda a: a >= 0,
                        allowed='a finite number >= 0'),
            parts.Param('decay', 0.9, check=lambda a: (a >= 0) & (a < 1),
                        allowed='a number in [0, 1)')],
    doc='upload iff ||Q - Qhat||^2 >= weight x its running average')


def last_gradient(inputs, *, state):
  out, compressor_states = inputs.compress(inputs.grad_P, state,
                                           inputs.compressor_states)
  return (out, compressor_states), inputs.grad_P


LAST_GRADIENT = parts.estimator(
    'last_gradient', last_gradient,
    init=lambda num_params, dtype: jnp.zeros((num_params,), dtype),
    doc='Q = y + C(g - y), y the last round\'s gradient (3PC v1, idealized: '
        'the server cannot rebuild y)')


LOCAL_ADAM = clients.client(
    'local_adam', lambda p: optax.adam(p['lr'], b1=p['b1']),
    params=[clients.steps(5), clients.lr(0.01),
            parts.Param('b1', 0.9, check=lambda a: (a >= 0) & (a < 1),
                        allowed='a number in [0, 1)')],
    doc='K local steps of Adam, its moments reset every round')


def heavy_ball(learning_rate, momentum) -> optax.GradientTransformation:
  """Heavy-ball momentum written out as an optax transformation: v <- g +
  momentum v, the step -learning_rate v (what optax.sgd(lr, momentum)
  computes, in the same order)."""

  def init(params):
    return jax.tree.map(jnp.zeros_like, params)

  def update(updates, velocity, params=None):
    del params
    velocity = jax.tree.map(lambda g, v: g + momentum * v, updates, velocity)
    return jax.tree.map(lambda v: -learning_rate * v, velocity), velocity

  return optax.GradientTransformation(init, update)


HEAVY_BALL = servers.optax_server(
    'heavy_ball', heavy_ball,
    [parts.Param('momentum', 0.9, check=lambda a: (a >= 0) & (a < 1),
                 allowed='a number in [0, 1)')],
    doc='heavy-ball momentum, written in user code')


def register() -> None:
  """Registers the parts and presets (again: a re-run cell replaces them,
  and a RunSpec made afterwards compiles the new ones)."""
  for part in (RAND_K, NATURAL, POWERSGD):
    compressors.REGISTRY.register(part.name, part, replace=True)
  trigger.REGISTRY.register(EMA.name, EMA, replace=True)
  clients.REGISTRY.register(LOCAL_ADAM.name, LOCAL_ADAM, replace=True)
  servers.REGISTRY.register(HEAVY_BALL.name, HEAVY_BALL, replace=True)
  estimators.REGISTRY.register(LAST_GRADIENT.name, LAST_GRADIENT,
                               replace=True)
  A = laq_jax.Algorithm
  for preset in (
      A('rand_k_gd', False, 'rand_k', False, reference='rand-k'),
      A('natural_gd', False, 'natural', False,
        reference='Horvath et al. 2019: natural compression'),
      A('powersgd_ef', False, POWERSGD.name, False, error_feedback=True,
        reference='Vogels et al. 2019: PowerSGD'),
      A('laq_ema', False, 'uniform', True, 'ema',
        reference="LAQ's quantizer, an EMA trigger"),
      A('gd_momentum', False, 'identity', False, server='heavy_ball',
        params={'heavy_ball.momentum': 0.9},
        reference='GD with heavy-ball server momentum'),
      A('tpc_v1_topk', False, 'top_k', False, estimator='last_gradient',
        reference='3PC v1 (idealized): y + top_k(g - y)'),
      A('fedavg_adam', True, 'identity', False, client='local_adam',
        absent='drop', weighting='samples', settings={'step_size': 1.0},
        reference='FedAvg with local Adam'),
  ):
    laq_jax.register_algorithm(preset, replace=True)


register()
