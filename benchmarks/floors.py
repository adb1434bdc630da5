#!/usr/bin/env python
"""The minibatch experiments against their floors, and where their time goes.

    LAQ_JAX_DATA=/work/shared/data/mnist python benchmarks/floors.py \\
        [--iters 100] [--out floors.json]

The report's two minibatch experiments (configs/mnist_logreg_stochastic.py
and configs/mnist_mlp_stochastic.py: full MNIST over M = 10 workers, 500
samples per worker per iteration, float32, the full objective logged every
10 iterations), each of the report's algorithms (sgd, qsgd, ssgd, slaq) as
its own compiled program, as the report's grid maps its points: the
program's time per iteration (`laq_jax.run_chunk` of `--iters` iterations,
compiled ahead of time, the least of the repeats, the algorithms timed
interleaved) against the floor per iteration that the report's timing
table uses (`experiments.run.roofline`: the gradient's and the logged
loss's matrix products at the dense-matmul rate, or the passes over the
features and the minibatch rows at the read bandwidth, plus the minibatch
draws at the draw's rate; all measured here first).

Then one profile of slaq's program (`jax.profiler` on the CPU; each XLA
operation's own time, its nested operations' taken out), summed by what
the operations compute, found from the source lines XLA keeps with each
(the compiled program's stack frames): the minibatch draw, the gather of
the minibatch rows, the gradient's forward and backward products, the
logged objective, the communication rule (trigger, quantizer, server), and
the rest. The profile sums the operations' own times: the timed step is
longer (the loop's work between operations is in no operation).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top

from benchmarks import machine  # pylint: disable=g-import-not-at-top
from benchmarks.timing import block, time_interleaved
from configs import mnist_logreg_stochastic, mnist_mlp_stochastic
from experiments.run import build as build_lib
from experiments.run import roofline
from experiments.run import startup
import laq_jax
from laq_jax import loop

EXPERIMENTS = {'logreg_stochastic': mnist_logreg_stochastic,
               'mlp_stochastic': mnist_mlp_stochastic}
ALGOS = ('sgd', 'qsgd', 'ssgd', 'slaq')
# What an operation computes, from the functions on its stack (the first
# match, innermost rule first).
CATEGORIES = (
    ('minibatch draw', ('sample_rows', 'batch_key', 'client_batch_rows')),
    ('logged objective', ('_logged_loss',)),
    ('row gather', ('draw_minibatch',)),
    ('rule (trigger, compressor, server)', ('rules.py', 'trigger.py',
                                            'compressors.py', 'quantize.py',
                                            'servers.py', 'parts.py',
                                            'schedule.py')),
)


def _frames(hlo: str) -> dict[int, list[str]]:
  """stack_frame_id -> ['file:function', ...] from innermost, parsed from
  the compiled program's text."""
  def table(name):
    block_ = re.search(rf'^{name}\n((?:\d+ .*\n)+)', hlo, re.M)
    return {} if block_ is None else {
        int(line.split(' ', 1)[0]): line.split(' ', 1)[1]
        for line in block_.group(1).splitlines()}
  files = {k: v.strip('"').rsplit('/', 1)[-1]
           for k, v in table('FileNames').items()}
  functions = {k: v.strip('"') for k, v in table('FunctionNames').items()}
  locations = {}
  for k, v in table('FileLocations').items():
    f = int(re.search(r'file_name_id=(\d+)', v).group(1))
    fn = int(re.search(r'function_name_id=(\d+)', v).group(1))
    locations[k] = f'{files.get(f, "?")}:{functions.get(fn, "?")}'
  frames = {}
  for k, v in table('StackFrames').items():
    loc = int(re.search(r'file_location_id=(\d+)', v).group(1))
    parent = int(re.search(r'parent_frame_id=(\d+)', v).group(1))
    frames[k] = (locations.get(loc, '?'), parent)
  out = {}
  for k in frames:
    chain, seen, f = [], set(), k
    while f in frames and f not in seen:
      seen.add(f)
      chain.append(frames[f][0])
      f = frames[f][1] - 1 if frames[f][1] != f else None  # 1-based parent
    out[k] = chain
  return out


def categorize(hlo: str) -> dict[str, str]:
  """HLO instruction name -> what it computes: CATEGORIES by the functions
  on its stack; else, inside a conditional or loop of a known category (an
  op_name under the conditional's), that category; else the gradient's
  'forward' or 'backward' products by autodiff's op_name (jvp, its
  transpose); else 'other'."""
  frames = _frames(hlo)
  ops = {}
  for m in re.finditer(r'^\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{([^}]*)\}',
                       hlo, re.M):
    meta = m.group(2)
    frame = re.search(r'stack_frame_id=(\d+)', meta)
    op_name = re.search(r'op_name="([^"]*)"', meta)
    ops[m.group(1)] = (
        ' '.join(frames.get(int(frame.group(1)), [])) if frame else '',
        op_name.group(1) if op_name else '')
  known = {}
  for name, (chain, op_name) in ops.items():
    kind = next((label for label, keys in CATEGORIES
                 if any(k in chain for k in keys)), None)
    if kind is not None:
      known[name] = kind
  # The operations of a conditional's or loop's body: their op_name extends
  # the conditional's own.
  scopes = sorted(((ops[n][1], k) for n, k in known.items()
                   if re.search(r'/(cond|while)$', ops[n][1])),
                  key=lambda sk: -len(sk[0]))
  out = {}
  for name, (chain, op_name) in ops.items():
    kind = known.get(name) or next(
        (k for scope, k in scopes if op_name.startswith(scope + '/')), None)
    if kind is None and 'jvp(' in op_name:
      kind = ('gradient: backward' if 'transpose(' in op_name else
              'gradient: forward')
    out[name] = kind or 'other'
  return out


def exclusive_times(trace_events) -> dict[str, float]:
  """Operation name -> seconds of its own (nested events taken out), over
  the events of the XLA thunks (per thread, by start time)."""
  by_thread = collections.defaultdict(list)
  for e in trace_events:
    if e.get('ph') == 'X' and 'dur' in e:
      by_thread[(e.get('pid'), e.get('tid'))].append(e)
  own = collections.Counter()
  for events in by_thread.values():
    events.sort(key=lambda e: (e['ts'], -e['dur']))
    stack = []  # (end, name)
    for e in events:
      while stack and stack[-1][0] <= e['ts']:
        stack.pop()
      if stack:
        own[stack[-1][1]] -= e['dur']
      own[e['name']] += e['dur']
      stack.append((e['ts'] + e['dur'], e['name']))
  return {k: v / 1e6 for k, v in own.items()}


def profile(compiled, state, num_iters: int) -> dict[str, float]:
  """Seconds per iteration by category, from one profiled call."""
  hlo = compiled.as_text()
  names = categorize(hlo)
  for name in re.findall(r'^\s*(?:ROOT )?%([\w.\-]+) = ', hlo, re.M):
    names.setdefault(name, 'other')  # (no metadata)
  with tempfile.TemporaryDirectory() as tmp:
    jax.profiler.start_trace(tmp)
    block(compiled(state))
    jax.profiler.stop_trace()
    path = sorted(glob.glob(f'{tmp}/**/*.trace.json.gz', recursive=True))[-1]
    with gzip.open(path) as f:
      events = json.load(f)['traceEvents']
  totals = collections.Counter()
  for name, seconds in exclusive_times(events).items():
    if name in names:
      totals[names[name]] += seconds / num_iters
  return dict(totals)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--iters', type=int, default=100)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--only', nargs='*', choices=sorted(EXPERIMENTS))
  parser.add_argument('--out', default=None)
  args = parser.parse_args(argv)
  startup.setup_jax()
  info = machine.describe_machine()
  rates = roofline.measure()
  print(f'# {info["cpu_model"]}, {info["cpus_usable"]} core(s), JAX '
        f'{jax.__version__}; {roofline_line(rates)}')
  results = {'machine': info, 'rates': rates, 'iters': args.iters,
             'experiments': {}}
  for name in args.only or EXPERIMENTS:
    module = EXPERIMENTS[name]
    programs, floors = {}, {}
    for algo in ALGOS:
      config = module.get_config()
      config.algo = algo
      built = build_lib.build(config)
      state = laq_jax.init_state(built.spec, built.hyper, built.dtype)
      compiled = jax.jit(lambda st, b=built: loop.run_chunk(
          b.spec, st, b.data, b.hyper, args.iters)).lower(state).compile()
      programs[algo] = (compiled, state)
      num_train = built.data.x_MxNxD.shape[0] * built.data.x_MxNxD.shape[1]
      cost = roofline.cost(
          config.model, num_train, 1, stochastic=True,
          batch_samples=config.batch_size * config.num_workers,
          feature_bytes=built.data.x_MxNxD.dtype.itemsize,
          hidden=config.hidden, loss_every=built.spec.log_every)
      floors[algo] = roofline.floor_seconds(cost, rates, config.precision)
    times = time_interleaved({a: (lambda c=c, s=s: c(s))
                              for a, (c, s) in programs.items()},
                             args.repeats)
    rows = {a: {'ms_per_iter': 1e3 * min(t) / args.iters,
                'floor_ms_per_iter': 1e3 * floors[a],
                'over_floor': min(t) / args.iters / floors[a]}
            for a, t in times.items()}
    total = sum(min(t) for t in times.values()) / args.iters
    floor = sum(floors.values())
    parts = profile(*programs['slaq'], args.iters)
    results['experiments'][name] = {
        'algos': rows, 'program_ms_per_iter': 1e3 * total,
        'floor_ms_per_iter': 1e3 * floor, 'over_floor': total / floor,
        'slaq_profile_ms_per_iter': {k: 1e3 * v for k, v in parts.items()}}
    print(f'\n## {name}: {len(ALGOS)} programs, {1e3 * total:.2f} ms per '
          f'iteration of all, floor {1e3 * floor:.2f} ms: '
          f'{total / floor:.2f}x')
    print('| algorithm | ms / iteration | floor (ms) | / floor |')
    print('|---|---:|---:|---:|')
    for a, r in rows.items():
      print(f'| {a} | {r["ms_per_iter"]:.2f} | {r["floor_ms_per_iter"]:.2f} '
            f'| {r["over_floor"]:.2f} |')
    print(f'\nslaq, profiled ({sum(parts.values()) * 1e3:.2f} ms per '
          'iteration):\n\n| part | ms / iteration |\n|---|---:|')
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
      print(f'| {k} | {1e3 * v:.2f} |')
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(results, f, indent=1, default=str)
  return 0


def roofline_line(rates) -> str:
  from experiments.studies.paper import report_sections  # pylint: disable=g-import-not-at-top
  return report_sections.fmt_rate(rates)


if __name__ == '__main__':
  sys.exit(main())
