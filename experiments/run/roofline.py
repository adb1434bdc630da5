"""The machine's limits, and how fast an experiment's iterations could run.

    rates = measure()                       # matmul FLOP/s, read bytes/s
    floor = floor_seconds(cost(...), rates, 'float64')

A run's floor per iteration is max(matmul FLOPs / the dense-matmul rate,
bytes that must be read / the read bandwidth): the gradient's (and, for
minibatch runs, the full loss's) matrix products at the rate a large dense
`jnp.matmul` reaches on this machine, or one pass over the training
features at the rate a large `jnp.sum` reads memory, whichever is longer.
Both rates are measured in the same process, just before they are used
(benchmarks/run.py, experiments.reproduce). A minibatch run's floor also
reads its minibatch rows once, and adds the time its minibatch draws take
at the draw's measured rate (rows drawn per second). Elementwise work
(softmax, ReLU, the communication rule, O(M P) per point) is not in the
floor: it is part of what the report calls the rest.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from laq_jax import problems


class Probe(NamedTuple):
  """A machine-limit probe: a compiled call and the work (FLOPs or bytes)
  one call does."""
  name: str
  fn: Any
  work: float
  unit: str

  def rate(self, seconds: float) -> float:
    return self.work / seconds


def _compiled(fn, *args):
  return jax.jit(fn).lower(*args).compile()


def matmul_probe(n: int = 2048, dtype=jnp.float32) -> Probe:
  """Dense n x n matmul: the practical compute limit (FLOP/s)."""
  key_a, key_b = jax.random.split(jax.random.key(0))
  a = jax.random.normal(key_a, (n, n), dtype)
  b = jax.random.normal(key_b, (n, n), dtype)
  compiled = _compiled(jnp.matmul, a, b)
  return Probe(f'matmul {jnp.dtype(dtype).name} {n}^2',
               lambda: compiled(a, b), 2 * n**3, 'FLOP/s')


def bandwidth_probe(num_bytes: int = 2**28) -> Probe:
  """Read bandwidth (bytes/s): a float32 sum over an array beyond the
  caches."""
  x = jnp.ones((num_bytes // 4,), jnp.float32)
  compiled = _compiled(jnp.sum, x)
  return Probe(f'sum of {num_bytes / 2**20:.0f} MiB', lambda: compiled(x),
               num_bytes, 'B/s')


def draw_probe(num_workers: int = 10, shard_size: int = 6000,
               batch_size: int = 500) -> Probe:
  """The minibatch draw (`randomness.sample_rows`) of `num_workers`
  workers: rows drawn per second."""
  from laq_jax import randomness  # pylint: disable=g-import-not-at-top
  keys = jax.vmap(lambda w: randomness.batch_key(0, 1, w))(
      jnp.arange(num_workers))
  compiled = _compiled(jax.vmap(lambda k: randomness.sample_rows(
      k, shard_size, batch_size)), keys)
  return Probe(f'draw {num_workers} x {batch_size} of {shard_size}',
               lambda: compiled(keys), num_workers * batch_size, 'rows/s')


def best_seconds(fn, repeats: int) -> float:
  """The least time of `repeats` calls after a warm-up (the least disturbed
  on a shared machine)."""
  jax.block_until_ready(fn())
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - start)
  return best


def measure(repeats: int = 5, matmul_n: int = 2048,
            read_bytes: int = 2**28) -> dict[str, Any]:
  """The dense-matmul rate per float type and the read bandwidth.

  Returns:
    {'matmul_flops_per_s': {'float32': r, 'float64': r (when float64 is
    on)}, 'read_bytes_per_s': bw, 'draw_rows_per_s': the minibatch draw's
    rate, 'probes': the probes' names}.
  """
  dtypes = ['float32'] + (['float64'] if jax.config.jax_enable_x64 else [])
  matmul = {d: matmul_probe(matmul_n, jnp.dtype(d)) for d in dtypes}
  read = bandwidth_probe(read_bytes)
  draw = draw_probe()
  return {
      'matmul_flops_per_s': {d: p.rate(best_seconds(p.fn, repeats))
                             for d, p in matmul.items()},
      'read_bytes_per_s': read.rate(best_seconds(read.fn, repeats)),
      'draw_rows_per_s': draw.rate(best_seconds(draw.fn, repeats)),
      'probes': [p.name for p in matmul.values()] + [read.name, draw.name],
  }


class Cost(NamedTuple):
  """What one iteration of a program must do: matmul FLOPs, bytes read,
  minibatch rows drawn."""
  flops: float
  bytes: float
  draws: float = 0.0


def _problem(model, dim: int, classes: int, hidden: int):
  """The Problem of `model` (a Problem, or a registered model's name)."""
  if isinstance(model, str):
    return problems.get_problem(model, dim, classes, hidden=hidden)
  return model


def _per_sample(model, attribute: str, dim, classes, hidden) -> float:
  problem = _problem(model, dim, classes, hidden)
  value = getattr(problem, attribute)
  if value is None:
    raise ValueError(f'model {problem.name!r} does not state its '
                     f'{attribute} (laq_jax.Problem.{attribute})')
  return value


def gradient_flops(model, num_samples: int, dim: int = 784,
                   classes: int = 10, hidden: int = 200) -> float:
  """Matmul FLOPs of one gradient (forward + backward) over the samples:
  the Problem's own `grad_flops_per_sample` times their number."""
  return num_samples * _per_sample(model, 'grad_flops_per_sample', dim,
                                   classes, hidden)


def loss_flops(model, num_samples: int, dim: int = 784,
               classes: int = 10, hidden: int = 200) -> float:
  """Matmul FLOPs of the loss alone (the forward pass)."""
  return num_samples * _per_sample(model, 'loss_flops_per_sample', dim,
                                   classes, hidden)


def cost(model: str, num_samples: int, num_points: int, *,
         stochastic: bool = False, batch_samples: int = 0,
         feature_bytes: float = 4, passes: int = 1, dim: int = 784,
         classes: int = 10, hidden: int = 200, loss_every: int = 1) -> Cost:
  """One iteration of a program of `num_points` grid points.

  Args:
    model: a Problem or a registered model's name.
    num_samples: training samples over all workers (N M).
    num_points: G, the points sharing the program.
    stochastic: minibatch gradients; the loss f(theta^k) on every sample is
      still computed every `loss_every` iterations (the trace's loss), so
      one iteration costs 1 / loss_every of it (and of its pass over the
      features). Every point draws its own minibatch rows and reads them
      once.
    batch_samples: minibatch samples over all workers (M times the batch).
    feature_bytes: bytes per feature as the run stores them (8 float64, 4
      float32, 2 for MNIST's pixels as bfloat16 integers).
    passes: passes over the features per iteration: 1 when the points are
      vmapped (they share every pass), G when they are mapped (each point
      reads the data itself).
  """
  if stochastic:
    flops = num_points * (gradient_flops(model, batch_samples, dim, classes,
                                         hidden)
                          + loss_flops(model, num_samples, dim, classes,
                                       hidden) / loss_every)
    read = (passes * num_samples * dim * feature_bytes / loss_every
            + num_points * batch_samples * dim * feature_bytes)
    return Cost(float(flops), float(read), float(num_points * batch_samples))
  flops = num_points * gradient_flops(model, num_samples, dim, classes,
                                      hidden)
  read = passes * num_samples * dim * feature_bytes
  return Cost(float(flops), float(read))


def floor_seconds(c: Cost, rates: dict[str, Any], precision: str) -> float:
  """max(FLOPs / matmul rate, bytes / read bandwidth) for one iteration,
  plus its minibatch draws at the draw's rate (rates measured before the
  draw was in the floor have none: 0 then)."""
  draw_rate = rates.get('draw_rows_per_s')
  return (max(c.flops / rates['matmul_flops_per_s'][precision],
              c.bytes / rates['read_bytes_per_s'])
          + (c.draws / draw_rate if c.draws and draw_rate else 0.0))


def feature_bytes(model, precision: str, integer_features: bool,
                  layout: str | None = None) -> int:
  """Bytes per feature as a run stores what its gradient reads: 2 when
  integer features (MNIST's pixels) are kept as bfloat16 integers for a
  float32 model with a fast full-batch gradient (the 'bf16_split' layout,
  `laq_jax.layouts`), else the run's float type. `layout`: the one the run
  used (sweep.json's); None for runs from before it was recorded, which
  used bf16_split wherever it applied."""
  if precision == 'float64':
    return 8
  fast = _problem(model, 784, 10, 200).workers_value_and_grad is not None
  split = layout == 'bf16_split' if layout is not None else True
  return 2 if fast and integer_features and split else 4
