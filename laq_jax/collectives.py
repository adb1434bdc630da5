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

import contextlib
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


# Halvings of `fixed_sum` in one kernel off a CPU: chosen by the paper's
# programs' kernels per iteration (benchmarks/kernels.py, logistic
# regression: 64 at 3, 56 at 5 and 6); a longer tree is a longer serial
# sum in each GPU thread.
_LEVELS = 5


def fixed_sum(x: jax.Array) -> jax.Array:
  """The sum over the last axis in an order fixed by this code: pairwise,
  halving the axis (zero-padded to even) until one element is left.

  A `jnp.sum` is a reduce whose order XLA picks per program (by the shape of
  the batch around it, the fusion it lands in, the backend), so a worker's
  norms would differ in the last bits between its workers vmapped on one
  device and split over several, and a trigger comparison at its threshold
  could go either way. Written as elementwise adds, which XLA does not
  reassociate, the per-worker sums are the same bits in every layout.

  Two forms make the same sums, so the same bits: one level at a time
  (`_halving`, a kernel or so a level) on a CPU, where it is the faster,
  and elsewhere up to `_LEVELS` levels in one kernel (`_grouped`: a GPU
  launches a kernel for each; XLA:CPU runs the grouped tree's strided
  reads at half the speed). `jax.lax.platform_dependent` picks one when the
  program is lowered; `form` overrides it. Derivatives go one level at a
  time on every platform (their transpose is two pads a level, the grouped
  form's one a term).
  """
  if jnp.issubdtype(x.dtype, jnp.inexact):
    return _fixed_sum(x)
  return _primal(x)


FORMS = ('halving', 'grouped')
_form = None


@contextlib.contextmanager
def form(name: str | None):
  """Trace `fixed_sum` in one of FORMS whatever the platform (None: by the
  platform), e.g. to count the kernels a GPU's program has on a CPU
  (benchmarks/kernels.py). Affects programs traced inside the block."""
  global _form
  if name is not None and name not in FORMS:
    raise ValueError(f'fixed_sum form {name!r} is not known: use one of '
                     f'{", ".join(FORMS)} or None')
  before, _form = _form, name
  try:
    yield
  finally:
    _form = before


def _primal(x):
  if _form is not None:
    return _halving(x) if _form == 'halving' else _grouped(x)
  return jax.lax.platform_dependent(x, cpu=_halving, default=_grouped)


@jax.custom_jvp
def _fixed_sum(x):
  return _primal(x)


@_fixed_sum.defjvp
def _fixed_sum_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return _primal(x), _halving(t)


def _halving(x: jax.Array) -> jax.Array:
  """`fixed_sum` one level at a time: pad to even, add neighbours."""
  while x.shape[-1] > 1:
    if x.shape[-1] % 2:
      x = jnp.concatenate([x, jnp.zeros_like(x[..., :1])], axis=-1)
    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    x = pairs[..., 0] + pairs[..., 1]
  return x[..., 0]


def _grouped(x: jax.Array) -> jax.Array:
  """`fixed_sum` up to `_LEVELS` halvings at a time.

  The axis is zero-padded to a multiple of 2^levels and the 2^levels
  adjacent elements of each group are added pairwise, each its own slice
  (every partial sum has one user, so XLA fuses a group's tree into one
  kernel). Every sum is the one `_halving` makes (a zero it pads with
  meets the same sums there: x + 0), so the bits are the same.
  """
  while x.shape[-1] > 1:
    total = (x.shape[-1] - 1).bit_length()  # ceil(log2 n) halvings left
    levels = -(-total // -(-total // _LEVELS))  # spread evenly
    group = 2 ** levels
    if x.shape[-1] % group:
      x = jnp.concatenate(
          [x, jnp.zeros(x.shape[:-1] + (group - x.shape[-1] % group,),
                        x.dtype)], axis=-1)
    x = x.reshape(*x.shape[:-1], x.shape[-1] // group, group)
    terms = [x[..., j] for j in range(group)]
    while len(terms) > 1:
      terms = [terms[j] + terms[j + 1] for j in range(0, len(terms), 2)]
    x = terms[0]
  return x[..., 0]


def sum_sq(x: jax.Array) -> jax.Array:
  """||x||^2 over the last axis, by `fixed_sum`."""
  return fixed_sum(jnp.square(x))
