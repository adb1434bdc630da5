r"""One preset of the communication-efficient family, at its published settings.

    python -m experiments.main --config=configs/compressors.py:algo=ef21 \
        --workdir=runs/compressors/ef21
    python -m experiments.main --config=configs/compressors.py:algo=topk_ef,mlp,quick \
        --workdir=runs/compressors/topk_ef_mlp

Any preset of `laq_jax.ALGORITHMS` (docs/algorithm.md): the paper's eight,
qsgd, ssgd, terngrad, ef_signsgd, topk_ef, ef21, ef21_sgd, clag, two_laq.
Settings by the kind of gradient (documented in docs/algorithm.md):
  full batch  the LAQ paper's: alpha = 0.02, b = 4 (b = 8 on the network),
              D = 10, xi = 0.8, c_e = 3, tbar = 100; 4,000 iterations on
              logistic regression (float64), 8,000 on the network (float32);
  minibatch   the authors' SLAQ settings: 500 samples per worker,
              alpha = 0.008, b = 3, c_e = 1.5, c_0 = 0.2, 1,500 iterations
              (NeurIPS SLAQ.py); on the network their network script's
              (TPAMI-LAQ SGD/lasterrsgdDNN.py): alpha = 0.02, b = 6,
              c_e = 3, c_0 = 0, xi = 3 with xi_schedule '300:2,500:6',
              and alpha = 0.0006 for the sign and ternary presets
              (ef_signsgd, terngrad), as that script runs its sign-SGD and
              ternary methods;
and for every preset: QSGD s = 10,000 levels (the authors' script), SSGD
p = 0.5 (theirs), top_k k = 1% of p (EF21, CLAG, top-k with error feedback),
CLAG zeta = 20 (its threshold then equals LAG's xi / (alpha^2 M^2) = 20 at
these settings for one history term), two_laq's broadcast at b bits.

Variants: `mlp` (the 200-ReLU network), `quick` (6,000 images, minutes),
`tiny` (600 images, seconds); `name=value` overrides any field and wins
over the settings above.
"""

from __future__ import annotations

import ml_collections

from configs import default
from configs import mnist_mlp_stochastic
from laq_jax.hyper import get_algorithm

# The settings of each kind of gradient (the field's presets share them).
FULL_BATCH = dict(step_size=0.02, bits=4, err_weight=3.0,
                  threshold_offset=0.0, num_iters=4000)
MINIBATCH = dict(step_size=0.008, bits=3, err_weight=1.5,
                 threshold_offset=0.2, batch_size=500, num_iters=1500)
NETWORK = dict(model='mlp', hidden=200, precision='float32', fstar='none')
# The minibatch presets on the network (SGD/lasterrsgdDNN.py).
NETWORK_MINIBATCH = mnist_mlp_stochastic.SETTINGS
NETWORK_SIGN_STEP = 0.0006  # its sign-SGD and ternary runs (alg 4, 5)
SIGN_PRESETS = ('ef_signsgd', 'terngrad')
QUICK_NETWORK_BATCH = mnist_mlp_stochastic.QUICK_BATCH


def network_minibatch_settings(algo: str) -> dict:
  """A minibatch preset's settings on the network."""
  values = dict(NETWORK_MINIBATCH)
  if algo in SIGN_PRESETS:
    values['step_size'] = NETWORK_SIGN_STEP
  return values

VARIANTS = {
    **default.VARIANTS,
    'mlp': {},  # applied below (it changes the budget and bits)
    'quick': dict(train_subset=6000, eval_every=50),
    'tiny': dict(train_subset=600, num_iters=30, eval_every=10,
                 batch_size=20),
}
QUICK_ITERS = {'full': 1000, 'minibatch': 300, 'mlp_full': 200,
               'mlp_minibatch': 300}


def kind_settings(algo: str, network: bool, quick: bool) -> dict:
  """The settings of `algo`'s kind of gradient, on the network or not."""
  stochastic = get_algorithm(algo).stochastic
  values = dict(MINIBATCH if stochastic else FULL_BATCH)
  if network:
    values.update(NETWORK)
    if not stochastic:
      values.update(bits=8, num_iters=8000)
    else:
      values.update(network_minibatch_settings(algo))
      if quick:
        values['batch_size'] = QUICK_NETWORK_BATCH
  if quick:
    key = ('mlp_' if network else '') + ('minibatch' if stochastic
                                          else 'full')
    values['num_iters'] = QUICK_ITERS[key]
    if not network and not stochastic:
      values['target_residual'] = 1e-2
  return values


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The preset named by `algo=` (default ef21) at its kind's settings."""
  config = default.get_config()
  config.algo = 'ef21'
  config.eval_every = 100
  probe = default.apply_arg(default.get_config(), arg, VARIANTS)
  words = {w.strip() for w in (arg or '').split(',')}
  config.update(kind_settings(probe.algo, 'mlp' in words,
                              'quick' in words))
  # The argument last, so its variants and name=value pairs win.
  return default.apply_arg(config, arg, VARIANTS)
