"""Logistic regression's full-batch loss and gradient, written for speed
(`laq_jax.problems.logistic_regression` uses them): the products over every
worker's rows as plain matrix products, MNIST's integer features read as
bfloat16 integers, the float32 factor split into three exact bf16 parts."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from laq_jax import collectives

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
