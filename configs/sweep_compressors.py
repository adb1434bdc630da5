r"""Every preset of the family as one sweep: two compiled programs.

    python -m experiments.sweep --config=configs/sweep_compressors.py \
        --workdir=runs/sweep_compressors
    python -m experiments.sweep --config=configs/sweep_compressors.py:tiny \
        --workdir=runs/sweep_compressors_tiny      # seconds

The grid's `algo` axis holds the family's 17 presets of
`laq_jax.ALGORITHMS` (LASG and CADA: configs/lasg.py); the
full-batch ones and the minibatch ones run as two programs (their gradients
differ), everything else they differ in (compressor, what it compresses,
error feedback, trigger, the broadcast's bits, the settings) is data. Each
kind runs at its settings of configs/compressors.py (`config.algo_settings`
gives the minibatch presets the authors' SLAQ settings, on the network their
network script's: b = 6, alpha = 0.02, xi = 3 with its schedule, c_e = 3,
c_0 = 0, alpha = 0.0006 for sign and ternary). One budget for
both programs: 1,500 iterations (the full batch ones at 4,000 in `:full`).

Variants: `full` (the 7 full-batch presets, 4,000 iterations, the convex
target 1e-6), `minibatch` (the 10 minibatch presets, float32 as the
paper's SLAQ experiments), `mlp` (the network:
b = 8 full batch, float32), `quick` (6,000 images, minutes), `tiny`
(seconds). A grid over a part's parameter is one program too, e.g.
`--config.sweep="{'algo': ('ef21',), 'top_k': {'k': (0.001, 0.01, 0.1)}}"`
(a part's parameter as a nested group: `top_k.k`), or
`configs/sweep_compressors.py:zeta` (CLAG over `clag.zeta`).
"""

from __future__ import annotations

import ml_collections

from configs import compressors
from configs import default
from configs import lasg
from laq_jax.hyper import ALGORITHMS
from laq_jax.presets import AFTER_LAQ

# The compressor family (/work/shared/compressors.md): every built-in preset
# but the LAQ authors' follow-ups, LASG and CADA, which have their own study
# (configs/lasg.py), and the presets after LAQ (laq_jax.presets.AFTER_LAQ:
# the 3PC family's, a study of their own); a preset registered from user
# code joins.
FAMILY = tuple(a for a in ALGORITHMS if a not in lasg.PRESETS
               and a not in {p.name for p in AFTER_LAQ})
FULL = tuple(a for a in FAMILY if not ALGORITHMS[a].stochastic)
MINIBATCH = tuple(a for a in FAMILY if ALGORITHMS[a].stochastic)
# The minibatch presets' own settings (grid data, not the config's).
MINIBATCH_SETTINGS = {k: v for k, v in compressors.MINIBATCH.items()
                      if k in ('step_size', 'bits', 'err_weight',
                               'threshold_offset')}

VARIANTS = {
    **default.VARIANTS,
    'full': dict(sweep={'algo': FULL}, num_iters=4000),
    'minibatch': dict(sweep={'algo': MINIBATCH}, precision='float32'),
    'mlp': dict(model='mlp', hidden=200, precision='float32', fstar='none',
                bits=8),
    'quick': dict(train_subset=6000, num_iters=300, eval_every=100,
                  target_residual=1e-2),
    # (the network at 32 hidden units: the tests' pipeline, in seconds)
    'tiny': dict(train_subset=600, num_iters=30, eval_every=10,
                 batch_size=20, hidden=32),
    'zeta': dict(sweep={'algo': ('clag',),
                        'clag': {'zeta': (1.0, 5.0, 20.0, 100.0)}}),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = default.get_config()
  config.update(compressors.FULL_BATCH)
  config.num_iters = 1500
  config.eval_every = 100
  config.batch_size = compressors.MINIBATCH['batch_size']
  # sweep_batch_size 0: every grid point of a program at once
  default.add_sweep_fields(
      config, {'algo': FULL + MINIBATCH},
      algo_settings={a: dict(MINIBATCH_SETTINGS) for a in MINIBATCH})
  config = default.apply_arg(config, arg, VARIANTS)
  if config.model == 'mlp':  # the network script's minibatch settings
    for a in MINIBATCH:
      config.algo_settings[a] = ml_collections.ConfigDict(
          compressors.network_minibatch_settings(a))
    words = [w.split('=', 1)[0].strip() for w in (arg or '').split(',')]
    if 'quick' in words and 'batch_size' not in words:  # (given: it wins)
      config.batch_size = compressors.QUICK_NETWORK_BATCH
  return config
