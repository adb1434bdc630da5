"""Workers on devices: the worker axis split over a mesh under `jax.shard_map`.

    mesh = make_mesh()                       # every device, one axis 'workers'
    data = shard_data(data, mesh)            # place the shards once
    state, trace = laq_jax.run(spec, data, hyper, T,
                               run_chunk_fn=make_run_chunk(mesh))

The M workers are split into equal blocks, one block per device; inside a
device the block is vmapped, exactly as the single-device path vmaps all M.
The step is the same `loop.make_step` / `rules.step` code: given
`axis_name='workers'` the server aggregate and the loss gather the workers over
the mesh axis. Worker ids are global, so minibatch draws do not depend on the
layout, and a run on any number of devices matches `laq_jax.run_chunk`: a
device computes its workers' gradients with the single-device path's
arithmetic (the products are per worker; the per-worker sums have a fixed
order, `collectives.fixed_sum`), and the server adds the gathered uploads in
worker order. For logistic regression's full-batch gradient (the paper's
convex run) the uploads and the losses are the same bits
(tests/_sharded_checks.py; the paper report's cross-check at full size);
autodiff's gradients (the MLP, minibatches) may differ in the last bits.

What lives where:
  * split over 'workers': the data, each worker's rule state (last upload,
    last error, staleness clock) and the per-worker fields of the Trace;
  * replicated: theta, the aggregate, the parameter history, the step count,
    the hyperparameters and the loss.

Collectives are dense: every device gathers all M workers' P-vectors every
step (`collectives.sum_workers`) whether or not a worker uploaded. A skipped upload is *accounted* (its
bits are 0 in the Trace), not removed from the wire.

The same functions work with several processes (`laq_jax.distributed`): a
mesh over `jax.devices()` then spans every host, and arrays are placed with
`jax.make_array_from_callback`, each process filling its own devices.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from laq_jax.round import loop
from laq_jax.round.hyper import Hyper
from laq_jax.round.loop import Data, LoopState, RunSpec, Trace

AXIS = 'workers'
WORKERS_ON = ('vmap', 'devices')


def make_mesh(num_devices: int | None = None) -> Mesh:
  """A 1-D mesh named 'workers' over the first `num_devices` devices.

  Args:
    num_devices: how many of `jax.devices()` (all processes' devices in a
      multi-process run) to use; None uses all of them.

  Returns:
    A `jax.sharding.Mesh` with the single axis 'workers'.
  """
  devices = jax.devices()
  if num_devices is None:
    num_devices = len(devices)
  if not 1 <= num_devices <= len(devices):
    raise ValueError(f'num_devices={num_devices} is not allowed: it must be '
                     f'in 1..{len(devices)} (the devices JAX sees: '
                     f'{len(devices)} x {devices[0].platform})')
  return jax.make_mesh((num_devices,), (AXIS,), devices=devices[:num_devices])


def num_mesh_devices(mesh: Mesh) -> int:
  """The size of the mesh's 'workers' axis."""
  if AXIS not in mesh.shape:
    raise ValueError(f'mesh axes {tuple(mesh.shape)} have no {AXIS!r} axis; '
                     'build the mesh with laq_jax.sharding.make_mesh')
  return mesh.shape[AXIS]


def check_layout(num_workers: int, num_devices: int) -> None:
  """Raises ValueError unless the M workers split evenly over the devices.

  Args:
    num_workers: M.
    num_devices: the size of the 'workers' mesh axis.
  """
  if num_devices >= 1 and num_workers >= 1 and num_workers % num_devices == 0:
    return
  divisors = [d for d in range(1, num_workers + 1) if num_workers % d == 0]
  raise ValueError(
      f'num_workers={num_workers} cannot be split over num_devices='
      f'{num_devices}: with workers_on=devices every device holds the same '
      f'number of workers, so the device count must divide num_workers. '
      f'Device counts that work for {num_workers} workers: '
      f'{", ".join(map(str, divisors))} (or change num_workers to a multiple '
      f'of {num_devices}).')


# ----------------------------------------------------------------------------
# Placement.

def _data_specs(data: Data) -> Data:
  """The worker-axis fields split over AXIS, the scale replicated, absent
  layouts absent."""
  return Data(*(None if value is None else P(AXIS) if name in Data.PER_WORKER
                else P() for name, value in zip(Data._fields, data)))


def per_worker_fields(kind: type) -> tuple[str, ...]:
  """The fields with a leading worker axis, as the type states them
  (`PER_WORKER`); a state or stats type that does not is refused."""
  fields = getattr(kind, 'PER_WORKER', None)
  if fields is None:
    raise TypeError(f'{kind.__name__} does not state its PER_WORKER fields '
                    '(a class attribute: the names with a leading worker '
                    'axis), so its sharding is unknown')
  unknown = set(fields) - set(kind._fields)
  if unknown:
    raise TypeError(f'{kind.__name__}.PER_WORKER names {sorted(unknown)}, '
                    'which are not its fields')
  return tuple(fields)


def _specs(fields: NamedTuple, lead: tuple) -> NamedTuple:
  """Split the per-worker fields over AXIS (after `lead`), replicate the rest."""
  split = per_worker_fields(type(fields))
  # A field may be a pytree (a part's state): every leaf gets its spec.
  return type(fields)(*(
      jax.tree.map(lambda _, s=P(*lead, AXIS) if name in split else P(): s,
                   value)
      for name, value in zip(fields._fields, fields)))


def _state_specs(state: LoopState, grid: bool) -> LoopState:
  lead = (None,) if grid else ()
  return LoopState(step=P(), theta_P=P(), rule=_specs(state.rule, lead))


def _trace_specs(spec: RunSpec, grid: bool):
  trace = loop.trace_type(spec.rule.stats_type)
  return _specs(trace(*trace._fields), (None, None) if grid else (None,))


def _hyper_specs(hyper: Hyper) -> Hyper:
  """Every array of `hyper` (the Network's too) replicated."""
  return jax.tree.map(lambda _: P(), hyper)


def _place(x, sharding: NamedSharding) -> jax.Array:
  """x as a global array with `sharding` (a no-op when it already is one).

  Built with `jax.make_array_from_callback`, so each process fills only its
  own devices; every process must hold the same full value of `x`.
  """
  if isinstance(x, jax.Array):
    if x.sharding == sharding:
      return x
    # An equivalent placement is relabelled (no copy): shard_map checks its
    # inputs' specs, and on a mesh of one device every spec is equivalent
    # (one GPU: P(None) where it wants P('workers')). A global array is
    # resharded in place.
    if (x.sharding.is_equivalent_to(sharding, x.ndim)
        or not x.is_fully_addressable):
      return jax.device_put(x, sharding)
  value = np.asarray(x)
  return jax.make_array_from_callback(value.shape, sharding,
                                      lambda index: value[index])


def _place_tree(tree, specs, mesh: Mesh):
  def place(x, spec):
    # Spelled to full rank, as jit's outputs are, so that a placed input and
    # a chunk's output share one compiled program.
    spec = P(*spec, *([None] * (np.ndim(x) - len(spec))))
    return _place(x, NamedSharding(mesh, spec))
  return jax.tree.map(place, tree, specs)


def shard_data(data: Data, mesh: Mesh) -> Data:
  """Places the worker shards: worker axis split over 'workers'.

  Args:
    data: Data with leading worker axis M (NumPy or JAX arrays; in a
      multi-process run every process passes the same full data).
    mesh: from `make_mesh`.

  Returns:
    Data of global arrays; device d holds workers d*M/n .. (d+1)*M/n - 1.
  """
  check_layout(data.x_MxNxD.shape[0], num_mesh_devices(mesh))
  return _place_tree(data, _data_specs(data), mesh)


def shard_state(state: LoopState, mesh: Mesh) -> LoopState:
  """Places a LoopState from `laq_jax.init_state` (full M; grid-aware).

  Per-worker rule state is split over 'workers'; theta, the aggregate, the
  history and the step count are replicated.
  """
  grid = jnp.ndim(state.step) == 1
  specs = _state_specs(state, grid)
  split = [x for x, spec in zip(jax.tree.leaves(state.rule),
                                jax.tree.leaves(specs.rule)) if spec != P()]
  if split:
    check_layout(split[0].shape[grid], num_mesh_devices(mesh))
  return _place_tree(state, specs, mesh)


def shard_hyper(hyper: Hyper, mesh: Mesh) -> Hyper:
  """Replicates the hyperparameters (scalars or a grid) over the mesh."""
  return _place_tree(hyper, _hyper_specs(hyper), mesh)


def init_state(spec: RunSpec, hyper: Hyper, mesh: Mesh,
               dtype=jnp.float32) -> LoopState:
  """`laq_jax.init_state`, placed on the mesh."""
  return shard_state(loop.init_state(spec, hyper, dtype), mesh)


# ----------------------------------------------------------------------------
# The sharded chunk.

def _local_chunk(spec: RunSpec, num_steps: int, state: LoopState, data: Data,
                 hyper: Hyper):
  """One device's part: its block of workers, the same chunk as vmap."""
  num_local = data.x_MxNxD.shape[0]
  worker_ids_M = (jax.lax.axis_index(AXIS) * num_local
                  + jnp.arange(num_local, dtype=jnp.int32))
  return loop.scan_chunk(spec, state, data, hyper, num_steps,
                         worker_ids_M=worker_ids_M, axis_name=AXIS)


@functools.cache
def make_run_chunk(mesh: Mesh, *, gather_trace: bool | None = None
                   ) -> Callable[..., tuple[LoopState, Trace]]:
  """`laq_jax.run_chunk` with the workers split over the mesh axis 'workers'.

  Args:
    mesh: from `make_mesh`; its 'workers' size must divide M.
    gather_trace: return the per-worker Trace fields replicated (all-gathered)
      instead of split over 'workers'. None: only when the mesh spans several
      processes, where a split array cannot be read by one process (and
      `laq_jax.run` turns each chunk's Trace into NumPy).

  Returns:
    fn(spec, state, data, hyper, num_steps, *, donate=False) -> (state,
    Trace), the contract and output shapes of `laq_jax.run_chunk` (a grid
    Hyper with a leading G axis runs the whole sweep in one program).
    Inputs not yet on the mesh are placed first (place the data once with
    `shard_data` to avoid copying it every chunk). Compiled once per (spec,
    num_steps, shapes, dtypes, donate).
  """
  num_devices = num_mesh_devices(mesh)
  if gather_trace is None:
    gather_trace = len({d.process_index for d in mesh.devices.flat}) > 1

  def chunk(spec, state, data, hyper, num_steps, grid):
    local = functools.partial(_local_chunk, spec, num_steps)
    state_specs = _state_specs(state, grid)
    state, trace = jax.shard_map(
        local, mesh=mesh,
        in_specs=(state_specs, _data_specs(data), _hyper_specs(hyper)),
        out_specs=(state_specs, _trace_specs(spec, grid)),
    )(state, data, hyper)
    if gather_trace:  # every device (and process) gets the whole trace
      trace = jax.tree.map(
          lambda a: jax.sharding.reshard(
              a, NamedSharding(mesh, P(*([None] * a.ndim)))), trace)
    return state, trace

  plain = jax.jit(chunk, static_argnums=(0, 4, 5))
  donating = jax.jit(chunk, static_argnums=(0, 4, 5), donate_argnums=(1,))

  def run_chunk(spec: RunSpec, state: LoopState, data: Data, hyper: Hyper,
                num_steps: int, *, donate: bool = False
                ) -> tuple[LoopState, Trace]:
    check_layout(spec.num_workers, num_devices)
    if data.x_MxNxD.shape[0] != spec.num_workers:
      raise ValueError(f'data has {data.x_MxNxD.shape[0]} worker shards but '
                       f'spec.num_workers={spec.num_workers}; they must match')
    spec.check_hyper(hyper)
    grid = jnp.ndim(hyper.step_size) == 1
    return (donating if donate else plain)(
        spec, shard_state(state, mesh), shard_data(data, mesh),
        shard_hyper(hyper, mesh), num_steps, grid)

  class _Compiled:
    """Both programs' cache size (tests, the launchers' compile count)."""

    @staticmethod
    def _cache_size():
      return plain._cache_size() + donating._cache_size()

  run_chunk.compiled = _Compiled

  return run_chunk


def run_chunk_fn(workers_on: str = 'vmap', num_devices: int | None = None,
                 ) -> Callable[..., tuple[LoopState, Trace]]:
  """The chunk runner for the execution option `workers_on`.

  Args:
    workers_on: 'vmap' (all workers vmapped on one device: `laq_jax.run_chunk`)
      or 'devices' (split over a 'workers' mesh of `num_devices` devices).
    num_devices: for 'devices': how many devices (None: all of them).

  Returns:
    A function to pass as `laq_jax.run(..., run_chunk_fn=...)`.
  """
  if workers_on == 'vmap':
    return loop.run_chunk
  if workers_on == 'devices':
    return make_run_chunk(make_mesh(num_devices))
  raise ValueError(f'workers_on={workers_on!r} is not allowed: use one of '
                   f'{", ".join(map(repr, WORKERS_ON))}')
