r"""The experiments of the LAQ paper that `experiments.reproduce` runs.

    python -m experiments.reproduce --workdir runs/paper           # full
    python -m experiments.reproduce --workdir runs/paper_quick --quick

Each experiment is one run config (`configs/NAME.py:ARG`) whose algorithms run
as a grid axis of ONE compiled program (`laq_jax.sweep.run_sweep`); the
full-batch and the stochastic algorithms are separate programs.

Full budget (the spec's settings, full MNIST, M = 10 workers in file order):
  logreg             gd/qgd/lag/laq, logistic regression, float64, 4,000
                     iterations, target residual 1e-6;
  logreg_stochastic  sgd/qsgd/slag/slaq, the authors' SLAQ settings (b = 3,
                     alpha = 0.008, c_e = 1.5, c_0 = 0.2, minibatch 500 per
                     worker, 1,500 iterations), float32;
  mlp_stochastic     the same four on the 200-ReLU MLP, float32;
  mlp                gd/qgd/lag/laq on the MLP, float32, a fixed budget of
                     MLP_ITERS iterations: one full-batch MLP iteration of
                     the four algorithms takes about 2-4 s on a 2-core CPU
                     (full MNIST), so the paper's longer runs do not fit a
                     CPU session; the budget is stated in the report.

`--quick` (a few minutes on a 2-core CPU): the first 6,000 training images
(600 per worker), fewer iterations, and a looser target residual
(QUICK_TARGET) for the convex run; the test set is the full MNIST test set.
"""

from __future__ import annotations

from typing import NamedTuple

import ml_collections

import configs

FULL_BATCH = ('gd', 'qgd', 'lag', 'laq')
STOCHASTIC = ('sgd', 'qsgd', 'slag', 'slaq')
MLP_ITERS = 300
QUICK_TARGET = 1e-2


class Experiment(NamedTuple):
  """One experiment of the paper: a config and the algorithms it compares.

  Attributes:
    name: subfolder of the workdir.
    title: heading in the report.
    config: configs/CONFIG.py.
    arg: the config argument (`configs/CONFIG.py:ARG`), '' for none.
    algos: the algorithms, run as one grid axis.
    lazy: the paper's algorithm among them (laq or slaq).
    baseline: the unquantized, non-lazy reference (gd or sgd).
  """
  name: str
  title: str
  config: str
  arg: str
  algos: tuple[str, ...]
  lazy: str
  baseline: str

  @property
  def convex(self) -> bool:
    return self.config.startswith('mnist_logreg')

  @property
  def stochastic(self) -> bool:
    return self.lazy == 'slaq'


_FULL = (
    Experiment('logreg', 'Logistic regression, full batch (convex)',
               'mnist_logreg', '', FULL_BATCH, 'laq', 'gd'),
    Experiment('logreg_stochastic',
               'Logistic regression, minibatch (authors\' SLAQ settings)',
               'mnist_logreg_stochastic', '', STOCHASTIC, 'slaq', 'sgd'),
    Experiment('mlp_stochastic',
               'MLP (200 ReLUs), minibatch (authors\' SLAQ settings)',
               'mnist_mlp_stochastic', '', STOCHASTIC, 'slaq', 'sgd'),
    Experiment('mlp', 'MLP (200 ReLUs), full batch (nonconvex)', 'mnist_mlp',
               f'num_iters={MLP_ITERS},eval_every=50', FULL_BATCH, 'laq',
               'gd'),
)

_QUICK_ARGS = {
    'logreg': ('train_subset=6000,num_iters=1000,eval_every=250,'
               f'target_residual={QUICK_TARGET:g}'),
    'logreg_stochastic': 'train_subset=6000,num_iters=300,eval_every=100',
    'mlp_stochastic': 'train_subset=6000,num_iters=80,eval_every=40',
    'mlp': 'train_subset=6000,num_iters=40,eval_every=20',
}


def experiments(quick: bool = False) -> tuple[Experiment, ...]:
  """The experiments, in the order they run (longest last)."""
  if not quick:
    return _FULL
  return tuple(e._replace(arg=_QUICK_ARGS[e.name]) for e in _FULL)


def run_config(experiment: Experiment, algo: str | None = None
               ) -> ml_collections.ConfigDict:
  """The run config of one algorithm of `experiment` (experiments.main's)."""
  arg = ','.join(a for a in (f'algo={algo or experiment.algos[0]}',
                             experiment.arg) if a)
  return configs.load(experiment.config, arg)


def sweep_config(experiment: Experiment) -> ml_collections.ConfigDict:
  """The sweep config: the run config with `algo` as the grid axis."""
  config = run_config(experiment)
  config.sweep = ml_collections.ConfigDict({'algo': experiment.algos})
  config.sweep_batch_size = 0  # every algorithm in one program
  return config


def main_command(experiment: Experiment, algo: str, workdir: str) -> str:
  """The `experiments.main` command that redoes one row alone."""
  arg = ','.join(a for a in (f'algo={algo}', experiment.arg) if a)
  return (f'python -m experiments.main --config=configs/{experiment.config}'
          f'.py:{arg} --workdir={workdir}')
