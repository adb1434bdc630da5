"""Sums over the worker axis: one place for the backends' quirks.

The rule and the loop add up per-worker vectors (the uploaded innovations,
the gradients, the losses). Under `jax.shard_map` every device first gathers
all workers' rows in global worker order and adds them as the single-device
path does, left to right: the server receives each worker's upload anyway,
and a `psum` of per-device partial sums would add in another order. The
per-worker sums (norms, a worker's loss over its samples) use `fixed_sum`,
whose order does not depend on how many workers share a device either, so a
run on devices is the same bits as the run vmapped on one device.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def sum_workers(x_MxP: jax.Array, axis_name: str | None = None) -> jax.Array:
  """The sum over the leading worker axis (and over devices under shard_map).

  Written as M vector adds rather than `jnp.sum(axis=0)`: on the CPU backend
  (jaxlib 0.10.2) the reduce over the leading axis of a [10, 159010] array
  took 13-30 ms against 0.1 ms for the adds (measured with benchmarks/run.py
  when this was written). The result
  is the same sum, left to right.

  Args:
    x_MxP: one row per (local) worker (any trailing shape, or none).
    axis_name: the mesh axis the workers are split over, or None.
  """
  if axis_name is not None:
    x_MxP = jax.lax.all_gather(x_MxP, axis_name, tiled=True, to='invarying')
  return functools.reduce(jnp.add, [x_MxP[m] for m in range(x_MxP.shape[0])])


def gather_workers(x_M: jax.Array, axis_name: str | None = None
                   ) -> jax.Array:
  """Every worker's rows in global worker order (the local ones without a
  mesh axis): what the server sees of a per-worker quantity."""
  if axis_name is None:
    return x_M
  return jax.lax.all_gather(x_M, axis_name, tiled=True, to='invarying')


def fixed_sum(x: jax.Array) -> jax.Array:
  """The sum over the last axis in an order fixed by this code: pairwise,
  halving the axis (zero-padded to even) until one element is left.

  A `jnp.sum` is a reduce whose order XLA picks per program (by the shape of
  the batch around it, the fusion it lands in, the backend), so a worker's
  norms would differ in the last bits between its workers vmapped on one
  device and split over several, and a trigger comparison at its threshold
  could go either way. Written as elementwise adds, which XLA does not
  reassociate, the per-worker sums are the same bits in every layout.
  """
  while x.shape[-1] > 1:
    if x.shape[-1] % 2:
      x = jnp.concatenate([x, jnp.zeros_like(x[..., :1])], axis=-1)
    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    x = pairs[..., 0] + pairs[..., 1]
  return x[..., 0]


def sum_sq(x: jax.Array) -> jax.Array:
  """||x||^2 over the last axis, by `fixed_sum`."""
  return fixed_sum(jnp.square(x))
