"""The problem on the workers' data: shards, layouts, objectives, evaluation.

`Data` holds the worker shards (and faster layouts of them); `full_batch`
gives every worker's full-shard objective and gradient, `worker_objective`
one worker's f_m; `objective`, `accuracy` and `predict` evaluate flat
parameters. `laq_jax.loop` builds its scan body from these.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from laq_jax import randomness
from laq_jax.problems import Problem


class Data(NamedTuple):
  """Worker shards: x_MxNxD features, y_MxN integer labels.

  The other fields are optional copies of x in layouts a problem's
  `workers_value_and_grad` reads faster (`fast_layout` makes them):
  xt_MxDxN is x transposed; xq_MxNxD and xqt_MxDxN hold integer features as
  exact bfloat16 integers n with x = n * xq_scale (float32 runs).

  count_M (int32), when set, is each client's own samples: clients of
  unequal sizes are padded to N, rows count_M[m]..N-1 of client m are
  padding, and f_m is the mean over its first count_M[m] rows only
  (`laq_jax.data.split_clients`). None: every row is a sample.
  """
  x_MxNxD: jax.Array
  y_MxN: jax.Array
  xt_MxDxN: jax.Array | None = None
  xq_MxNxD: jax.Array | None = None
  xqt_MxDxN: jax.Array | None = None
  xq_scale: jax.Array | None = None
  count_M: jax.Array | None = None

  # The fields with a leading worker axis (the scale is replicated).
  PER_WORKER = ('x_MxNxD', 'y_MxN', 'xt_MxDxN', 'xq_MxNxD', 'xqt_MxDxN',
                'count_M')

  @property
  def has_fast_layout(self) -> bool:
    return self.xt_MxDxN is not None or self.xq_MxNxD is not None

  def sample_counts(self) -> np.ndarray:
    """Each worker's samples as NumPy int [M] (N each without count_M)."""
    if self.count_M is None:
      return np.full(self.x_MxNxD.shape[0], self.x_MxNxD.shape[1], np.int64)
    return np.asarray(self.count_M).astype(np.int64)


def fast_layout(data: Data, integer_scale: float | None = None) -> Data:
  """`data` with the layouts the fast full-batch gradient reads.

  Args:
    data: the shards (x float32 or float64).
    integer_scale: s when every feature is an integer n with `|n| <= 256`
      times s (MNIST's pixels: s = 1/255). A float32 run then reads the
      integers as exact bfloat16 values (`xq_*`); otherwise (or in float64)
      x is also kept transposed (`xt_MxDxN`).

  Returns:
    A Data with the same x and y and the extra fields (the memory of x once
    more, or half of it for the bfloat16 copies).

  Raises:
    ValueError: `integer_scale` given, but some feature is not such an
      integer times it.
  """
  x = data.x_MxNxD
  if integer_scale is not None and x.dtype == jnp.float32:
    n = np.asarray(x, np.float64) / integer_scale
    rounded = np.rint(n)
    off = np.max(np.abs(n - rounded), initial=0)
    largest = np.max(np.abs(rounded), initial=0)
    if off > 1e-3 or largest > 256:
      raise ValueError(
          f'integer_scale={integer_scale}: the features are not integers '
          '|n| <= 256 times it (x / integer_scale is '
          + (f'off an integer by up to {off:.3g}' if off > 1e-3 else
             f'as large as {largest:.0f} in magnitude')
          + '); pass integer_scale=None')
    xq = jnp.asarray(rounded, jnp.bfloat16)
    return data._replace(xq_MxNxD=xq, xqt_MxDxN=jnp.swapaxes(xq, 1, 2),
                         xq_scale=jnp.asarray(integer_scale, jnp.float32))
  return data._replace(xt_MxDxN=jnp.swapaxes(jnp.asarray(x), 1, 2))


def flat_params(problem: Problem, seed, dtype):
  """(theta_P, unravel) of the problem's initialization under `seed`."""
  params = problem.init(randomness.init_key(seed))
  params = jax.tree.map(lambda p: jnp.asarray(p, dtype), params)
  return ravel_pytree(params)


def flat_range(problem: Problem, path: str) -> tuple[int, int]:
  """[lo, hi): where the parameter at `path` lies in the flat theta_P.

  `path` names one leaf of the model's parameters by its keys joined with
  '/', as `jax.tree_util.keystr(..., simple=True, separator='/')` writes
  them (e.g. 'conv1/bias'); the flat order is `ravel_pytree`'s
  (`flat_params`). Raises ValueError naming the leaves there are."""
  template = jax.eval_shape(problem.init, jax.random.key(0))
  lo, names = 0, []
  for key_path, leaf in jax.tree_util.tree_flatten_with_path(template)[0]:
    name = jax.tree_util.keystr(key_path, simple=True, separator='/')
    size = math.prod(leaf.shape)
    if name == path:
      return lo, lo + size
    names.append(name)
    lo += size
  raise ValueError(f'path {path!r} is not a parameter of {problem.name}: it '
                   f'must be one of {", ".join(names)}')


def _unravel(problem: Problem, dtype) -> Callable:
  template = jax.eval_shape(problem.init, jax.random.key(0))
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, dtype), template)
  return ravel_pytree(zeros)[1]


def worker_objective(problem: Problem, unravel: Callable, theta_P, x_NxD, y_N,
                     l2, count=None) -> jax.Array:
  """f_m(theta) = mean loss on the shard + (lam / 2) ||theta||^2 (or the
  problem's own regularizer).

  With `count`, the mean is over the first `count` rows only (the rest are
  padding)."""
  if count is None:
    loss = problem.loss(unravel(theta_P), x_NxD, y_N)
  else:
    losses_N = problem.sample_losses(unravel(theta_P), x_NxD, y_N)
    valid_N = jnp.arange(x_NxD.shape[0]) < count
    loss = (jnp.sum(jnp.where(valid_N, losses_N, 0))
            / jnp.asarray(count, losses_N.dtype))
  return loss + problem.regularize(theta_P, l2)


# A model whose forward pass costs more than this per sample (the CNNs,
# ResNet-20, the LSTM; not logistic regression or the MLP) has its
# whole-shard objectives computed one worker at a time (`lax.map`), and
# its predictions in smaller batches: vmapped over every worker's shard, a
# convolution's activations alone are gigabytes.
HEAVY_FLOPS_PER_SAMPLE = 2e6


def heavy(problem: Problem) -> bool:
  return (problem.loss_flops_per_sample or 0) > HEAVY_FLOPS_PER_SAMPLE


def _vmap_objective(objective_fn, theta_P, data: Data, sequential=False):
  """objective_fn(theta, x, y[, count]) over every worker (one at a time
  with `sequential`)."""
  if sequential:
    if data.count_M is None:
      return jax.lax.map(lambda xy: objective_fn(theta_P, *xy),
                         (data.x_MxNxD, data.y_MxN))
    return jax.lax.map(lambda xyc: objective_fn(theta_P, *xyc),
                       (data.x_MxNxD, data.y_MxN, data.count_M))
  if data.count_M is None:
    return jax.vmap(objective_fn, in_axes=(None, 0, 0))(
        theta_P, data.x_MxNxD, data.y_MxN)
  return jax.vmap(objective_fn, in_axes=(None, 0, 0, 0))(
      theta_P, data.x_MxNxD, data.y_MxN, data.count_M)


def full_batch(problem: Problem, data: Data, l2) -> tuple[Callable,
                                                          Callable]:
  """Every worker's objective on its whole shard, and its gradient.

  Returns:
    (value_and_grad, values): theta_P -> (f_M, grads_MxP) and theta_P ->
    f_M. The problem's `workers_value_and_grad` when the data carry
    `fast_layout`'s layouts, else autodiff of `worker_objective` vmapped
    over the workers.
  """
  dtype = data.x_MxNxD.dtype
  unravel = _unravel(problem, dtype)
  objective = lambda th, x, y, count=None: worker_objective(
      problem, unravel, th, x, y, l2, count)
  fast = problem.workers_value_and_grad is not None and data.has_fast_layout
  ravel = lambda tree: ravel_pytree(tree)[0]

  def value_and_grad(theta_P):
    if fast:
      return problem.workers_value_and_grad(theta_P, data, l2, unravel, ravel)
    return _vmap_objective(jax.value_and_grad(objective), theta_P, data,
                           heavy(problem))

  def values(theta_P):
    if fast and problem.workers_value is not None:
      return problem.workers_value(theta_P, data, l2, unravel)
    return _vmap_objective(objective, theta_P, data, heavy(problem))

  return value_and_grad, values


def accuracy(problem: Problem, theta_P, x_NxD, y_N, *,
             batch: int = 10_000) -> float:
  """Classification accuracy of the flat parameters on (x, y); NaN for a
  problem that classifies nothing (`Problem.classifier`)."""
  if not problem.classifier:
    return float('nan')
  return float(np.mean(np.asarray(predict(problem, theta_P, x_NxD, batch)) ==
                       np.asarray(y_N)))


def predict(problem: Problem, theta_P, x_NxD, batch: int = 10_000):
  """Predicted labels, evaluated in batches (vmapped over a grid of theta)."""
  theta_P = jnp.asarray(theta_P)
  if heavy(problem):  # (about 2e10 FLOPs a call over the grid of theta)
    grid = theta_P.shape[0] if theta_P.ndim == 2 else 1
    batch = int(max(16, min(batch, 2e10 // (problem.loss_flops_per_sample
                                             * grid))))
  out = []
  for start in range(0, x_NxD.shape[0], batch):
    out.append(_predict(problem, theta_P,
                        jnp.asarray(x_NxD[start:start + batch], theta_P.dtype)))
  return jnp.concatenate(out, axis=-1)


@jax.jit(static_argnums=0)
def _predict(problem, theta_P, x_NxD):
  def one(theta):
    unravel = _unravel(problem, theta.dtype)
    return jnp.argmax(problem.apply(unravel(theta), x_NxD), -1)
  if theta_P.ndim == 2:
    return jax.vmap(one)(theta_P)
  return one(theta_P)


@jax.jit(static_argnums=0)
def objective(problem: Problem, theta_P, data: Data, l2) -> jax.Array:
  """f(theta) = sum_m f_m(theta) on the full shards (the convex target)."""
  unravel = _unravel(problem, theta_P.dtype)
  values = _vmap_objective(
      lambda th, x, y, count=None: worker_objective(problem, unravel, th, x,
                                                    y, l2, count),
      theta_P, data, heavy(problem))
  return jnp.sum(values)
