"""The Flower side of benchmarks/peers.py: FedAvg on MNIST in Flower's
simulation engine: logistic regression with NumPy clients (as Flower's own
NumPy examples write them), or McMahan et al.'s CNN with JAX clients (as
Flower's JAX example writes them: jax alone, the model written out here).

Runs in a virtual environment of its own with flwr[simulation] (and jax for
the CNN; not a dependency of laq-jax: benchmarks/peers.py says how to make
it), from the environment: PEER_DATA (an .npz of x [M, n, 784] float32,
y [M, n], xt, yt and, for the CNN, its initial parameters p:<layer>/<name>,
written by benchmarks/peers.py), MODEL (logreg | cnn), M, S, K, B, LR,
ROUNDS. Prints one JSON line: the wall time, and each round's end time,
test accuracy and the seconds its evaluation took (round 0: the initial
parameters).
"""
import json
import os
import time

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

DATA = os.environ['PEER_DATA']  # npz: x [M, n, 784] float32, y [M, n], xt, yt
MODEL = os.environ.get('MODEL', 'logreg')
# The CNN's arrays, in the order they travel (flax's names: HWIO kernels).
CNN_NAMES = ('conv1/kernel', 'conv1/bias', 'conv2/kernel', 'conv2/bias',
             'fc/kernel', 'fc/bias', 'out/kernel', 'out/bias')
M, PER_ROUND, K, B, ROUNDS = (int(os.environ.get(k, d)) for k, d in (
    ('M', 100), ('S', 10), ('K', 5), ('B', 10), ('ROUNDS', 10)))
LR = float(os.environ.get('LR', 0.05))
_cache = {}
def data():
  if not _cache:
    z = np.load(DATA, mmap_mode='r')
    _cache.update(x=z['x'], y=z['y'])
  return _cache

def grad(w, b, x, y):
  """The mean cross-entropy's gradient of softmax regression."""
  z = x @ w + b
  z -= z.max(1, keepdims=True)
  p = np.exp(z)
  p /= p.sum(1, keepdims=True)
  p[np.arange(len(y)), y] -= 1
  p /= len(y)
  return x.T @ p, p.sum(0)

_jax = {}
def cnn_fns():
  """(jitted SGD step, jitted logits) of McMahan et al.'s CNN: 5x5 conv 32
  (SAME) -> ReLU -> 2x2 max pool -> 5x5 conv 64 -> ReLU -> pool -> dense
  512 -> ReLU -> dense 10; the mean cross-entropy."""
  if not _jax:
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

    def logits(p, x):
      x = x.reshape(-1, 28, 28, 1)
      for i in (1, 2):
        x = jax.lax.conv_general_dilated(
            x, p[f'conv{i}/kernel'], (1, 1), 'SAME',
            dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + p[f'conv{i}/bias']
        x = jax.lax.reduce_window(jax.nn.relu(x), -jnp.inf, jax.lax.max,
                                  (1, 2, 2, 1), (1, 2, 2, 1), 'VALID')
      x = jax.nn.relu(x.reshape(x.shape[0], -1) @ p['fc/kernel']
                      + p['fc/bias'])
      return x @ p['out/kernel'] + p['out/bias']

    def loss(p, x, y):
      z = jax.nn.log_softmax(logits(p, x))
      return -jnp.mean(jnp.take_along_axis(z, y[:, None], 1))

    @jax.jit
    def step(p, x, y):
      g = jax.grad(loss)(p, x, y)
      return {k: p[k] - LR * g[k] for k in p}

    _jax.update(step=step, logits=jax.jit(logits))
  return _jax['step'], _jax['logits']


client = ClientApp()
@client.train()
def train(msg: Message, context: Context):
  """K steps of client SGD on minibatches of B drawn without replacement."""
  arrays = msg.content['arrays'].to_numpy_ndarrays()
  m = int(context.node_config['partition-id'])
  d = data()
  x, y = np.asarray(d['x'][m]), np.asarray(d['y'][m])
  rng = np.random.default_rng([int(msg.content['config']['server-round']),
                               m])
  if MODEL == 'cnn':
    step, _ = cnn_fns()
    p = dict(zip(CNN_NAMES, arrays))
    for _ in range(K):
      idx = rng.choice(len(y), B, replace=False)
      p = step(p, x[idx], y[idx])
    arrays = [np.asarray(p[k]) for k in CNN_NAMES]
  else:
    w, b = arrays
    for _ in range(K):
      idx = rng.choice(len(y), B, replace=False)
      gw, gb = grad(w, b, x[idx], y[idx])
      w, b = w - LR * gw, b - LR * gb
    arrays = [w, b]
  return Message(RecordDict({
      'arrays': ArrayRecord(arrays),
      'metrics': MetricRecord({'num-examples': len(y)})}), reply_to=msg)

server = ServerApp()
LOG = []
@server.main()
def main(grid: Grid, context: Context):
  """Flower's FedAvg: S of M clients a round, the sample-weighted mean,
  the test accuracy after every round (centralized evaluation)."""
  del context
  z = np.load(DATA)
  xt, yt = z['xt'], z['yt']

  def evaluate(server_round, arrays):
    start = time.perf_counter()
    if MODEL == 'cnn':
      _, logits = cnn_fns()
      p = dict(zip(CNN_NAMES, arrays.to_numpy_ndarrays()))
      predicted = np.concatenate([np.argmax(logits(p, xt[i:i + 2000]), 1)
                                  for i in range(0, len(yt), 2000)])
    else:
      w, b = arrays.to_numpy_ndarrays()
      predicted = np.argmax(xt @ w + b, 1)
    end = time.perf_counter()
    # (the round's end: when its evaluation began)
    LOG.append((server_round, start, float(np.mean(predicted == yt)),
                end - start))
    return MetricRecord({'accuracy': LOG[-1][2]})

  initial = ([z['p:' + k] for k in CNN_NAMES] if MODEL == 'cnn' else
             [np.zeros((784, 10), np.float32), np.zeros(10, np.float32)])

  strategy = FedAvg(fraction_train=PER_ROUND / M, fraction_evaluate=0.0,
                    min_train_nodes=PER_ROUND, min_available_nodes=M)
  strategy.start(grid=grid, initial_arrays=ArrayRecord(initial),
                 num_rounds=ROUNDS, evaluate_fn=evaluate)

def peak_rss() -> int:
  """This process's peak resident memory, VmHWM (getrusage's ru_maxrss
  keeps the peak of the process that started this one)."""
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith('VmHWM:'):
        return int(line.split()[1]) * 1024
  return 0


if __name__ == '__main__':
  start = time.perf_counter()
  run_simulation(server_app=server, client_app=client, num_supernodes=M,
                 backend_config={'client_resources': {'num_cpus': 1}})
  print(json.dumps({
      'wall_s': time.perf_counter() - start, 'start': start,
      'rounds': [dict(round=r, end=t, accuracy=a, evaluate_s=e)
                 for r, t, a, e in LOG],
      # the driver's peak (the Ray workers are processes of their own)
      'maxrss_bytes': peak_rss()}))
