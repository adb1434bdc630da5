r"""How the cost of an iteration grows with the number of clients M.

    LAQ_JAX_DATA=/path/to/mnist python benchmarks/clients.py --out clients.json
    LAQ_JAX_DATA=/path/to/mnist python benchmarks/clients.py --quick   # 6,000 images

At a fixed training set (all 60,000 MNIST images: 6,000 each at M = 10, 600
at M = 100, 60 at M = 1,000), for logistic regression (P = 7,850, float64,
the launchers' fast layout) and the 200-ReLU network (P = 159,010, float32),
side by side in one run, each program compiled ahead of time and timed
interleaved (benchmarks/timing.py):
  loop      the LAQ iteration as the launchers run it (`laq_jax.run_chunk`,
            full participation; the same program with q = 0.1 computes
            every client's gradient too and masks the absent ones);
  gradient  every client's full-batch gradient and the sum, no rule (its
            work is fixed by N, whatever M is);
  rule      the LAQ rule step alone on fixed gradients [M, P] (its work is
            M * P: the innovations, the quantizer, the trigger, the sums);
and XLA's memory analysis of each (arguments + outputs + temporaries), the
rule state's bytes, and the process's peak resident memory. Prints a table
and writes the raw times as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
jax.config.update('jax_enable_x64', True)
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

import laq_jax  # pylint: disable=g-import-not-at-top
from benchmarks import machine  # pylint: disable=g-import-not-at-top
from benchmarks.timing import aot, aot_run_chunk, maxrss_bytes, memory_bytes  # pylint: disable=g-import-not-at-top
from benchmarks.timing import time_interleaved  # pylint: disable=g-import-not-at-top
from benchmarks.workloads import plain_gd_chunk  # pylint: disable=g-import-not-at-top
from laq_jax import data as data_lib  # pylint: disable=g-import-not-at-top

CLIENTS = (10, 100, 1000)
PROBLEMS = {'logreg': dict(dtype=jnp.float64, steps=10),
            'mlp': dict(dtype=jnp.float32, steps=3)}


def rule_chunk(spec, grads_MxP, state, theta_P, hyper, num_steps):
  """The rule step alone (the loop's parts), on fixed gradients."""
  ids = jnp.arange(spec.num_workers, dtype=jnp.int32)

  def body(carry, _):
    step, theta, rule_state = carry
    theta, rule_state, stats = spec.rule.step(
        grads_MxP, rule_state, theta, hyper, step_count=step,
        worker_ids_M=ids, num_workers=spec.num_workers, axis_name=None,
        parts=spec.parts)
    return (step + 1, theta, rule_state), stats.sent_M

  return jax.lax.scan(body, (jnp.int32(0), theta_P, state), None,
                      length=num_steps)


def bench(problem_name, num_clients, x, y, repeats):
  opts = PROBLEMS[problem_name]
  dtype, steps = opts['dtype'], opts['steps']
  x_MxNxD, y_MxN = data_lib.make_shards(x, y, num_clients)
  data = laq_jax.Data(jnp.asarray(x_MxNxD, dtype), jnp.asarray(y_MxN))
  problem = laq_jax.get_problem(problem_name)
  if problem_name == 'logreg':
    data = laq_jax.fast_layout(data, 1 / 255)
  spec = laq_jax.RunSpec(problem, num_clients, compressors=('uniform',),
                         triggers=('laq',))
  bits = 4 if problem_name == 'logreg' else 8
  hyper = laq_jax.make_hyper('laq', dtype=dtype, bits=bits)
  state = laq_jax.init_state(spec, hyper, dtype)
  start = time.perf_counter()
  loop_c, loop_compile = aot_run_chunk(spec, state, data, hyper, steps)
  grad_c, grad_compile = aot(
      lambda d, th: plain_gd_chunk(problem, d, th, 1e-3, 1e-2, steps),
      data, state.theta_P)
  grads = jnp.asarray(np.random.default_rng(0).normal(
      size=(num_clients, problem.num_params())) * 1e-3, dtype)
  rule_c, rule_compile = aot(
      lambda g, s, th, h: rule_chunk(spec, g, s, th, h, steps),
      grads, state.rule, state.theta_P, hyper)
  compile_s = time.perf_counter() - start
  times = time_interleaved({
      'loop': lambda: loop_c(state, data, hyper),
      'gradient': lambda: grad_c(data, state.theta_P),
      'rule': lambda: rule_c(grads, state.rule, state.theta_P, hyper),
  }, repeats)
  state_bytes = sum(int(a.nbytes) for a in jax.tree.leaves(state.rule))
  return {
      'problem': problem_name, 'M': num_clients,
      'P': problem.num_params(), 'N': int(np.prod(y_MxN.shape)),
      'dtype': jnp.dtype(dtype).name, 'steps_per_call': steps,
      'per_iteration_s': {k: min(v) / steps for k, v in times.items()},
      'all_times_s': times,
      'compile_s': {'loop': loop_compile, 'gradient': grad_compile,
                    'rule': rule_compile, 'all': compile_s},
      'memory_bytes': {'loop': memory_bytes(loop_c),
                       'gradient': memory_bytes(grad_c),
                       'rule': memory_bytes(rule_c)},
      'rule_state_bytes': state_bytes,
      'maxrss_bytes': maxrss_bytes(),
  }


def table(results) -> str:
  lines = ['| problem | M | loop ms/it | gradient ms/it | rule ms/it | '
           'rule ns per M*P | loop memory (XLA) | rule state |',
           '|---|---:|---:|---:|---:|---:|---:|---:|']
  for r in results:
    t = r['per_iteration_s']
    mem = r['memory_bytes']['loop'].get('total', 0)
    lines.append(
        f"| {r['problem']} | {r['M']:,} | {1e3 * t['loop']:.2f} | "
        f"{1e3 * t['gradient']:.2f} | {1e3 * t['rule']:.2f} | "
        f"{1e9 * t['rule'] / (r['M'] * r['P']):.3f} | "
        f"{mem / 2**20:,.0f} MiB | {r['rule_state_bytes'] / 2**20:,.0f} MiB |")
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='6,000 images (M = 1,000: 6 each), 2 repeats')
  parser.add_argument('--repeats', type=int, default=None)
  parser.add_argument('--problems', default='logreg,mlp')
  parser.add_argument('--out', default=None, help='JSON file of raw results')
  args = parser.parse_args(argv)
  mnist = data_lib.load_mnist(None, dtype=np.float64)
  n = 6000 if args.quick else 60_000
  x, y = mnist['x_train'][:n], mnist['y_train'][:n]
  repeats = args.repeats or (2 if args.quick else 3)
  results = []
  wall = time.perf_counter()
  for problem_name in args.problems.split(','):
    for num_clients in CLIENTS:
      r = bench(problem_name, num_clients, x, y, repeats)
      print(f"{problem_name} M={num_clients}: "
            + ', '.join(f'{k} {1e3 * v:.2f} ms/it'
                        for k, v in r['per_iteration_s'].items()),
            flush=True)
      results.append(r)
  out = {'machine': machine.describe_machine(), 'results': results,
         'wall_s': time.perf_counter() - wall, 'num_train': n}
  print(table(results))
  print(f"wall time {out['wall_s']:.0f} s")
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(out, f, indent=1, default=float)
  return 0


if __name__ == '__main__':
  sys.exit(main())
