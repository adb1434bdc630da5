"""How long `benchmarks/gpu.sh` takes on one H200-class GPU, from FLOP counts.

    python benchmarks/gpu_estimate.py [--out estimate.md]

Every program gpu.sh runs (the paper's four experiments at the authors'
budgets, the network at its 8,000 full-batch iterations, the cross-check and
authors_code runs, and the family's four sweeps at full budget): its
iterations x (the larger of its matrix-product FLOPs at a fraction of the
GPU's peak and its passes over the features at a fraction of its memory
bandwidth, `experiments.run.roofline.cost`) + a fixed cost per iteration for
the kernels of the rule and the loop (launch-bound on a GPU: small [M, P]
elementwise work). On an accelerator `grid_axis='auto'` vmaps every grid,
so a grid's points share each pass and each kernel launch.

The assumptions are printed with the estimate; they are the estimate's
error bars, not measurements.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import paper  # pylint: disable=g-import-not-at-top
from experiments.run import config as config_lib
from experiments.run import predict
from experiments.run import roofline
from experiments.studies.family import study as family_study
from laq_jax import hyper as hyper_lib

# NVIDIA H200 SXM (datasheet: FP64 and FP64 tensor 34 / 67 TFLOP/s, FP32
# 67 TFLOP/s (TF32 tensor 495), HBM3e 4.8 TB/s, 141 GB) and what these
# programs reach of it, shared with `python -m experiments.predict`.
H200 = predict.H200
MATMUL_EFFICIENCY = H200['matmul_efficiency']  # of peak, for these shapes
#                   (C = 10 columns, or hidden 200: far from large products)
BANDWIDTH_EFFICIENCY = H200['bandwidth_efficiency']
KERNELS_PER_ITERATION = H200['kernels_per_iteration']  # rule + loop +
#                                                network time, per program
SECONDS_PER_KERNEL = H200['seconds_per_kernel']  # a small kernel's launch
NETWORK_FULL_ITERS = 8000
OVERHEAD_S = 120             # start-up, compiling, loading, f*, accuracy


def programs():
  """(label, config, points) of every sweep or run gpu.sh launches."""
  out = []
  for e in paper.experiments(quick=False, mlp_iters=NETWORK_FULL_ITERS):
    config = paper.sweep_config(e)
    out.append((f'paper {e.name}', config,
                config_lib.points_from_config(config)))
    if e.name == 'logreg':  # the cross-check: the lazy row alone, twice
      run = paper.run_config(e, e.lazy)
      out += [(f'paper cross-check ({w})', run, [{'algo': e.lazy}])
              for w in ('alone', 'devices')]
    if e.stochastic:  # the lazy row with authors_code
      out.append((f'paper {e.name} authors_code', paper.run_config(e, e.lazy),
                  [{'algo': e.lazy}]))
  for study in family_study.studies('full', NETWORK_FULL_ITERS, 0):
    for kind, (arg, _) in study.sweeps.items():
      config = importlib.import_module(
          'configs.sweep_compressors').get_config(arg)
      out.append((f'family {study.name} {kind}', config,
                  config_lib.points_from_config(config)))
  return out


def estimate(device=H200):
  rows = []
  for label, config, points in programs():
    groups = {}
    for p in points:
      stochastic = hyper_lib.get_algorithm(p['algo']).stochastic
      groups[stochastic] = groups.get(stochastic, 0) + 1
    n = config.train_subset or config_lib.MNIST_TRAIN_SIZE
    precision = config.precision
    seconds = flops = 0.0
    for stochastic, g in groups.items():
      cost = roofline.cost(
          config.model, n, g, stochastic=stochastic,
          batch_samples=config.batch_size * config.num_workers,
          feature_bytes=8 if precision == 'float64' else 4, passes=1,
          hidden=config.hidden,
          loss_every=config.get('loss_every') or (10 if stochastic else 1))
      per_iter = predict.device_seconds(cost, device, precision,
                                        gradients=1)
      seconds += config.num_iters * per_iter
      flops += config.num_iters * cost.flops
    rows.append({'program': label, 'points': len(points),
                 'iterations': config.num_iters, 'precision': precision,
                 'model': config.model, 'tflop': flops / 1e12,
                 'seconds': seconds})
  return rows


def markdown(rows, device=H200) -> str:
  total = sum(r['seconds'] for r in rows) + OVERHEAD_S
  lines = [f'# gpu.sh on one {device["name"]}: the estimate from FLOP counts',
           '',
           f'Assumptions: matmul at {MATMUL_EFFICIENCY:.0%} of '
           f'{device["float32_flops"] / 1e12:.0f} TFLOP/s (float32) and '
           f'{device["float64_flops"] / 1e12:.0f} TFLOP/s (float64), '
           f'{BANDWIDTH_EFFICIENCY:.0%} of {device["bandwidth"] / 1e12:.1f} '
           f'TB/s, {KERNELS_PER_ITERATION} kernels of '
           f'{SECONDS_PER_KERNEL * 1e6:.0f} us per iteration of every '
           f'program, {OVERHEAD_S} s of start-up, compiling, loading, f* and '
           'test accuracy; every grid vmapped (`grid_axis=\'auto\'`).', '',
           '| program | points | iterations | model | precision | TFLOP | '
           'estimate (s) |', '|---|---:|---:|---|---|---:|---:|']
  for r in rows:
    lines.append(f"| {r['program']} | {r['points']} | {r['iterations']:,} | "
                 f"{r['model']} | {r['precision']} | {r['tflop']:,.1f} | "
                 f"{r['seconds']:,.1f} |")
  lines += ['', f'**Total: {total:,.0f} s ({total / 60:.1f} min)** against the '
            'target of 8 minutes (benchmarks/run.py and benchmarks/cost.py '
            'add about a minute).', '']
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default=None)
  args = parser.parse_args(argv)
  text = markdown(estimate())
  print(text)
  if args.out:
    with open(args.out, 'w') as f:
      f.write(text)
  return 0


if __name__ == '__main__':
  sys.exit(main())
