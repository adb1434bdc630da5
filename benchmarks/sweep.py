#!/usr/bin/env python
"""A sweep as one vmapped program against G separate runs, compile time apart.

    python benchmarks/sweep.py                 # MNIST subset, G in 1, 4, 16
    python benchmarks/sweep.py --full          # full MNIST (60,000 images)
    python benchmarks/sweep.py --grid 1,4,16,48 --iters 100 --out sweep.json

Runs from the repository root (it puts the root on sys.path itself). Needs
MNIST: set LAQ_JAX_DATA (or pass --data_dir).

For each G, the first G points of the grid laq x bits {2,3,4,8} x xi {0.2,
0.4, 0.8, 1.6} x seed {0, 1, 2} (logistic regression, M = 10 workers):
  * sweep: `laq_jax.run_chunk` with a [G] Hyper, the whole scan vmapped over
    the grid (what `laq_jax.sweep.run_sweep` calls);
  * separate: the single-point program (scalar Hyper, what `experiments.main`
    runs), called once per point, one after the other, in the same process;
  * separate_g1: the same, but each point run as a grid of one (the vmapped
    program with G = 1), which isolates what vmapping the grid itself gains
    from any difference between the scalar and the vmapped programs.
Both are compiled ahead of time (`jit(...).lower(...).compile()`), so the
compile times are printed apart; each timed call follows one warm-up call, is
synchronised with `block_until_ready`, and the figure kept is the minimum
over `--repeats` (the least disturbed, on a shared machine), the two sides
timed interleaved. ratio = separate / sweep, ratio_g1 = separate_g1 / sweep
(above 1: the sweep is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np

import laq_jax
from laq_jax import data as data_lib
from laq_jax import sweep
from benchmarks.timing import aot_run_chunk, block

NUM_WORKERS = 10
GRID = {'bits': [2, 3, 4, 8], 'xi': [0.2, 0.4, 0.8, 1.6], 'seed': [0, 1, 2]}
# Every Hyper field a grid point holds (laq_jax.sweep.HYPER_KEYS).
BASE = dict(algo='laq', step_size=0.02, bits=4, xi=0.8, err_weight=3.0,
            threshold_offset=0.0, max_staleness=100, l2=0.01, seed=0)


def _timed(fn):
  start = time.perf_counter()
  block(fn())
  return time.perf_counter() - start


def bench(spec, data, points, num_steps, repeats):
  """Seconds for the vmapped sweep and for the points run one by one."""
  dtype = data.x_MxNxD.dtype
  hyper_G = sweep.stack_points(points, dtype)
  state_G = laq_jax.init_state(spec, hyper_G, dtype)
  swept, compile_sweep = aot_run_chunk(spec, state_G, data, hyper_G, num_steps)

  singles = []
  for point in points:
    hyper = laq_jax.make_hyper(point['algo'], dtype=dtype,
                               **{k: point[k] for k in sweep.HYPER_KEYS})
    singles.append((laq_jax.init_state(spec, hyper, dtype), hyper))
  single, compile_single = aot_run_chunk(spec, singles[0][0], data,
                                         singles[0][1], num_steps)

  # The same points as grids of one: the vmapped program with G = 1.
  ones = []
  for point in points:
    hyper = sweep.stack_points([point], dtype)
    ones.append((laq_jax.init_state(spec, hyper, dtype), hyper))
  one, compile_one = aot_run_chunk(spec, ones[0][0], data, ones[0][1],
                                   num_steps)

  runs = {'sweep': lambda: swept(state_G, data, hyper_G),
          'separate': lambda: [single(s, data, h) for s, h in singles],
          'separate_g1': lambda: [one(s, data, h) for s, h in ones]}
  for fn in runs.values():
    block(fn())
  seconds = {name: [] for name in runs}
  for _ in range(repeats):
    for name, fn in runs.items():
      seconds[name].append(_timed(fn))
  best = {name: min(v) for name, v in seconds.items()}
  per = lambda t: 1e3 * t / (len(points) * num_steps)
  return {'G': len(points), 'compile_sweep_s': compile_sweep,
          'compile_single_s': compile_single, 'compile_g1_s': compile_one,
          'sweep_s': best['sweep'], 'separate_s': best['separate'],
          'separate_g1_s': best['separate_g1'],
          'ratio': best['separate'] / best['sweep'],
          'ratio_g1': best['separate_g1'] / best['sweep'],
          'ms_per_point_iteration_sweep': per(best['sweep']),
          'ms_per_point_iteration_separate': per(best['separate']),
          'ms_per_point_iteration_separate_g1': per(best['separate_g1'])}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--full', action='store_true',
                      help='full MNIST (60,000 images) instead of a subset')
  parser.add_argument('--subset', type=int, default=6000,
                      help='training images without --full (default 6000)')
  parser.add_argument('--grid', default='1,4,16',
                      help='comma-separated grid sizes G (at most 48)')
  parser.add_argument('--iters', type=int, default=20,
                      help='iterations per run (one compiled chunk)')
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--precision', default='float64',
                      choices=('float32', 'float64'))
  parser.add_argument('--data_dir', default=None)
  parser.add_argument('--out', default=None, help='also write JSON here')
  args = parser.parse_args()

  # float64 on for a float64 run; every array asks for its dtype, so a
  # float32 run stays float32.
  jax.config.update('jax_enable_x64', True)
  dtype = np.float64 if args.precision == 'float64' else np.float32
  mnist = data_lib.load_mnist(args.data_dir, dtype=dtype)
  num = 60_000 if args.full else args.subset
  x, y = data_lib.make_shards(mnist['x_train'][:num], mnist['y_train'][:num],
                              NUM_WORKERS)
  data = laq_jax.Data(jnp.asarray(x), jnp.asarray(y))
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), NUM_WORKERS)
  all_points = sweep.expand_grid(GRID, BASE)
  sizes = [int(g) for g in args.grid.split(',')]
  if any(not 1 <= g <= len(all_points) for g in sizes):
    parser.error(f'--grid={args.grid}: each G must be in 1..'
                 f'{len(all_points)}')

  print(f'# sweep vs separate runs: logreg, M={NUM_WORKERS}, {num} images, '
        f'{args.precision}, {args.iters} iterations, {jax.device_count()} x '
        f'{jax.devices()[0].platform} ({os.cpu_count()} CPU cores), best of '
        f'{args.repeats}')
  header = ('G', 'compile sweep s', 'sweep s', 'G separate s', 'ratio',
            'G separate (G=1 grids) s', 'ratio_g1', 'ms/pt-it sweep',
            'ms/pt-it separate', 'ms/pt-it separate_g1')
  print(' | '.join(header))
  results = []
  for g in sizes:
    jax.clear_caches()  # compile times below are first compiles
    r = bench(spec, data, all_points[:g], args.iters, args.repeats)
    results.append(r)
    print(f"{r['G']} | {r['compile_sweep_s']:.2f} | {r['sweep_s']:.3f} | "
          f"{r['separate_s']:.3f} | {r['ratio']:.2f}x | "
          f"{r['separate_g1_s']:.3f} | {r['ratio_g1']:.2f}x | "
          f"{r['ms_per_point_iteration_sweep']:.2f} | "
          f"{r['ms_per_point_iteration_separate']:.2f} | "
          f"{r['ms_per_point_iteration_separate_g1']:.2f}", flush=True)
  print(f"# compile, single-point program: {results[-1]['compile_single_s']:.2f}"
        f" s; G=1 grid program: {results[-1]['compile_g1_s']:.2f} s")
  if args.out:
    meta = {'images': num, 'precision': args.precision,
            'iterations': args.iters, 'repeats': args.repeats,
            'devices': f'{jax.device_count()} x {jax.devices()[0].platform}',
            'cpu_count': os.cpu_count(), 'python': platform.python_version(),
            'jax': jax.__version__}
    with open(args.out, 'w') as f:
      json.dump({'meta': meta, 'results': results}, f, indent=2)


if __name__ == '__main__':
  main()
