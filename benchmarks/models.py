r"""The cost of an iteration of each workload's model, against its floor.

    python benchmarks/models.py --out models.json          # ~ minutes on a CPU
    python benchmarks/models.py --quick                    # fewer repeats

For each model (logistic regression, the 200-ReLU MLP, McMahan et al.'s CNN,
the LASG code's CNN, ResNet-20 with GroupNorm, the character LSTM) at its
workload's input (28x28x1 images, 32x32x3 for ResNet-20, 80 characters for
the LSTM): an iteration of minibatch SGD through the loop as the launchers
run it (`laq_jax.run_chunk`: M = 10 vmapped workers, each its minibatch of
B samples, float32; the whole-shard loss not logged), compiled ahead of
time and timed interleaved with the machine's probes (benchmarks/timing.py).
The floor is the iteration's FLOPs (M * B * the model's gradient FLOPs per
sample, `Problem.grad_flops_per_sample`) at the rate this machine reaches:
a float32 matmul (the dense models) or a float32 5x5 convolution (the
convolutional ones), each measured here. The features are random (the cost
of these programs does not depend on the values). Prints a Markdown table
(for docs/benchmarks.md) and writes the raw times as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

import laq_jax  # pylint: disable=g-import-not-at-top
from benchmarks import machine  # pylint: disable=g-import-not-at-top
from benchmarks.timing import aot_run_chunk, time_interleaved  # pylint: disable=g-import-not-at-top
from experiments.run import roofline  # pylint: disable=g-import-not-at-top

WORKERS = 10
# (model, input features, classes, minibatch, iterations per timed call,
#  the rate its floor uses)
WORKLOADS = (
    ('logreg', 784, 10, 50, 20, 'matmul'),
    ('mlp', 784, 10, 50, 20, 'matmul'),
    ('lasg_cnn', 784, 10, 50, 5, 'conv'),
    ('cnn', 784, 10, 50, 3, 'conv'),
    ('resnet20', 3072, 10, 32, 2, 'conv'),
    ('char_lstm', 80, 80, 10, 2, 'matmul'),
    # the same model with lstm='fused' (laq_jax.models.lstm_layer)
    ('char_lstm_fused', 80, 80, 10, 2, 'matmul'),
)


def conv_probe(batch: int = 64) -> roofline.Probe:
  """A float32 5x5 'SAME' convolution, 32 -> 64 channels on 28x28 maps
  (the CNN's second layer): its FLOPs and a compiled call."""
  key = jax.random.key(0)
  x = jax.random.normal(key, (batch, 28, 28, 32), jnp.float32)
  w = jax.random.normal(key, (5, 5, 32, 64), jnp.float32)
  fn = jax.jit(lambda a, b: jax.lax.conv_general_dilated(
      a, b, (1, 1), 'SAME', dimension_numbers=('NHWC', 'HWIO', 'NHWC')))
  compiled = fn.lower(x, w).compile()
  flops = 2.0 * batch * 28 * 28 * 25 * 32 * 64
  return roofline.Probe(f'conv 5x5 32->64 on {batch}x28x28 float32',
                        lambda: compiled(x, w), flops, 'FLOP')


def bench(model, dim, classes, batch, steps):
  """(problem, a call of the compiled program, its compile seconds)."""
  problem, compiled, args, compile_s = build(model, dim, classes, batch,
                                             steps)
  return problem, (lambda: compiled(*args)), compile_s


def build(model, dim, classes, batch, steps, stragglers=False):
  """(problem, the compiled chunk of `steps` iterations, its arguments,
  compile seconds) of one row of WORKLOADS. `stragglers`: compile the
  stragglers' draws in (`RunSpec.stragglers`; the launchers leave them out
  where no point has any, as here; they were in at 4e7d038, where one H200
  ran these programs: `kernels.py --fit` counts them so)."""
  problem = (laq_jax.get_problem('char_lstm', dim, classes, lstm='fused')
             if model == 'char_lstm_fused'
             else laq_jax.get_problem(model, dim, classes))
  rng = np.random.default_rng(0)
  shape = (WORKERS, 2 * batch, dim)
  x = (rng.integers(0, classes, shape) if model.startswith('char_lstm')
       else rng.random(shape))
  data = laq_jax.Data(jnp.asarray(x, jnp.float32),
                      jnp.asarray(rng.integers(0, classes, shape[:2]),
                                  jnp.int32))
  algorithm = laq_jax.get_algorithm('sgd')
  spec = laq_jax.RunSpec(problem, WORKERS, stochastic=True, batch_size=batch,
                         compressors=(algorithm.compressor,),
                         triggers=(algorithm.trigger,),
                         loss_every=10**6, stragglers=stragglers)
  hyper = laq_jax.make_hyper('sgd', dtype=jnp.float32, step_size=1e-3,
                             l2=0.0)
  state = laq_jax.init_state(spec, hyper, jnp.float32)
  compiled, compile_s = aot_run_chunk(spec, state, data, hyper, steps)
  return problem, compiled, (state, data, hyper), compile_s


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true', help='2 repeats')
  parser.add_argument('--out', help='write the raw times here (JSON)')
  parser.add_argument('--only', default='',
                      help='comma-separated models (default: all)')
  args = parser.parse_args(argv)
  repeats = 2 if args.quick else 5
  wanted = [w for w in WORKLOADS
            if not args.only or w[0] in args.only.split(',')]
  calls, built = {}, {}
  start = time.perf_counter()
  for model, dim, classes, batch, steps, rate in wanted:
    problem, call, compile_s = bench(model, dim, classes, batch, steps)
    calls[model] = call
    built[model] = (problem, compile_s)
  probes = {'matmul': roofline.matmul_probe(), 'conv': conv_probe()}
  for name, probe in probes.items():
    calls[f'probe:{name}'] = probe.fn
  times = time_interleaved(calls, repeats)
  rates = {name: probe.rate(min(times[f'probe:{name}']))
           for name, probe in probes.items()}
  rows = []
  for model, dim, classes, batch, steps, rate in wanted:
    problem, compile_s = built[model]
    per_it = min(times[model]) / steps
    flops = WORKERS * batch * problem.grad_flops_per_sample
    floor = flops / rates[rate]
    rows.append({'model': model, 'P': problem.num_params(),
                 'input': dim, 'M': WORKERS, 'B': batch,
                 'gflop_per_iteration': flops / 1e9,
                 'per_iteration_s': per_it, 'floor_s': floor,
                 'ratio': per_it / floor, 'rate': rate,
                 'compile_s': compile_s, 'all_times_s': times[model]})
  result = {'machine': machine.describe_machine(), 'rates_flops_per_s': rates,
            'rows': rows, 'wall_s': time.perf_counter() - start,
            'jax': jax.__version__, 'backend': jax.default_backend()}
  print(f"machine: {result['machine'].get('cpu_model', '?')}, "
        f"{jax.default_backend()}; rates: matmul "
        f"{rates['matmul'] / 1e9:.1f} GFLOP/s, conv "
        f"{rates['conv'] / 1e9:.1f} GFLOP/s (float32)")
  print('| model | P | M x B | GFLOP / iteration | ms / iteration | floor ms '
        '| x floor | rate |')
  print('|---|---:|---:|---:|---:|---:|---:|---|')
  for r in rows:
    print(f"| {r['model']} | {r['P']:,} | {r['M']} x {r['B']} | "
          f"{r['gflop_per_iteration']:.3g} | {1e3 * r['per_iteration_s']:.3g}"
          f" | {1e3 * r['floor_s']:.3g} | {r['ratio']:.2f} | {r['rate']} |")
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(result, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
