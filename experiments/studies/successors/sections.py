"""The successors study's sweeps: each section's config (configs/successors.py)
with the settings its paper derives from the data.

    config = sweep_config('scaffnew', 'cpu')    # gamma, p from the shards

Scaffnew's gamma = 1 / L_max and p = 1 / sqrt(kappa)
(`theory.scaffnew_settings`), EF21-P's step grid gamma = 2^j / L_minus
(`theory.smoothness`) and EF21-BC's factors times EF21's theory step
(`theory.step_size`) are computed from the section's own worker shards, so a
config at another size (`tiny`, `full`) gets its own.
"""

from __future__ import annotations

import copy

import numpy as np

SIZES = ('full', 'cpu', 'quick', 'tiny')
# The sweep-only fields a plain run's config does not have.
_SWEEP_FIELDS = ('sweep', 'sweep_batch_size', 'sweep_grid_axis',
                 'algo_settings')


def shards(config) -> np.ndarray:
  """x_MxNxD: the worker shards of `config`'s data, float64 (built as a
  plain full-batch run of the same data fields)."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from experiments.run import build as build_lib  # pylint: disable=g-import-not-at-top
  from laq_jax import parts as parts_lib  # pylint: disable=g-import-not-at-top
  plain = copy.deepcopy(config)
  with plain.unlocked():
    for name in _SWEEP_FIELDS:
      if name in plain:
        del plain[name]
  plain.algo = 'gd'
  plain.params = ml_collections.ConfigDict(parts_lib.default_groups())
  plain.precision = 'float64'
  plain.fstar = 'none'
  plain.model = 'logreg'  # (the features alone are read)
  return np.asarray(build_lib.build(plain).data.x_MxNxD, np.float64)


def sweep_configs(section: str, size: str = 'cpu') -> list[tuple[str, object]]:
  """[(subfolder, config)]: the section's sweeps ('' for one sweep in the
  section's folder; the CLAG heatmap runs one per k, `k1`, `k158`, ...)."""
  from configs import successors  # pylint: disable=g-import-not-at-top
  config = sweep_config(section, size)
  if section == 'autoencoder':  # one sweep per split
    out = []
    for split in successors.AUTOENCODER_SPLITS:
      one = copy.deepcopy(config)
      one.split = split
      out.append((split, one))
    return out
  if section != 'clag':
    return [('', config)]
  import ml_collections  # pylint: disable=g-import-not-at-top
  from laq_jax.round import theory  # pylint: disable=g-import-not-at-top
  x = shards(config)
  l_minus, l_plus = theory.smoothness(x, config.l2, model=config.model)
  out = []
  for k in successors.CLAG_KS:
    one = copy.deepcopy(config)
    one.params.top_k.k = float(k)
    alpha = theory.step_size('tpc_clag', l_minus, l_plus, config.num_workers,
                             x.shape[-1] + 1,
                             **{'top_k.k': float(k), 'tpc_lazy.zeta': 0.0})
    one.sweep = ml_collections.ConfigDict(dict(
        config.sweep, step_size=tuple(float(2.0**j * alpha)
                                      for j in successors.CLAG_J)))
    out.append((f'k{k}', one))
  return out


def sweep_config(section: str, size: str = 'cpu'):
  """The section's sweep config at `size` (SIZES), with its data-derived
  settings."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from configs import successors  # pylint: disable=g-import-not-at-top
  from laq_jax.round import theory  # pylint: disable=g-import-not-at-top
  if section not in successors.SECTIONS:
    raise ValueError(f'section {section!r} is not known: use one of '
                     f'{", ".join(successors.SECTIONS)}')
  if size not in SIZES:
    raise ValueError(f'size {size!r} is not known: use one of '
                     f'{", ".join(SIZES)}')
  config = successors.get_config(section + ('' if size == 'cpu'
                                            else f',{size}'))
  if section == 'scaffnew':
    got = theory.scaffnew_settings(shards(config), config.l2)
    gamma, p = got['scaffnew.lr'], got['scaffnew.p']
    config.algo_settings = ml_collections.ConfigDict({
        'gd': {'step_size': gamma / config.num_workers},
        'scaffnew': {'scaffnew': {'lr': gamma, 'p': p}},
        'fedavg': {'server_lr': 1.0, 'weighting': 'uniform',
                   'local': {'steps': max(1, round(1 / p)), 'lr': gamma}}})
  if section == 'ef21_p':
    l_minus, _ = theory.smoothness(shards(config), config.l2)
    config.sweep.step_size = tuple(
        float(2.0**j / l_minus / config.num_workers)
        for j in successors.EF21P_J)
  if section == 'ef21_bc':  # gamma = factor x EF21's theory step, top-2
    x = shards(config)
    l_minus, l_plus = theory.smoothness(x, config.l2, model=config.model)
    alpha = theory.step_size('tpc_ef21', l_minus, l_plus, config.num_workers,
                             x.shape[-1] + 1,
                             **{'top_k.k': successors.EF21_BC_K})
    config.sweep.step_size = tuple(float(f * alpha)
                                   for f in successors.EF21_BC_FACTORS)
  return config
