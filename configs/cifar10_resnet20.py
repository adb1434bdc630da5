r"""CIFAR-10 with ResNet-20 (GroupNorm), federated.

    python -m experiments.sweep --config=configs/cifar10_resnet20.py:quick \
        --config.data_dir=/path/to/cifar10 --workdir=runs/cifar10_quick

CIFAR-10 is read from its official files (dataset `cifar10`; not
downloadable from here: docs/algorithm.md, "Datasets", says where to put
them). The setting: ResNet-20 with GroupNorm (`resnet20`, 269,722
parameters; why GroupNorm: laq_jax/problems/models.py), M = 100 clients of 500
images with a Dirichlet(0.5) label skew, 10% participation, absent
clients dropped, minibatches of 32, SGD's step 0.05 on the mean gradient,
no l2, 1,000 rounds, test accuracy every 50; the sweep is
configs/workloads.py's FAMILY. A ResNet-20 gradient is 242 MFLOP a
sample: a full round is about 775 GFLOP, a GPU's job (`quick`: M = 10 of
500, 100 rounds; `tiny`: seconds, what the tests run on small files).
"""

from __future__ import annotations

import ml_collections

from configs import default
from configs import workloads

ETA = 0.05
VARIANTS = {
    **default.VARIANTS,
    'quick': dict(num_workers=10, train_subset=5000, num_iters=100,
                  eval_every=10, loss_every=10, batch_size=16,
                  participation=0.5),
    'tiny': dict(num_workers=2, train_subset=20, num_iters=2, eval_every=1,
                 loss_every=1, batch_size=5, participation=1.0),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  return workloads.workload_config(
      arg, VARIANTS, ETA, dataset='cifar10', model='resnet20',
      num_workers=100, split='dirichlet', dirichlet_alpha=0.5,
      participation=0.1, batch_size=32, num_iters=1000, eval_every=50,
      loss_every=50)
