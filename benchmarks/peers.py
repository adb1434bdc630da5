r"""laq-jax side by side with Flower's simulation engine: the same FedAvg run.

    python -m venv .venv-flower
    .venv-flower/bin/pip install "flwr[simulation]==1.42.0"
    LAQ_JAX_DATA=/path/to/mnist python benchmarks/peers.py \
        --flower_python .venv-flower/bin/python --out peers.json

The task: MNIST's 60,000 training images over M = 100 equal clients (600
each, `make_shards`), FedAvg with S = 10 clients a round, K = 5 local steps
of client SGD (lr 0.05) on minibatches of 10 drawn without replacement, the
sample-weighted mean, server step 1, logistic regression from zeros in
float32, no regularization; the test accuracy on the 10,000 test images
after every round. Flower runs it in its simulation engine (Ray) with NumPy
clients (benchmarks/peers_flower.py, in a virtual environment of its own:
flwr is not a dependency of laq-jax); laq-jax runs the `fedavg` preset with
`round_size` = S, one compiled program. Then FedSGD with LAQ on the same
clients (`slaq`, S = 10 a round, absent clients dropped), which Flower does
not have, for laq-jax alone.

Measured: rounds per second over the run (Flower: from its first round's
end to its last, so Ray's start is apart; laq-jax: one compiled call of
all rounds), the first round at or above --target test accuracy and the
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


def laq_jax_run(algo, x_MxNxD, y_MxN, x_test, y_test, rounds, **settings):
  """(rounds per second of one compiled call, accuracy after each round)."""
  problem = laq_jax.get_problem('logreg')
  data = laq_jax.Data(jnp.asarray(x_MxNxD, jnp.float32), jnp.asarray(y_MxN))
  parts = sweep_lib.parts_of([{'algo': algo, 'clients_per_round': S}])
  spec = laq_jax.RunSpec(problem, M, stochastic=True, batch_size=B,
                         round_size=S, loss_every=rounds, **parts)
  hyper = laq_jax.make_hyper(algo, dtype=jnp.float32, clients_per_round=S,
                             l2=0.0, **settings)
  state = laq_jax.init_state(spec, hyper, jnp.float32)
  compiled = laq_jax.run_chunk.lower(spec, state, data, hyper,
                                     rounds).compile()
  jax.block_until_ready(compiled(state, data, hyper))  # warm
  start = time.perf_counter()
  jax.block_until_ready(compiled(state, data, hyper))
  seconds = time.perf_counter() - start
  # the accuracy after every round: the same rounds, one call each
  one = laq_jax.run_chunk.lower(spec, state, data, hyper, 1).compile()
  accuracy, ends = [], []
  start = time.perf_counter()
  for _ in range(rounds):
    state, _ = one(state, data, hyper)
    ends.append(time.perf_counter() - start)
    accuracy.append(laq_jax.accuracy(problem, state.theta_P, x_test,
                                     y_test))
  return {'rounds_per_s': rounds / seconds, 'call_s': seconds,
          'accuracy': accuracy, 'round_end_s': ends}


def flower_run(python, x_MxNxD, y_MxN, x_test, y_test, rounds):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'mnist.npz')
    np.savez(path, x=np.asarray(x_MxNxD, np.float32), y=y_MxN,
             xt=np.asarray(x_test, np.float32), yt=y_test)
    env = dict(os.environ, PEER_DATA=path, M=str(M), S=str(S), K=str(K),
               B=str(B), LR=str(LR), ROUNDS=str(rounds))
    proc = subprocess.run(
        [python, os.path.join(ROOT, 'benchmarks', 'peers_flower.py')],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=3600,
        check=False)
  if proc.returncode:
    raise RuntimeError(f'the Flower run failed:\n{proc.stderr[-3000:]}')
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  rows = [r for r in out['rounds'] if r['round'] >= 1]
  first, last = rows[0], rows[-1]
  return {'rounds_per_s': (len(rows) - 1) / (last['end'] - first['end']),
          'accuracy': [r['accuracy'] for r in rows],
          'round_end_s': [r['end'] - out['start'] for r in rows],
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
      'FLOWER_PYTHON'), help='python of a venv with flwr[simulation]')
  parser.add_argument('--rounds', type=int, default=30)
  parser.add_argument('--target', type=float, default=0.85)
  parser.add_argument('--out', default=None)
  args = parser.parse_args(argv)
  mnist = data_lib.load_mnist(None, dtype=np.float32)
  x, y = data_lib.make_shards(mnist['x_train'], mnist['y_train'], M)
  xt, yt = mnist['x_test'], mnist['y_test']
  results = {}
  wall = time.perf_counter()
  results['laq-jax fedavg'] = laq_jax_run(
      'fedavg', x, y, xt, yt, args.rounds,
      **{'local.steps': K, 'local.lr': LR})
  results['laq-jax slaq (FedSGD + LAQ)'] = laq_jax_run(
      'slaq', x, y, xt, yt, args.rounds, step_size=LR, absent='drop')
  laq_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  # (this process's peak: MNIST loaded, both programs compiled and run)
  for name in results:
    results[name]['maxrss_bytes'] = laq_rss
  if args.flower_python:
    results['Flower fedavg'] = flower_run(args.flower_python, x, y, xt, yt,
                                          args.rounds)
  print(f'| run | rounds/s | first round >= {args.target:.0%} | seconds to '
        'it | final accuracy | peak RSS |')
  print('|---|---:|---:|---:|---:|---:|')
  for name, r in results.items():
    k, seconds = to_target(r, args.target)
    print(f"| {name} | {r['rounds_per_s']:.2f} | {k or 'not reached'} | "
          f"{'' if seconds is None else f'{seconds:.1f}'} | "
          f"{r['accuracy'][-1]:.2%} | {r['maxrss_bytes'] / 2**20:,.0f} MiB |")
  if 'Flower fedavg' in results:
    a = np.asarray(results['laq-jax fedavg']['accuracy'])
    b = np.asarray(results['Flower fedavg']['accuracy'])
    gap = np.abs(a - b)
    print(f'FedAvg accuracy, laq-jax against Flower: largest gap '
          f'{gap.max():.2%} (round {int(gap.argmax()) + 1}), mean gap over '
          f'the last 10 rounds {gap[-10:].mean():.2%}; rounds per second '
          f"{results['laq-jax fedavg']['rounds_per_s'] / results['Flower fedavg']['rounds_per_s']:.0f}x "
          'Flower\'s')
  out = {'machine': machine.describe_machine(), 'results': results,
         'wall_s': time.perf_counter() - wall, 'M': M, 'S': S, 'K': K,
         'B': B, 'lr': LR, 'target': args.target}
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(out, f, indent=1, default=float)
  return 0


if __name__ == '__main__':
  sys.exit(main())
