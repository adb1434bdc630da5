"""The communication rule: compress, decide, aggregate, step. One for all.

Every algorithm is this one rule with different data in `Hyper`: which
compressor (`compressors.COMPRESSORS`), whether it compresses the innovation
g - Qhat (LAQ) or the gradient itself (QSGD, SSGD), whether workers may skip
(the LAG/LAQ trigger); the loop feeds full or minibatch gradients. So one rule,
written once, serves every algorithm and every point of a sweep.

Arrays are flat: a worker's gradient is a vector of all P parameters, because
the quantizer's radius and the trigger's norms are taken over the whole
parameter vector (Sun et al. 2019). Every per-worker array has a leading worker
axis M. Under `jax.shard_map` the worker axis is split over devices; pass
`axis_name` and the aggregate becomes a `psum` over it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from laq_jax import collectives
from laq_jax import compressors
from laq_jax import randomness
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
    error_M: e = ||Q - g||^2 of this step's compression (0 at full
      precision).
  """
  sent_M: jax.Array
  bits_M: jax.Array
  innovation_M: jax.Array
  threshold_M: jax.Array
  error_M: jax.Array


# A worker that has never uploaded counts as infinitely stale, so every worker
# uploads at k = 0 whatever the trigger says: the paper's Algorithm 1 (and
# LAG's) starts the server from every worker's initial upload, "Initialize
# theta^1, {Q_m(theta_hat_m^0)}". Starting the clocks at 0 instead (the
# authors' scripts, `Hyper.authors_code`) lets a worker skip at k = 0 when
# c_e * e exceeds ||Q||^2 (at b = 4 that silences the whole MLP for tbar
# steps). Any int32 tbar is <= this, and the forced upload resets the clock
# before it could overflow.
NEVER_UPLOADED = 2**31 - 1


def init(num_params: int, num_workers: int, memory: int,
         dtype=jnp.float32, authors_code=False) -> RuleState:
  """All-zero state for `num_workers` workers (the local count under shard_map).

  With `authors_code` the clocks start at 0, as in the authors' scripts, and
  the trigger alone decides at k = 0; otherwise at NEVER_UPLOADED.
  """
  clock = jnp.where(authors_code, 0, NEVER_UPLOADED).astype(jnp.int32)
  return RuleState(
      last_upload_MxP=jnp.zeros((num_workers, num_params), dtype),
      last_error_M=jnp.zeros((num_workers,), dtype),
      clock_M=jnp.full((num_workers,), clock, jnp.int32),
      aggregate_P=jnp.zeros((num_params,), dtype),
      history_D=jnp.zeros((memory,), dtype),
  )


def _worker(grad_P, last_upload_P, last_error, clock, key, shared_threshold,
            hyper: Hyper, compressor_names):
  """One worker: compress, decide. Returns (new Qhat, ehat, clock, delta, stats)."""
  ref_P = jnp.where(hyper.innovation, last_upload_P,
                    jnp.zeros_like(last_upload_P))
  out = compressors.compress(grad_P, ref_P, key, hyper, compressor_names)
  value_P = out.value_P
  error = jnp.sum(jnp.square(value_P - grad_P))
  innovation = jnp.sum(jnp.square(value_P - last_upload_P))
  rhs = trigger_lib.threshold(shared_threshold, error, last_error,
                              hyper.err_weight, hyper.threshold_offset)
  sent = trigger_lib.should_upload(innovation, rhs, clock, hyper.max_staleness,
                                   hyper.lazy)
  delta_P = jnp.where(sent, value_P - last_upload_P, jnp.zeros_like(value_P))
  new_upload_P = jnp.where(sent, value_P, last_upload_P)
  new_error = jnp.where(sent, error, last_error)
  new_clock = jnp.where(sent, jnp.zeros_like(clock), clock + 1)
  bits = jnp.where(sent, out.bits, jnp.int32(0))
  stats = StepStats(sent, bits, innovation, rhs, error)
  return new_upload_P, new_error, new_clock, delta_P, stats


def step(grads_MxP: jax.Array, state: RuleState, theta_P: jax.Array,
         hyper: Hyper, *, step_count=0, worker_ids_M=None,
         num_workers: int | None = None, axis_name: str | None = None,
         compressor_names=compressors.COMPRESSORS
         ) -> tuple[jax.Array, RuleState, StepStats]:
  """One iteration k of the family (docs/algorithm.md, "One iteration").

  Args:
    grads_MxP: each (local) worker's gradient at theta^k.
    state: the rule state at iteration k.
    theta_P: the parameters theta^k (flat).
    hyper: scalar hyperparameters of this run.
    step_count: k (seeds the random compressors; the authors' history
      weights).
    worker_ids_M: global indices of the local workers (default 0..M-1):
      with the step and the seed they key the random compressors.
    num_workers: M over all devices (defaults to the local count).
    axis_name: mesh axis the workers are split over (under shard_map), or None.
    compressor_names: the compressors this program may meet (static).

  Returns:
    (theta^{k+1}, state^{k+1}, per-worker StepStats).
  """
  num_local = grads_MxP.shape[0]
  num_workers = num_workers or num_local
  if worker_ids_M is None:
    worker_ids_M = jnp.arange(num_local, dtype=jnp.int32)
  shared = trigger_lib.history_threshold(state.history_D, hyper.step_size,
                                         hyper.xi, num_workers, step_count,
                                         hyper.authors_code)
  keys = jax.vmap(lambda w: randomness.compress_key(hyper.seed, step_count,
                                                    w))(worker_ids_M)
  worker = jax.vmap(_worker, in_axes=(0, 0, 0, 0, 0, None, None, None))
  new_upload, new_error, new_clock, delta_MxP, stats = worker(
      grads_MxP, state.last_upload_MxP, state.last_error_M, state.clock_M,
      keys, shared, hyper, compressor_names)
  aggregate_P = state.aggregate_P + collectives.sum_workers(delta_MxP,
                                                            axis_name)
  new_theta_P = theta_P - hyper.step_size * aggregate_P
  moved = jnp.sum(jnp.square(new_theta_P - theta_P))
  history = jnp.concatenate([moved[None], state.history_D[:-1]])
  new_state = RuleState(new_upload, new_error, new_clock, aggregate_P, history)
  return new_theta_P, new_state, stats


class Rule(NamedTuple):
  """A communication rule as an optax-style pair of pure functions.

  `laq_jax.RunSpec.rule` holds one and the loop calls it, so another rule
  plugs in without editing the loop. Its state is a NamedTuple whose
  per-worker fields carry a leading worker axis and a name ending in `_M...`
  (`last_upload_MxP`, `clock_M`): under shard_map those are split over the
  devices, the others replicated.

  Attributes:
    init: (num_params, num_workers, memory, dtype, hyper) -> state, for the
      local workers.
    step: (grads_MxP, state, theta_P, hyper, *, step_count, worker_ids_M,
      num_workers, axis_name, compressor_names) -> (theta^{k+1}, state,
      StepStats).
  """
  init: Callable[..., NamedTuple]
  step: Callable[..., tuple[jax.Array, NamedTuple, StepStats]]


def _init(num_params, num_workers, memory, dtype, hyper) -> RuleState:
  return init(num_params, num_workers, memory, dtype, hyper.authors_code)


# The LAQ family: every preset of `laq_jax.hyper.ALGORITHMS`.
LAQ = Rule(init=_init, step=step)
