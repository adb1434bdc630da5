r"""The experiments of the LAQ paper that `experiments.reproduce` runs.

    python -m experiments.reproduce --workdir runs/paper           # full
    python -m experiments.reproduce --workdir runs/paper_quick --quick

Each experiment is one run config (`configs/NAME.py:ARG`) whose algorithms run
as a grid axis of ONE compiled program (`experiments.sweep`); the full-batch
and the stochastic algorithms are separate programs.

Full budget (the authors' settings, full MNIST, M = 10 workers in file order):
  logreg             gd/qgd/lag/laq, logistic regression, float64, 4,000
                     iterations, target residual 1e-6;
  logreg_stochastic  sgd/qsgd/ssgd/slaq (the four the authors' SLAQ script
                     compares), SLAQ at b = 3, alpha = 0.008, c_e = 1.5,
                     c_0 = 0.2 (NeurIPS SLAQ.py), minibatch 500 per worker,
                     QSGD with s = 10,000 levels, SSGD keeping p = 0.5,
                     1,500 iterations, float32;
  mlp_stochastic     the same four on the 200-ReLU MLP at the authors'
                     network settings (TPAMI-LAQ SGD/lasterrsgdDNN.py):
                     b = 6, alpha = 0.02, c_e = 3, c_0 = 0, xi = 3 doubled
                     from k = 300 and 6x from k = 500, float32;
  mlp                gd/qgd/lag/laq on the MLP at b = 8, float32, the
                     authors' 8,000 iterations on an accelerator; on a
                     CPU-only machine MLP_CPU_ITERS (one full-batch MLP
                     iteration of the four algorithms takes seconds on a
                     2-core CPU), which the report states.

`--quick` (a few minutes on a 2-core CPU): the first 6,000 training images
(600 per worker), fewer iterations, and a looser target residual
(QUICK_TARGET) for the convex run; the test set is the full MNIST test set.
`--tiny` (the test suite's; about a minute): every config's `tiny` variant,
600 images and 30 iterations (the convex run 200, to reach TINY_TARGET),
which checks the pipeline and the report, not the paper.
"""

from __future__ import annotations

from typing import NamedTuple

import ml_collections

import configs
from configs import mnist_mlp_stochastic

FULL_BATCH = ('gd', 'qgd', 'lag', 'laq')
STOCHASTIC = ('sgd', 'qsgd', 'ssgd', 'slaq')
MLP_FULL_ITERS = 8000  # the authors' network script
MLP_CPU_ITERS = 1000
QUICK_TARGET = 1e-2
TINY_TARGET = 0.5
BUDGETS = ('full', 'quick', 'tiny')


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
    uploads_vs: the algorithms the paper's algorithm must beat on uploads.
    bits_vs: ... and on bits.
    source: the authors' script its settings come from.
  """
  name: str
  title: str
  config: str
  arg: str
  algos: tuple[str, ...]
  lazy: str
  baseline: str
  uploads_vs: tuple[str, ...]
  bits_vs: tuple[str, ...]
  source: str = ''

  @property
  def convex(self) -> bool:
    return self.config.startswith('mnist_logreg')

  @property
  def stochastic(self) -> bool:
    return self.lazy == 'slaq'


_FULL = (
    Experiment('logreg', 'Logistic regression, full batch (convex)',
               'mnist_logreg', '', FULL_BATCH, 'laq', 'gd',
               uploads_vs=('gd', 'qgd'), bits_vs=('gd', 'qgd', 'lag'),
               source='github sunjunaimer/LAQ, NeurIPS2019:LAQ/LAQ.py'),
    Experiment('logreg_stochastic',
               'Logistic regression, minibatch (SLAQ.py\'s settings)',
               'mnist_logreg_stochastic', '', STOCHASTIC, 'slaq', 'sgd',
               uploads_vs=('sgd', 'qsgd', 'ssgd'),
               bits_vs=('sgd', 'qsgd', 'ssgd'),
               source='github sunjunaimer/LAQ, NeurIPS2019:LAQ/SLAQ.py'),
    Experiment('mlp_stochastic',
               'MLP (200 ReLUs), minibatch (lasterrsgdDNN.py\'s settings)',
               'mnist_mlp_stochastic', '', STOCHASTIC, 'slaq', 'sgd',
               uploads_vs=('sgd', 'qsgd', 'ssgd'),
               bits_vs=('sgd', 'qsgd', 'ssgd'),
               source='github sunjunaimer/TPAMI-LAQ, SGD.zip: '
                      'SGD/lasterrsgdDNN.py'),
    Experiment('mlp', 'MLP (200 ReLUs), full batch (nonconvex)', 'mnist_mlp',
               '', FULL_BATCH, 'laq', 'gd',
               uploads_vs=('gd', 'qgd'), bits_vs=('gd', 'qgd', 'lag'),
               source='github sunjunaimer/TPAMI-LAQ, GD.zip: '
                      'GD/lasterrtwiceDNN.py'),
)

_QUICK_ARGS = {
    'logreg': ('train_subset=6000,num_iters=1000,eval_every=250,'
               f'target_residual={QUICK_TARGET:g}'),
    'logreg_stochastic': 'train_subset=6000,num_iters=300,eval_every=100',
    # The minibatch keeps the authors' share of a shard (500 of 6,000 =
    # 1/12): at batch 500 of a 600-image shard the minibatch gradients are
    # nearly full ones, their innovations fall below the quantization error
    # at b = 6, SLAQ's workers stop uploading and the network runs away on
    # stale gradients (loss 65,559 after 300 iterations, 31.6% accuracy).
    'mlp_stochastic': ('train_subset=6000,num_iters=300,eval_every=100,'
                       f'batch_size={mnist_mlp_stochastic.QUICK_BATCH}'),
    'mlp': 'train_subset=6000,num_iters=200,eval_every=100',
}


# Each config's `tiny` variant: 600 images (60 per worker), 30 iterations,
# minibatches of 20 (configs/lasg.py's `network,tiny` has the same); the
# convex run long enough to reach its target (residual 0.5 near k = 130), so
# the report's target columns hold numbers.
_TINY_ARGS = {e: 'tiny' for e in _QUICK_ARGS}
_TINY_ARGS['logreg'] = (f'tiny,num_iters=200,eval_every=100,'
                        f'target_residual={TINY_TARGET:g}')


def check_budget(budget: str) -> None:
  if budget not in BUDGETS:
    raise ValueError(f'unknown budget {budget!r}; allowed: '
                     f'{", ".join(BUDGETS)}')


def budget_flag(budget: str) -> str:
  """The launcher's flag of `budget`: '', ' --quick' or ' --tiny'."""
  check_budget(budget)
  return '' if budget == 'full' else f' --{budget}'


def mlp_budget(accelerator: bool) -> int:
  """The full-batch MLP's iterations: the authors' 8,000 on an accelerator,
  MLP_CPU_ITERS on a CPU-only machine."""
  return MLP_FULL_ITERS if accelerator else MLP_CPU_ITERS


def experiments(budget: str = 'full', mlp_iters: int = MLP_FULL_ITERS
                ) -> tuple[Experiment, ...]:
  """The experiments, in the order they run (longest last).

  Args:
    budget: 'full' (the authors'), 'quick' or 'tiny' (BUDGETS).
    mlp_iters: the full-batch MLP's iterations (see `mlp_budget`); only
      for the full budget.
  """
  check_budget(budget)
  if budget != 'full':
    args = _QUICK_ARGS if budget == 'quick' else _TINY_ARGS
    return tuple(e._replace(arg=args[e.name]) for e in _FULL)
  return tuple(e._replace(arg=f'num_iters={mlp_iters}')
               if e.name == 'mlp' and mlp_iters != MLP_FULL_ITERS else e
               for e in _FULL)


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
