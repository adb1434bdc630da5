"""f*, the minimum of the convex objective, solved to high accuracy in float64.

    opt = solve(problem, data, l2)      # needs jax_enable_x64
    opt.value, opt.theta_P, opt.grad_norm, opt.gap_bound

Two phases, both compiled: L-BFGS (optax.lbfgs with its zoom line search)
until the gradient is small, then Newton steps with conjugate-gradient solves
on Hessian-vector products. The Newton phase needs no function values, so it
keeps converging where a line search on f can no longer see a decrease
(f changes by less than its rounding error, ~1e-16 * f). The objective is
the loop's own `laq_jax.objective` (sum over the worker shards, each with
lam / 2 ||theta||^2), so the f* found is the one the runs' losses approach.

With lam > 0 the objective is (M * lam)-strongly convex, which certifies the
answer: f(theta) - f* <= ||grad f(theta)||^2 / (2 M lam) (`gap_bound`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from laq_jax.problems import Problem
from laq_jax.round.loop import Data, flat_params, objective


class Optimum(NamedTuple):
  """The solver's answer.

  Attributes:
    value: f(theta_P), float.
    theta_P: the minimizer found (NumPy float64).
    grad_norm: ||grad f(theta_P)||_2.
    gap_bound: ||grad||^2 / (2 M lam), a bound on value - f* (inf if lam = 0).
    iterations: L-BFGS iterations + Newton iterations.
    method: how it was computed, in words.
  """
  value: float
  theta_P: np.ndarray
  grad_norm: float
  gap_bound: float
  iterations: int
  method: str


def _lbfgs(fun, theta0_P, tol, max_iters):
  opt = optax.lbfgs(memory_size=20)
  value_and_grad = optax.value_and_grad_from_state(fun)

  def step(carry):
    theta, state = carry
    value, grad = value_and_grad(theta, state=state)
    updates, state = opt.update(grad, state, theta, value=value, grad=grad,
                                value_fn=fun)
    return optax.apply_updates(theta, updates), state

  def keep_going(carry):
    _, state = carry
    count = optax.tree.get(state, 'count')
    grad_norm = optax.tree.norm(optax.tree.get(state, 'grad'))
    return (count == 0) | ((count < max_iters) & (grad_norm >= tol))

  theta, state = jax.lax.while_loop(keep_going, step,
                                    (theta0_P, opt.init(theta0_P)))
  return theta, optax.tree.get(state, 'count')


def _newton(fun, theta_P, tol, max_iters):
  grad_fn = jax.grad(fun)

  def hvp(theta, v):
    return jax.jvp(grad_fn, (theta,), (v,))[1]

  def step(carry):
    theta, norm, count, _ = carry
    grad = grad_fn(theta)
    # Inexact Newton: a loose CG solve still multiplies the gradient norm by
    # about the CG tolerance per step.
    direction, _ = jax.scipy.sparse.linalg.cg(
        lambda v: hvp(theta, v), -grad, tol=1e-4, maxiter=300)
    new = theta + direction
    new_norm = jnp.linalg.norm(grad_fn(new))
    better = new_norm < norm
    return (jnp.where(better, new, theta), jnp.where(better, new_norm, norm),
            count + 1, better)

  def keep_going(carry):
    _, norm, count, improved = carry
    # Stop at the tolerance, or once a step no longer shrinks the gradient
    # (it has reached its rounding floor).
    return (count < max_iters) & (norm >= tol) & improved

  norm0 = jnp.linalg.norm(grad_fn(theta_P))
  theta, _, count, _ = jax.lax.while_loop(
      keep_going, step, (theta_P, norm0, 0, jnp.bool_(True)))
  return theta, count


def solve(problem: Problem, data: Data, l2: float, *, tol: float = 1e-10,
          max_iters: int = 5000, newton_iters: int = 20,
          theta0_P=None) -> Optimum:
  """Minimizes f(theta) = sum_m f_m(theta) in float64.

  Args:
    problem: the (convex) model, e.g. logistic regression.
    data: the worker shards the runs use (cast to float64 here; arrays
      sharded over devices are gathered to the host first).
    l2: lam.
    tol: stop when ||grad f|| < tol (or when it stops shrinking).
    max_iters: cap on L-BFGS iterations.
    newton_iters: cap on Newton-CG polishing iterations.
    theta0_P: start (default: the problem's initialization with seed 0).

  Returns:
    An Optimum.

  Raises:
    ValueError: float64 is off (call
      `jax.config.update('jax_enable_x64', True)` at startup).
  """
  if not jax.config.jax_enable_x64:
    raise ValueError("f* needs float64: call jax.config.update("
                     "'jax_enable_x64', True) at startup, before building "
                     'any array')
  # On one device: shards laid over a mesh (workers_on='devices') come back
  # to the host first, since the solver is a plain single-device program.
  data = Data(jnp.asarray(np.asarray(data.x_MxNxD), jnp.float64),
              jnp.asarray(np.asarray(data.y_MxN)),
              count_M=(None if data.count_M is None
                       else jnp.asarray(np.asarray(data.count_M))))
  if theta0_P is None:
    theta0_P, _ = flat_params(problem, 0, jnp.float64)
  theta0_P = jnp.asarray(theta0_P, jnp.float64)
  l2 = jnp.asarray(l2, jnp.float64)
  theta, lbfgs_count, newton_count = _solve(problem, data, l2, theta0_P, tol,
                                            max_iters, newton_iters)
  value, grad = jax.value_and_grad(
      lambda th: objective(problem, th, data, l2))(theta)
  grad_norm = float(jnp.linalg.norm(grad))
  strong = data.x_MxNxD.shape[0] * float(l2)
  gap = grad_norm**2 / (2 * strong) if strong > 0 else float('inf')
  method = (f'L-BFGS (optax.lbfgs, {int(lbfgs_count)} iterations) then '
            f'Newton-CG ({int(newton_count)} iterations), float64; '
            f'||grad f|| = {grad_norm:.2e}, f - f* <= {gap:.1e}')
  return Optimum(float(value), np.asarray(theta), grad_norm, gap,
                 int(lbfgs_count) + int(newton_count), method)


@jax.jit(static_argnums=(0, 4, 5, 6))
def _solve(problem, data, l2, theta0_P, tol, max_iters, newton_iters):
  fun = lambda th: objective(problem, th, data, l2)
  # L-BFGS gets the bulk; the line search stalls near f's rounding floor,
  # so it stops at a looser gradient norm and Newton finishes.
  theta, lbfgs_count = _lbfgs(fun, theta0_P, max(tol, 1e-7), max_iters)
  theta, newton_count = _newton(fun, theta, tol, newton_iters)
  return theta, lbfgs_count, newton_count
