r"""The four full-batch algorithms (gd, qgd, lag, laq) as ONE compiled program.

The LAQ paper's convex experiment (MNIST logistic regression, M = 10 workers
in file order, lam = 0.01, alpha = 0.02, b = 4, D = 10, xi = 0.8, c_e = 3,
tbar = 100, float64, 4,000 iterations, target residual 1e-6), the algorithm
a grid axis (`quantize` / `lazy` switches of one program):

    python -m experiments.sweep --config=configs/sweep_algos.py \
        --workdir=runs/sweep_algos

Short version (full MNIST, 300 iterations):

    python -m experiments.sweep --config=configs/sweep_algos.py:quick \
        --workdir=runs/sweep_algos_quick

results.csv holds the paper's table (iterations, uploads and bits to the
target residual, test accuracy); curves.npz the [4, T] curves for its
figures. Any other key can be crossed with the algorithms, e.g. seeds or
step sizes: `--config.sweep.step_size='(0.01, 0.02)'` after adding it to
`config.sweep` here.
"""

from __future__ import annotations

import ml_collections

from configs import default

VARIANTS = {
    **default.VARIANTS,
    'quick': dict(num_iters=300, eval_every=100),
    'tiny': dict(train_subset=600, num_iters=30, eval_every=10),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.model = 'logreg'
  config.precision = 'float64'
  config.num_iters = 4000
  config.eval_every = 200
  # sweep_batch_size 0: every grid point in one program
  default.add_sweep_fields(config, {'algo': ('gd', 'qgd', 'lag', 'laq')})
  return default.apply_arg(config, arg, VARIANTS)
