"""The Flower side of benchmarks/peers.py: FedAvg on MNIST in Flower's
simulation engine, logistic regression with NumPy clients (as Flower's own
NumPy examples write them).

Runs in a virtual environment of its own with flwr[simulation] (not a
dependency of laq-jax; benchmarks/peers.py says how to make it), from the
environment: PEER_DATA (an .npz of x [M, n, 784] float32, y [M, n], xt, yt,
written by benchmarks/peers.py), M, S, K, B, LR, ROUNDS. Prints one JSON
line: the wall time, and each round's end time and test accuracy.
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

client = ClientApp()
@client.train()
def train(msg: Message, context: Context):
  """K steps of client SGD on minibatches of B drawn without replacement."""
  w, b = msg.content['arrays'].to_numpy_ndarrays()
  m = int(context.node_config['partition-id'])
  d = data()
  x, y = np.asarray(d['x'][m]), np.asarray(d['y'][m])
  rng = np.random.default_rng([int(msg.content['config']['server-round']),
                               m])
  for _ in range(K):
    idx = rng.choice(len(y), B, replace=False)
    gw, gb = grad(w, b, x[idx], y[idx])
    w, b = w - LR * gw, b - LR * gb
  return Message(RecordDict({
      'arrays': ArrayRecord([w, b]),
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
    w, b = arrays.to_numpy_ndarrays()
    LOG.append((server_round, time.perf_counter(),
                float(np.mean(np.argmax(xt @ w + b, 1) == yt))))
    return MetricRecord({'accuracy': LOG[-1][2]})

  strategy = FedAvg(fraction_train=PER_ROUND / M, fraction_evaluate=0.0,
                    min_train_nodes=PER_ROUND, min_available_nodes=M)
  strategy.start(grid=grid, initial_arrays=ArrayRecord(
      [np.zeros((784, 10), np.float32), np.zeros(10, np.float32)]),
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
      'rounds': [dict(round=r, end=t, accuracy=a) for r, t, a in LOG],
      # the driver's peak (the Ray workers are processes of their own)
      'maxrss_bytes': peak_rss()}))
