r"""laq-jax side by side with Flower's simulation engine (the same FedAvg run)
and with pfl-research (`--tasks cifar`: its CIFAR-10 benchmark, the same
algorithm on the same draws).

    python -m venv .venv-pfl
    .venv-pfl/bin/pip install pfl==0.6.0 torch==2.13.0
    python benchmarks/peers.py --tasks cifar \
        --pfl_python .venv-pfl/bin/python --pfl_clients 200 --pfl_rounds 6

pfl-research's task (`PFL`, `pfl_task`): FedAvg over IID users of 50
CIFAR-10 images (`cifar_task`: the real files when `cifar10` finds them,
else generated ones of the same shape and class balance), 50 a round, one
local epoch in batches of 10 at 0.1, the server's SGD at 1.0, pfl's
`simple_cnn` as laq-jax's `pfl_cnn`. pfl (benchmarks/peers_pfl.py, in a
venv of its own with PyTorch's CPU build) replays laq-jax's cohorts and
minibatches (`fedavg_draws`) from laq-jax's initial parameters; the script
compares the training loss after each round and the last parameters
(exit 1 past --pfl_tolerance) and reports rounds per second, seconds per
100 rounds and peak memory, laq-jax's with `RunSpec.client_batch` 0 and 1.

The Flower task:

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
from laq_jax import loop  # pylint: disable=g-import-not-at-top
from laq_jax import sweep as sweep_lib  # pylint: disable=g-import-not-at-top

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M, S, K, B, LR = 100, 10, 5, 10, 0.05
NEVER = 10**9  # loss_every: the objective at step 0 alone


def timed_call(spec, state, data, hyper, steps):
  """(the state after `steps` rounds from `state`, the seconds of that one
  compiled call, timed after a warm call of it)."""
  compiled = laq_jax.run_chunk.lower(spec, state, data, hyper,
                                     steps).compile()
  jax.block_until_ready(compiled(state, data, hyper))  # warm
  start = time.perf_counter()
  out, _ = jax.block_until_ready(compiled(state, data, hyper))
  return out, time.perf_counter() - start


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
  out, seconds = timed_call(spec, first, data, hyper, rounds)
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


# ----------------------------------------------------------------------------
# pfl-research's CIFAR-10 benchmark (apple/pfl-research,
# benchmarks/image_classification/configs/baseline.yaml): FedAvg, 1,000
# IID clients of 50 images, 50 a round, one local epoch in batches of 10 at
# 0.1, the server's SGD at 1.0, users weighted equally, `simple_cnn`
# (laq-jax's `pfl_cnn`), 1,500 rounds.
PFL = dict(clients=1000, n=50, S=50, B=10, epochs=1, lr=0.1, server_lr=1.0,
           rounds=1500)
EVAL_SAMPLES = 500  # the fixed training samples each round's loss is on


def cifar_task(num_clients: int, n: int, seed: int = 0):
  """(x [M, n, 3072] float32, y [M, n] int32, which): pfl's cifar10_iid
  users from CIFAR-10's training images when `cifar10` finds them, else
  from generated images of the same shape and class balance (uint8 pixels
  uniform, 5,000 of each class; the timing does not depend on the pixels):
  per-channel standardized by the training set's moments, rows permuted by
  `seed`, then cut into M users of n (pfl's `load_and_preprocess` and
  `make_iid_federated_dataset`, which uses NumPy's global permutation)."""
  try:
    images = data_lib.load_cifar10(None)
    x, y, which = images['x_train'] * 255.0, images['y_train'], 'CIFAR-10'
  except data_lib.DataError:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (50_000, 3072), dtype=np.uint8)
    y = rng.permutation(np.arange(50_000) % 10)
    which = 'generated CIFAR-10-shaped images (CIFAR-10 not found)'
  if num_clients * n > len(x):
    raise ValueError(f'{num_clients:,} clients of {n} need '
                     f'{num_clients * n:,} images; there are {len(x):,}')
  x = x.reshape(-1, 32 * 32, 3).astype(np.float32)
  mean, std = x.mean(axis=(0, 1), dtype=np.float64), x.std(axis=(0, 1),
                                                          dtype=np.float64)
  order = np.random.default_rng(seed).permutation(len(x))[:num_clients * n]
  x = ((x[order] - mean) / std).astype(np.float32)
  return (x.reshape(num_clients, n, 3072),
          np.asarray(y)[order].astype(np.int32).reshape(num_clients, n),
          which)


def fedavg_draws(hyper, num_clients: int, per_round: int, n: int,
                 batch_size: int, steps: int, rounds: int):
  """(clients [R, S], rows [R, S, K B]): the clients laq-jax's FedAvg
  takes in rounds 0..R-1 (`participation.participants`, ascending, as a
  gathered round holds them) and the rows of each one's K local
  minibatches in order (local step j's key: the round's `batch_key` of
  the client, folded with j for j >= 1; `stages.local_gradients`)."""
  from laq_jax import randomness  # pylint: disable=g-import-not-at-top
  from laq_jax.round import participation  # pylint: disable=g-import-not-at-top

  @jax.jit
  def one(step):
    present = participation.participants(hyper, step, num_clients,
                                         per_round)
    clients = jnp.nonzero(present, size=per_round)[0].astype(jnp.int32)

    def rows(m):
      key0 = randomness.batch_key(hyper.seed, step, m)
      keys = [key0] + [jax.random.fold_in(key0, j) for j in range(1, steps)]
      return jnp.concatenate([randomness.sample_rows(k, n, batch_size)
                              for k in keys])
    return clients, jax.vmap(rows)(clients)

  out = [one(jnp.int32(k)) for k in range(rounds)]
  return (np.stack([np.asarray(c) for c, _ in out]),
          np.stack([np.asarray(r) for _, r in out]))


def pfl_task_laq_jax(x_MxNxD, y_MxN, xe, ye, rounds: int,
                     client_batch: int = 0):
  """laq-jax's side of pfl's task (`RunSpec.client_batch` as given):
  (result, hyper, theta_P, unravel, K)."""
  problem = laq_jax.get_problem('pfl_cnn', 3072)
  num_clients = x_MxNxD.shape[0]
  data = laq_jax.Data(jnp.asarray(x_MxNxD), jnp.asarray(y_MxN))
  parts = sweep_lib.parts_of([{'algo': 'fedavg',
                               'clients_per_round': PFL['S']}])
  steps = PFL['epochs'] * x_MxNxD.shape[1] // PFL['B']
  spec = laq_jax.RunSpec(problem, num_clients, stochastic=True,
                         batch_size=PFL['B'], round_size=PFL['S'],
                         loss_every=NEVER, client_batch=client_batch,
                         **parts)
  hyper = laq_jax.make_hyper(
      'fedavg', dtype=jnp.float32, clients_per_round=PFL['S'], l2=0.0,
      server_lr=PFL['server_lr'], weighting='uniform',
      **{'local.steps': steps, 'local.lr': PFL['lr']})
  state = laq_jax.init_state(spec, hyper, jnp.float32)
  theta0_P = np.asarray(state.theta_P)
  _, unravel = laq_jax.flat_params(problem, 0, jnp.float32)
  loss = jax.jit(lambda th: jnp.mean(problem.sample_losses(
      unravel(th), jnp.asarray(xe), jnp.asarray(ye))))
  # The loss after every round: the rounds one call each, in place (the
  # first call also logs the objective at step 0, a pass over all the
  # data, which the timed call then does not hold).
  one = laq_jax.run_chunk.lower(spec, state, data, hyper, 1,
                                donate=True).compile()
  # (buffers of its own: init_state's arrays may share one, which a
  # donating call cannot take twice)
  state, _ = one(loop._copy_state(state), data, hyper)  # pylint: disable=protected-access
  losses = [float(loss(state.theta_P))]
  # The rounds' speed: rounds 2 .. R, one compiled call, timed after a warm
  # call (two states at once: [M, P] is 6.5 GB at M = 1,000).
  timed = rounds - 1
  out, seconds = timed_call(spec, state, data, hyper, timed)
  timed_P = np.asarray(out.theta_P)
  del out
  for _ in range(timed):
    state, _ = one(state, data, hyper)
    losses.append(float(loss(state.theta_P)))
  theta_P = np.asarray(state.theta_P)
  return ({'rounds_per_s': timed / seconds, 'call_s': seconds,
           'losses': losses, 'theta_P': theta_P,
           # (the same rounds as the calls of one, to rounding: reported)
           'call_against_rounds_max_difference': float(
               np.max(np.abs(timed_P - theta_P))),
           'initial_loss': float(loss(jnp.asarray(theta0_P))),
           'maxrss_bytes': resource.getrusage(
               resource.RUSAGE_SELF).ru_maxrss * 1024},
          hyper, theta0_P, unravel, steps)


def pfl_run(python, x_MxNxD, y_MxN, clients, rows, xe, ye, params):
  """pfl's side (benchmarks/peers_pfl.py in `python`'s venv)."""
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'cifar.npz')
    np.savez(path, x=x_MxNxD, y=y_MxN, clients=clients, rows=rows, xe=xe,
             ye=ye, **params)
    env = dict(os.environ, PEER_DATA=path, B=str(PFL['B']),
               LR=str(PFL['lr']), SERVER_LR=str(PFL['server_lr']))
    if os.sep in python:  # (it runs from the temporary folder)
      python = os.path.abspath(python)
    proc = subprocess.run(
        [python, os.path.join(ROOT, 'benchmarks', 'peers_pfl.py')],
        env=dict(env, PEER_OUT=os.path.join(tmp, 'theta.npy')), cwd=tmp,
        capture_output=True, text=True, timeout=6 * 3600, check=False)
    if proc.returncode:
      raise RuntimeError(f'the pfl run failed:\n{proc.stderr[-3000:]}')
    theta_P = np.load(os.path.join(tmp, 'theta.npy'))
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  ends = out['ends']  # round 1 apart (pfl's first round evaluates users)
  timed = max(len(ends) - 1, 1)
  return {'rounds_per_s': timed / (ends[-1] - ends[0]),
          'losses': out['losses'], 'wall_s': out['wall_s'],
          'maxrss_bytes': out['maxrss_bytes'], 'torch': out['torch'],
          'threads': out['threads'], 'device': out.get('device'),
          'theta_P': theta_P}


def pfl_task(python, num_clients: int, rounds: int, tolerance: float,
             client_batches=(0, 1)):
  """pfl-research's CIFAR-10 task in laq-jax (once per `client_batch`)
  and, with `python`, in pfl: (results, facts, gaps or None): the largest
  relative gap of the training loss after a round, and the parameters'
  gap after the last relative to how far they moved."""
  x, y, which = cifar_task(num_clients, PFL['n'])
  xe = x.reshape(-1, 3072)[:EVAL_SAMPLES]
  ye = y.reshape(-1)[:EVAL_SAMPLES]
  results = {}
  for b in client_batches:
    ours, hyper, theta0_P, unravel, steps = pfl_task_laq_jax(
        x, y, xe, ye, rounds, b)
    results[f'laq-jax fedavg pfl_cnn (client_batch={b})'] = ours
  facts = {'data': which, 'clients': num_clients, 'n': PFL['n'],
           'S': PFL['S'], 'B': PFL['B'], 'K': steps, 'lr': PFL['lr'],
           'server_lr': PFL['server_lr'], 'rounds': rounds,
           'tolerance': tolerance}
  if not python:
    return results, facts, None
  clients, rows = fedavg_draws(hyper, num_clients, PFL['S'], PFL['n'],
                               PFL['B'], steps, rounds)
  flat = jax.tree_util.tree_flatten_with_path(unravel(theta0_P))[0]
  params = {'p:' + '/'.join(k.key for k in path): np.asarray(a)
            for path, a in flat}
  theirs = pfl_run(python, x, y, clients, rows, xe, ye, params)
  results['pfl fedavg simple_cnn'] = theirs
  theta0_P = np.asarray(theta0_P)
  gaps = {}
  for name, ours in results.items():
    if name.startswith('laq-jax'):
      gaps[name] = {
          'loss': float(np.max(np.abs(np.asarray(ours['losses'])
                                      - np.asarray(theirs['losses']))
                               / np.abs(np.asarray(theirs['losses'])))),
          'params': float(np.linalg.norm(ours['theta_P'] - theirs['theta_P'])
                          / np.linalg.norm(theirs['theta_P'] - theta0_P))}
  return results, facts, gaps


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
  parser.add_argument('--tasks', default='mnist',
                      help="comma-separated: mnist (the Flower comparison), "
                      "cifar (pfl-research's CIFAR-10 benchmark)")
  parser.add_argument('--pfl_python', default=os.environ.get('PFL_PYTHON'),
                      help='python of a venv with pfl and PyTorch (CPU)')
  parser.add_argument('--pfl_clients', type=int, default=PFL['clients'])
  parser.add_argument('--pfl_rounds', type=int, default=10)
  parser.add_argument('--pfl_tolerance', type=float, default=1e-3,
                      help='largest relative gap of the two sides\' '
                      'training loss after any round')
  args = parser.parse_args(argv)
  tasks = args.tasks.split(',')
  if sorted(set(tasks) - {'mnist', 'cifar'}):
    parser.error(f'--tasks: unknown '
                 f'{", ".join(sorted(set(tasks) - {"mnist", "cifar"}))}; '
                 'allowed: mnist, cifar')
  if 'cifar' in tasks:
    if not 1 <= args.pfl_clients * PFL['n'] <= 50_000 or (
        args.pfl_clients < PFL['S']):
      parser.error(f'--pfl_clients={args.pfl_clients}: between '
                   f'{PFL["S"]} and 1,000 (50 images each of 50,000)')
    if args.pfl_rounds < 2:
      parser.error(f'--pfl_rounds={args.pfl_rounds}: at least 2 (the '
                   'first is not timed)')
  if tasks == ['cifar']:
    return cifar_main(args)
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


def cifar_main(args) -> int:
  """pfl-research's task: the table, the JSON, the loss check."""
  wall = time.perf_counter()
  results, facts, gaps = pfl_task(args.pfl_python, args.pfl_clients,
                                  args.pfl_rounds, args.pfl_tolerance)
  print(f"pfl-research's CIFAR-10 FedAvg on {facts['data']}: "
        f"{facts['clients']:,} clients x {facts['n']}, {facts['S']} a "
        f"round, K = {facts['K']} steps of {facts['B']} at {facts['lr']}, "
        f"{facts['rounds']} rounds")
  print('| run | rounds/s | s per 100 rounds | loss after the last round '
        '| peak RSS |')
  print('|---|---:|---:|---:|---:|')
  for name, r in results.items():
    print(f"| {name} | {r['rounds_per_s']:.3f} | "
          f"{100 / r['rounds_per_s']:,.1f} | {r['losses'][-1]:.5f} | "
          f"{r['maxrss_bytes'] / 2**20:,.0f} MiB |")
  out = {'machine': machine.describe_machine(), 'task': 'cifar',
         'facts': facts, 'gaps': gaps, 'wall_s': time.perf_counter() - wall,
         'results': {name: {k: v for k, v in r.items() if k != 'theta_P'}
                     for name, r in results.items()}}
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(out, f, indent=1, default=float)
  if gaps is None:
    return 0
  theirs = results['pfl fedavg simple_cnn']['rounds_per_s']
  failed = False
  for name, gap in gaps.items():
    print(f"{name} against pfl: {results[name]['rounds_per_s'] / theirs:.2f}x "
          f"its rounds per second; the training loss after each round within "
          f"{gap['loss']:.1e} relative (tolerance {args.pfl_tolerance:.0e}), "
          f"the last parameters {gap['params']:.1e} of how far they moved")
    failed |= max(gap.values()) > args.pfl_tolerance
  if failed:
    print(f'the two sides differ by more than {args.pfl_tolerance:.0e}: not '
          'the same algorithm on the same draws', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
