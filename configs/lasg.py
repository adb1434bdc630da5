r"""LASG and CADA (the LAQ authors' follow-ups) beside SGD and SLAQ: sweeps.

    python -m experiments.sweep --config=configs/lasg.py:network \
        --workdir=runs/lasg/network          # the minibatch network
    python -m experiments.sweep --config=configs/lasg.py:lasg_mnist \
        --workdir=runs/lasg/lasg_mnist       # LASG's own MNIST setting
    python -m experiments.sweep --config=configs/lasg.py:network,quick \
        --workdir=runs/lasg/network_quick    # minutes

`network` (the default): the paper report's minibatch network
(configs/mnist_mlp_stochastic.py: the 200-ReLU MLP, full MNIST, M = 10,
minibatches of 500, alpha = 0.02 on the sum, 1,500 iterations, float32),
where Algorithm 1's SLAQ runs away at the DNN script's settings (b = 6,
xi = 3 with the schedule '300:2,500:6', c_e = 3, c_0 = 0). Every preset runs
in ONE program with its own settings (`algo_settings`):
  sgd, slaq          the DNN script's (SLAQ as Algorithm 1 reads it);
  lasg_wk2/wk1/ps    the experiment's step and minibatch, LASG's trigger
                     constants from its code (sunyuejiao/lasg main_lasg.py):
                     xi = 1 (xi_d = 1/D, D = 10, no schedule), a forced
                     upload after 49 skips (its delay bound 50: tbar = 49),
                     c_e = c_0 = 0; PS's L = 0.1 M^2 = 10 (check_ps's 0.1
                     on gradients averaged over M);
  lasg_*_laq         the same with LAQ's quantizer at the DNN script's b = 6
                     and c_e = 3 (the error terms; our combination: neither
                     repository quantizes LASG);
  cada1, cada2,      CADA's MNIST code (ChrisYZZ/CADA-master, Python/MNIST):
  cada_adam          Adam step 5e-4 (not rescaled: Adam is scale-free but
                     for eps), b1 = 0.9, b2 = 0.999, eps = 1e-8 on the
                     average = 1e-7 on the sum, delay bound 50 (tbar = 49),
                     and the MATLAB code's absolute threshold c = 5e-4 on
                     averaged gradients = 0.05 here (docs/algorithm.md).
`lasg_mnist`: LASG's own experiment as its code sets it (M = 20 workers,
MNIST sorted by label and cut into shards of 3,000, minibatches of 6, lr
0.01 on the AVERAGE gradient = alpha 5e-4 on the sum, no weight decay, 20
epochs = 10,000 iterations, delay bound 50), on its CNN (`lasg_cnn`, the
code's mnist.py `Net`) started as PyTorch starts it (`init='torch'`:
torch.nn's default uniform initializers; flax's default init skips the
slow first ~300 steps the authors' runs show), WK1/WK2/PS against SGD;
PS's L = 0.1 M^2 where lasg_ps is swept.
`cada_mnist`: CADA as its authors' MNIST code runs it (ChrisYZZ/CADA-master
Python/MNIST code: M = 10 label-sorted shards of 6,000, minibatches of 12,
Adam's lr 5e-4, 20 epochs = 10,000 iterations, the LASG CNN as PyTorch
starts it): `cada1_mnist` / `cada2_mnist` (LASG's WK1 / WK2 tests at LASG's
constants against the history of ||alpha agg||^2, the MNIST code's) beside
`cada_adam`; its saved runs upload 39.6% (CADA1) and 18.4% (CADA2) of
Adam's 99,910 uploads.
`cada_mnist,typo`: the same with the authors' AMSGrad typo
(`cada1_mnist_typo`, `cada2_mnist_typo`: utils_gpu.py:158 leaves the first
convolution's bias with vhat at the first step's v; the range
`laq_jax.flat_range(model, 'conv1/bias')` of the model the sweep runs).
Adam uploads every step whatever its server, so the typo's shares are of
the `cada_mnist` sweep's Adam (`cada_adam_typo` exists for its loss).
"""

from __future__ import annotations

import ml_collections

from configs import default
from configs import mnist_mlp_stochastic

# LASG's trigger constants (main_lasg.py: thrd_scale 1/(M^2 lr^2 D), D = 10,
# delay_bound 50), in the suite's units.
LASG = dict(xi=1.0, xi_schedule='', max_staleness=49, err_weight=0.0,
            threshold_offset=0.0)
LASG_QUANTIZED = dict(LASG, bits=6, err_weight=3.0)
CADA = dict(step_size=5e-4, max_staleness=49, xi_schedule='')
CADA_PARAMS = {'cada_amsgrad': {'eps': 1e-7}, 'cada_wk1': {'c': 0.05},
               'cada_wk2': {'c': 0.05}}
# The follow-ups' presets: their own study, not the compressor family's.
PRESETS = ('lasg_wk2', 'lasg_wk1', 'lasg_ps', 'lasg_wk2_laq', 'lasg_wk1_laq',
           'lasg_ps_laq', 'cada1', 'cada2', 'cada_adam', 'cada1_mnist',
           'cada2_mnist', 'cada1_mnist_typo', 'cada2_mnist_typo',
           'cada_adam_typo')
NETWORK_ALGOS = ('sgd', 'slaq', 'lasg_wk2', 'lasg_wk1', 'lasg_ps',
                 'lasg_wk2_laq', 'lasg_wk1_laq', 'lasg_ps_laq', 'cada1',
                 'cada2', 'cada_adam')
LASG_MNIST_ALGOS = ('sgd', 'lasg_wk2', 'lasg_wk1', 'lasg_ps')
# CADA as its MNIST code runs (issue 54 item 4): LASG's tests against the
# history of ||alpha agg||^2, beside the Adam baseline.
CADA_MNIST_ALGOS = ('cada_adam', 'cada1_mnist', 'cada2_mnist')
# ... with the authors' AMSGrad typo (their saved runs' code).
CADA_MNIST_TYPO_ALGOS = ('cada1_mnist_typo', 'cada2_mnist_typo')
TYPO_SERVER = 'cada_amsgrad_mnist_typo'
TYPO_LAYER = 'conv1/bias'  # the first convolution's bias


def typo_range(config: ml_collections.ConfigDict) -> dict[str, int]:
  """The typo server's stale range: TYPO_LAYER of the config's model."""
  import laq_jax as lj  # pylint: disable=g-import-not-at-top
  from laq_jax import problems  # pylint: disable=g-import-not-at-top
  problem = problems.get_problem(config.model, init=config.init)
  lo, hi = lj.flat_range(problem, TYPO_LAYER)
  return {'stale_from': lo, 'stale_to': hi}


def algo_settings(algos) -> dict:
  """Each preset's own settings (see the module docstring)."""
  out = {}
  for a in algos:
    if a.startswith('lasg') and a.endswith('_laq'):
      out[a] = dict(LASG_QUANTIZED)
    elif a.startswith('lasg'):
      out[a] = dict(LASG)
    elif a.startswith('cada'):
      out[a] = dict(CADA)
  return out


VARIANTS = {
    **default.VARIANTS,
    'network': {},
    'lasg_mnist': dict(num_workers=20, split='label_sorted', batch_size=6,
                       step_size=5e-4, l2=0.0, num_iters=10_000,
                       loss_every=100, eval_every=1000, model='lasg_cnn',
                       init='torch'),
    'cada_mnist': dict(num_workers=10, split='label_sorted', batch_size=12,
                       step_size=5e-4, l2=0.0, num_iters=10_000,
                       loss_every=100, eval_every=1000, model='lasg_cnn',
                       init='torch'),
    'typo': {},  # (with cada_mnist: CADA_MNIST_TYPO_ALGOS)
    'quick': dict(train_subset=6000, num_iters=300, eval_every=100,
                  batch_size=mnist_mlp_stochastic.QUICK_BATCH),
    'tiny': dict(train_subset=600, num_iters=30, eval_every=10,
                 batch_size=20),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  config = mnist_mlp_stochastic.get_config()
  words = [w.split('=', 1)[0].strip() for w in (arg or '').split(',')]
  algos = (LASG_MNIST_ALGOS if 'lasg_mnist' in words else
           CADA_MNIST_TYPO_ALGOS if {'cada_mnist', 'typo'} <= set(words)
           else CADA_MNIST_ALGOS if 'cada_mnist' in words else NETWORK_ALGOS)
  if 'typo' in words and 'cada_mnist' not in words:
    raise ValueError('variant typo is not allowed alone: it must come with '
                     'cada_mnist (configs/lasg.py:cada_mnist,typo)')
  default.add_sweep_fields(config, {'algo': algos},
                           algo_settings=algo_settings(algos))
  for part, values in CADA_PARAMS.items():
    for name, value in values.items():
      if any(a.startswith('cada') for a in algos):
        config.params[part][name] = value
  config = default.apply_arg(config, arg, VARIANTS)
  if 'cada_mnist' in words:  # LASG's trigger constants, Adam's step
    for a in algos:
      config.algo_settings[a] = ml_collections.ConfigDict(
          dict(LASG, step_size=5e-4) if a != 'cada_adam'
          else dict(CADA))
      if a.endswith('_typo'):  # the stale range of the model it runs
        config.algo_settings[a][TYPO_SERVER] = ml_collections.ConfigDict(
            typo_range(config))
  if 'lasg_mnist' in words:  # LASG's own settings for every preset
    for a in algos:
      config.algo_settings[a] = ml_collections.ConfigDict(
          dict(LASG) if a != 'sgd' else {})
    # PS's L = 0.1 M^2 (40 at M = 20) as lasg_ps's own setting: a sweep
    # that leaves lasg_ps out (--config.sweep.algo=...) sets no L.
    config.algo_settings.lasg_ps.lasg_ps = ml_collections.ConfigDict(
        {'L': 0.1 * config.num_workers**2})
  return config
