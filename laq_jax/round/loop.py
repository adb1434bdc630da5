"""Training: one jitted `lax.scan` over iterations, workers vmapped inside.

    state, trace = run_chunk(spec, state, data, hyper, num_steps=T)

`spec` (shapes and the model) is static; `state`, `data` and `hyper` are
arrays, so a new hyperparameter value, a new seed or a later chunk of the same
length reuses the compiled program. Give `hyper` a leading grid axis G (see
`hyper.stack_hypers`) and the same call runs a whole sweep as one program: the
scan runs for each point in turn (`RunSpec.grid_axis='map'`), or one scan
steps every point vmapped ('vmap'; 'auto' picks, `spec.resolve_grid_axis`);
the data are shared, not copied (a vmapped grid reads them once per
iteration for all points).
"""

from __future__ import annotations

import collections
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import collectives
from laq_jax import network as network_lib
from laq_jax.problems.objective import (Data, _unravel, accuracy,  # noqa: F401
                                        fast_layout, flat_params, flat_range, full_batch,
                                        objective, predict, worker_objective)
from laq_jax.round import hyper as hyper_lib
from laq_jax.round import participation as participation_lib
from laq_jax.round import rules
from laq_jax.round import spec as spec_lib
from laq_jax.round.hyper import Hyper
from laq_jax.round.spec import (GRID_AXES, MINIBATCH_LOSS_EVERY,  # noqa: F401
                                RunSpec)
# The round's stages on the workers' side (laq_jax.stages), served here as
# they always were.
from laq_jax.round.stages import (LOGGED_OBJECTIVE, Setting, _logged_loss,  # noqa: F401
                                  _objective_m,
                                  _shard_sample, client_batch_rows,
                                  draw_minibatch, flops_per_worker_step,
                                  full_batch_gradients, gather_setting,
                                  gradient_part, local_gradients,
                                  minibatch_gradients, participation_stage,
                                  round_fits, round_rows, round_time_stage,
                                  worker_flops)


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


TRACE_HEAD = ('loss', 'grad_norm_sq')
# The round's simulated time on `Hyper.network`, after the rule's stats.
TRACE_TIME = ('time_s', 'slowest', 'slowdown_M', 'participants_M')


@functools.cache
def trace_type(stats_type: type) -> type:
  """The Trace of a rule whose step returns `stats_type`: the loop's loss
  and gradient norm, then the stats' fields unchanged (their PER_WORKER
  too), then the round's time (TRACE_TIME)."""
  fields = TRACE_HEAD + tuple(stats_type._fields) + TRACE_TIME
  trace = collections.namedtuple('Trace', fields)
  trace.PER_WORKER = tuple(getattr(stats_type, 'PER_WORKER', ())) + (
      'slowdown_M', 'participants_M')
  trace.__doc__ = _TRACE_DOC
  return trace


_TRACE_DOC = """Per-step outputs of a chunk, leading axis T (then M for per-worker).

`loss` is the full objective f(theta^k) = sum_m f_m(theta^k) at the
server's parameters the step started from, at the logged iterations
(`RunSpec.loss_every`, `metrics.logged`; NaN at the others);
`grad_norm_sq` is ||sum_m g_m||^2 of the gradients the workers computed
(at the parameters they hold: ||grad f(theta^k)||^2 in a full-batch run
without a quantized broadcast; the minibatch gradients' sum in a
stochastic one); then the rule's stats (`rules.StepStats` for the LAQ
family: sent_M, bits_M, bits_down_M the bits each worker received after
the step, innovation_M, threshold_M, error_M); then the round's simulated
time on `Hyper.network` (`laq_jax.network.round_time`, float64 where x64
is on): time_s, T[k]; slowest, the worker that set it; slowdown_M, each
worker's straggler factor s[k, m]; participants_M, who took part in round k
(every worker without `RunSpec.participation`).
"""

# The LAQ family's Trace.
Trace = trace_type(rules.StepStats)


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
                              spec.memory, hyper, parts=spec.parts)
  return LoopState(jnp.int32(0), theta_P, rule_state)



def held_params(spec: RunSpec, state: LoopState, axis_name):
  """(theta^k, the parameters the workers compute at): theta itself, or
  its quantized broadcast (compiled in only when a point quantizes it).
  Under shard_map theta is replicated; differentiating at it directly would
  psum the gradients over devices (the transpose of the implicit
  broadcast), so both are marked varying: each worker its own gradient."""
  theta_P = state.theta_P
  at_P = (spec.rule.worker_params(state.rule, theta_P) if spec.downlink
          else theta_P)
  if axis_name is not None:
    theta_P = jax.lax.pcast(theta_P, axis_name, to='varying')
    at_P = jax.lax.pcast(at_P, axis_name, to='varying')
  return theta_P, at_P


def client_stage(s: Setting, gradients: Callable, full_values: Callable,
                 state: LoopState, theta_P, at_P, rows):
  """The clients' work of a round on `rows` (None: every local worker):
  (the Setting of those rows, the logged loss, their gradients or local
  updates, what the rule's step takes beside them: the local work's
  additions, the rows, LASG's same sample, the sample counts). The loss is
  the objective over every client, also when only the rows compute."""
  spec = s.spec
  sub, rule_state, gradients_ = s, state.rule, gradients
  if rows is not None:
    sub = gather_setting(s, rows)
    rule_state = participation_lib.gather_rows(state.rule, rows)
    gradients_ = gradient_part(sub)
  extra = {}
  if spec.local:
    loss, grads_MxP, *same, extra['local'] = gradients_(
        state.step, theta_P, at_P, rule_state)
  else:
    loss, grads_MxP, *same = gradients_(state.step, theta_P, at_P)
  if rows is not None:
    if spec.stochastic:
      loss = _logged_loss(s, state.step, theta_P, full_values)
    else:  # the full part's own loss (XLA drops its unused gradients),
      # a pass over every client: at the logged iterations alone
      every = spec.log_every
      own = lambda: gradients(state.step, theta_P, at_P)[0]
      if every == 1:
        loss = own()
      else:
        with jax.named_scope(LOGGED_OBJECTIVE):
          loss = jax.lax.cond(
              state.step % every == 0, own,
              lambda: jnp.full((), jnp.nan, grads_MxP.dtype))
    extra['rows_M'] = rows
  if same and spec.rule.same_sample:
    extra['same_sample'] = same[0]
  if spec.weighting and s.data.count_M is not None:
    extra['counts_M'] = jnp.asarray(s.data.count_M, grads_MxP.dtype)
  return sub, loss, grads_MxP, extra


def drawn_grad_norm_sq(spec: RunSpec, grads_MxP, participation: dict,
                       axis_name):
  """||sum of the gradients the round's clients computed||^2 (a client not
  drawn computed none), in a fixed order, as every norm: a reduce's order
  is XLA's choice per program, so the masked and the gathered round's would
  differ in the last bit."""
  drawn_MxP = grads_MxP
  if spec.participation:
    drawn_MxP = jnp.where(participation['present_M'][:, None], grads_MxP,
                          jnp.zeros_like(grads_MxP))
  return collectives.sum_sq(collectives.sum_workers(drawn_MxP, axis_name))


# The most participation draws (rounds x clients x grid points) a chunk
# makes before its scan; a longer chunk draws round by round (the same
# values), so its draws never outgrow the run: 2**22 uniforms are 16 MB.
CHUNK_DRAWS = 2**22


def draws_at_once(spec: RunSpec, num_steps: int, points: int = 1) -> bool:
  """Whether a chunk of `num_steps` rounds of `points` grid points draws
  its participation uniforms at once (`chunk_draws`): partial participation
  compiled in, and at most CHUNK_DRAWS of them."""
  return (spec.participation
          and points * num_steps * spec.num_workers <= CHUNK_DRAWS)


def chunk_draws(spec: RunSpec, hyper: Hyper, step,
                num_steps: int) -> jax.Array | None:
  """Every client's participation uniform of rounds step .. step +
  num_steps - 1, [T, M], drawn at once before the scan, which hands round
  k its row; None where `draws_at_once` says no (each round then draws its
  own). The values each round would draw, bit for bit (threefry's integer
  arithmetic and an exact conversion): per round the draw is two rolled
  threefry loops over all M clients, each a few dozen operations a CPU
  pays for one by one and a GPU launches as kernels. (The straggler
  factors stay drawn in the round: their exp and log round differently
  for arrays of other shapes under some XLA emitters.)"""
  if not draws_at_once(spec, num_steps):
    return None
  return jax.vmap(lambda k: participation_lib.uniforms(
      hyper.seed, k, spec.num_workers))(
          step + jnp.arange(num_steps, dtype=jnp.int32))


def make_step(spec: RunSpec, data: Data, hyper: Hyper, *,
              worker_ids_M: jax.Array | None = None,
              axis_name: str | None = None,
              vmapped: bool = False, path: str | None = None) -> Callable:
  """The scan body, (LoopState, u_M or None) -> (LoopState, Trace row), in
  named stages: the gradient part, the rule (compress, decide,
  participation, aggregate, the server's update), the round's time. The
  round's participation uniforms come from the scan (`chunk_draws`), or
  None: it draws them.

  Args:
    spec: static run description.
    data: the (local) worker shards.
    hyper: scalar hyperparameters.
    worker_ids_M: global indices of the local workers (seeds their minibatch
      draws, so any device layout draws the same batches).
    axis_name: the mesh axis the workers are split over, under shard_map.
    vmapped: the body runs vmapped over a grid's points (see `Setting`).
    path: with `RunSpec.round_size`, how a round runs: 'gather' on its
      participants' rows (the caller checked they fit, `round_fits`),
      'mask' on every row, None: a `lax.cond` of the two on `round_fits`.
  """
  if worker_ids_M is None:
    worker_ids_M = jnp.arange(data.x_MxNxD.shape[0], dtype=jnp.int32)
  s = Setting(spec, data, hyper_lib.cast(hyper, data.x_MxNxD.dtype),
              worker_ids_M, axis_name, vmapped)
  gradients = gradient_part(s)
  local_flops_M, all_flops_M = worker_flops(s)
  num_local = data.x_MxNxD.shape[0]
  size = round_rows(spec, num_local)
  if size == num_local:
    path = 'mask'
  full_values = full_batch(spec.problem, data, s.hyper.l2)[1]

  def one_round(state: LoopState, present_all, slowdown_M, rows):
    """The round on `rows` of the local workers (None: every one)."""
    theta_P, at_P = held_params(spec, state, axis_name)
    sub, loss, grads_MxP, extra = client_stage(
        s, gradients, full_values, state, theta_P, at_P, rows)
    present_all, more = participation_stage(
        s, state.step, slowdown_M, local_flops_M, present_all, rows)
    extra.update(more)
    grad_norm_sq = drawn_grad_norm_sq(spec, grads_MxP, more, axis_name)
    new_theta_P, rule_state, stats = spec.rule.step(
        grads_MxP, state.rule, state.theta_P, s.hyper, step_count=state.step,
        worker_ids_M=sub.worker_ids_M, num_workers=spec.num_workers,
        axis_name=axis_name, parts=spec.parts, **extra)
    round_ = round_time_stage(s, stats, all_flops_M, slowdown_M, present_all)
    row = trace_type(spec.rule.stats_type)(
        loss, grad_norm_sq, *stats, round_.time_s, round_.slowest,
        slowdown_M, present_all[worker_ids_M])
    return LoopState(state.step + 1, new_theta_P, rule_state), row

  def body(state: LoopState, u_M: jax.Array | None):
    # The stragglers' factors of this round (keys: seed, step, worker).
    slowdown_M = (network_lib.slowdown(s.hyper.network, s.hyper.seed,
                                       state.step, worker_ids_M)
                  if spec.stragglers else network_lib.no_slowdown(
                      s.hyper.network, worker_ids_M))
    if path == 'mask':
      present_all = (participation_lib.participants(
          s.hyper, state.step, spec.num_workers, u_M=u_M)
                     if spec.participation else None)
      return one_round(state, present_all, slowdown_M, None)
    # On the gathered path every round fits (the chunk checked): at most
    # size rows on each of the M / num_local devices take part.
    bound = (min(spec.num_workers, spec.num_workers // num_local * size)
             if path == 'gather' else None)
    present_all = participation_lib.participants(s.hyper, state.step,
                                                 spec.num_workers, bound,
                                                 u_M=u_M)
    rows = participation_lib.round_rows(present_all[worker_ids_M], size)
    if path == 'gather':
      return one_round(state, present_all, slowdown_M, rows)
    return jax.lax.cond(
        round_fits(s, present_all),
        lambda: one_round(state, present_all, slowdown_M, rows),
        lambda: one_round(state, present_all, slowdown_M, None))

  return body


def scan_packed(body: Callable, carry, xs, length: int):
  """`lax.scan(body, carry, xs, length)` with each step's row written as
  one array per (dtype, shape) of its leaves, unpacked after the scan.

  A scan writes each leaf of its per-step output into its own [T, ...]
  buffer, a kernel per leaf and step (the Trace has a dozen and more):
  stacked, the row is a few writes. Stacking and slicing move values and
  change no bits.
  """
  layout = []

  def packed_body(c, x):
    c, row = body(c, x)
    leaves, treedef = jax.tree.flatten(row)
    groups = {}
    for i, leaf in enumerate(leaves):
      groups.setdefault((jnp.result_type(leaf), jnp.shape(leaf)),
                        []).append(i)
    layout[:] = [treedef, list(groups.values()), len(leaves)]
    return c, tuple(jnp.stack([leaves[i] for i in members])
                    for members in groups.values())

  carry, stacked = jax.lax.scan(packed_body, carry, xs, length=length)
  treedef, groups, num_leaves = layout
  leaves = [None] * num_leaves
  for array, members in zip(stacked, groups):
    for j, i in enumerate(members):
      leaves[i] = array[:, j]
  return carry, jax.tree.unflatten(treedef, leaves)


def scan_chunk(spec: RunSpec, state: LoopState, data: Data, hyper: Hyper,
               num_steps: int, *, worker_ids_M: jax.Array | None = None,
               axis_name: str | None = None, path: str = 'auto'):
  """The traced chunk: `num_steps` scan steps, for each point of a grid Hyper.

  Shared by `run_chunk` (all workers here) and `laq_jax.sharding` (inside
  shard_map, with the local workers' global ids and the mesh axis).
  `path`: 'auto', a gathered run's chunk on its participants' rows where
  every round fits, else masked (one `lax.cond`, both compiled); 'gather',
  the caller knows every round fits (`fits_for_sure`): the masked program,
  and its temporaries of every client, are not compiled at all.
  """
  num_local = data.x_MxNxD.shape[0]
  gathers = round_rows(spec, num_local) < num_local
  ids = (jnp.arange(num_local, dtype=jnp.int32) if worker_ids_M is None
         else worker_ids_M)

  def chunk_fits(step, one_hyper):
    """Whether every round of the chunk fits its rows (`round_fits`)."""
    one_hyper = hyper_lib.cast(one_hyper, data.x_MxNxD.dtype)
    s = Setting(spec, data, one_hyper, ids, axis_name, False)

    def drawn(_):  # every round's participants, counted
      return jnp.all(jax.vmap(lambda k: round_fits(s, participation_lib.
                                                   participants(
                                                       one_hyper, k,
                                                       spec.num_workers)))(
          step + jnp.arange(num_steps, dtype=jnp.int32)))
    if num_local < spec.num_workers:  # (split over devices: counts vary)
      return drawn(None)
    # All workers here and S clients a round: every round has min(S, M).
    per_round = one_hyper.clients_per_round
    return jax.lax.cond(per_round > 0,
                        lambda _: per_round <= round_rows(spec, num_local),
                        drawn, None)

  def chunk(state, hyper):
    def run(path):
      body = make_step(spec, data, hyper, worker_ids_M=worker_ids_M,
                       axis_name=axis_name, path=path)
      return scan_packed(body, state, chunk_draws(
          spec, hyper, state.step, num_steps), num_steps)
    if not gathers:
      return run('mask')
    if path == 'gather':
      return run('gather')
    # Rounds on their participants' rows where every round of the chunk
    # fits (one conditional per chunk: a conditional per round would copy
    # the [M, P] state in and out of it every round), else masked.
    return jax.lax.cond(chunk_fits(state.step, hyper),
                        lambda: run('gather'), lambda: run('mask'))

  if jnp.ndim(hyper.step_size) == 1:  # a grid; the data are shared
    if (spec_lib.resolve_grid_axis(spec) == 'vmap'
        and jnp.shape(hyper.step_size)[0] > 1):  # (one point: its own run)
      # One scan whose body steps every point, vmapped. The points share
      # the step count, which stays one scalar: the conditionals on it (the
      # logged iterations of a minibatch run) stay conditionals, and the
      # products of the data with every point's parameters are one product
      # (logistic regression: X [M N, D] @ [D, G C]).
      def grid(path):
        def grid_body(states, u_GxM):
          step = states.step[0]
          def point(one_state, one_hyper, u_M):
            body = make_step(spec, data, one_hyper, worker_ids_M=worker_ids_M,
                             axis_name=axis_name, vmapped=True, path=path)
            return body(one_state._replace(step=step), u_M)
          return jax.vmap(point)(states, hyper, u_GxM)
        u_TxGxM = None
        if draws_at_once(spec, num_steps, jnp.shape(hyper.step_size)[0]):
          u_TxGxM = jnp.swapaxes(jax.vmap(lambda h: chunk_draws(
              spec, h, state.step[0], num_steps))(hyper), 0, 1)
        out, trace = scan_packed(grid_body, state, u_TxGxM, num_steps)
        return out, jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), trace)
      if not gathers:
        return grid('mask')
      if path == 'gather':
        return grid('gather')
      # Every point's rounds must fit (a conditional per point would batch
      # into a select that runs both).
      fits = jnp.all(jax.vmap(lambda h: chunk_fits(state.step[0], h))(hyper))
      return jax.lax.cond(fits, lambda: grid('gather'), lambda: grid('mask'))
    return jax.lax.map(lambda point: chunk(*point), (state, hyper))
  return chunk(state, hyper)


_compiled_chunk = jax.jit(scan_chunk, static_argnums=(0, 4),
                          static_argnames=('path',))
# The same program with the input state's buffers given to the output (no
# copy of the [M, P] state in, and one state fewer in memory).
_donating_chunk = jax.jit(scan_chunk, static_argnums=(0, 4),
                          static_argnames=('path',), donate_argnums=(1,))


def fits_for_sure(spec: RunSpec, hyper: Hyper, num_local: int) -> bool:
  """Whether every round of every point surely fits a gathered round's
  rows, from the concrete Hyper alone: all workers on one device and every
  point with `clients_per_round` S' in 1..S (`RunSpec.round_size`), so
  each round has exactly min(S', M) participants. Then `run_chunk`
  compiles the gathered program alone: the masked one, which would hold
  every client's temporaries (three [M, P] arrays at M = 1,000), is not
  built."""
  size = round_rows(spec, num_local)
  if size >= num_local:
    return False
  per_round = np.asarray(hyper.clients_per_round)
  return bool(np.all((per_round > 0) & (per_round <= size)))


def run_chunk(spec: RunSpec, state: LoopState, data: Data, hyper: Hyper,
              num_steps: int, *, donate: bool = False
              ) -> tuple[LoopState, Trace]:
  spec.check_hyper(hyper)  # on the concrete values, before any tracing
  fn = _donating_chunk if donate else _compiled_chunk
  return fn(spec, state, data, hyper, num_steps, path=_path(spec, data,
                                                            hyper))


def _path(spec, data, hyper) -> str:
  return ('gather' if fits_for_sure(spec, hyper, data.x_MxNxD.shape[0])
          else 'auto')


def _lower(spec, state, data, hyper, num_steps, *, donate=False):
  spec.check_hyper(hyper)
  fn = _donating_chunk if donate else _compiled_chunk
  return fn.lower(spec, state, data, hyper, num_steps,
                  path=_path(spec, data, hyper))


# As jit's: the cache size, both programs' (tests, the launchers' compile
# count) and ahead-of-time lowering (benchmarks).
run_chunk._cache_size = lambda: (_compiled_chunk._cache_size()
                                 + _donating_chunk._cache_size())
run_chunk.lower = _lower
run_chunk.__doc__ = """Runs `num_steps` iterations from `state` as one compiled program.

`spec.check_hyper` runs first on the concrete `hyper`: a Hyper that picks a
part the program does not compile in is refused in one line (a switch would
otherwise run the first compiled part), and so is a traced Hyper (a call
inside jax.jit or vmap), whose parts cannot be checked; a grid Hyper
(`stack_hypers`) sweeps values in one program instead. The compiled program
is cached on
`spec` (its part objects included), the shapes and `num_steps`.

Args:
  spec: static RunSpec.
  state: LoopState (leading G axis for a grid).
  data: Data shards, shared by every grid point.
  hyper: Hyper of scalars, or of [G] arrays for a sweep.
  num_steps: T, the chunk length (static).
  donate: give `state`'s buffers to the output: the program updates the
    state in place instead of copying it in first (at M = 1,000 clients the
    [M, P] arrays are hundreds of MB), and `state` can no longer be used
    after the call. A program of its own (compiled once more).

Returns:
  (state after the chunk, Trace with leading [T] (or [G, T]) axes).
"""


# A copy of a state in buffers of its own (jitted: also a state over several
# processes).
_copy_state = jax.jit(lambda state: jax.tree.map(jnp.copy, state))


def _step_of(state: LoopState) -> int:
  """k of a (grid, sharded, multi-process) LoopState."""
  step = state.step
  if isinstance(step, jax.Array) and not step.is_fully_addressable:
    step = step.addressable_data(0)
  return int(np.asarray(step).reshape(-1)[0])


class Chunk(NamedTuple):
  """What `run` passes its callback after each chunk.

  Attributes:
    start: k at the chunk's first step (the resumed state's step counts).
    state: the LoopState after the chunk (under `run(donate=True)` valid
      until the callback returns: the next chunk updates it in place).
    trace: the chunk's Trace as NumPy.
  """
  start: int
  state: LoopState
  trace: Trace


def run(spec: RunSpec, data: Data, hyper: Hyper, num_steps: int, *,
        chunk_size: int | None = None, state: LoopState | None = None,
        callback: Callable[[Chunk], bool | None] | None = None,
        run_chunk_fn: Callable | None = None, keep_trace: bool = True,
        donate: bool = False) -> tuple[LoopState, Trace | None]:
  """Runs `num_steps` iterations in chunks of one compiled program: the one
  chunk driver (the launchers' single runs and sweeps are built on it).

  Args:
    spec, data, hyper: as for `run_chunk` (`spec.check_hyper` always runs).
    num_steps: iterations to run from `state` (at most; see `callback`).
    chunk_size: iterations per compiled call (default: all at once). A
      shorter last chunk compiles once more.
    state: where to start (default: `init_state`); its step may be > 0 (a
      resumed run), and the chunks' `start` counts from it.
    callback: called after each chunk with a `Chunk`, for progress lines,
      evaluation and checkpoints; returning True stops the run there (a
      diverging run).
    run_chunk_fn: replaces `run_chunk` (e.g. the sharded version).
    keep_trace: join and return the chunks' Traces (False: return None, and
      hold no more than one chunk's trace in memory).
    donate: each chunk updates the state in place (`run_chunk`'s donate;
      `run_chunk_fn` must take it): the state a callback gets is valid until
      it returns, and `state` is copied once first, so the caller's stays
      theirs.

  Returns:
    (the LoopState where it stopped, Trace of the steps run as NumPy arrays,
    time on axis -1 for scalars / -2 for per-worker arrays, after any grid
    axis; or None without keep_trace).
  """
  run_chunk_fn = run_chunk_fn or run_chunk
  spec.check_hyper(hyper)
  spec.check_data(data)
  if state is None:
    state = init_state(spec, hyper, data.x_MxNxD.dtype)
  if donate:  # buffers of its own
    state = _copy_state(state)
  chunk_size = chunk_size or num_steps
  extra = {'donate': True} if donate else {}
  grid = jnp.ndim(hyper.step_size) == 1
  time_axis = 1 if grid else 0
  start = _step_of(state)
  parts = []
  done = 0
  while done < num_steps:
    length = min(chunk_size, num_steps - done)
    state, trace = run_chunk_fn(spec, state, data, hyper, length, **extra)
    trace = jax.tree.map(np.asarray, trace)
    if keep_trace:
      parts.append(trace)
    stop = callback is not None and callback(Chunk(start + done, state,
                                                   trace))
    done += length
    if stop:
      break
  if not keep_trace:
    return state, None
  if not parts:  # zero steps: an empty Trace of the right shapes, no compile
    shapes = jax.eval_shape(
        lambda s, d, h: run_chunk_fn(spec, s, d, h, 1)[1], state, data, hyper)
    trace = jax.tree.map(
        lambda a: np.zeros(a.shape[:time_axis] + (0,) + a.shape[time_axis + 1:],
                           a.dtype), shapes)
    return state, trace
  trace = jax.tree.map(lambda *xs: np.concatenate(xs, axis=time_axis), *parts)
  return state, trace


