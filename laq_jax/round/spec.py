"""RunSpec: the static part of a run, what changes the compiled program."""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np

from laq_jax import network as network_lib
from laq_jax import show as show_lib
from laq_jax.parts import broadcasts as broadcasts_lib
from laq_jax.parts import privatizers
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import compressors
from laq_jax.parts import estimators as estimators_lib
from laq_jax.parts import servers as servers_lib
from laq_jax.parts import triggers as trigger_lib
from laq_jax.problems import Problem
from laq_jax.round import fields
from laq_jax.round import rules
from laq_jax.round.hyper import Hyper
from laq_jax.show import show


GRID_AXES = ('auto', 'map', 'vmap')
# The logged objective's default interval in minibatch runs (RunSpec's
# loss_every=0): the full objective costs a pass over every worker's whole
# shard, many times the minibatch gradient.
MINIBATCH_LOSS_EVERY = fields.MINIBATCH_LOSS_EVERY


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
      registered one, `compressors.REGISTRY`, but the opt-in ones,
      `Part.opt_in`).
    triggers: the same for the triggers (`Hyper.trigger`,
      `trigger.REGISTRY`); LASG's and CADA's are opt-in (each costs a
      second gradient per step in every program that compiles it in):
      name them to run them.
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
      is computed only at the logged iterations; in a run whose rounds
      compute their participants' rows alone (`round_size` S of M), at
      least every ceil(M / S) iterations (a pass over every client's data
      costs M / S rounds' gradients). The logged values are those of a
      loss_every=1 run; the run itself does not change.
    participation: compile partial participation in (`Hyper.participation`,
      `clients_per_round`, `absent`, `deadline_s`; `laq_jax.participation`):
      who takes part is drawn every round, a deadline cuts late ones off,
      and absent clients are masked. Off, every
      client takes part in every round and nothing of it is compiled.
    servers: the server updates it may meet (`Hyper.server` picks one;
      default ('sgd',), the paper's step).
    gradient: the gradient part, `(loop.Setting) -> gradients(step,
      theta_P, at_P) -> (loss, grads_MxP)`; None: `loop.minibatch_gradients`
      when `stochastic`, else `loop.full_batch_gradients`. A function of
      your own is compiled in by identity (the cache keys on it).
    clients: the client parts it may meet (`Hyper.client` picks one,
      `laq_jax.clients`; default ('gradient',): one gradient per worker).
      A local client (K local steps, uploading the model change) needs
      `stochastic` and the library's gradient part (`gradient` None).
    estimators: the estimators it may meet (`Hyper.estimator` picks one,
      `laq_jax.estimators`: what a worker compresses into its candidate
      upload); default every registered one but the opt-in ones.
    broadcasts: the broadcasts it may meet where `downlink` is on
      (`Hyper.broadcast` picks one, `laq_jax.broadcasts`: what the server
      sends back); default every registered one but the opt-in ones.
    compressors_b: the compressors `Hyper.compressor_b` may pick, the
      second compressor an estimator may call (`estimators.Inputs.
      compress_b`); default ('identity',), which no built-in calls.
    weighting: compile the weighted-mean aggregate in (`Hyper.weighting`
      samples or uniform); off, the server steps with the uploads' sum.
    round_size: S, at most how many clients a round draws (with
      `participation`; `participation.round_size` picks it for a set of
      points). A round that draws at most S clients per device computes
      only their rows: it gathers their data and state, takes S gradients
      (or S x K local steps) and scatters back, O(S P) for O(M P), with
      the masked program's results (docs/algorithm.md, "A round costs its
      participants", says where only to rounding). A chunk whose rounds
      draw more (Bernoulli participation past its bound) runs the masked
      program (one `lax.cond` per chunk). 0 (the default), or S >= the
      workers per device: every client is computed and the absent ones
      masked. The logged objective stays the full f(theta^k) over every
      client: a pass over all the data at each logged iteration
      (`loss_every`).
    warm_start: compile the warm start in (`Hyper.warm_start`: a worker's
      first upload is its gradient uncompressed, 32 p bits; the 3PC
      family's and MARINA's presets).
    client_batch: b, how many of a round's rows take their gradient or
      local steps at once: 0 (the default) every row, vmapped; b > 0 in a
      loop over batches of b rows, each batch vmapped (`lax.map`'s
      `batch_size`; `stages.over_workers`): the temporaries of b clients,
      not of all, and on a CPU faster for the convolutional models (XLA:CPU
      runs a vmapped batch of matrix products slower than one at a time:
      pfl-research's CNN, 50 clients x 5 local steps, 3.5 s a round at b =
      1 against 4.7 s vmapped on a 2-core EPYC). The same results to
      rounding.
    upload_memory: keep the server's copy of every worker's last upload
      (`RuleState.last_upload_MxP`, [M, P]). False for programs whose every
      point reads none (`points.needs_upload_memory`: the eager trigger, the
      direct estimator, `absent` drop and a weighted mean, i.e. FedAvg and
      its family): the memory is [M, 0], a round holds only its uploads
      (O(S P) with `round_size`), every result is the same bit for bit but
      the trigger's `innovation_M` (||Q||^2 instead of ||Q - Qhat||^2) and
      `aggregate_P` (the round's uploads' sum); `check_hyper` refuses a
      point that would read it. The launchers set it from their points.
    stragglers: compile the stragglers' compute slowdowns in
      (`network.slowdown`, random draws every round). False for programs
      whose every point's network has none (`Network.straggler` 'none';
      `points.needs_stragglers`): every factor is 1, as 'none' gives, with
      no draws (on a CPU the draws were 45 of the 128 kernels of a round of
      full-batch logistic regression); `check_hyper` refuses a straggler
      model. The launchers set it from their points.
    privacy: the privacy parts it may meet (`Hyper.privacy` picks one,
      `laq_jax.privatizers`: differential privacy's clipping and noise);
      default ('off',): none compiled in.

  The parts are resolved from their registries when the RunSpec is made,
  and the RunSpec holds the part objects (`part_objects`): two RunSpecs
  with the same names but a part registered again in between are different
  programs (jit's cache keys on them), and a RunSpec keeps running the parts
  it was made with.
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
  servers: tuple[str, ...] = ('sgd',)
  gradient: Callable | None = None
  clients: tuple[str, ...] = ('gradient',)
  weighting: bool = False
  round_size: int = 0
  estimators: tuple[str, ...] | None = None
  broadcasts: tuple[str, ...] | None = None
  compressors_b: tuple[str, ...] = ('identity',)
  warm_start: bool = False
  client_batch: int = 0
  upload_memory: bool = True
  stragglers: bool = True
  privacy: tuple[str, ...] = ('off',)
  part_objects: tuple = dataclasses.field(default=(), init=False,
                                          repr=False)

  @property
  def parts(self) -> rules.Parts:
    """The rule's parts this program compiles in (the part objects)."""
    (compressors_, triggers, servers, clients, estimators_,
     broadcasts_, compressors_b, privacy) = self.part_objects
    return rules.Parts(compressors_, triggers, servers, self.error_feedback,
                       self.downlink, self.stochastic, clients,
                       self.weighting, estimators_, broadcasts_,
                       compressors_b, self.warm_start, self.upload_memory,
                       privacy)

  @property
  def local(self) -> bool:
    """Whether a client part with local steps is compiled in."""
    return any(clients_lib.is_local(p) for p in self.part_objects[3])

  @property
  def log_every(self) -> int:
    """E in effect: `loss_every`, or its default for the kind of run."""
    if self.loss_every:
      return self.loss_every
    every = MINIBATCH_LOSS_EVERY if self.stochastic else 1
    if self.participation and 0 < self.round_size < self.num_workers:
      every = max(every, -(-self.num_workers // self.round_size))
    return every

  def __new__(cls, *args, **kwargs):
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for name in kwargs:
      if name not in names:
        raise ValueError(f'RunSpec: {show_lib.unknown(name, names)}')
    del args
    return super().__new__(cls)

  def __post_init__(self):
    if not isinstance(self.problem, Problem):
      raise ValueError(f'problem={show(self.problem)} is not allowed: it must '
                       'be a laq_jax.Problem (laq_jax.get_problem(name))')
    for name in ('num_workers', 'memory', 'round_size', 'loss_every',
                 'client_batch'):
      fields.check_run_integer(name, getattr(self, name))
    for name in ('stochastic', 'error_feedback', 'downlink', 'participation',
                 'weighting', 'warm_start', 'upload_memory', 'stragglers'):
      if not isinstance(getattr(self, name), (bool, np.bool_)):
        raise ValueError(f'{name}={show(getattr(self, name))} is not '
                         'allowed: it must be True or False')
    # (a full-batch run reads no batch size: any integer will do)
    if self.stochastic or not fields.is_integer(self.batch_size):
      fields.check_run_integer('batch_size', self.batch_size)
    if self.gradient is not None and not callable(self.gradient):
      raise ValueError(f'gradient={show(self.gradient)} is not allowed: it '
                       'must be a function (loop.Setting) -> gradients, or '
                       'None')
    if not isinstance(self.rule, rules.Rule):
      raise ValueError(f'rule={show(self.rule)} is not allowed: it must be a '
                       'laq_jax.Rule (e.g. laq_jax.LAQ)')
    if self.round_size and not self.participation:
      raise ValueError(f'round_size={self.round_size} is not allowed with '
                       'participation=False: every client takes part in '
                       'every round (set participation=True, or round_size=0)')
    if self.round_size and not self.rule.rows:
      raise ValueError(f'round_size={self.round_size} is not allowed with '
                       'this rule: its step does not take rows_M= '
                       '(laq_jax.Rule.rows); use round_size=0')
    if self.round_size and self.gradient is not None:
      raise ValueError(f'round_size={self.round_size} is not allowed with a '
                       'gradient part of your own (gradient=...): its loss '
                       'would cover the round\'s rows only; use round_size=0')
    if not isinstance(self.grid_axis, str) or self.grid_axis not in GRID_AXES:
      raise ValueError(f'grid_axis={show(self.grid_axis)} is not allowed; '
                       f'allowed: {", ".join(GRID_AXES)}')
    objects = []
    for name, registry in (('compressors', compressors.REGISTRY),
                           ('triggers', trigger_lib.REGISTRY),
                           ('servers', servers_lib.REGISTRY),
                           ('clients', clients_lib.REGISTRY),
                           ('estimators', estimators_lib.REGISTRY),
                           ('broadcasts', broadcasts_lib.REGISTRY),
                           ('compressors_b', compressors.REGISTRY),
                           ('privacy', privatizers.REGISTRY)):
      given = getattr(self, name)
      try:
        names = registry.check_names(registry.default_names if given is None
                                     else given)
      except ValueError as e:
        raise ValueError(f'RunSpec.{name}: {e}') from None
      object.__setattr__(self, name, names)
      objects.append(registry.parts(names))
    object.__setattr__(self, 'part_objects', tuple(objects))
    if self.local and not self.stochastic:
      raise ValueError(f'clients={self.clients} is not allowed with '
                       'stochastic=False: local work runs K steps on '
                       'minibatches (set stochastic=True and batch_size)')
    if self.local and self.gradient is not None:
      raise ValueError(f'clients={self.clients} is not allowed with a gradient '
                       'part of your own (gradient=...): local work is the '
                       'library\'s gradient part')

  def check_hyper(self, hyper: Hyper) -> None:
    """Raises ValueError if `hyper` uses a part not compiled in."""
    if not isinstance(hyper, Hyper):
      raise ValueError(f'hyper is {type(hyper).__name__}: it must be a '
                       'laq_jax.Hyper (laq_jax.make_hyper(algo, ...))')
    self.check_grid(hyper)
    try:
      used = np.unique(np.asarray(hyper.compressor))
      used_triggers = np.unique(np.asarray(hyper.trigger))
      feedback = bool(np.any(np.asarray(hyper.error_feedback)))
      downlink = bool(np.any(np.asarray(hyper.downlink_bits) > 0))
    except jax.errors.TracerArrayConversionError:
      raise ValueError(
          'hyper is traced (run_chunk or run called inside jax.jit, vmap or '
          'grad): the parts it picks cannot be checked against the ones the '
          'program compiles in, and an unchecked one would run another part '
          'silently; pass a concrete Hyper (a grid of them, '
          'laq_jax.stack_hypers, sweeps values in one program)') from None
    used_servers = np.unique(np.asarray(hyper.server))
    used_clients = np.unique(np.asarray(hyper.client))
    used_estimators = np.unique(np.asarray(hyper.estimator))
    used_b = np.unique(np.asarray(hyper.compressor_b))
    used_privacy = np.unique(np.asarray(hyper.privacy))
    # (a broadcast part runs only where the downlink is compiled in)
    used_broadcasts = (np.unique(np.asarray(hyper.broadcast))
                       if self.downlink else np.zeros((0,), int))
    for kind, registry, indices in (
        ('compressors', compressors.REGISTRY, used),
        ('triggers', trigger_lib.REGISTRY, used_triggers),
        ('servers', servers_lib.REGISTRY, used_servers),
        ('clients', clients_lib.REGISTRY, used_clients),
        ('estimators', estimators_lib.REGISTRY, used_estimators),
        ('broadcasts', broadcasts_lib.REGISTRY, used_broadcasts),
        ('compressors_b', compressors.REGISTRY, used_b),
        ('privacy', privatizers.REGISTRY, used_privacy)):
      names = [registry.names[int(i)] if 0 <= int(i) < len(registry)
               else f'#{int(i)}' for i in indices]
      missing = [n for n in names if n not in getattr(self, kind)]
      if missing:
        opt_in = [n for n in missing if n in registry
                  and registry.get(n).opt_in]
        why = (f' ({", ".join(opt_in)}: opt-in, compiled in only where '
               'named)' if opt_in else '')
        what = {'compressors_b': 'compressor_b',
                'privacy': 'privacy part'}.get(kind, kind[:-1])
        raise ValueError(f'hyper uses {what}(s) {", ".join(missing)} '
                         f'but RunSpec.{kind}={getattr(self, kind)}: the '
                         'program does not compile it in; list it in '
                         f'RunSpec.{kind}{why}')
    for part in (p for group in self.part_objects for p in group):
      if not part.params:
        continue
      group = (getattr(hyper, 'params', None) or {}).get(part.name)
      if group is None:
        raise ValueError(f'hyper.params has no group {show(part.name)} for the '
                         f'{part.kind} {show(part.name)} the program compiles '
                         'in: build the Hyper after registering the part '
                         '(laq_jax.make_hyper)')
      missing = [n for n in part.param_names if n not in group]
      if missing:  # the part was registered again with another parameter list
        raise ValueError(
            f'hyper.params[{show(part.name)}] has no {", ".join(missing)} '
            f'(it has {", ".join(group) or "none"}), which the {part.kind} '
            f'{show(part.name)} the program compiles in declares (params='
            f'{part.param_names}): build the Hyper after registering the '
            'part (laq_jax.make_hyper)')
    partial = bool(np.any(np.asarray(hyper.participation) < 1)
                   or np.any(np.asarray(hyper.clients_per_round) > 0)
                   or np.any(np.asarray(hyper.deadline_s) > 0))
    if partial and not self.participation:
      raise ValueError('hyper uses partial participation (participation < 1, '
                       'clients_per_round > 0 or deadline_s > 0) but '
                       'RunSpec.participation=False; set it True')
    if np.any(np.asarray(hyper.clients_per_round) > self.num_workers):
      raise ValueError(
          f'clients_per_round={show(np.asarray(hyper.clients_per_round))} is '
          f'not allowed: it must be at most num_workers={self.num_workers}')
    network_lib.check_ring(
        np.asarray(hyper.network.topology) == network_lib.TOPOLOGIES.index(
            'ring'),
        can_ring=((np.asarray(hyper.compressor) == compressors.index(
            'identity'))
                  & (np.asarray(hyper.trigger) == trigger_lib.index('eager'))
                  & ~np.asarray(hyper.error_feedback)
                  & (np.asarray(hyper.downlink_bits) == 0)),
        deadline_s=hyper.deadline_s, where='hyper.')
    weighted = bool(np.any(np.asarray(hyper.weighting) > 0))
    warm = bool(np.any(np.asarray(hyper.warm_start)))
    for used_it, name in ((feedback, 'error_feedback'),
                          (downlink, 'downlink'), (weighted, 'weighting'),
                          (warm, 'warm_start')):
      if used_it and not getattr(self, name):
        raise ValueError(f'hyper uses {name} but RunSpec.{name}=False; '
                         'set it True')
    laws = {network_lib.STRAGGLERS[int(i)]
            for i in np.unique(np.asarray(hyper.network.straggler))} - {'none'}
    if laws and not self.stragglers:
      raise ValueError(
          f'hyper.network has stragglers ({", ".join(sorted(laws))}) but '
          'RunSpec.stragglers=False compiles their draws out: set it True '
          '(it is False only where every point\'s network has straggler '
          'none)')
    if not self.upload_memory:
      reads = memory_readers(hyper)
      if reads:
        raise ValueError(
            f'hyper reads the last uploads ({"; ".join(reads)}) but '
            'RunSpec.upload_memory=False keeps none: set it True (it is '
            'False only for points with the eager trigger, the direct '
            'estimator, absent=drop and a weighted mean)')

  def check_data(self, data) -> None:
    """Raises ValueError, naming the field and what is allowed, unless `data`
    (a `loop.Data`) fits this spec and the problem: x [M, N, D] floating and
    finite, y [M, N] integer labels in 0..C-1, M = num_workers, the optional
    layouts and count_M of matching shapes, a minibatch that fits a shard.
    Value checks (finite, label range) run on concrete arrays only."""
    x, y = getattr(data, 'x_MxNxD', None), getattr(data, 'y_MxN', None)
    for name, a, axes in (('x_MxNxD', x, '[M workers, N samples, D '
                           'features]'), ('y_MxN', y, '[M workers, N '
                                          'samples]')):
      if not (hasattr(a, 'shape') and hasattr(a, 'dtype')):
        raise ValueError(f'Data.{name} is {type(a).__name__}: it must be an '
                         f'array {axes}')
      if a.ndim != axes.count(',') + 1:
        raise ValueError(f'Data.{name} has shape {tuple(a.shape)}: it must '
                         f'have {axes.count(",") + 1} axes {axes}')
    m, n, d = x.shape
    if m != self.num_workers:
      raise ValueError(
          f'Data.x_MxNxD has {m} workers (shape {tuple(x.shape)}) but '
          f'RunSpec.num_workers={self.num_workers}: give one shard per '
          'worker (laq_jax.data.make_shards(x, y, num_workers))')
    if tuple(y.shape) != (m, n):
      raise ValueError(f'Data.y_MxN has shape {tuple(y.shape)}: it must be '
                       f'[M, N] = {(m, n)}, one label per row of x_MxNxD')
    if n < 1 or d < 1:
      raise ValueError(f'Data.x_MxNxD has shape {tuple(x.shape)}: every '
                       'shard needs at least one sample and one feature')
    if not np.issubdtype(x.dtype, np.floating):
      raise ValueError(f'Data.x_MxNxD has dtype {x.dtype}: it must be '
                       'float32 or float64 (the run\'s precision)')
    if not np.issubdtype(y.dtype, np.integer):
      raise ValueError(f'Data.y_MxN has dtype {y.dtype}: it must be integer '
                       f'class labels 0..{self.problem.num_classes - 1}')
    for name, shape in (('xt_MxDxN', (m, d, n)), ('xq_MxNxD', (m, n, d)),
                        ('xqt_MxDxN', (m, d, n)), ('count_M', (m,))):
      a = getattr(data, name, None)
      if a is not None and tuple(jax.numpy.shape(a)) != shape:
        raise ValueError(f'Data.{name} has shape {tuple(jax.numpy.shape(a))}'
                         f': it must be {shape} for x_MxNxD of shape '
                         f'{tuple(x.shape)}')
    try:
      logits = jax.eval_shape(
          lambda k, xs: self.problem.apply(self.problem.init(k), xs),
          jax.random.key(0), jax.ShapeDtypeStruct((1, d), x.dtype))
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f'Data.x_MxNxD has D={d} features, which the problem '
                       f'{show(self.problem.name)} does not take: '
                       f'{type(e).__name__}') from None
    if (self.problem.classifier
        and tuple(logits.shape) != (1, self.problem.num_classes)):
      raise ValueError(f'the problem {show(self.problem.name)} gives logits of '
                       f'shape {tuple(logits.shape)} for one sample of D={d} '
                       f'features: it must be (1, {self.problem.num_classes})')
    if self.stochastic and data.count_M is None and self.batch_size > n:
      raise ValueError(f'batch_size={self.batch_size} is not allowed: it '
                       f'must be at most the shard size N={n} (a minibatch is '
                       'drawn without replacement from one shard)')
    arrays = [x, y] + ([data.count_M] if data.count_M is not None else [])
    if any(isinstance(a, jax.core.Tracer) for a in arrays):
      return
    finite, low, high, counts = _data_stats(x, y, data.count_M)
    if not finite:
      raise ValueError('Data.x_MxNxD holds NaN or inf: the features must be '
                       'finite (check the data, or drop those samples)')
    if self.problem.classifier and (low < 0
                                    or high >= self.problem.num_classes):
      raise ValueError(
          f'Data.y_MxN holds labels {int(low)}..{int(high)}: they must be '
          f'in 0..{self.problem.num_classes - 1} (the problem '
          f'{show(self.problem.name)} has {self.problem.num_classes} classes)')
    if counts is not None and not (1 <= counts[0] and counts[1] <= n):
      raise ValueError(f'Data.count_M holds {int(counts[0])}..'
                       f'{int(counts[1])}: each client\'s samples must be in '
                       f'1..N={n}')

  def check_grid(self, hyper: Hyper) -> None:
    """Raises ValueError unless every array of a grid `hyper` has the same
    leading length G (a scalar Hyper passes)."""
    if jax.numpy.ndim(hyper.step_size) == 0:
      return
    g = jax.numpy.shape(hyper.step_size)[0]
    for name, value in zip(hyper._fields, hyper):
      if name == 'network':
        leaves = zip(value._fields, value)
      elif name == 'params':
        leaves = [(f'{part}.{p}', v) for part, group in value.items()
                  for p, v in group.items()]
      else:
        leaves = [(None, value)]
      for sub, leaf in leaves:
        shape = jax.numpy.shape(leaf)
        if not shape or shape[0] != g:
          where = (f'hyper.params[{sub!r}]' if name == 'params' else
                   f'hyper.{name}' + (f'.{sub}' if sub else ''))
          raise ValueError(
              f'{where} has shape {shape} but hyper.step_size has {g} grid '
              f'points: every field of a grid Hyper needs the same leading '
              'length (build grids with laq_jax.stack_hypers)')


def memory_readers(hyper: Hyper) -> list[str]:
  """What in a concrete `hyper` (a run or a grid) reads the server's copy of
  the workers' last uploads, in words: a trigger but eager, an estimator but
  direct, `absent` stale, a plain sum of the uploads (weighting sum). Empty:
  `RunSpec(upload_memory=False)` runs it (`points.needs_upload_memory`)."""
  from laq_jax.round import participation as participation_lib  # pylint: disable=g-import-not-at-top
  out = []
  for what, registry, allowed in (
      ('trigger', trigger_lib.REGISTRY, 'eager'),
      ('estimator', estimators_lib.REGISTRY, 'direct')):
    used = {registry.names[int(i)]
            for i in np.unique(np.asarray(getattr(hyper, what)))}
    if used - {allowed}:
      out.append(f'{what} {", ".join(sorted(used - {allowed}))}')
  if np.any(np.asarray(hyper.absent)
            != participation_lib.ABSENT.index('drop')):
    out.append('absent stale')
  if np.any(np.asarray(hyper.weighting)
            == participation_lib.WEIGHTING.index('sum')):
    out.append('weighting sum')
  return out


@jax.jit
def _data_stats(x, y, count):
  stats = (jax.numpy.all(jax.numpy.isfinite(x)), jax.numpy.min(y),
           jax.numpy.max(y))
  if count is not None:
    return stats + ((jax.numpy.min(count), jax.numpy.max(count)),)
  return stats + (None,)


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
