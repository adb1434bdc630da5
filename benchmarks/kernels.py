r"""Kernels per iteration: how many launches one iteration of each program
makes, read from its compiled while-body (issue 53's proxy for a GPU).

    python benchmarks/kernels.py                  # ~1-2 minutes on a CPU
    python benchmarks/kernels.py --out kernels.json --only logreg,mlp
    python benchmarks/kernels.py --fit docs/gpu/h200_4e7d038.json \
        --out docs/gpu/kernel_fit.json     # the cost per kernel, fitted

A small model's iteration on a GPU costs about its number of kernels times a
few microseconds, not its FLOPs (the H200 rows of docs/benchmarks.md: the
logistic-regression iteration at 943x its floor). This counts them, on the
machine at hand, in the program as the launchers compile it
(`laq_jax.run_chunk`, lowered and compiled ahead of time, float32): the
optimized HLO of the chunk's scan, its while-body walked through control
flow (a `conditional` counts its predicate and its largest branch, except
the logged objective's (`laq_jax.stages.LOGGED_OBJECTIVE` in its metadata),
which an iteration that does not log takes at its smaller branch: the
counts are such an iteration's, 'kernels_logging' one that logs; a nested
`while` its body times its known trip count, except the random bits'
threefry rounds, which JAX lowers as a loop on a CPU only and a GPU runs
unrolled in one fusion: one kernel; a `call` its callee), each
other instruction one kernel except the ones that move no data
(parameter, constant, tuple, get-tuple-element, bitcast, after-all). A
fusion is one kernel; what it fuses is not walked. XLA:CPU fuses
differently from XLA:GPU (it also keeps the random bits' threefry rounds as
loops), so the counts are a proxy: the same program's count before and
after a change, and the programs against each other.

The fixed-order sums (`laq_jax.collectives.fixed_sum`) take one form on a
CPU and another on a GPU, the same bits (`collectives.FORMS`): --form
grouped, the default, counts the programs as a GPU gets them; --form
halving as a CPU does (and as every program was before 2026-12-07).

The programs (M = 10 vmapped workers unless said): logistic regression and
the 200-ReLU MLP full batch under LAQ (the paper's), the MLP minibatch under
SLAQ (B = 50), the character LSTM minibatch under SGD (B = 10, 80
characters; also with `lstm='fused'`, `laq_jax.models.lstm_layer`),
FedAvg's local steps (K = 5 of B = 10, logistic regression), a federated
round of S = 10 of M = 1,000 clients (FedAvg, logistic regression,
`RunSpec.round_size`), and the rule alone (`laq_jax.rules.step`
of LAQ on given gradients, M = 10, p = 7,850). Prints a Markdown table and,
with --out, writes the counts as JSON (with the machine and JAX version).

With --fit MEASURED_JSON (a GPU run's rows, docs/gpu/*.json): counts the
kernels of benchmarks/models.py's programs, the ones that ran measured (in
the halving form, as at 4e7d038; the committed docs/gpu/kernel_fit.json was
counted at c48df71, before the loop wrote its trace row packed, which took
8 to 15 kernels off each program since), and fits each measured iteration
beyond its floor as a cost per iteration plus a cost per kernel (`fit`);
`experiments.run.predict.H200` holds the result.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

import laq_jax  # pylint: disable=g-import-not-at-top
from benchmarks import machine  # pylint: disable=g-import-not-at-top
from laq_jax import collectives  # pylint: disable=g-import-not-at-top
from laq_jax import sweep as sweep_lib  # pylint: disable=g-import-not-at-top
from laq_jax.round import stages  # pylint: disable=g-import-not-at-top

# Instructions that launch nothing (a kernel is any other one).
FREE = frozenset({'parameter', 'constant', 'tuple', 'get-tuple-element',
                  'bitcast', 'after-all', 'partition-id', 'replica-id',
                  'opt-barrier'})
_HEAD = re.compile(r'^(?:ENTRY )?%([\w.\-]+) ')
_INSTRUCTION = re.compile(r'^\s+(?:ROOT )?%([\w.\-]+) = (.*)$')
_OPCODE = re.compile(r'(?<![\w.\-])([a-z][a-z0-9\-]*)\(')
# The logged objective's conditional, by the name scope in its metadata.
_LOGGED = re.compile(r'op_name="[^"]*' + stages.LOGGED_OBJECTIVE)
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
# JAX's rolled threefry2x32 on a CPU: a loop of 5 whose carry ends with the
# two u32[4] rotation tables
_THREEFRY = re.compile(r'u32\[4\]\{0\}, u32\[4\]\{0\}\) while\(.*'
                       r'"known_trip_count":\{"n":"5"\}')


def computations(hlo: str) -> dict[str, list[tuple[str, str, str]]]:
  """{computation: [(instruction, opcode, its text after '=')]} of an HLO
  module's text."""
  out, current = {}, None
  for line in hlo.splitlines():
    if current is None:
      head = _HEAD.match(line)
      if head and line.rstrip().endswith('{'):
        current = head.group(1)
        out[current] = []
      continue
    if line.startswith('}'):
      current = None
      continue
    found = _INSTRUCTION.match(line)
    if found:
      rhs = found.group(2)
      # the opcode: the first word followed by '(' after the result's type
      # (a tuple type opens with '(' after a space, never after a word)
      op = _OPCODE.search(rhs)
      out[current].append((found.group(1), op.group(1) if op else '', rhs))
  return out


def _called(rhs: str, key: str) -> list[str]:
  found = re.search(key + r'=\{?([^,}\s]+(?:, ?%[\w.\-]+)*)\}?', rhs)
  if not found:
    return []
  return [n.strip().lstrip('%') for n in found.group(1).split(',')]


def count(comps, name: str, tally: collections.Counter | None = None,
          times: int = 1, logging: bool = True) -> int:
  """Kernels one execution of computation `name` launches (see the module
  docstring); `tally` gathers them by opcode. `logging` False: the logged
  objective's conditional (`laq_jax.stages.LOGGED_OBJECTIVE`, named in its
  metadata) at its smallest branch, as an iteration that does not log
  takes it (the other conditionals still at their largest)."""
  total = 0
  for _, op, rhs in comps[name]:
    if op in FREE:
      continue
    if op == 'while' and _THREEFRY.search(rhs):
      # XLA:CPU's rolled threefry rounds (JAX lowers them as a loop on
      # CPU only); on a GPU they are unrolled and fused: one kernel
      total += 1
      if tally is not None:
        tally['threefry'] += times
    elif op == 'while':
      trip = _TRIP.search(rhs)
      n = int(trip.group(1)) if trip else 1
      body, = _called(rhs, 'body')
      cond, = _called(rhs, 'condition')
      total += n * (count(comps, body, tally, times * n, logging)
                    + count(comps, cond, tally, times * n, logging))
    elif op == 'conditional':
      branches = _called(rhs, 'branch_computations') or (
          _called(rhs, 'true_computation') + _called(rhs, 'false_computation'))
      sizes = {b: count(comps, b, logging=logging) for b in branches}
      pick = (min if not logging and _LOGGED.search(rhs) else max)
      taken = pick(sizes, key=sizes.get)
      total += 1 + count(comps, taken, tally, times, logging)
      if tally is not None:
        tally['conditional'] += times
    elif op == 'call':
      callee, = _called(rhs, 'to_apply')
      total += count(comps, callee, tally, times, logging)
    else:
      total += 1
      if tally is not None:
        tally[op] += times
  return total


def scan_body(hlo: str) -> tuple[dict, str]:
  """(the computations, the name of the chunk's scan body): of the loops
  the entry computation runs outside any other loop (directly or through
  calls and conditionals; not threefry's), the one with the most kernels
  in its body."""
  comps = computations(hlo)
  entry = re.search(r'^ENTRY %([\w.\-]+) ', hlo, re.M).group(1)
  bodies, todo = [], [entry]
  while todo:
    for _, op, rhs in comps[todo.pop()]:
      if op == 'while' and not _THREEFRY.search(rhs):
        bodies.append(_called(rhs, 'body')[0])
      elif op == 'call':
        todo += _called(rhs, 'to_apply')
      elif op == 'conditional':
        todo += _called(rhs, 'branch_computations')
  if not bodies:
    raise ValueError('no loop in the program: is it a scan?')
  return comps, max(bodies, key=lambda b: count(comps, b))


def per_iteration(compiled_text: str) -> dict:
  """The kernels of one iteration of the chunk's scan: 'kernels' in an
  iteration that does not log the objective (the counts below are its),
  'kernels_logging' in one that does (the same where the objective comes
  with every iteration's gradient, as in full batch)."""
  comps, body = scan_body(compiled_text)
  tally = collections.Counter()
  kernels = count(comps, body, tally, logging=False)
  return {'kernels': kernels,
          'kernels_logging': count(comps, body, logging=True),
          'fusions': tally['fusion'],
          'custom_calls': tally['custom-call'],
          'by_opcode': dict(tally.most_common())}


def _data(rng, workers, rows, dim, classes, integer=False):
  x = (rng.integers(0, classes, (workers, rows, dim)) if integer
       else rng.random((workers, rows, dim)))
  return laq_jax.Data(jnp.asarray(x, jnp.float32),
                      jnp.asarray(rng.integers(0, classes, (workers, rows)),
                                  jnp.int32))


def _chunk(algo, problem, workers, data, steps=4, hyper_kwargs=None,
           **spec_kwargs):
  """The compiled text of `steps` iterations of preset `algo` with the
  parts a launcher compiles in for it."""
  hyper = laq_jax.make_hyper(algo, dtype=jnp.float32, **(hyper_kwargs or {}))
  parts = sweep_lib.parts_of([{'algo': algo}])  # as launched
  parts.update(spec_kwargs.pop('parts', {}))
  spec = laq_jax.RunSpec(problem, workers, **parts, **spec_kwargs)
  state = laq_jax.init_state(spec, hyper, jnp.float32)
  return laq_jax.run_chunk.lower(spec, state, data, hyper,
                                 steps).compile().as_text()


def program(name: str) -> str:
  """The compiled text of one of PROGRAMS."""
  rng = np.random.default_rng(0)
  if name == 'logreg':
    return _chunk('laq', laq_jax.get_problem('logreg', 784, 10), 10,
                  _data(rng, 10, 60, 784, 10))
  if name == 'mlp':
    return _chunk('laq', laq_jax.get_problem('mlp', 784, 10), 10,
                  _data(rng, 10, 60, 784, 10))
  if name == 'mlp_minibatch':
    return _chunk('slaq', laq_jax.get_problem('mlp', 784, 10), 10,
                  _data(rng, 10, 100, 784, 10), stochastic=True,
                  batch_size=50, loss_every=10**6)
  if name == 'char_lstm':
    return _chunk('sgd', laq_jax.get_problem('char_lstm', 80, 80), 10,
                  _data(rng, 10, 20, 80, 80, integer=True), steps=2,
                  stochastic=True, batch_size=10, loss_every=10**6)
  if name == 'char_lstm_fused':
    return _chunk('sgd', laq_jax.get_problem('char_lstm', 80, 80,
                                             lstm='fused'), 10,
                  _data(rng, 10, 20, 80, 80, integer=True), steps=2,
                  stochastic=True, batch_size=10, loss_every=10**6)
  if name == 'fedavg_local':
    return _chunk('fedavg', laq_jax.get_problem('logreg', 784, 10), 10,
                  _data(rng, 10, 60, 784, 10), stochastic=True,
                  batch_size=10, loss_every=10**6)
  if name == 'round_10_of_1000':
    return _chunk('fedavg', laq_jax.get_problem('logreg', 784, 10), 1000,
                  _data(rng, 1000, 20, 784, 10),
                  hyper_kwargs={'clients_per_round': 10}, stochastic=True,
                  batch_size=10, loss_every=10**6, round_size=10,
                  parts={'participation': True})
  if name == 'rule_alone':
    return _rule_alone()
  raise ValueError(f'program {name!r} is not known: use one of '
                   f'{", ".join(PROGRAMS)}')


def _rule_alone() -> str:
  """LAQ's rule (`rules.step`) in a scan of its own, on given gradients."""
  from laq_jax import rules  # pylint: disable=g-import-not-at-top
  m, p = 10, 7850
  hyper = laq_jax.make_hyper('laq', dtype=jnp.float32)
  alg = laq_jax.get_algorithm('laq')
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg', 784, 10), m,
                         compressors=(alg.compressor,),
                         triggers=(alg.trigger,))
  state = laq_jax.init_state(spec, hyper, jnp.float32)
  grads = jnp.ones((m, p), jnp.float32)

  def body(carry, k):
    theta, rule = carry
    theta, rule, _ = rules.step(grads * k, rule, theta, hyper,
                                step_count=k, parts=spec.parts)
    return (theta, rule), None

  fn = jax.jit(lambda c: jax.lax.scan(body, c, jnp.arange(4.0))[0])
  return fn.lower((state.theta_P, state.rule)).compile().as_text()


PROGRAMS = ('logreg', 'mlp', 'mlp_minibatch', 'char_lstm',
            'char_lstm_fused', 'fedavg_local',
            'round_10_of_1000', 'rule_alone')


def fit(rows: list[dict]) -> dict:
  """The cost of an iteration on a GPU beyond its floor, fitted to measured
  iterations: seconds_per_iteration + kernels x seconds_per_kernel, least
  squares in relative error (every row counts alike, whatever its size).

  Args:
    rows: per program, {'model', 'ms' (measured per iteration), 'over_floor'
      (measured / its floor), 'kernels' (counted here)}.

  Returns:
    {'seconds_per_iteration', 'seconds_per_kernel', 'rows': each row with
    'floor_ms' and 'fitted_ms' (floor + the fit) added}.
  """
  t = np.array([r['ms'] for r in rows]) * 1e-3
  floor = t / np.array([r['over_floor'] for r in rows])
  k = np.array([r['kernels'] for r in rows], float)
  a = np.stack([np.ones_like(k), k], axis=1) / t[:, None]
  (per_iteration, per_kernel), *_ = np.linalg.lstsq(a, (t - floor) / t,
                                                     rcond=None)
  return {'seconds_per_iteration': float(per_iteration),
          'seconds_per_kernel': float(per_kernel),
          'rows': [dict(r, floor_ms=1e3 * f,
                        fitted_ms=1e3 * (f + per_iteration + per_kernel * n))
                   for r, f, n in zip(rows, floor, k)]}


def fit_measured(measured_path: str) -> dict:
  """`fit` of a GPU run's model rows (docs/gpu/*.json, benchmarks/models.py
  there) against the kernels of the same programs counted here."""
  from benchmarks import models  # pylint: disable=g-import-not-at-top
  with open(measured_path) as f:
    measured = json.load(f)
  shapes = {w[0]: w for w in models.WORKLOADS}
  rows = []
  with collectives.form('halving'):  # (as at 4e7d038)
    for row in measured['models']['rows']:
      _, compiled, _, _ = models.build(*shapes[row['model']][:5],
                                       stragglers=True)
      rows.append(dict(row, kernels=per_iteration(compiled.as_text())
                       ['kernels']))
  return dict(fit(rows), measured=measured_path,
              commit=measured['commit'], device=measured['machine']['device'],
              counted_with={'jax': jax.__version__,
                            'backend': jax.default_backend(),
                            'fixed_sum_form': 'halving'})


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', help='write the counts here (JSON)')
  parser.add_argument('--only', default='',
                      help='comma-separated programs (default: all)')
  parser.add_argument('--models', action='store_true',
                      help='instead: count benchmarks/models.py\'s programs '
                      '(minibatch SGD of each workload\'s model, as the '
                      'launchers compile it: predict.KERNELS)')
  parser.add_argument('--form', choices=collectives.FORMS,
                      default='grouped',
                      help='the fixed-order sums as a GPU (grouped) or a CPU '
                      '(halving) gets them; --fit counts in halving')
  parser.add_argument('--fit', metavar='MEASURED_JSON', default=None,
                      help='instead: fit the cost per kernel to a GPU run '
                      '(docs/gpu/h200_4e7d038.json), counting its models\' '
                      'programs here; --out writes the fit')
  args = parser.parse_args(argv)
  # (set before anything is traced: a jitted function keeps the form of its
  # first trace)
  with collectives.form('halving' if args.fit else args.form):
    return _main(args)


def _main(args) -> int:
  """main's work, inside the chosen form of the fixed-order sums."""
  if args.models:
    from benchmarks import models  # pylint: disable=g-import-not-at-top
    rows = []
    for workload in models.WORKLOADS:
      _, compiled, _, _ = models.build(*workload[:5])
      rows.append({'program': f'{workload[0]} minibatch',
                   **per_iteration(compiled.as_text())})
    print(f'| model (minibatch SGD, M = 10), {args.form} | '
          'kernels / iteration |')
    print('|---|---:|')
    for r in rows:
      print(f"| {r['program']} | {r['kernels']:,} |")
    if args.out:
      with open(args.out, 'w') as f:
        json.dump({'machine': machine.describe_machine(),
                   'jax': jax.__version__, 'backend': jax.default_backend(),
                   'fixed_sum_form': args.form, 'rows': rows}, f, indent=1)
    return 0
  if args.fit:
    result = fit_measured(args.fit)
    print(f"per iteration {result['seconds_per_iteration'] * 1e6:.1f} us + "
          f"kernels x {result['seconds_per_kernel'] * 1e6:.3f} us")
    print('| model | kernels | measured ms | floor ms | fitted ms |')
    print('|---|---:|---:|---:|---:|')
    for r in result['rows']:
      print(f"| {r['model']} | {r['kernels']:,} | {r['ms']:g} | "
            f"{r['floor_ms']:.3g} | {r['fitted_ms']:.3g} |")
    if args.out:
      with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)
    return 0
  wanted = [p for p in PROGRAMS
            if not args.only or p in args.only.split(',')]
  unknown = set(filter(None, args.only.split(','))) - set(PROGRAMS)
  if unknown:
    print(f'error: --only: unknown program(s) {", ".join(sorted(unknown))}; '
          f'known: {", ".join(PROGRAMS)}', file=sys.stderr)
    return 1
  start = time.perf_counter()
  rows = []
  for name in wanted:
    began = time.perf_counter()
    row = {'program': name, **per_iteration(program(name)),
           'compile_s': time.perf_counter() - began}
    rows.append(row)
  print(f'| program ({args.form}) | kernels / iteration | '
        'logging the objective | '
        'fusions | custom calls | most frequent others |')
  print('|---|---:|---:|---:|---:|---|')
  for r in rows:
    others = ', '.join(f'{op} {n}' for op, n in r['by_opcode'].items()
                       if op not in ('fusion', 'custom-call'))[:80]
    print(f"| {r['program']} | {r['kernels']:,} | "
          f"{r['kernels_logging']:,} | {r['fusions']:,} | "
          f"{r['custom_calls']:,} | {others} |")
  if args.out:
    with open(args.out, 'w') as f:
      json.dump({'machine': machine.describe_machine(),
                 'jax': jax.__version__, 'backend': jax.default_backend(),
                 'fixed_sum_form': args.form,
                 'rows': rows, 'wall_s': time.perf_counter() - start}, f,
                indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
