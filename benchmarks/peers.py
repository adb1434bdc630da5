r"""laq-jax side by side with Flower's simulation engine: the same FedAvg run.

    python -m venv .venv-flower
    .venv-flower/bin/pip install "flwr[simulation]==1.42.0" jax==0.10.2
    LAQ_JAX_DATA=/path/to/mnist python benchmarks/peers.py \
        --flower_python .venv-flower/bin/python --out peers.json < /dev/null

The task: MNIST's 60,000 training images over M = 100 equal clients (600
each, `make_shards`), FedAvg with S = 10 clients a round, K = 5 local steps
of client SGD (lr 0.05) on minibatches of 10 drawn without replacement, the
sample-weighted mean, server step 1, in float32 without regularization, for
each of --models: logistic regression from zeros, and McMahan et al.'s CNN
(`cnn`) from laq-jax's initial parameters (hyper.seed 0), which Flower's
side starts from too; the test accuracy on the 10,000 test images after
every round. Flower runs it in its simulation engine (Ray) with NumPy
clients for logistic regression and JAX clients for the CNN
(benchmarks/peers_flower.py, in a virtual environment of its own: flwr is
not a dependency of laq-jax); laq-jax runs the `fedavg` preset with
`round_size` = S, one compiled program. Then FedSGD with LAQ on the same
clients (`slaq`, S = 10 a round, absent clients dropped), which Flower does
not have, for laq-jax alone. The two sides' CNNs are written apart (flax
here, jax.lax there): their test accuracies at the initial parameters must
agree (checked).

Measured: rounds per second over the run (Flower: from its first round's
end to its last, less its evaluations, so Ray's start is apart; laq-jax:
one compiled call of all rounds), the first round at or above --target test accuracy and the
time to it, the test accuracy per round, and peak resident memory (laq-jax:
this process; Flower: its driver process, the Ray workers apart). The two
FedAvg runs are the same algorithm but not the same draws (which clients,
which minibatches), so their accuracies agree statistically, not bit for
bit: the script prints both curves and the largest gap. Without
--flower_python it runs the laq-jax side alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

import laq_jax  # pylint: disable=g-import-not-at-top
from benchmarks import machine  # pylint: disable=g-import-not-at-top
from laq_jax import data as data_lib  # pylint: disable=g-import-not-at-top
from laq_jax import sweep as sweep_lib  # pylint: disable=g-import-not-at-top

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M, S, K, B, LR = 100, 10, 5, 10, 0.05
NEVER = 10**9  # loss_every: the objective at step 0 alone


def laq_jax_run(model, algo, x_MxNxD, y_MxN, x_test, y_test, rounds,
                **settings):
  """(rounds per second of one compiled call, accuracy after each round)."""
  problem = laq_jax.get_problem(model)
  data = laq_jax.Data(jnp.asarray(x_MxNxD, jnp.float32), jnp.asarray(y_MxN))
  parts = sweep_lib.parts_of([{'algo': algo, 'clients_per_round': S}])
  # The training objective is not logged inside the timed rounds (Flower's
  # run has none): only at step 0, which the untimed first round holds.
  spec = laq_jax.RunSpec(problem, M, stochastic=True, batch_size=B,
                         round_size=S, loss_every=NEVER, **parts)
  hyper = laq_jax.make_hyper(algo, dtype=jnp.float32, clients_per_round=S,
                             l2=0.0, **settings)
  state = laq_jax.init_state(spec, hyper, jnp.float32)
  initial = laq_jax.accuracy(problem, state.theta_P, x_test, y_test)
  # the accuracy after every round: the rounds one call each
  one = laq_jax.run_chunk.lower(spec, state, data, hyper, 1).compile()
  accuracy, first = [], None
  for _ in range(rounds):
    state, _ = one(state, data, hyper)
    first = state if first is None else first
    accuracy.append(laq_jax.accuracy(problem, state.theta_P, x_test,
                                     y_test))
  # the rounds' speed: rounds 2 .. rounds + 1, one compiled call, timed
  compiled = laq_jax.run_chunk.lower(spec, first, data, hyper,
                                     rounds).compile()
  jax.block_until_ready(compiled(first, data, hyper))  # warm
  start = time.perf_counter()
  out, _ = jax.block_until_ready(compiled(first, data, hyper))
  seconds = time.perf_counter() - start
  # (the same rounds as the calls of one, to rounding: reported)
  difference = float(np.max(np.abs(
      np.asarray(out.theta_P)
      - np.asarray(one(state, data, hyper)[0].theta_P))))
  return {'rounds_per_s': rounds / seconds, 'call_s': seconds,
          'call_against_rounds_max_difference': difference,
          'accuracy': accuracy,
          # (a round's end at the timed rate, the evaluations apart)
          'round_end_s': [(k + 1) * seconds / rounds for k in range(rounds)],
          'initial_accuracy': initial}


def initial_params(model) -> dict:
  """laq-jax's initial parameters of `model` (hyper.seed 0, float32) by
  flax's names, 'p:conv1/kernel', ... ({} for logistic regression, which
  both sides start from zeros)."""
  if model == 'logreg':
    return {}
  theta_P, unravel = laq_jax.flat_params(laq_jax.get_problem(model), 0,
                                         jnp.float32)
  flat = jax.tree_util.tree_flatten_with_path(unravel(theta_P))[0]
  return {'p:' + '/'.join(k.key for k in path): np.asarray(a)
          for path, a in flat}


def flower_run(python, model, x_MxNxD, y_MxN, x_test, y_test, rounds):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'mnist.npz')
    np.savez(path, x=np.asarray(x_MxNxD, np.float32), y=y_MxN,
             xt=np.asarray(x_test, np.float32), yt=y_test,
             **initial_params(model))
    env = dict(os.environ, PEER_DATA=path, MODEL=model, M=str(M), S=str(S),
               K=str(K), B=str(B), LR=str(LR), ROUNDS=str(rounds))
    proc = subprocess.run(
        [python, os.path.join(ROOT, 'benchmarks', 'peers_flower.py')],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=3600,
        check=False)
  if proc.returncode:
    raise RuntimeError(f'the Flower run failed:\n{proc.stderr[-3000:]}')
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  log = sorted(out['rounds'], key=lambda r: r['round'])
  # A round's end less the evaluations before it (each round's end is when
  # its evaluation began).
  evaluated = np.cumsum([0.0] + [r['evaluate_s'] for r in log[:-1]])
  ends = {r['round']: r['end'] - out['start'] - e
          for r, e in zip(log, evaluated)}
  rows = [r for r in log if r['round'] >= 1]
  first, last = rows[0]['round'], rows[-1]['round']
  return {'rounds_per_s': (last - first) / (ends[last] - ends[first]),
          'accuracy': [r['accuracy'] for r in rows],
          'round_end_s': [ends[r['round']] for r in rows],
          'initial_accuracy': log[0]['accuracy'] if log[0]['round'] == 0
                              else None,
          'evaluate_s': sum(r['evaluate_s'] for r in log),
          'wall_s': out['wall_s'], 'maxrss_bytes': out['maxrss_bytes']}


def to_target(result, target):
  """(first round at or above target, seconds to it) or (None, None)."""
  for k, a in enumerate(result['accuracy']):
    if a >= target:
      return k + 1, result['round_end_s'][k]
  return None, None


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--flower_python', default=os.environ.get(
      'FLOWER_PYTHON'), help='python of a venv with flwr[simulation] (and '
                      'jax, for the CNN)')
  parser.add_argument('--models', default='logreg,cnn',
                      help='comma-separated: logreg, cnn')
  parser.add_argument('--rounds', type=int, default=30)
  parser.add_argument('--target', type=float, default=0.85)
  parser.add_argument('--out', default=None)
  args = parser.parse_args(argv)
  models = args.models.split(',')
  unknown = sorted(set(models) - {'logreg', 'cnn'})
  if unknown:
    parser.error(f'--models: unknown {", ".join(unknown)}; allowed: '
                 'logreg, cnn')
  mnist = data_lib.load_mnist(None, dtype=np.float32)
  x, y = data_lib.make_shards(mnist['x_train'], mnist['y_train'], M)
  xt, yt = mnist['x_test'], mnist['y_test']
  results = {}
  wall = time.perf_counter()
  for model in models:
    results[f'laq-jax fedavg {model}'] = laq_jax_run(
        model, 'fedavg', x, y, xt, yt, args.rounds,
        **{'local.steps': K, 'local.lr': LR})
    results[f'laq-jax slaq (FedSGD + LAQ) {model}'] = laq_jax_run(
        model, 'slaq', x, y, xt, yt, args.rounds, step_size=LR,
        absent='drop')
  laq_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  # (this process's peak: MNIST loaded, the programs compiled and run)
  for name in results:
    results[name]['maxrss_bytes'] = laq_rss
  if args.flower_python:
    for model in models:
      results[f'Flower fedavg {model}'] = flower_run(
          args.flower_python, model, x, y, xt, yt, args.rounds)
  print(f'| run | rounds/s | first round >= {args.target:.0%} | seconds to '
        'it | final accuracy | peak RSS |')
  print('|---|---:|---:|---:|---:|---:|')
  for name, r in results.items():
    k, seconds = to_target(r, args.target)
    print(f"| {name} | {r['rounds_per_s']:.2f} | {k or 'not reached'} | "
          f"{'' if seconds is None else f'{seconds:.1f}'} | "
          f"{r['accuracy'][-1]:.2%} | {r['maxrss_bytes'] / 2**20:,.0f} MiB |")
  out = {'machine': machine.describe_machine(), 'results': results,
         'wall_s': time.perf_counter() - wall, 'M': M, 'S': S, 'K': K,
         'B': B, 'lr': LR, 'target': args.target, 'models': models}
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(out, f, indent=1, default=float)
  for model in models:
    if f'Flower fedavg {model}' not in results:
      continue
    ours, theirs = (results[f'{side} fedavg {model}']
                    for side in ('laq-jax', 'Flower'))
    if theirs['initial_accuracy'] is None:
      print(f'Flower\'s {model} run logged no round 0: its model is not '
            'checked against laq-jax\'s', file=sys.stderr)
      return 1
    gap = np.abs(np.asarray(ours['accuracy'])
                 - np.asarray(theirs['accuracy']))
    print(f'FedAvg {model}, laq-jax against Flower: at the initial '
          f"parameters {ours['initial_accuracy']:.2%} and "
          f"{theirs['initial_accuracy']:.2%}; largest gap {gap.max():.2%} "
          f'(round {int(gap.argmax()) + 1}), mean gap over the last 10 '
          f'rounds {gap[-10:].mean():.2%}; rounds per second '
          f"{ours['rounds_per_s'] / theirs['rounds_per_s']:.0f}x Flower's")
    if abs(ours['initial_accuracy'] - theirs['initial_accuracy']) > 1e-3:
      print(f'the two sides\' {model} differ at the same parameters: '
            'their models are not the same', file=sys.stderr)
      return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
