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
papers' server steps (`algo_settings`, from `Algorithm.settings`).
"""

from __future__ import annotations

import ml_collections

from configs import default

FAMILY = ('sgd', 'slaq', 'qsgd', 'topk_ef', 'ef21_sgd', 'lasg_wk2',
          'lasg_ps', 'cada2', 'fedavg', 'fedprox', 'scaffold', 'fedadam',
          'fedpaq')


def workload_config(arg: str | None, variants: dict, eta: float,
                    **fields) -> ml_collections.ConfigDict:
  """A workload config: the defaults with the federated fields every
  workload shares (fedavg, absent clients dropped, float32, no f*, no l2),
  then `fields`, the family sweep, the argument's variants and overrides,
  and SGD's step `eta` on the mean gradient (alpha = eta / M on the sum)
  unless the argument set `step_size`."""
  config = default.get_config()
  config.update(dict(algo='fedavg', absent='drop', precision='float32',
                     fstar='none', l2=0.0))
  config.update(fields)
  family_sweep(config)
  config = default.apply_arg(config, arg, variants)
  given = {w.split('=', 1)[0].strip() for w in (arg or '').split(',')}
  if 'step_size' not in given:
    config.step_size = eta / config.num_workers
  return config


def family_sweep(config: ml_collections.ConfigDict,
                 presets=FAMILY) -> ml_collections.ConfigDict:
  """Makes `config` a sweep over `presets` with each local preset's own
  server step."""
  from laq_jax.hyper import ALGORITHMS  # pylint: disable=g-import-not-at-top
  return default.add_sweep_fields(
      config, {'algo': tuple(presets)},
      algo_settings={a: dict(ALGORITHMS[a].settings) for a in presets
                     if ALGORITHMS[a].settings})
