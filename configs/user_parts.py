"""A user's own parts through the launchers: the config names the module.

`notebooks/user_parts.py` is a module of a user's own (not the library): on
import it registers rand-k (its own parameter k), natural compression,
PowerSGD rank 2 (per-worker state), an ema trigger (state) and presets that
use them, among them GD with an optax momentum server. This config imports it
first, so its parts' parameters are fields of `config.params`, and names it
in `config.modules`, so every process that checks the config imports it too
(as big_vision's configs name their model modules). MNIST logistic
regression, full batch, PowerSGD with error feedback:

    python -m experiments.main --config=configs/user_parts.py \\
        --workdir=runs/user_parts/powersgd
    python -m experiments.main --config=configs/user_parts.py:algo=rand_k_gd \\
        --config.params.rand_k.k=500 --workdir=runs/user_parts/rand_k
    python -m experiments.main --config=configs/user_parts.py:algo=gd_momentum,quick \\
        --config.params.heavy_ball.momentum=0.5 --workdir=runs/user_parts/momentum

Any module of yours works the same way: import it here and list it in
`config.modules` (comma-separated), on PYTHONPATH or beside the launch.
"""

from __future__ import annotations

import ml_collections

from configs import default
from laq_jax import parts

MODULES = 'notebooks.user_parts'
parts.import_modules(MODULES)  # its parts' parameters join config.params


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.modules = MODULES
  config.algo = 'powersgd_ef'
  config.precision = 'float32'
  config.num_iters = 1000
  config.eval_every = 100
  config.fstar = 'none'
  return default.apply_arg(config, arg)
