"""RunSpec: the static part of a run, what changes the compiled program."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from laq_jax import compressors
from laq_jax import network as network_lib
from laq_jax import rules
from laq_jax import trigger as trigger_lib
from laq_jax.hyper import Hyper
from laq_jax.problems import Problem


GRID_AXES = ('auto', 'map', 'vmap')
# The logged objective's default interval in minibatch runs (RunSpec's
# loss_every=0): the full objective costs a pass over every worker's whole
# shard, many times the minibatch gradient.
MINIBATCH_LOSS_EVERY = 10


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """The static part of a run: what changes the compiled program.

  Attributes:
    problem: the model.
    num_workers: M, over all devices.
    memory: D, how many past parameter steps the trigger remembers.
    stochastic: minibatch gradients (sgd, slaq, qsgd, ...) instead of full
      ones.
    batch_size: samples per worker per iteration when stochastic.
    compressors: the compressors the program may meet (`Hyper.compressor`
      picks one at run time); only these are compiled in (default: every
      registered one, `compressors.REGISTRY`).
    triggers: the same for the triggers (`Hyper.trigger`,
      `trigger.REGISTRY`).
    error_feedback: compile error feedback in (`Hyper.error_feedback`
      switches it per run).
    downlink: compile the quantized broadcast in (`Hyper.downlink_bits`);
      then the workers' gradients are taken at the broadcast parameters and
      the loss, at the server's, costs one more forward pass.
    rule: the communication rule the loop runs (`rules.Rule`).
    grid_axis: how a grid Hyper runs: 'map' runs the points one after
      another inside the one program, each with the single run's
      arithmetic, so a point equals its run alone bit for bit and computes
      only the parts its own data choose; 'vmap' batches the points (one
      pass over the data for all of them, wider matrix products), where a
      point agrees with its run alone to rounding only (the products'
      summation order changes with their width); 'auto' (the default) is
      'vmap' where it is the faster (`resolve_grid_axis`), else 'map'. Ask
      for 'map' where bit-exact agreement with single runs matters.
    loss_every: E, the trace's `loss` holds the full objective f(theta^k) at
      the iterations k with k % E == 0 and NaN at the others
      (`metrics.logged`); 0
      (the default) means 1 for full-batch runs, whose loss comes with the
      gradient, and MINIBATCH_LOSS_EVERY for minibatch runs, where the full
      objective is a pass over all the data that the step does not need and
      is computed only at the logged iterations. The logged values are
      those of a loss_every=1 run; the run itself does not change.
    triggers: the triggers it may meet (see compressors).
    participation: compile partial participation in (`Hyper.participation`,
      `clients_per_round`, `absent`, `deadline_s`; `laq_jax.participation`):
      who takes part is drawn every round, a deadline cuts late ones off,
      and absent clients are masked. Off, every
      client takes part in every round and nothing of it is compiled.
  """
  problem: Problem
  num_workers: int
  memory: int = 10
  stochastic: bool = False
  batch_size: int = 500
  compressors: tuple[str, ...] | None = None
  error_feedback: bool = True
  downlink: bool = True
  rule: rules.Rule = rules.LAQ
  grid_axis: str = 'auto'
  loss_every: int = 0
  triggers: tuple[str, ...] | None = None
  participation: bool = False

  @property
  def parts(self) -> rules.Parts:
    """The rule's parts this program compiles in."""
    return rules.Parts(self.compressors, self.error_feedback, self.downlink,
                       self.stochastic, self.triggers)

  @property
  def log_every(self) -> int:
    """E in effect: `loss_every`, or its default for the kind of run."""
    return self.loss_every or (MINIBATCH_LOSS_EVERY if self.stochastic
                               else 1)

  def __post_init__(self):
    if self.num_workers < 1:
      raise ValueError(f'num_workers={self.num_workers} is not allowed: it '
                       'must be an integer >= 1')
    if self.memory < 1:
      raise ValueError(f'memory={self.memory} is not allowed: D must be an '
                       'integer >= 1')
    if self.stochastic and self.batch_size < 1:
      raise ValueError(f'batch_size={self.batch_size} is not allowed: it must '
                       'be an integer >= 1')
    if (isinstance(self.loss_every, bool) or not isinstance(
        self.loss_every, (int, np.integer)) or self.loss_every < 0):
      raise ValueError(f'loss_every={self.loss_every!r} is not allowed: it '
                       'must be an integer >= 1, or 0 for the default (1 '
                       f'full batch, {MINIBATCH_LOSS_EVERY} minibatch)')
    if self.grid_axis not in GRID_AXES:
      raise ValueError(f'grid_axis={self.grid_axis!r} is not allowed; '
                       f'allowed: {", ".join(GRID_AXES)}')
    object.__setattr__(self, 'compressors', compressors.check_names(
        compressors.REGISTRY.names if self.compressors is None
        else self.compressors))
    object.__setattr__(self, 'triggers', trigger_lib.REGISTRY.check_names(
        trigger_lib.REGISTRY.names if self.triggers is None
        else self.triggers))

  def check_hyper(self, hyper: Hyper) -> None:
    """Raises ValueError if `hyper` uses a part not compiled in."""
    try:
      used = np.unique(np.asarray(hyper.compressor))
      used_triggers = np.unique(np.asarray(hyper.trigger))
      feedback = bool(np.any(np.asarray(hyper.error_feedback)))
      downlink = bool(np.any(np.asarray(hyper.downlink_bits) > 0))
    except jax.errors.TracerArrayConversionError:
      return  # traced: the caller checked the concrete values
    for kind, registry, indices in (
        ('compressors', compressors.REGISTRY, used),
        ('triggers', trigger_lib.REGISTRY, used_triggers)):
      names = [registry.names[int(i)] if 0 <= int(i) < len(registry)
               else f'#{int(i)}' for i in indices]
      missing = [n for n in names if n not in getattr(self, kind)]
      if missing:
        raise ValueError(f'hyper uses {kind[:-1]}(s) {", ".join(missing)} '
                         f'but RunSpec.{kind}={getattr(self, kind)}; list '
                         'them there')
    partial = bool(np.any(np.asarray(hyper.participation) < 1)
                   or np.any(np.asarray(hyper.clients_per_round) > 0)
                   or np.any(np.asarray(hyper.deadline_s) > 0))
    if partial and not self.participation:
      raise ValueError('hyper uses partial participation (participation < 1, '
                       'clients_per_round > 0 or deadline_s > 0) but '
                       'RunSpec.participation=False; set it True')
    if np.any(np.asarray(hyper.clients_per_round) > self.num_workers):
      raise ValueError(
          f'clients_per_round={np.asarray(hyper.clients_per_round)!r} is '
          f'not allowed: it must be at most num_workers={self.num_workers}')
    ring = np.asarray(hyper.network.topology) == network_lib.TOPOLOGIES.index(
        'ring')
    if np.any(ring & (np.asarray(hyper.deadline_s) > 0)):
      raise ValueError("deadline_s > 0 is not allowed with topology='ring': "
                       'the ring all-reduce has no round to cut a late '
                       "worker from; use topology='star' or deadline_s=0")
    if np.any(ring):
      can = ((np.asarray(hyper.compressor) == compressors.index('identity'))
             & (np.asarray(hyper.trigger) == trigger_lib.index('eager'))
             & ~np.asarray(hyper.error_feedback)
             & (np.asarray(hyper.downlink_bits) == 0))
      if np.any(ring & ~can):
        raise ValueError(
            "hyper.network.topology='ring' is not allowed with a compressed, "
            'lazy, error-feedback or quantized-broadcast rule: a ring '
            'all-reduce sums full-precision messages in transit (gd, sgd '
            "only); use topology='star'")
    for used_it, name in ((feedback, 'error_feedback'),
                          (downlink, 'downlink')):
      if used_it and not getattr(self, name):
        raise ValueError(f'hyper uses {name} but RunSpec.{name}=False; '
                         'set it True')


def resolve_grid_axis(spec: RunSpec) -> str:
  """'map' or 'vmap': the grid axis `spec.grid_axis` asks for, 'auto'
  resolved.

  'auto' is 'vmap' on an accelerator, and on a CPU where the benchmark
  measured it faster (docs/benchmarks.md, "Grids"): full-batch runs of a
  problem with a written-out gradient (logistic regression), whose
  vmapped points share one pass over the data. Elsewhere on a CPU
  (minibatch runs, the network) it is 'map'.
  """
  if spec.grid_axis != 'auto':
    return spec.grid_axis
  if jax.default_backend() != 'cpu':
    return 'vmap'
  shared = (not spec.stochastic
            and spec.problem.workers_value_and_grad is not None)
  return 'vmap' if shared else 'map'
