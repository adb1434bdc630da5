"""What an iteration costs as the work grows, and which layout is fastest here.

    python benchmarks/cost.py [--quick] [--out cost.json]

Two tables, both through `laq_jax.run_chunk` compiled ahead of time, timed
interleaved (best of the repeats), per iteration of the whole program:

- **layouts**: the full-batch laq iteration of logistic regression in float32
  on every layout the library has (plain data: autodiff; 'transposed'; the
  'bf16_split' of MNIST's integer pixels), N = 6,000 and 60,000 images,
  M = 10 and 100 workers, and the layout `laq_jax.layouts.choose` picks here;
- **cost**: a sweep's iteration against N (6,000 / 60,000 images), G (1, 4,
  16, 64 points, `grid_axis='auto'`) and the problem (logistic regression in
  float64 as the convex experiment runs it; the network in float32 as its
  full-batch experiment runs it), with the floor (`experiments.run.roofline`:
  matmul FLOPs at the measured dense rate, or the passes over the features
  at the measured read bandwidth) and wall / floor beside each: what
  `experiments.run.predict` multiplies a sweep's floor by to predict its time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np

import laq_jax
from benchmarks import machine
from benchmarks.grids import grid_point
from benchmarks.timing import aot_run_chunk, block
from benchmarks.workloads import load_shards
from experiments.run import roofline
from laq_jax import layouts
from laq_jax import sweep as sweep_lib


def _time(programs: dict, repeats: int) -> dict:
  """name -> (compiled, args): best seconds of each, interleaved."""
  best = {k: float('inf') for k in programs}
  for name, (compiled, args) in programs.items():
    block(compiled(*args))  # warm-up
  for _ in range(repeats):
    for name, (compiled, args) in programs.items():
      start = time.perf_counter()
      block(compiled(*args))
      best[name] = min(best[name], time.perf_counter() - start)
  return best


def bench_layouts(x, y, sizes, num_steps: int, repeats: int) -> list[dict]:
  """Per-iteration seconds of float32 laq on each layout, per (N, M)."""
  rows = []
  for n, m in sizes:
    xs = x.reshape(-1, x.shape[-1])[:n].reshape(m, n // m, -1)
    ys = y.reshape(-1)[:n].reshape(m, n // m)
    plain = laq_jax.Data(jnp.asarray(xs, jnp.float32), jnp.asarray(ys))
    candidates = {'plain': plain,
                  'transposed': laq_jax.fast_layout(plain, None),
                  'bf16_split': laq_jax.fast_layout(plain, 1 / 255)}
    spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), m,
                           **sweep_lib.parts_of([{'algo': 'laq'}]))
    hyper = laq_jax.make_hyper('laq', dtype=jnp.float32)
    state = laq_jax.init_state(spec, hyper, jnp.float32)
    programs = {}
    for name, data in candidates.items():
      compiled, _ = aot_run_chunk(spec, state, data, hyper, num_steps)
      programs[name] = (compiled, (state, data, hyper))
    times = _time(programs, repeats)
    chosen = layouts.choose(plain, 1 / 255)
    fastest = min(('transposed', 'bf16_split'), key=times.get)
    rows.append({'N': n, 'M': m, 'per_iter_s': {
        k: v / num_steps for k, v in times.items()},
                 'chosen': chosen, 'fastest': fastest,
                 'chosen_over_fastest': times[chosen] / times[fastest]})
  return rows


def bench_cost(data_dir, sizes, grid_sizes, rates, repeats: int,
               problems=('logreg', 'mlp')) -> list[dict]:
  """Per-iteration seconds of a G-point grid, with its floor."""
  rows = []
  settings = {'logreg': (jnp.float64, np.float64, 'float64', 5),
              'mlp': (jnp.float32, np.float32, 'float32', 2)}
  for name in problems:
    dtype, np_dtype, precision, steps = settings[name]
    problem = laq_jax.get_problem(name)
    x_full, y_full = load_shards(data_dir, None, np_dtype)
    for n in sizes:
      per = n // x_full.shape[0]
      data = laq_jax.Data(jnp.asarray(x_full[:, :per], dtype),
                          jnp.asarray(y_full[:, :per]))
      if problem.workers_value_and_grad is not None:
        data = layouts.auto_layout(data, 1 / 255)
      spec = laq_jax.RunSpec(problem, x_full.shape[0],
                             **sweep_lib.parts_of([{'algo': 'laq'}]))
      axis = laq_jax.spec.resolve_grid_axis(spec)
      for g in grid_sizes:
        hyper = (grid_point(0, dtype) if g == 1 else
                 laq_jax.stack_hypers([grid_point(i, dtype)
                                       for i in range(g)]))
        state = laq_jax.init_state(spec, hyper, dtype)
        compiled, compile_s = aot_run_chunk(spec, state, data, hyper, steps)
        seconds = _time({'it': (compiled, (state, data, hyper))},
                        repeats)['it'] / steps
        cost = roofline.cost(
            name, n, g, feature_bytes=8 if precision == 'float64' else 4,
            passes=1 if (axis == 'vmap' or g == 1) else g)
        floor = roofline.floor_seconds(cost, rates, precision)
        rows.append({'problem': name, 'precision': precision, 'N': n, 'G': g,
                     'grid_axis': axis if g > 1 else 'single',
                     'per_iter_s': seconds, 'per_point_iter_s': seconds / g,
                     'floor_s': floor, 'wall_over_floor': seconds / floor,
                     'compile_s': compile_s})
        print(f"  {name:6s} N={n:>6,} G={g:>2} {rows[-1]['grid_axis']:6s} "
              f'{1e3 * seconds:9.1f} ms/it  floor {1e3 * floor:8.1f} ms  '
              f"x{rows[-1]['wall_over_floor']:.2f}", file=sys.stderr,
              flush=True)
        del compiled
  return rows


def print_tables(result: dict) -> None:
  print('[layouts: float32 laq, logistic regression, ms per iteration]')
  print(f"  {'N':>7} {'M':>4} {'plain':>9} {'transposed':>11} "
        f"{'bf16_split':>11}  chosen      fastest")
  for r in result['layouts']:
    t = {k: 1e3 * v for k, v in r['per_iter_s'].items()}
    print(f"  {r['N']:>7,} {r['M']:>4} {t['plain']:9.2f} "
          f"{t['transposed']:11.2f} {t['bf16_split']:11.2f}  "
          f"{r['chosen']:<11} {r['fastest']}")
  if result.get('cost'):
    print('\n[cost per iteration: the whole G-point program]')
    print(f"  {'problem':8} {'N':>7} {'G':>3} {'axis':6} {'ms/it':>9} "
          f"{'ms/pt/it':>9} {'floor ms':>9} {'wall/floor':>10}")
    for r in result['cost']:
      print(f"  {r['problem']:8} {r['N']:>7,} {r['G']:>3} {r['grid_axis']:6} "
            f"{1e3 * r['per_iter_s']:9.1f} {1e3 * r['per_point_iter_s']:9.2f}"
            f" {1e3 * r['floor_s']:9.1f} {r['wall_over_floor']:10.2f}")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='6,000 images, G up to 16, fewer repeats')
  parser.add_argument('--only', choices=('layouts', 'cost'), default=None)
  parser.add_argument('--out', default=None)
  parser.add_argument('--data_dir', default=None)
  args = parser.parse_args(argv)
  jax.config.update('jax_enable_x64', True)
  start = time.perf_counter()
  result = {'machine': machine.describe_machine(), 'quick': args.quick}
  x, y = load_shards(args.data_dir, None)
  repeats = 2 if args.quick else 3
  if args.only in (None, 'layouts'):
    sizes = ((6000, 10),) if args.quick else ((6000, 10), (60000, 10),
                                              (60000, 100))
    result['layouts'] = bench_layouts(x, y, sizes, 5 if args.quick else 10,
                                      repeats)
  else:
    result['layouts'] = []
  if args.only in (None, 'cost'):
    result['rates'] = roofline.measure(repeats=3)
    result['cost'] = bench_cost(
        args.data_dir, (6000,) if args.quick else (6000, 60000),
        (1, 4, 16) if args.quick else (1, 4, 16, 64), result['rates'],
        2)  # best of 2: the G = 64 network takes 40 s per call
  result['machine']['load_average_end'] = os.getloadavg()
  result['seconds'] = time.perf_counter() - start
  print_tables(result)
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(result, f, indent=1, default=str)
  return 0


if __name__ == '__main__':
  sys.exit(main())
