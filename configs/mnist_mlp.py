"""Nonconvex experiment of the LAQ paper: MNIST, one hidden layer of 200 ReLUs.

Same rule settings as the convex run (alpha = 0.02, b = 4, D = 10, xi = 0.8,
c_e = 3, tbar = 100, lam = 0.01), a fixed budget of iterations, float32; the
figures show the loss itself (f* is unknown):

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
  config.precision = 'float32'
  config.fstar = 'none'
  config.num_iters = 2000
  config.eval_every = 100
  return default.apply_arg(config, arg, VARIANTS)
