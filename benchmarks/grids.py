"""Sweeps: a vmapped G-point sweep vs G separate runs, and its memory.

The grid is laq on logistic regression over bits {2,3,4,8} x xi {0.2, 0.4,
0.8, 1.6} x seed. `bench_sweep` times the sweep program against the
single-point program run once per point (interleaved); `largest_grid` fits
XLA's memory analysis of the sweep program, linear in G, to the memory
available.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import laq_jax
from laq_jax import sweep as sweep_lib
from benchmarks.machine import device_memory_limit
from benchmarks.timing import aot_run_chunk, block, maxrss_bytes, memory_bytes
from benchmarks.workloads import NUM_WORKERS, to_data


def grid_point(index: int, dtype) -> laq_jax.Hyper:
  """The index-th point of a bits x xi x seed grid of laq."""
  bits = (2, 3, 4, 8)[index % 4]
  xi = (0.2, 0.4, 0.8, 1.6)[(index // 4) % 4]
  return laq_jax.make_hyper('laq', dtype=dtype, bits=bits, xi=xi,
                            seed=index // 16)


def bench_sweep(problem_name: str, x, y, grid_sizes, num_steps: int,
                repeats: int, dtype=jnp.float32, grid_axis: str = 'map'
                ) -> dict:
  """A G-point sweep (its points mapped or vmapped, `RunSpec.grid_axis`) vs
  G separate runs of the one-point program.

  Both as the sweep launcher runs them: the RunSpec compiles in laq's parts
  alone (`laq_jax.sweep.parts_of`; a vmapped grid evaluates every compiled
  compressor for every point), logistic regression on the launchers' data
  layouts.
  """
  problem = laq_jax.get_problem(problem_name)
  data = to_data(x, y, dtype, layout=problem_name == 'logreg')
  spec = laq_jax.RunSpec(problem, NUM_WORKERS, grid_axis=grid_axis,
                         **sweep_lib.parts_of([{'algo': 'laq'}]))
  max_g = max(grid_sizes)
  points = [grid_point(i, dtype) for i in range(max_g)]
  states = [laq_jax.init_state(spec, h, dtype) for h in points]

  single, single_compile_s = aot_run_chunk(spec, states[0], data, points[0],
                                           num_steps)
  block(single(states[0], data, points[0]))
  sweeps = {}
  for g in grid_sizes:
    grid = laq_jax.stack_hypers(points[:g])
    grid_state = laq_jax.init_state(spec, grid, dtype)
    compiled, compile_s = aot_run_chunk(spec, grid_state, data, grid,
                                        num_steps)
    block(compiled(grid_state, data, grid))  # warm-up
    sweeps[g] = (compiled, grid_state, grid, compile_s, maxrss_bytes())

  # Interleaved, so both sides see the same load: each repeat runs the sweep
  # of G points, then the separate runs G_prev..G-1 (one at a time); G
  # separate runs = the first G of them.
  run_times = np.full((repeats, max_g), np.inf)
  sweep_times = {g: [] for g in grid_sizes}
  for r in range(repeats):
    done = 0
    for g in grid_sizes:
      compiled, grid_state, grid, _, _ = sweeps[g]
      start = time.perf_counter()
      block(compiled(grid_state, data, grid))
      sweep_times[g].append(time.perf_counter() - start)
      for i in range(done, g):
        start = time.perf_counter()
        block(single(states[i], data, points[i]))
        run_times[r, i] = time.perf_counter() - start
      done = g
  per_run = run_times.min(axis=0)

  rows = []
  for g in grid_sizes:
    compiled, _, _, compile_s, rss = sweeps[g]
    sweep_s = min(sweep_times[g])
    separate_s = float(np.sum(per_run[:g]))
    rows.append({
        'G': g, 'sweep_s': sweep_s, 'separate_s': separate_s,
        'sweep_speedup': separate_s / sweep_s,
        'sweep_per_point_iter_s': sweep_s / g / num_steps,
        'sweep_over_G1': sweep_s / min(sweep_times[grid_sizes[0]]),
        'compile_s': compile_s, 'memory': memory_bytes(compiled),
        'maxrss_bytes_after_warmup': rss,
    })
  return {'problem': problem_name, 'grid_axis': grid_axis,
          'num_steps': num_steps, 'repeats': repeats,
          'single_compile_s': single_compile_s,
          'single_per_iter_s': float(np.median(per_run)) / num_steps,
          'rows': rows}


def largest_grid(problem_name: str, x_shape, grid_sizes, num_steps: int,
                 dtype=jnp.float32, rows=None) -> dict:
  """Largest G whose vmapped sweep program fits, from XLA's memory analysis
  (a mapped one, the default, holds one point's temporaries at a time).

  The program's bytes (arguments + outputs + temporaries) are measured for
  two grid sizes (compiling on abstract shapes, nothing is allocated, unless
  `rows` from `bench_sweep` already have them); they grow linearly in G, so
  G_max = (available - intercept) / slope.
  """
  if rows is None:
    problem = laq_jax.get_problem(problem_name)
    spec = laq_jax.RunSpec(problem, NUM_WORKERS, grid_axis='vmap',
                           **sweep_lib.parts_of([{'algo': 'laq'}]))
    data = laq_jax.Data(jax.ShapeDtypeStruct(x_shape, dtype),
                        jax.ShapeDtypeStruct(x_shape[:2], jnp.int32))
    rows = []
    for g in grid_sizes:
      grid = laq_jax.stack_hypers([grid_point(i, dtype) for i in range(g)])
      state = jax.eval_shape(lambda h: laq_jax.init_state(spec, h, dtype),
                             grid)
      compiled = laq_jax.run_chunk.lower(spec, state, data, grid,
                                         num_steps).compile()
      rows.append({'G': g, 'memory': memory_bytes(compiled)})
  sizes = [(r['G'], r['memory'].get('total')) for r in rows
           if r['memory'].get('total')]
  if len(sizes) < 2:
    return {'problem': problem_name, 'largest_G': None,
            'how': 'memory_analysis unavailable on this backend'}
  (g0, b0), (g1, b1) = sizes[-2], sizes[-1]
  slope = (b1 - b0) / (g1 - g0)
  intercept = b0 - slope * g0
  available, source = device_memory_limit()
  largest = int((available - intercept) // slope) if slope > 0 else None
  return {
      'problem': problem_name, 'num_steps': num_steps,
      'bytes_by_G': {g: b for g, b in sizes},
      'bytes_per_point': slope, 'bytes_fixed': intercept,
      'available_bytes': available, 'available_source': source,
      'largest_G': largest,
      'how': (f'linear fit of XLA memory_analysis totals at G={g0} and '
              f'G={g1}; (available - fixed) / per-point'),
  }
