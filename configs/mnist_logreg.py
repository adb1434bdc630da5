"""Convex experiment of the LAQ paper: MNIST logistic regression, full batch.

M = 10 workers with 6,000 images each in file order, lam = 0.01, alpha = 0.02,
b = 4, D = 10, xi = 0.8, c_e = 3, tbar = 100, float64 so that the loss residual
f(theta^k) - f* can reach 1e-6 (f* solved once and cached):

    python -m experiments.main --config=configs/mnist_logreg.py \\
        --workdir=runs/mnist_logreg/laq --config.algo=laq

The four full-batch algorithms on a short budget, then their comparison:

    for a in gd qgd lag laq; do
      python -m experiments.main --config=configs/mnist_logreg.py:algo=$a,quick \\
          --workdir=runs/quick/$a
    done
    python -m experiments.compare --workdirs runs/quick/{gd,qgd,lag,laq} \\
        --out runs/quick/compare
"""

from __future__ import annotations

import ml_collections

from configs import default

VARIANTS = {
    **default.VARIANTS,
    # Full MNIST, a short budget: the upload and bit savings are already
    # visible; the 1e-6 residual needs the full 4,000 iterations.
    'quick': dict(num_iters=300, eval_every=50),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.model = 'logreg'
  config.precision = 'float64'
  config.num_iters = 4000
  config.eval_every = 200
  return default.apply_arg(config, arg, VARIANTS)
