"""The federated study's sweeps: their configs and reading them (the study,
`study.run_problem`, runs them).

    config = sweep_config('logreg', 'main', 'quick')
    loaded = load_sweep(workdir / 'logreg' / 'main')

Per problem (logistic regression, the 200-ReLU network), the sweeps of
configs/federated.py, each one compiled program (see
experiments/federated.py for what each sweep is).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

SWEEPS = ('main', 'deadline', 'laziness', 'slaq_bits', 'local', 'local_k',
          'mcmahan')
# Rounds with local work (docs/algorithm.md, "Local work"), each at its
# paper's server step (`Algorithm.settings`), beside main's FedSGD presets;
# and FedAvg's K swept in one program.
LOCAL_PRESETS = ('fedavg', 'fedavgm', 'fedadam', 'fedyogi', 'fedprox',
                 'scaffold', 'fedpaq', 'fedlaq')
LOCAL_K = (1, 5, 20)
# The local sweeps' rounds at the full budget, what a 2-core CPU affords: a
# round with local work costs K gradient steps of every client (the
# vmapped program computes all M and masks the absent), so K = 10 local
# steps make a round ten of main's iterations; evaluated often enough that
# "rounds to target" resolves them.
LOCAL_BUDGET = {'logreg': dict(num_iters=500, eval_every=25),
                'mlp': dict(num_iters=50, eval_every=5)}
# SLAQ's b on the network: the logistic settings' b = 3 against the
# network script's b = 6, under both readings of absence (network only;
# 300 iterations at the full budget, what showed the difference on a CPU).
SLAQ_BITS_GRID = {'algo': ('slaq',), 'absent': ('stale', 'drop'),
                  'bits': (3, 6)}
SLAQ_BITS_ITERS = 300
DEADLINE_PERCENTILE = 90
LAZINESS_GRID = {'algo': ('sgd', 'slaq'), 'participation': (1.0, 0.5, 0.1),
                 'absent': ('stale', 'drop')}
TITLES = {'logreg': 'Logistic regression (convex)',
          'mlp': 'The 200-ReLU network (nonconvex)'}


class FederatedError(RuntimeError):
  """A sweep of the experiment is missing or cannot be read."""


CPU_MLP_ITERS = 500


def sweep_config(problem: str, sweep: str, budget: str,
                 deadline_s: float = 0.0, mlp_iters: int | None = None):
  """The config of one sweep of the experiment (`mlp_iters`: the network's
  iterations at the full budget, None for the config's)."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from configs import federated  # pylint: disable=g-import-not-at-top
  arg = problem + ('' if budget == 'full' else f',{budget}')
  if problem == 'mlp' and budget == 'full' and mlp_iters:
    arg += f',num_iters={int(mlp_iters)}'
  if sweep == 'deadline':
    arg += f',deadline_s={deadline_s!r}'
  if sweep == 'slaq_bits':
    arg += (f',num_iters={SLAQ_BITS_ITERS}' if budget == 'full' else ''
            ) + ',algo=slaq'
  if sweep in ('local', 'local_k') and budget == 'full':
    arg += ''.join(f',{k}={v}' for k, v in LOCAL_BUDGET[problem].items())
  config = federated.get_config(arg)
  if sweep == 'laziness':
    config.sweep = ml_collections.ConfigDict(dict(LAZINESS_GRID))
  if sweep == 'slaq_bits':
    config.sweep = ml_collections.ConfigDict(dict(SLAQ_BITS_GRID))
  if sweep in ('local', 'local_k'):
    from laq_jax.hyper import ALGORITHMS  # pylint: disable=g-import-not-at-top
    algos = LOCAL_PRESETS if sweep == 'local' else ('fedavg',)
    grid = {'algo': algos}
    if sweep == 'local_k':
      grid['local'] = {'steps': LOCAL_K}
    config.sweep = ml_collections.ConfigDict(grid)
    config.algo_settings = ml_collections.ConfigDict(
        {a: dict(ALGORITHMS[a].settings) for a in algos})
  return config


def load_sweep(folder: pathlib.Path) -> dict:
  """A finished sweep's results.csv rows (each with `diverged` and
  `diverged_at` by the one rule), curves.npz and sweep.json."""
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  if not (folder / 'sweep.json').is_file():
    raise FederatedError(f'{folder} has no finished sweep (sweep.json); run '
                         'python -m experiments.federated again')
  with np.load(folder / 'curves.npz', allow_pickle=False) as c:
    curves = {k: c[k] for k in c.files}
  for need in ('participants', 'uploads', 'bits', 'time_s',
               'test_accuracy'):
    if need not in curves:
      raise FederatedError(f'{folder}/curves.npz lacks {need!r} (a sweep of '
                           'older code, or too large to keep it): run it '
                           'again')
  # Each point's `diverged` / `diverged_at` by the one rule
  # (`laq_jax.metrics.diverged_at`), recomputed from curves.npz: results
  # written before the rule marked NaN/inf only.
  rows = outputs.mark_divergence(outputs.read_results(folder / 'results.csv'),
                                 folder)
  return {'rows': rows,
          'curves': curves,
          'info': json.loads((folder / 'sweep.json').read_text()),
          'config': json.loads((folder / 'config.json').read_text())}


def arrivals(loaded: dict, point: int) -> np.ndarray:
  """[T, M] each participant's compute + upload time (NaN for the absent),
  on the point's network (its profile: the experiment overrides no field)."""
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  c, row = loaded['curves'], loaded['rows'][point]
  net = network.PROFILES[row['network.profile']]
  flops = float(row['flops_per_worker_step'])
  time = (c['slowdown'][point] * flops / net['flops_per_s']
          + net['up_latency_s'] + c['bits'][point] / net['up_bps'])
  return np.where(c['participants'][point], time, np.nan)


def deadline_from(loaded: dict) -> float:
  """The DEADLINE_PERCENTILE-th percentile of SGD's arrivals in `main`."""
  sgd = next(i for i, r in enumerate(loaded['rows']) if r['algo'] == 'sgd')
  return float(np.nanpercentile(arrivals(loaded, sgd), DEADLINE_PERCENTILE))
