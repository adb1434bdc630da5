"""Training: one jitted `lax.scan` over iterations, workers vmapped inside.

    state, trace = run_chunk(spec, state, data, hyper, num_steps=T)

`spec` (shapes and the model) is static; `state`, `data` and `hyper` are
arrays, so a new hyperparameter value, a new seed or a later chunk of the same
length reuses the compiled program. Give `hyper` a leading grid axis G (see
`hyper.stack_hypers`) and the same call runs a whole sweep as one program: the
scan runs for each point in turn (`RunSpec.grid_axis='map'`) or vmapped over
G ('vmap'); the data are shared, not copied.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from laq_jax import collectives
from laq_jax import compressors
from laq_jax import randomness
from laq_jax import hyper as hyper_lib
from laq_jax import rules
from laq_jax import trigger as trigger_lib
from laq_jax.hyper import Hyper
from laq_jax.problems import Problem


GRID_AXES = ('map', 'vmap')
# The logged objective's default interval in minibatch runs (RunSpec's
# loss_every=0): the full objective costs a pass over every worker's whole
# shard, many times the minibatch gradient.
MINIBATCH_LOSS_EVERY = 10


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """The static part of a run: what changes the compiled program.

  Attributes:
    problem: the model.
    num_workers: M, over all devices.
    memory: D, how many past parameter steps the trigger remembers.
    stochastic: minibatch gradients (sgd, slaq, qsgd, ...) instead of full
      ones.
    batch_size: samples per worker per iteration when stochastic.
    compressors: the compressors the program may meet (`Hyper.compressor`
      picks one at run time); only these are compiled in (default: every
      registered one, `compressors.REGISTRY`).
    triggers: the same for the triggers (`Hyper.trigger`,
      `trigger.REGISTRY`).
    error_feedback: compile error feedback in (`Hyper.error_feedback`
      switches it per run).
    downlink: compile the quantized broadcast in (`Hyper.downlink_bits`);
      then the workers' gradients are taken at the broadcast parameters and
      the loss, at the server's, costs one more forward pass.
    rule: the communication rule the loop runs (`rules.Rule`).
    grid_axis: how a grid Hyper runs: 'map' (default) runs the points one
      after another inside the one program, each with the single run's
      arithmetic, so a point equals its run alone bit for bit and computes
      only the parts its own data choose; 'vmap' batches the points (wider
      matrix products, the faster choice on an accelerator), where a point
      agrees with its run alone to rounding only (the products' summation
      order changes with their width).
    loss_every: E, the trace's `loss` holds the full objective f(theta^k) at
      the iterations k with k % E == 0 and NaN at the others
      (`metrics.logged`); 0
      (the default) means 1 for full-batch runs, whose loss comes with the
      gradient, and MINIBATCH_LOSS_EVERY for minibatch runs, where the full
      objective is a pass over all the data that the step does not need and
      is computed only at the logged iterations. The logged values are
      those of a loss_every=1 run; the run itself does not change.
  """
  problem: Problem
  num_workers: int
  memory: int = 10
  stochastic: bool = False
  batch_size: int = 500
  compressors: tuple[str, ...] | None = None
  error_feedback: bool = True
  downlink: bool = True
  rule: rules.Rule = rules.LAQ
  grid_axis: str = 'map'
  loss_every: int = 0
  triggers: tuple[str, ...] | None = None

  @property
  def parts(self) -> rules.Parts:
    """The rule's parts this program compiles in."""
    return rules.Parts(self.compressors, self.error_feedback, self.downlink,
                       self.stochastic, self.triggers)

  @property
  def log_every(self) -> int:
    """E in effect: `loss_every`, or its default for the kind of run."""
    return self.loss_every or (MINIBATCH_LOSS_EVERY if self.stochastic
                               else 1)

  def __post_init__(self):
    if self.num_workers < 1:
      raise ValueError(f'num_workers={self.num_workers} is not allowed: it '
                       'must be an integer >= 1')
    if self.memory < 1:
      raise ValueError(f'memory={self.memory} is not allowed: D must be an '
                       'integer >= 1')
    if self.stochastic and self.batch_size < 1:
      raise ValueError(f'batch_size={self.batch_size} is not allowed: it must '
                       'be an integer >= 1')
    if (isinstance(self.loss_every, bool) or not isinstance(
        self.loss_every, (int, np.integer)) or self.loss_every < 0):
      raise ValueError(f'loss_every={self.loss_every!r} is not allowed: it '
                       'must be an integer >= 1, or 0 for the default (1 '
                       f'full batch, {MINIBATCH_LOSS_EVERY} minibatch)')
    if self.grid_axis not in GRID_AXES:
      raise ValueError(f'grid_axis={self.grid_axis!r} is not allowed; '
                       f'allowed: {", ".join(GRID_AXES)}')
    object.__setattr__(self, 'compressors', compressors.check_names(
        compressors.REGISTRY.names if self.compressors is None
        else self.compressors))
    object.__setattr__(self, 'triggers', trigger_lib.REGISTRY.check_names(
        trigger_lib.REGISTRY.names if self.triggers is None
        else self.triggers))

  def check_hyper(self, hyper: Hyper) -> None:
    """Raises ValueError if `hyper` uses a part not compiled in."""
    try:
      used = np.unique(np.asarray(hyper.compressor))
      used_triggers = np.unique(np.asarray(hyper.trigger))
      feedback = bool(np.any(np.asarray(hyper.error_feedback)))
      downlink = bool(np.any(np.asarray(hyper.downlink_bits) > 0))
    except jax.errors.TracerArrayConversionError:
      return  # traced: the caller checked the concrete values
    for kind, registry, indices in (
        ('compressors', compressors.REGISTRY, used),
        ('triggers', trigger_lib.REGISTRY, used_triggers)):
      names = [registry.names[int(i)] if 0 <= int(i) < len(registry)
               else f'#{int(i)}' for i in indices]
      missing = [n for n in names if n not in getattr(self, kind)]
      if missing:
        raise ValueError(f'hyper uses {kind[:-1]}(s) {", ".join(missing)} '
                         f'but RunSpec.{kind}={getattr(self, kind)}; list '
                         'them there')
    for used_it, name in ((feedback, 'error_feedback'),
                          (downlink, 'downlink')):
      if used_it and not getattr(self, name):
        raise ValueError(f'hyper uses {name} but RunSpec.{name}=False; '
                         'set it True')


class Data(NamedTuple):
  """Worker shards: x_MxNxD features, y_MxN integer labels.

  The other fields are optional copies of x in layouts a problem's
  `workers_value_and_grad` reads faster (`fast_layout` makes them):
  xt_MxDxN is x transposed; xq_MxNxD and xqt_MxDxN hold integer features as
  exact bfloat16 integers n with x = n * xq_scale (float32 runs).
  """
  x_MxNxD: jax.Array
  y_MxN: jax.Array
  xt_MxDxN: jax.Array | None = None
  xq_MxNxD: jax.Array | None = None
  xqt_MxDxN: jax.Array | None = None
  xq_scale: jax.Array | None = None

  @property
  def has_fast_layout(self) -> bool:
    return self.xt_MxDxN is not None or self.xq_MxNxD is not None


def fast_layout(data: Data, integer_scale: float | None = None) -> Data:
  """`data` with the layouts the fast full-batch gradient reads.

  Args:
    data: the shards (x float32 or float64).
    integer_scale: s when every feature is an integer n with |n| <= 256
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


class LoopState(NamedTuple):
  """Everything a run needs to continue: resume from it bit-identically.

  Attributes:
    step: k, iterations done (int32).
    theta_P: the parameters theta^k, flat.
    rule: the communication rule's state.
  """
  step: jax.Array
  theta_P: jax.Array
  rule: NamedTuple


class Trace(NamedTuple):
  """Per-step outputs of a chunk, leading axis T (then M for per-worker).

  `loss` is the full objective f(theta^k) = sum_m f_m(theta^k) at the
  server's parameters the step started from, at the logged iterations
  (`RunSpec.loss_every`, `metrics.logged`; NaN at the others);
  `grad_norm_sq` is ||sum_m g_m||^2 of the gradients the workers computed
  (at the parameters they hold: ||grad f(theta^k)||^2 in a full-batch run
  without a quantized broadcast; the minibatch gradients' sum in a
  stochastic one);
  `bits_down_M` the bits each worker received after the step.
  """
  loss: jax.Array
  grad_norm_sq: jax.Array
  bits_down_M: jax.Array
  sent_M: jax.Array
  bits_M: jax.Array
  innovation_M: jax.Array
  threshold_M: jax.Array
  error_M: jax.Array


def flat_params(problem: Problem, seed, dtype):
  """(theta_P, unravel) of the problem's initialization under `seed`."""
  params = problem.init(randomness.init_key(seed))
  params = jax.tree.map(lambda p: jnp.asarray(p, dtype), params)
  return ravel_pytree(params)


def _unravel(problem: Problem, dtype) -> Callable:
  template = jax.eval_shape(problem.init, jax.random.key(0))
  zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, dtype), template)
  return ravel_pytree(zeros)[1]


def worker_objective(problem: Problem, unravel: Callable, theta_P, x_NxD, y_N,
                     l2) -> jax.Array:
  """f_m(theta) = mean loss on the shard + (lam / 2) ||theta||^2."""
  return (problem.loss(unravel(theta_P), x_NxD, y_N)
          + 0.5 * l2 * jnp.sum(jnp.square(theta_P)))


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
  objective = lambda th, x, y: worker_objective(problem, unravel, th, x, y,
                                                l2)
  fast = problem.workers_value_and_grad is not None and data.has_fast_layout
  ravel = lambda tree: ravel_pytree(tree)[0]

  def value_and_grad(theta_P):
    if fast:
      return problem.workers_value_and_grad(theta_P, data, l2, unravel, ravel)
    return jax.vmap(jax.value_and_grad(objective), in_axes=(None, 0, 0))(
        theta_P, data.x_MxNxD, data.y_MxN)

  def values(theta_P):
    if fast and problem.workers_value is not None:
      return problem.workers_value(theta_P, data, l2, unravel)
    return jax.vmap(objective, in_axes=(None, 0, 0))(theta_P, data.x_MxNxD,
                                                     data.y_MxN)

  return value_and_grad, values


def init_state(spec: RunSpec, hyper: Hyper, dtype=jnp.float32,
               num_local_workers: int | None = None) -> LoopState:
  """Iteration 0: theta^0 from the problem's init under hyper.seed, zero memory.

  Works for a single Hyper or a grid (leading G axis on every field).
  """
  if jnp.ndim(hyper.seed) == 1:
    return jax.vmap(lambda h: init_state(spec, h, dtype, num_local_workers))(
        hyper)
  theta_P, _ = flat_params(spec.problem, hyper.seed, dtype)
  rule_state = spec.rule.init(theta_P, num_local_workers or spec.num_workers,
                              spec.memory, hyper)
  return LoopState(jnp.int32(0), theta_P, rule_state)


def make_step(spec: RunSpec, data: Data, hyper: Hyper, *,
              worker_ids_M: jax.Array | None = None,
              axis_name: str | None = None) -> Callable:
  """The scan body: LoopState -> (LoopState, Trace row).

  Args:
    spec: static run description.
    data: the (local) worker shards.
    hyper: scalar hyperparameters.
    worker_ids_M: global indices of the local workers (seeds their minibatch
      draws, so any device layout draws the same batches).
    axis_name: the mesh axis the workers are split over, under shard_map.
  """
  dtype = data.x_MxNxD.dtype
  hyper = hyper_lib.cast(hyper, dtype)
  problem = spec.problem
  unravel = _unravel(problem, dtype)
  num_local = data.x_MxNxD.shape[0]
  shard_size = data.x_MxNxD.shape[1]
  if worker_ids_M is None:
    worker_ids_M = jnp.arange(num_local, dtype=jnp.int32)

  objective = lambda th, x, y: worker_objective(problem, unravel, th, x, y,
                                                hyper.l2)
  value_and_grad = jax.vmap(jax.value_and_grad(objective),
                            in_axes=(None, 0, 0))
  full_value_and_grad, full_values = full_batch(problem, data, hyper.l2)

  num_blocks = max(shard_size // spec.batch_size, 1)

  def minibatch(step, worker, x_NxD, y_N):
    key = randomness.batch_key(hyper.seed, step, worker)
    idx = jax.random.choice(key, shard_size, (spec.batch_size,), replace=False)
    # The authors' scripts: one of the shard's fixed contiguous blocks of
    # batch_size (tf.data's batch, then shuffle().take(1)), drawn uniformly.
    block = jax.random.randint(key, (), 0, num_blocks)
    idx = jnp.where(hyper.authors_code,
                    block * spec.batch_size + jnp.arange(spec.batch_size),
                    idx)
    return x_NxD[idx], y_N[idx]

  every = spec.log_every

  def body(state: LoopState, _):
    theta_P = state.theta_P
    # The workers compute at the parameters they hold: theta itself, or its
    # quantized broadcast (compiled in only when a point quantizes it).
    at_P = state.rule.broadcast_P if spec.downlink else theta_P
    if axis_name is not None:
      # Under shard_map theta is replicated; differentiating at it directly
      # would psum the gradients over devices (the transpose of the implicit
      # broadcast). Each worker needs its own gradient: mark theta varying.
      theta_P = jax.lax.pcast(theta_P, axis_name, to='varying')
      at_P = jax.lax.pcast(at_P, axis_name, to='varying')
    if spec.stochastic:
      xb, yb = jax.vmap(minibatch, in_axes=(None, 0, 0, 0))(
          state.step, worker_ids_M, data.x_MxNxD, data.y_MxN)
      _, grads_MxP = value_and_grad(at_P, xb, yb)
      if every == 1:
        losses_M = full_values(theta_P)
      else:  # the full objective at the logged iterations only
        def not_logged(_):
          nan_M = jnp.full((num_local,), jnp.nan, dtype)
          # Under shard_map the logged branch is per worker: so is this one.
          return (nan_M if axis_name is None else
                  jax.lax.pcast(nan_M, axis_name, to='varying'))
        losses_M = jax.lax.cond(state.step % every == 0, full_values,
                                not_logged, theta_P)
      loss = collectives.sum_workers(losses_M, axis_name)
    else:
      losses_M, grads_MxP = full_value_and_grad(at_P)
      if spec.downlink:  # the loss at the server's theta, not the broadcast
        # (a conditional: a run with a full-precision broadcast, where the
        # two agree, skips the extra forward pass)
        losses_M = jax.lax.cond(
            hyper.downlink_bits > 0,
            lambda: full_values(theta_P),
            lambda: losses_M)
      # Added left to right (not a reduce, whose order XLA picks per
      # fusion), so a program with other parts compiled in sums alike.
      loss = collectives.sum_workers(losses_M, axis_name)
      if every > 1:
        loss = jnp.where(state.step % every == 0, loss,
                         jnp.asarray(jnp.nan, loss.dtype))
    grad_norm_sq = jnp.sum(jnp.square(collectives.sum_workers(grads_MxP,
                                                              axis_name)))
    theta_P, rule_state, stats = spec.rule.step(
        grads_MxP, state.rule, state.theta_P, hyper, step_count=state.step,
        worker_ids_M=worker_ids_M, num_workers=spec.num_workers,
        axis_name=axis_name, parts=spec.parts)
    row = Trace(loss, grad_norm_sq, stats.bits_down_M, stats.sent_M,
                stats.bits_M, stats.innovation_M, stats.threshold_M,
                stats.error_M)
    return LoopState(state.step + 1, theta_P, rule_state), row

  return body


def scan_chunk(spec: RunSpec, state: LoopState, data: Data, hyper: Hyper,
               num_steps: int, *, worker_ids_M: jax.Array | None = None,
               axis_name: str | None = None):
  """The traced chunk: `num_steps` scan steps, for each point of a grid Hyper.

  Shared by `run_chunk` (all workers here) and `laq_jax.sharding` (inside
  shard_map, with the local workers' global ids and the mesh axis).
  """
  def chunk(state, hyper):
    body = make_step(spec, data, hyper, worker_ids_M=worker_ids_M,
                     axis_name=axis_name)
    return jax.lax.scan(body, state, None, length=num_steps)

  if jnp.ndim(hyper.step_size) == 1:  # a grid; the data are shared
    if spec.grid_axis == 'vmap':
      return jax.vmap(chunk)(state, hyper)
    return jax.lax.map(lambda point: chunk(*point), (state, hyper))
  return chunk(state, hyper)


run_chunk = jax.jit(scan_chunk, static_argnums=(0, 4))
run_chunk.__doc__ = """Runs `num_steps` iterations from `state` as one compiled program.

Args:
  spec: static RunSpec.
  state: LoopState (leading G axis for a grid).
  data: Data shards, shared by every grid point.
  hyper: Hyper of scalars, or of [G] arrays for a sweep.
  num_steps: T, the chunk length (static).

Returns:
  (state after the chunk, Trace with leading [T] (or [G, T]) axes).
"""


def run(spec: RunSpec, data: Data, hyper: Hyper, num_steps: int, *,
        chunk_size: int | None = None, state: LoopState | None = None,
        callback: Callable[[LoopState, Trace], None] | None = None,
        run_chunk_fn: Callable | None = None
        ) -> tuple[LoopState, Trace]:
  """Runs `num_steps` iterations in chunks of one compiled program.

  Args:
    spec, data, hyper: as for `run_chunk`.
    num_steps: total iterations to run from `state`.
    chunk_size: iterations per compiled call (default: all at once). A
      shorter last chunk compiles once more.
    state: where to start (default: `init_state`).
    callback: called after each chunk with (state, that chunk's Trace) as
      NumPy, for progress lines, evaluation and checkpoints.
    run_chunk_fn: replaces `run_chunk` (e.g. the sharded version).

  Returns:
    (final LoopState, Trace of all steps as NumPy arrays, time on axis -1 for
    scalars / -2 for per-worker arrays, after any grid axis).
  """
  run_chunk_fn = run_chunk_fn or run_chunk
  spec.check_hyper(hyper)
  if state is None:
    state = init_state(spec, hyper, data.x_MxNxD.dtype)
  chunk_size = chunk_size or num_steps
  grid = jnp.ndim(hyper.step_size) == 1
  time_axis = 1 if grid else 0
  parts = []
  done = 0
  while done < num_steps:
    length = min(chunk_size, num_steps - done)
    state, trace = run_chunk_fn(spec, state, data, hyper, length)
    trace = jax.tree.map(np.asarray, trace)
    parts.append(trace)
    done += length
    if callback is not None:
      callback(state, trace)
  if not parts:  # zero steps: an empty Trace of the right shapes, no compile
    shapes = jax.eval_shape(
        lambda s, d, h: run_chunk_fn(spec, s, d, h, 1)[1], state, data, hyper)
    trace = jax.tree.map(
        lambda a: np.zeros(a.shape[:time_axis] + (0,) + a.shape[time_axis + 1:],
                           a.dtype), shapes)
    return state, trace
  trace = jax.tree.map(lambda *xs: np.concatenate(xs, axis=time_axis), *parts)
  return state, trace


def accuracy(problem: Problem, theta_P, x_NxD, y_N, *,
             batch: int = 10_000) -> float:
  """Classification accuracy of the flat parameters on (x, y)."""
  return float(np.mean(np.asarray(predict(problem, theta_P, x_NxD, batch)) ==
                       np.asarray(y_N)))


def predict(problem: Problem, theta_P, x_NxD, batch: int = 10_000):
  """Predicted labels, evaluated in batches (vmapped over a grid of theta)."""
  theta_P = jnp.asarray(theta_P)
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
  values = jax.vmap(lambda x, y: worker_objective(problem, unravel, theta_P, x,
                                                  y, l2))(data.x_MxNxD,
                                                          data.y_MxN)
  return jnp.sum(values)
