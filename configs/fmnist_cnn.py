r"""Fashion-MNIST with McMahan et al.'s CNN, federated.

    python -m experiments.sweep --config=configs/fmnist_cnn.py:quick \
        --workdir=runs/fmnist_cnn_quick              # the family, one program
    python -m experiments.main --config=configs/fmnist_cnn.py:tiny \
        --config.algo=fedavg --workdir=runs/fmnist_tiny

The setting: Fashion-MNIST (dataset `fashion_mnist`: the Debian package's
files, or `python -m experiments.fetch_data --dataset=fashion_mnist`), the
FedAvg paper's CNN (`cnn`, 1,663,370 parameters; `lasg_cnn` the LASG code's,
431,080: the variant of that name), M = 100 clients of 600 images with a
Dirichlet(0.5) label skew, 10% participation, absent clients dropped,
minibatches of 50, SGD's step 0.05 on the mean gradient (alpha = 0.05 / M
on the sum), no l2 (a network), 500 rounds, test accuracy every 25. The
sweep: configs/workloads.py's FAMILY (FedSGD, lazy, LASG / CADA, FedAvg
family), each local preset with its paper's server step.

Cost: the CNN's gradient is 72 MFLOP a sample, and the vmapped program
computes every client each round (absent ones masked), so a full round is
about 360 GFLOP: seconds on a CPU, hence `quick` (M = 10 of 600, the LASG
CNN, minibatches of 20, 200 rounds) and `tiny` (seconds).
"""

from __future__ import annotations

import ml_collections

from configs import default
from configs import workloads

ETA = 0.05  # SGD's step on the mean gradient
VARIANTS = {
    **default.VARIANTS,
    'lasg_cnn': dict(model='lasg_cnn'),
    'quick': dict(model='lasg_cnn', num_workers=10, train_subset=6000,
                  num_iters=200, eval_every=20, loss_every=20,
                  batch_size=20, participation=0.5),
    # The report's budget on a 2-core CPU (docs/workloads/REPORT.md):
    # quick's setting, 30 rounds.
    'cpu': dict(model='lasg_cnn', num_workers=10, train_subset=6000,
                num_iters=30, eval_every=5, loss_every=30,
                batch_size=20, participation=0.5),
    'tiny': dict(model='lasg_cnn', num_workers=4, train_subset=240,
                 num_iters=4, eval_every=2, loss_every=2, batch_size=5,
                 participation=0.5),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  return workloads.workload_config(
      arg, VARIANTS, ETA, dataset='fashion_mnist', model='cnn',
      num_workers=100, split='dirichlet', dirichlet_alpha=0.5,
      participation=0.1, batch_size=50, num_iters=500, eval_every=25,
      loss_every=25)
