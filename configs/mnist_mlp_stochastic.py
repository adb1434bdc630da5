"""Stochastic nonconvex experiment: SLAQ and family on the 200-ReLU MNIST MLP.

The LAQ authors' SLAQ settings: minibatches of 500 per worker, b = 3,
alpha = 0.008, c_e = 1.5, c_0 = 0.2, 1,500 iterations (float32):

    python -m experiments.main --config=configs/mnist_mlp_stochastic.py \\
        --workdir=runs/mnist_mlp_stochastic/slaq --config.algo=slaq

`algo` may be sgd, qsgd, ssgd, sqgd, slag or slaq. Short version:

    python -m experiments.main \\
        --config=configs/mnist_mlp_stochastic.py:algo=slaq,quick \\
        --workdir=runs/mlp_stochastic_quick/slaq
"""

from __future__ import annotations

import ml_collections

from configs import default

VARIANTS = {
    **default.VARIANTS,
    'quick': dict(train_subset=6000, num_iters=300, eval_every=50),
    'tiny': dict(train_subset=600, num_iters=30, eval_every=10, batch_size=20),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.algo = 'slaq'
  config.model = 'mlp'
  config.hidden = 200
  config.precision = 'float32'
  config.fstar = 'none'
  config.batch_size = 500
  config.bits = 3
  config.step_size = 0.008
  config.err_weight = 1.5
  config.threshold_offset = 0.2
  config.num_iters = 1500
  config.eval_every = 100
  return default.apply_arg(config, arg, VARIANTS)
