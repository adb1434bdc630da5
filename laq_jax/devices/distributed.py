"""Several processes (hosts) on JAX's own runtime: `jax.distributed`.

One process per host (or per GPU group), every process runs the same program:

    from laq_jax import distributed, sharding
    distributed.initialize()                 # flags, $LAQ_JAX_*, or cluster env
    mesh = sharding.make_mesh()              # all devices of all processes
    data = sharding.shard_data(data, mesh)   # each process fills its devices
    state, trace = laq_jax.run(spec, data, hyper, T,
                               run_chunk_fn=sharding.make_run_chunk(mesh))
    if distributed.is_writer():              # process 0 writes the files
      ...

Every process holds the same full data and hyperparameters (they are small
for MNIST); `jax.make_array_from_callback` copies into each process only the
shards of its own devices. The worker aggregate gathers the uploads over the global
'workers' mesh axis, so it crosses hosts through the collectives of the
backend (NCCL on GPU, ICI/DCN on TPU, gloo on CPU).
"""

from __future__ import annotations

import os

import jax

ENV_COORDINATOR = 'LAQ_JAX_COORDINATOR'
ENV_NUM_PROCESSES = 'LAQ_JAX_NUM_PROCESSES'
ENV_PROCESS_ID = 'LAQ_JAX_PROCESS_ID'


def _env_int(name: str) -> int | None:
  value = os.environ.get(name)
  if value in (None, ''):
    return None
  try:
    return int(value)
  except ValueError:
    raise ValueError(f'${name}={value!r} is not allowed: it must be an '
                     'integer') from None


def settings(coordinator_address: str | None = None,
             num_processes: int | None = None,
             process_id: int | None = None) -> dict:
  """The arguments `initialize` will use: explicit values, else $LAQ_JAX_*.

  Returns:
    {'coordinator_address', 'num_processes', 'process_id'}; values left None
    are for JAX to detect (SLURM, Open MPI, TPU and GKE environments).

  Raises:
    ValueError: a value is malformed or out of range.
  """
  if coordinator_address is None:
    coordinator_address = os.environ.get(ENV_COORDINATOR) or None
  if num_processes is None:
    num_processes = _env_int(ENV_NUM_PROCESSES)
  if process_id is None:
    process_id = _env_int(ENV_PROCESS_ID)
  if coordinator_address is not None and ':' not in coordinator_address:
    raise ValueError(f'coordinator_address={coordinator_address!r} is not '
                     "allowed: it must be 'host:port' (process 0's address)")
  if num_processes is not None and num_processes < 1:
    raise ValueError(f'num_processes={num_processes} is not allowed: it must '
                     'be an integer >= 1')
  if process_id is not None:
    last = None if num_processes is None else num_processes - 1
    if process_id < 0 or (last is not None and process_id > last):
      allowed = 'an integer >= 0' if last is None else f'in 0..{last}'
      raise ValueError(f'process_id={process_id} is not allowed: it must be '
                       f'{allowed} (num_processes={num_processes})')
  return dict(coordinator_address=coordinator_address,
              num_processes=num_processes, process_id=process_id)


def initialize(coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None, *,
               initialization_timeout: int = 300) -> None:
  """Joins this process to a multi-process JAX run. Call before any JAX work.

  Args:
    coordinator_address: 'host:port' of process 0 (default:
      $LAQ_JAX_COORDINATOR).
    num_processes: how many processes in all (default: $LAQ_JAX_NUM_PROCESSES).
    process_id: this process's index, 0..num_processes-1 (default:
      $LAQ_JAX_PROCESS_ID).
    initialization_timeout: seconds to wait for every process to join.

  With none of them given (and no $LAQ_JAX_* set), `jax.distributed` detects
  the cluster itself (SLURM, Open MPI, Cloud TPU, GKE). CPU collectives use
  gloo (the setting only concerns the CPU backend; GPUs use NCCL, TPUs their
  interconnect).
  """
  args = settings(coordinator_address, num_processes, process_id)
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(
      **{k: v for k, v in args.items() if v is not None},
      initialization_timeout=initialization_timeout)


def maybe_initialize(coordinator_address: str | None = None,
                     num_processes: int | None = None,
                     process_id: int | None = None, *,
                     auto_detect: bool = False,
                     initialization_timeout: int = 300) -> bool:
  """`initialize` when asked to, else nothing: for entry points like main.py.

  Args:
    coordinator_address, num_processes, process_id: as for `initialize`
      (flags; $LAQ_JAX_* fill the ones left None).
    auto_detect: initialize even when none is set, letting JAX detect the
      cluster (SLURM, Open MPI, Cloud TPU, GKE).
    initialization_timeout: seconds to wait for every process to join.

  Returns:
    True when this process joined a multi-process run.
  """
  args = settings(coordinator_address, num_processes, process_id)
  if not auto_detect and all(v is None for v in args.values()):
    return False
  initialize(**args, initialization_timeout=initialization_timeout)
  return True


def shutdown() -> None:
  """Leaves the multi-process run (at exit; safe when never initialized)."""
  jax.distributed.shutdown()


def is_writer() -> bool:
  """True only on process 0: the one process that writes files and prints."""
  return jax.process_index() == 0


def process_count() -> int:
  """How many processes take part (1 when `initialize` was not called)."""
  return jax.process_count()
