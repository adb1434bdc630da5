#!/usr/bin/env python
"""laq-jax benchmarks: how fast, against what, and how close to the machine's limit.

    python benchmarks/run.py [--quick] [--out bench.json]

Runs from the repository root (it puts the root on sys.path itself). Needs
MNIST: set LAQ_JAX_DATA (or pass --data_dir). Prints a table and writes JSON.

Every time is a per-iteration wall time of an ahead-of-time compiled program
(`jit(...).lower(...).compile()`, so compile time is measured apart), after one
warm-up call, synchronised with `block_until_ready`; the figure kept is the
minimum over repeats (the least disturbed, on a shared machine), and programs
compared with each other are timed interleaved. Ratios are A's time over B's.

Sections (and the module of benchmarks/ that holds each):
  machine   the dense matmul FLOP/s and read bandwidth this machine reaches
            (machine.py; the probes are experiments/run/roofline.py's).
  floor     logistic regression's LAQ iteration (full MNIST, M = 10) against
            its floor, max(gradient FLOPs / matmul rate, feature bytes /
            read bandwidth), float32 and float64: logreg_floor_fraction(_
            float64), and the same before the fast gradient (autodiff on
            plain data) (workloads.py).
  laq/gd    laq vs gd through `laq_jax.run_chunk` (the same compiled program:
            gd and laq differ only in the Hyper switches), vs a plain
            gradient-descent scan written here (no rule), the rule step alone,
            and the gradient without the worker axis; FLOP/s and bytes/s
            (workloads.py).
  numpy     laq-jax (on the launchers' data layouts) vs the NumPy oracle of
            the tests (tests/reference.py) on full MNIST logistic
            regression, float32 and float64 (vs_numpy.py); the data are
            loaded in each float type, as the launchers load them.
  check     the NumPy oracle vs laq-jax on an MNIST subset, 20 iterations:
            uploads must be equal in float64 (float32 is reported only)
            (vs_numpy.py).
  loss_every  the minibatch network (SLAQ, 500 per worker) logging the full
            objective every iteration vs every 10 (`RunSpec.loss_every`)
            vs never: mlp_minibatch_loss_every_1_over_10 (workloads.py).
  sweep     a vmapped sweep of G grid points vs G separate runs of the
            single-point program, for G in (1, 4, 16, 64); memory of the sweep
            program (XLA's memory_analysis) and the largest G that fits
            (grids.py).
The table is printed by report.py; timing.py holds the timing helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np

from benchmarks import grids
from benchmarks import machine
from benchmarks import report
from benchmarks import vs_numpy
from benchmarks import workloads
from benchmarks.timing import maxrss_bytes

LAQ_OVER_GD_TARGET = 1.15


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='a data subset and smaller grids (under a minute)')
  parser.add_argument('--out', default=None, help='where to write the JSON')
  parser.add_argument('--data_dir', default=None,
                      help='MNIST directory (default: LAQ_JAX_DATA, ...)')
  parser.add_argument('--repeats', type=int, default=None,
                      help='timed repeats per measurement (min is kept)')
  parser.add_argument('--only', default=None, choices=('loss_every', 'sweep', 'floor'),
                      help='run this section alone (with the machine '
                      'description)')
  args = parser.parse_args(argv)
  if args.only:
    return _only(args)

  start = time.perf_counter()
  # float64 is on for the float64 sections; every array asks for its dtype,
  # so the float32 programs stay float32.
  jax.config.update('jax_enable_x64', True)
  quick = args.quick
  repeats = args.repeats or (3 if quick else 5)
  result = {'command': ' '.join([os.path.basename(sys.executable)]
                                + sys.argv),
            'quick': quick, 'machine': machine.describe_machine()}
  x_full, y_full = workloads.load_shards(args.data_dir, None)
  x, y = (x_full[:, :600], y_full[:, :600]) if quick else (x_full, y_full)

  def log(msg):
    print(f'[{time.perf_counter() - start:6.1f}s] {msg}', file=sys.stderr,
          flush=True)

  log('machine limits')
  probes = {'matmul': machine.matmul_probe(1024 if quick else 2048),
            'bandwidth': machine.bandwidth_probe(2**26 if quick else 2**28)}
  result['matmul'] = machine.bench_probe(probes['matmul'], repeats + 2)
  result['bandwidth'] = machine.bench_probe(probes['bandwidth'], repeats + 2)

  result['logreg_floor'] = {}
  for dtype in (jnp.float32, jnp.float64):
    name = jnp.dtype(dtype).name
    log(f'logistic regression against its floor: {name}')
    xs, ys = (x, y) if dtype == jnp.float32 else (
        workloads.load_shards(args.data_dir, 600 if quick else None,
                              np.float64))
    result['logreg_floor'][name] = workloads.bench_logreg_floor(
        xs, ys, dtype, num_steps=10, repeats=repeats)

  result['laq_vs_gd'] = {}
  for name, steps in (('logreg', 10), ('mlp', 2)):
    log(f'laq vs gd: {name}')
    result['laq_vs_gd'][name] = workloads.bench_laq_vs_gd(
        name, x, y, steps, repeats, probes)

  log('minibatch network: the logged objective every 1 vs 10 iterations')
  result['loss_every'] = workloads.bench_loss_every(
      x, y, num_steps=10 if quick else 20, repeats=repeats)

  result['jax_vs_numpy'] = {}
  for dtype in (jnp.float32, jnp.float64):
    log(f'laq-jax vs NumPy: {jnp.dtype(dtype).name}')
    xs, ys = (x, y) if dtype == jnp.float32 else (
        workloads.load_shards(args.data_dir, 600 if quick else None,
                              np.float64))
    result['jax_vs_numpy'][jnp.dtype(dtype).name] = (
        vs_numpy.bench_jax_vs_numpy(xs, ys, dtype, jax_steps=5,
                                    numpy_steps=2, repeats=repeats))

  log('self-check')
  # 128 samples per worker (see vs_numpy.self_check).
  result['self_check'] = vs_numpy.self_check(x_full, y_full, per_worker=128,
                                             num_steps=20)

  log('sweep')
  grid_sizes = (1, 4, 16) if quick else (1, 4, 16, 64)
  result['sweep'] = grids.bench_sweep('logreg', x, y, grid_sizes, num_steps=3,
                                      repeats=2 if quick else 3)
  result['sweep_vmap'] = grids.bench_sweep('logreg', x, y, grid_sizes,
                                           num_steps=3,
                                           repeats=2 if quick else 3,
                                           grid_axis='vmap')
  log('largest grid')
  result['largest_grid'] = {
      'logreg': grids.largest_grid('logreg', x.shape, None, 3,
                                   rows=result['sweep_vmap']['rows']),
      'mlp': grids.largest_grid('mlp', x_full.shape,
                                (2, 4) if quick else (4, 16), 3),
  }

  lg, mlp = result['laq_vs_gd']['logreg'], result['laq_vs_gd']['mlp']
  floor = result['logreg_floor']
  result.update({
      'logreg_floor_fraction': floor['float32']['floor_fraction'],
      'logreg_floor_fraction_float64': floor['float64']['floor_fraction'],
      'logreg_floor_fraction_before': floor['float32'][
          'floor_fraction_before'],
      'logreg_floor_fraction_float64_before': floor['float64'][
          'floor_fraction_before'],
      'logreg_floor_fraction_paper_grid': floor['float32'][
          'floor_fraction_paper_grid'],
      'logreg_floor_fraction_float64_paper_grid': floor['float64'][
          'floor_fraction_paper_grid'],
      'logreg_floor_fraction_paper_grid_vmap': floor['float32'][
          'floor_fraction_paper_grid_vmap'],
      'logreg_floor_fraction_float64_paper_grid_vmap': floor['float64'][
          'floor_fraction_paper_grid_vmap'],
      'laq_over_gd_logreg': lg['laq_over_gd'],
      'laq_over_gd_mlp': mlp['laq_over_gd'],
      'laq_over_plain_gd_logreg': lg['laq_over_plain_gd'],
      'laq_over_plain_gd_mlp': mlp['laq_over_plain_gd'],
      'laq_over_gd_target': LAQ_OVER_GD_TARGET,
      'mlp_minibatch_loss_every_1_over_10': result['loss_every']['ratios'][
          'every_1_over_every_10']['median'],
      'jax_over_numpy_float32': result['jax_vs_numpy']['float32'][
          'jax_over_numpy'],
      'jax_over_numpy_float64': result['jax_vs_numpy']['float64'][
          'jax_over_numpy'],
      'sweep_speedup': result['sweep']['rows'][-1]['sweep_speedup'],
      'sweep_speedup_by_G': {r['G']: r['sweep_speedup']
                             for r in result['sweep']['rows']},
      'sweep_speedup_vmap': result['sweep_vmap']['rows'][-1]['sweep_speedup'],
      'sweep_speedup_vmap_by_G': {r['G']: r['sweep_speedup']
                                  for r in result['sweep_vmap']['rows']},
      # The MLP gradient is matmul-bound; logreg (C = 10 columns) is not.
      'matmul_fraction': mlp['matmul_fraction'],
      'matmul_fraction_logreg': lg['matmul_fraction'],
      'bandwidth_fraction_logreg': lg['bandwidth_fraction'],
      'self_check_ok': all(r['ok'] for r in result['self_check']
                           if r['strict']),
      'maxrss_bytes': maxrss_bytes(),
  })
  result['jax_over_numpy'] = result['jax_over_numpy_float32']
  result['machine']['load_average_end'] = os.getloadavg()
  result['seconds'] = time.perf_counter() - start
  report.print_table(result)
  log('done')
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(result, f, indent=1, default=_json_default)
  return 0 if result['self_check_ok'] else 1


def _only(args) -> int:
  """One section alone: `--only loss_every`, `sweep` or `floor`."""
  start = time.perf_counter()
  repeats = args.repeats or (3 if args.quick else 5)
  result = {'command': ' '.join([os.path.basename(sys.executable)]
                                + sys.argv),
            'quick': args.quick, 'machine': machine.describe_machine()}
  x, y = workloads.load_shards(args.data_dir, None)
  if args.only == 'floor':  # logistic regression against its floor
    jax.config.update('jax_enable_x64', True)
    result['logreg_floor'] = {}
    for dtype in (jnp.float32, jnp.float64):
      xs, ys = (x, y) if dtype == jnp.float32 else workloads.load_shards(
          args.data_dir, None, np.float64)
      if args.quick:
        xs, ys = xs[:, :600], ys[:, :600]
      r = workloads.bench_logreg_floor(xs, ys, dtype, num_steps=10,
                                       repeats=repeats)
      result['logreg_floor'][r['dtype']] = r
      print(f"{r['dtype']}: laq {1e3 * r['per_iter_s']['laq']:.2f} ms/it, "
            f"floor {1e3 * r['floor_s']:.2f} ms ({r['floor_bound']}-bound, "
            f"{r['feature_layout']} features), fraction of floor "
            f"{r['floor_fraction']:.3f} (before: autodiff "
            f"{1e3 * r['per_iter_s']['laq_autodiff']:.2f} ms, "
            f"{r['floor_fraction_before']:.3f}); paper grid mapped "
            f"{r['floor_fraction_paper_grid']:.3f}, vmapped "
            f"{r['floor_fraction_paper_grid_vmap']:.3f} of its floor",
            flush=True)
    result['machine']['load_average_end'] = os.getloadavg()
    if args.out:
      with open(args.out, 'w') as f:
        json.dump(result, f, indent=1, default=_json_default)
    return 0
  if args.only == 'sweep':
    jax.config.update('jax_enable_x64', True)
    if args.quick:
      x, y = x[:, :600], y[:, :600]
    sizes = (1, 4, 16) if args.quick else (1, 4, 16, 64)
    for key, axis in (('sweep', 'map'), ('sweep_vmap', 'vmap')):
      result[key] = grids.bench_sweep('logreg', x, y, sizes, num_steps=3,
                                      repeats=2 if args.quick else 3,
                                      grid_axis=axis)
    mapped = {r['G']: r for r in result['sweep']['rows']}
    result['vmap_over_map_per_point'] = {
        r['G']: mapped[r['G']]['sweep_s'] / r['sweep_s']
        for r in result['sweep_vmap']['rows']}
    result['machine']['load_average_end'] = os.getloadavg()
    result['seconds'] = time.perf_counter() - start
    print(f"machine: {result['machine']['cpu_model']}, load avg start "
          f"{result['machine']['load_average_start'][0]:.2f} end "
          f"{result['machine']['load_average_end'][0]:.2f}")
    print('  G   mapped ms/pt/it  vmapped ms/pt/it  separate ms/pt/it  '
          'vmapped vs mapped  vmapped vs separate')
    for r in result['sweep_vmap']['rows']:
      g = r['G']
      steps = result['sweep_vmap']['num_steps']
      print(f"  {g:<3} {1e3 * mapped[g]['sweep_per_point_iter_s']:16.2f} "
            f"{1e3 * r['sweep_per_point_iter_s']:17.2f} "
            f"{1e3 * r['separate_s'] / g / steps:18.2f} "
            f"{result['vmap_over_map_per_point'][g]:17.2f}x "
            f"{r['sweep_speedup']:19.2f}x")
    if args.out:
      with open(args.out, 'w') as f:
        json.dump(result, f, indent=1, default=_json_default)
    return 0
  result['loss_every'] = workloads.bench_loss_every(
      x, y, num_steps=10 if args.quick else 20, repeats=repeats)
  result['machine']['load_average_end'] = os.getloadavg()
  result['seconds'] = time.perf_counter() - start
  r = result['loss_every']
  print(f"machine: {result['machine']['cpu_model']}, load avg start "
        f"{result['machine']['load_average_start'][0]:.2f} end "
        f"{result['machine']['load_average_end'][0]:.2f}")
  for k, v in r['per_iter_s'].items():
    print(f'  {k:<16} {1e3 * v:10.2f} ms per iteration')
  for k, v in r['ratios'].items():
    print(f"  {k:<24} {v['median']:.2f} x (paired repeats "
          f"{v['min']:.2f}..{v['max']:.2f})")
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(result, f, indent=1, default=_json_default)
  return 0


def _json_default(value):
  if isinstance(value, (np.generic,)):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.tolist()
  return str(value)


if __name__ == '__main__':
  sys.exit(main())
