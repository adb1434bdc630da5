"""What the workload configs share (configs/fmnist_cnn.py,
configs/shakespeare_lstm.py, configs/cifar10_resnet20.py): the family they
sweep and how each preset keeps its own server step.

    config = workloads.family_sweep(config)   # algo over FAMILY, one program

FAMILY holds the stochastic presets of each family that exists (every one
a minibatch program, so the sweep is ONE compiled program): FedSGD and the
lazy family (sgd, slaq, qsgd, topk_ef, ef21_sgd), the authors' follow-ups
(lasg_wk2, lasg_ps, cada2), and rounds with local work (fedavg, fedprox,
scaffold, fedadam, fedpaq). `step_size` is the FedSGD family's (on the
sum of the M gradients: alpha = eta / M); the local presets keep their
papers' server steps (`algo_settings`, from `Algorithm.settings`), and
their clients step by the workload's eta (`local.lr`, `scaffold.lr`): the
papers' client steps were tuned on other models (FedAvg's 0.1, set for
MNIST's logistic regression and MLP, makes the LASG CNN on Fashion-MNIST
diverge within 6 rounds; measured), and McMahan et al. give FedAvg's
clients FedSGD's step. CADA's server is AMSGrad, whose step does not
scale with the gradient: cada2 takes the step of the CADA code's MNIST
network (`ADAPTIVE_STEP`, 5e-4) rather than eta / M (0.005 made the LASG
CNN's loss grow 100x in 6 rounds; measured).
"""

from __future__ import annotations

import ml_collections

from configs import default

FAMILY = ('sgd', 'slaq', 'qsgd', 'topk_ef', 'ef21_sgd', 'lasg_wk2',
          'lasg_ps', 'cada2', 'fedavg', 'fedprox', 'scaffold', 'fedadam',
          'fedpaq')

# Presets whose server step is an adaptive one (not on the sum of the
# gradients), at the step their authors ran a network with.
ADAPTIVE_STEP = {'cada2': 5e-4}


def workload_config(arg: str | None, variants: dict, eta: float,
                    settings: dict | None = None,
                    **fields) -> ml_collections.ConfigDict:
  """A workload config: the defaults with the federated fields every
  workload shares (fedavg, absent clients dropped, float32, no f*, no l2),
  then `fields`, the family sweep, the argument's variants and overrides,
  and SGD's step `eta` on the mean gradient (alpha = eta / M on the sum)
  unless the argument set `step_size`. `settings` ({algo: {group: {name:
  value}}}) adds to the presets' algo_settings (a paper's value for this
  workload, e.g. FedProx's mu)."""
  config = default.get_config()
  config.update(dict(algo='fedavg', absent='drop', precision='float32',
                     fstar='none', l2=0.0))
  config.update(fields)
  family_sweep(config, client_lr=eta)
  for algo, values in (settings or {}).items():
    if algo in config.algo_settings:
      config.algo_settings[algo].update(values)
    else:
      config.algo_settings[algo] = values
  config = default.apply_arg(config, arg, variants)
  given = {w.split('=', 1)[0].strip() for w in (arg or '').split(',')}
  if 'step_size' not in given:
    config.step_size = eta / config.num_workers
  return config


def family_sweep(config: ml_collections.ConfigDict, presets=FAMILY,
                 client_lr: float | None = None
                 ) -> ml_collections.ConfigDict:
  """Makes `config` a sweep over `presets` with each local preset's own
  server step and, given `client_lr`, that step for its clients (every
  `*.lr` parameter of the preset)."""
  from laq_jax.hyper import ALGORITHMS  # pylint: disable=g-import-not-at-top
  settings = {}
  for a in presets:
    s = dict(ALGORITHMS[a].settings)
    if a in ADAPTIVE_STEP:
      s['step_size'] = ADAPTIVE_STEP[a]
    if client_lr is not None:
      for key, _ in ALGORITHMS[a].params:
        if key.endswith('.lr'):
          group, name = key.split('.')
          s.setdefault(group, {})[name] = client_lr
    if s:
      settings[a] = s
  return default.add_sweep_fields(config, {'algo': tuple(presets)},
                                  algo_settings=settings)
