"""The pfl-research side of benchmarks/peers.py: FedAvg on CIFAR-10-shaped
data in pfl's simulation (`pfl.aggregate.simulate.SimulatedBackend`, one
process), as pfl-research's CIFAR-10 benchmark configures it
(benchmarks/image_classification/configs/baseline.yaml: `fedavg`,
`simple_cnn`, local SGD at 0.1 for one epoch in batches of 10, central SGD
at 1.0, users weighted equally).

Runs in a virtual environment of its own with pfl and PyTorch's CPU build
(not dependencies of laq-jax: benchmarks/peers.py says how to make it),
from the environment: PEER_DATA (an .npz written by benchmarks/peers.py:
x [M, n, 3072] float32 channels last, y [M, n]; clients [R, S] and rows
[R, S, K B], the clients laq-jax draws in each round and the rows of each
one's K minibatches of B, in order; xe, ye, the fixed training samples the
loss after each round is computed on; p:<layer>/<name>, laq-jax's initial
parameters by flax's names), B, LR, SERVER_LR. Each round's cohort is
laq-jax's, and each client's dataset that round is its K minibatches one
after the other, so that pfl's one local epoch in batches of B (pfl's
`Dataset.iter`, which does not shuffle) takes laq-jax's steps on laq-jax's
samples: the same algorithm on the same draws. The model is pfl's
`simple_cnn` written out here (pfl's benchmarks are not in its package)
without its dropout layers, as laq-jax's `pfl_cnn`. Prints one JSON line:
each round's end time (perf_counter, the loss evaluations subtracted), the
loss after it, the wall time and peak RSS.
"""
import json
import os
import resource
import time

import numpy as np
import torch
from torch import nn

from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByUser
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics, Weighted
from pfl.model.pytorch import PyTorchModel

B = int(os.environ.get('B', 10))
LR = float(os.environ.get('LR', 0.1))
SERVER_LR = float(os.environ.get('SERVER_LR', 1.0))


class SimpleCNN(nn.Module):
  """pfl-research's simple_cnn (benchmarks/model/pytorch/cnn.py) on 32x32x3
  images channels last, less its two dropout layers."""

  def __init__(self, num_classes=10):
    super().__init__()
    self.conv1 = nn.Conv2d(3, 32, (3, 3))
    self.conv2 = nn.Conv2d(32, 64, (3, 3))
    self.fc = nn.Linear(14 * 14 * 64, 128)
    self.out = nn.Linear(128, num_classes)

  def forward(self, x):
    x = x.reshape(-1, 32, 32, 3).permute(0, 3, 1, 2)  # (pfl's Transpose2D)
    x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
    x = torch.flatten(nn.functional.max_pool2d(x, (2, 2)), 1)
    return self.out(torch.relu(self.fc(x)))

  def loss(self, inputs, targets, eval=False):  # pylint: disable=redefined-builtin
    self.eval() if eval else self.train()  # pylint: disable=expression-not-assigned
    return nn.functional.cross_entropy(self(inputs), targets.long())

  @torch.no_grad()
  def metrics(self, inputs, targets, eval=True):  # pylint: disable=redefined-builtin
    self.eval() if eval else self.train()  # pylint: disable=expression-not-assigned
    loss = nn.functional.cross_entropy(self(inputs), targets.long(),
                                       reduction='sum')
    return {'loss': Weighted(loss.item(), len(targets))}

  def load_flax(self, z):
    """laq-jax's initial parameters (flax's names and layouts: HWIO
    kernels, NHWC flattening) into PyTorch's (OIHW, NCHW flattening)."""
    get = lambda name: torch.from_numpy(np.array(z['p:' + name]))
    with torch.no_grad():
      for conv in ('conv1', 'conv2'):
        getattr(self, conv).weight.copy_(get(f'{conv}/kernel').permute(
            3, 2, 0, 1))
        getattr(self, conv).bias.copy_(get(f'{conv}/bias'))
      # fc's input rows: flax's (h, w, c) order, PyTorch's (c, h, w)
      fc = get('fc/kernel').reshape(14, 14, 64, 128).permute(3, 2, 0, 1)
      self.fc.weight.copy_(fc.reshape(128, 14 * 14 * 64))
      self.fc.bias.copy_(get('fc/bias'))
      self.out.weight.copy_(get('out/kernel').T)
      self.out.bias.copy_(get('out/bias'))


class Clock(TrainingProcessCallback):
  """Each round's end (perf_counter, less the loss evaluations so far) and
  the mean cross-entropy on the fixed samples after it."""

  def __init__(self, xe, ye):
    self.xe, self.ye = xe, ye
    self.ends, self.losses, self.evaluated = [], [], 0.0

  def after_central_iteration(self, aggregate_metrics, model, *,
                              central_iteration):
    end = time.perf_counter()
    with torch.no_grad():
      model.pytorch_model.eval()
      # (on the model's device: pfl moves it to a GPU where it has one)
      device = next(model.pytorch_model.parameters()).device
      loss = nn.functional.cross_entropy(
          model.pytorch_model(self.xe.to(device)),
          self.ye.long().to(device)).item()
    self.ends.append(end - self.evaluated)
    self.losses.append(loss)
    self.evaluated += time.perf_counter() - end
    return False, Metrics()


def peak_rss():
  """This process's peak resident memory in bytes: VmHWM, this address
  space's (ru_maxrss counts the parent's before exec too)."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmHWM:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
  wall = time.perf_counter()
  torch.manual_seed(0)
  z = np.load(os.environ['PEER_DATA'])
  x, y = torch.from_numpy(z['x']), torch.from_numpy(z['y'].astype(np.int64))
  clients, rows = z['clients'], z['rows']
  rounds, per_round = clients.shape
  order = iter(range(rounds * per_round))  # user r S + i: round r's i-th

  def make_dataset(user):
    r, i = divmod(user, per_round)
    m, idx = int(clients[r, i]), torch.from_numpy(rows[r, i].astype(np.int64))
    return Dataset((x[m][idx], y[m][idx]), user_id=str(user))

  data = FederatedDataset(make_dataset, lambda: next(order))
  net = SimpleCNN()
  net.load_flax(z)
  model = PyTorchModel(model=net, local_optimizer_create=torch.optim.SGD,
                       central_optimizer=torch.optim.SGD(
                           [p for p in net.parameters() if p.requires_grad],
                           SERVER_LR))
  clock = Clock(torch.from_numpy(z['xe']), torch.from_numpy(
      z['ye'].astype(np.int64)))
  start = time.perf_counter()
  FederatedAveraging().run(
      algorithm_params=NNAlgorithmParams(
          central_num_iterations=rounds, evaluation_frequency=rounds + 1,
          train_cohort_size=per_round, val_cohort_size=0),
      backend=SimulatedBackend(training_data=data, val_data=None,
                               postprocessors=[WeightByUser()]),
      model=model,
      model_train_params=NNTrainHyperParams(
          local_learning_rate=LR, local_num_epochs=1, local_batch_size=B),
      model_eval_params=NNEvalHyperParams(local_batch_size=10_000),
      callbacks=[clock])
  # the last parameters in laq-jax's flat order (flax's tree: conv1, conv2,
  # fc, out; bias before kernel; HWIO kernels, fc's rows in (h, w, c))
  w = {n: p.detach().cpu().numpy() for n, p in net.named_parameters()}
  kernels = {
      'conv1': w['conv1.weight'].transpose(2, 3, 1, 0),
      'conv2': w['conv2.weight'].transpose(2, 3, 1, 0),
      'fc': w['fc.weight'].reshape(128, 64, 14, 14).transpose(2, 3, 1, 0)
            .reshape(14 * 14 * 64, 128),
      'out': w['out.weight'].T}
  np.save(os.environ['PEER_OUT'], np.concatenate(
      [a.ravel() for layer in ('conv1', 'conv2', 'fc', 'out')
       for a in (w[f'{layer}.bias'], kernels[layer])]))
  print(json.dumps({
      'start': start, 'ends': clock.ends, 'losses': clock.losses,
      'wall_s': time.perf_counter() - wall,
      'maxrss_bytes': peak_rss(),
      'torch': torch.__version__, 'threads': torch.get_num_threads(),
      'device': str(next(net.parameters()).device)}))


if __name__ == '__main__':
  main()
