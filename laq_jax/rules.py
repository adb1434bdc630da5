"""The communication rule: compress, decide, aggregate, step. One for all eight.

gd/qgd/lag/laq (and their stochastic twins) differ only in the `quantize` and
`lazy` switches of `Hyper` (and in the gradient the loop feeds in), so one
rule, written once, serves every algorithm and every point of a sweep.

Arrays are flat: a worker's gradient is a vector of all P parameters, because
the quantizer's radius and the trigger's norms are taken over the whole
parameter vector (Sun et al. 2019). Every per-worker array has a leading worker
axis M. Under `jax.shard_map` the worker axis is split over devices; pass
`axis_name` and the aggregate becomes a `psum` over it.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from laq_jax import quantize as quantize_lib
from laq_jax import trigger as trigger_lib
from laq_jax.hyper import Hyper


class RuleState(NamedTuple):
  """Server and worker memory.

  Attributes:
    last_upload_MxP: Qhat_m, each worker's last upload (0 at start).
    last_error_M: ehat_m, ||eps||^2 of that upload (0 at start).
    clock_M: t_m, consecutive skips so far (int32); NEVER_UPLOADED before a
      worker's first upload.
    aggregate_P: sum_m Qhat_m, what the server steps with (all workers).
    history_D: h_d = ||theta^{k+1-d} - theta^{k-d}||^2, d = 1..D ([0] newest).
  """
  last_upload_MxP: jax.Array
  last_error_M: jax.Array
  clock_M: jax.Array
  aggregate_P: jax.Array
  history_D: jax.Array


class StepStats(NamedTuple):
  """Per-step, per-worker statistics: the one logging surface.

  Attributes:
    sent_M: whether each worker uploaded.
    bits_M: bits each worker uploaded (0 on a skip), int32.
    innovation_M: ||Q - Qhat||^2, the trigger's left-hand side.
    threshold_M: the trigger's right-hand side.
    error_M: e = ||Q - g||^2 of this step's compression (0 unquantized).
    radius_M: R = ||g - Qhat||_inf.
  """
  sent_M: jax.Array
  bits_M: jax.Array
  innovation_M: jax.Array
  threshold_M: jax.Array
  error_M: jax.Array
  radius_M: jax.Array


# A worker that has never uploaded counts as infinitely stale, so every worker
# uploads at k = 0 whatever the trigger says: the paper's Algorithm 1 (and
# LAG's) starts the server from every worker's initial upload, "Initialize
# theta^1, {Q_m(theta_hat_m^0)}". Reading shared/laq-spec.md's "t_m = 0 at
# start" literally instead lets a worker skip at k = 0 when c_e * e exceeds
# ||Q||^2, which silences the whole MLP for tbar steps. Any int32 tbar is
# <= this, and the forced upload resets the clock before it could overflow.
NEVER_UPLOADED = 2**31 - 1


class Rule(NamedTuple):
  """An optax-style pair of pure functions."""
  init: Callable[..., RuleState]
  step: Callable[..., tuple[jax.Array, RuleState, StepStats]]


def init(num_params: int, num_workers: int, memory: int,
         dtype=jnp.float32) -> RuleState:
  """All-zero state for `num_workers` workers (the local count under shard_map)."""
  return RuleState(
      last_upload_MxP=jnp.zeros((num_workers, num_params), dtype),
      last_error_M=jnp.zeros((num_workers,), dtype),
      clock_M=jnp.full((num_workers,), NEVER_UPLOADED, jnp.int32),
      aggregate_P=jnp.zeros((num_params,), dtype),
      history_D=jnp.zeros((memory,), dtype),
  )


def _worker(grad_P, last_upload_P, last_error, clock, shared_threshold,
            hyper: Hyper):
  """One worker: compress, decide. Returns (new Qhat, ehat, clock, delta, stats)."""
  num_params = grad_P.shape[-1]
  quantized = quantize_lib.quantize_innovation(grad_P, last_upload_P,
                                               hyper.bits)
  value_P = jnp.where(hyper.quantize, quantized.value_P, grad_P)
  error = jnp.where(hyper.quantize, quantized.error_sq,
                    jnp.zeros_like(quantized.error_sq))
  innovation = jnp.sum(jnp.square(value_P - last_upload_P))
  rhs = trigger_lib.threshold(shared_threshold, error, last_error,
                              hyper.err_weight, hyper.threshold_offset)
  sent = trigger_lib.should_upload(innovation, rhs, clock, hyper.max_staleness,
                                   hyper.lazy)
  delta_P = jnp.where(sent, value_P - last_upload_P, jnp.zeros_like(value_P))
  new_upload_P = jnp.where(sent, value_P, last_upload_P)
  new_error = jnp.where(sent, error, last_error)
  new_clock = jnp.where(sent, jnp.zeros_like(clock), clock + 1)
  bits = jnp.where(sent,
                   quantize_lib.upload_bits(num_params, hyper.bits,
                                            hyper.quantize),
                   jnp.int32(0))
  stats = StepStats(sent, bits, innovation, rhs, error, quantized.radius)
  return new_upload_P, new_error, new_clock, delta_P, stats


def step(grads_MxP: jax.Array, state: RuleState, theta_P: jax.Array,
         hyper: Hyper, *, num_workers: int | None = None,
         axis_name: str | None = None
         ) -> tuple[jax.Array, RuleState, StepStats]:
  """One iteration k of the LAQ family (see shared laq-spec, "One iteration").

  Args:
    grads_MxP: each (local) worker's gradient at theta^k.
    state: the rule state at iteration k.
    theta_P: the parameters theta^k (flat).
    hyper: scalar hyperparameters of this run.
    num_workers: M over all devices (defaults to the local count).
    axis_name: mesh axis the workers are split over (under shard_map), or None.

  Returns:
    (theta^{k+1}, state^{k+1}, per-worker StepStats).
  """
  num_workers = num_workers or grads_MxP.shape[0]
  shared = trigger_lib.history_threshold(state.history_D, hyper.step_size,
                                         hyper.xi, num_workers)
  worker = jax.vmap(_worker, in_axes=(0, 0, 0, 0, None, None))
  new_upload, new_error, new_clock, delta_MxP, stats = worker(
      grads_MxP, state.last_upload_MxP, state.last_error_M, state.clock_M,
      shared, hyper)
  # M vector adds, not jnp.sum(axis=0): on the CPU backend (jaxlib 0.10.2) the
  # reduce over the leading axis of a [10, 159010] array took 13-30 ms against
  # 0.1 ms for the adds (benchmarks/run.py, docs/benchmarks.md).
  delta_P = functools.reduce(
      jnp.add, [delta_MxP[m] for m in range(delta_MxP.shape[0])])
  if axis_name is not None:
    delta_P = jax.lax.psum(delta_P, axis_name)
  aggregate_P = state.aggregate_P + delta_P
  new_theta_P = theta_P - hyper.step_size * aggregate_P
  moved = jnp.sum(jnp.square(new_theta_P - theta_P))
  history = jnp.concatenate([moved[None], state.history_D[:-1]])
  new_state = RuleState(new_upload, new_error, new_clock, aggregate_P, history)
  return new_theta_P, new_state, stats


RULE = Rule(init=init, step=step)
