"""Nonconvex experiment of the LAQ paper: MNIST, one hidden layer of 200 ReLUs.

The authors' network script (TPAMI-LAQ, GD/lasterrtwiceDNN.py): b = 8,
alpha = 0.02, c_e = 3, xi = 0.8, D = 10, tbar = 100, lam = 0.01, 8,000
full-batch iterations, float32. f* is unknown: the figures show the loss, the
paper's residual (the average worker loss minus the smallest value reached)
and the squared gradient norm ||sum_m grad f_m(theta^k)||^2.

    python -m experiments.main --config=configs/mnist_mlp.py \\
        --workdir=runs/mnist_mlp/laq --config.algo=laq

Short version (a subset of 6,000 images; minutes on a 2-core CPU):

    python -m experiments.main --config=configs/mnist_mlp.py:quick \\
        --workdir=runs/mnist_mlp_quick/laq
"""

from __future__ import annotations

import ml_collections

from configs import default

VARIANTS = {
    **default.VARIANTS,
    'quick': dict(train_subset=6000, num_iters=200, eval_every=50),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.model = 'mlp'
  config.hidden = 200
  config.bits = 8
  config.precision = 'float32'
  config.fstar = 'none'
  config.num_iters = 8000
  config.eval_every = 200
  return default.apply_arg(config, arg, VARIANTS)
