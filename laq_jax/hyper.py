"""Hyperparameters as data, and the algorithm presets.

Every number a sweep may vary lives in `Hyper` as an array, so a new value never
recompiles and a grid of values is a batch of Hypers (leading axis G). That
includes the choices that make one algorithm another: which compressor, whether
it compresses the gradient or the innovation, whether workers may skip. Only
shapes (worker count M, history length D, chunk length T, batch size, model,
full-batch or minibatch gradients) are static.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import clients as clients_lib
from laq_jax import compressors
from laq_jax import network as network_lib
from laq_jax import participation as participation_lib
from laq_jax import parts as parts_lib
from laq_jax import registry
from laq_jax import schedule
from laq_jax import servers as servers_lib
from laq_jax import show as show_lib
from laq_jax import trigger as trigger_lib
from laq_jax.show import show


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A preset of the one rule: which parts it plugs in.

  Attributes:
    name: what configs and sweeps call it.
    stochastic: minibatch gradients (else full shards).
    compressor: one of `compressors.COMPRESSORS`.
    innovation: compress g - Qhat (LAQ, EF21) rather than g itself (QSGD).
    trigger: one of `trigger.TRIGGERS`: 'eager' (always upload), 'laq' (the LAG/LAQ
      rule), 'clag' (CLAG's, Richtarik et al. 2022).
    server: one of `servers.SERVERS`: how the server steps ('sgd': theta -
      alpha * aggregate; 'momentum', 'adam', 'amsgrad', ... through optax).
    params: the preset's values of its parts' own parameters, dotted
      ({'momentum.momentum': 0.9}); a config or grid may override them.
    error_feedback: add what earlier compressions dropped before compressing.
    downlink: the server's broadcast is quantized too (b bits, LAQ's
      quantizer on the parameters' innovation).
    reference: where it comes from.
    client: one of `clients.CLIENTS`: what a participant computes
      ('gradient': one gradient; 'local', 'scaffold', ...: K local steps,
      uploading the model change).
    absent: what `absent='auto'` means for it ('stale' or 'drop').
    weighting: what `weighting='auto'` means for it ('sum', 'samples' or
      'uniform').
    settings: its paper's values of Hyper fields, which `make_hyper` takes
      for the fields it is not given; `server_lr` (eta_s, the server's
      step on a local client's model change) also where it is given as 0,
      its default, so that a config or a sweep over presets runs each at
      its own server step unless one is named.
  """
  name: str
  stochastic: bool
  compressor: str
  innovation: bool
  trigger: str = 'eager'
  error_feedback: bool = False
  downlink: bool = False
  reference: str = ''
  server: str = 'sgd'
  params: tuple[tuple[str, Any], ...] = ()
  client: str = 'gradient'
  absent: str = 'stale'
  weighting: str = 'sum'
  settings: tuple[tuple[str, Any], ...] = ()

  def __post_init__(self):
    object.__setattr__(self, 'params', tuple(
        dict(self.params).items()))  # a dict or pairs, kept as pairs
    object.__setattr__(self, 'settings', tuple(dict(self.settings).items()))
    if self.absent not in participation_lib.ABSENT:
      raise ValueError(f'Algorithm {self.name!r}: absent={self.absent!r} is '
                       f'not allowed; allowed: {", ".join(participation_lib.ABSENT)}')
    if self.weighting not in participation_lib.WEIGHTING:
      raise ValueError(f'Algorithm {self.name!r}: weighting={self.weighting!r} '
                       'is not allowed; allowed: '
                       f'{", ".join(participation_lib.WEIGHTING)}')

  @property
  def local(self) -> bool:
    """Whether participants run local steps (upload a model change)."""
    return self.client != 'gradient'

  @property
  def lazy(self) -> bool:
    """Whether workers may skip an upload."""
    return self.trigger != 'eager'

  @property
  def quantize(self) -> bool:
    """Whether uploads go through LAQ's innovation quantizer."""
    return self.compressor == 'uniform'


_A = Algorithm


def _local_presets() -> tuple[Algorithm, ...]:
  """FedAvg and friends: client part, server, weighting and the papers'
  settings (docs/algorithm.md, "Local work", cites each)."""
  fed = dict(client='local', absent='drop', weighting='samples')
  # McMahan et al. 2017 (MNIST, B = 10, E = 1 on 600 samples: 60 steps; a
  # CPU run takes K = 10 by default): client SGD, server step 1.
  local = {'local.steps': 10, 'local.lr': 0.1}
  return (
      _A('fedavg', True, 'identity', False, params=local,
         settings={'server_lr': 1.0}, **fed,
         reference='McMahan et al. 2017: FedAvg'),
      _A('fedavgm', True, 'identity', False, server='momentum',
         params={**local, 'momentum.momentum': 0.9},
         settings={'server_lr': 1.0}, **fed,
         reference='Hsu, Qi, Brown 2019: FedAvgM (server momentum 0.9)'),
      _A('fedadam', True, 'identity', False, server='fedadam',
         params={'local.steps': 10, 'local.lr': 10 ** -1.5},
         settings={'server_lr': 0.01}, **fed,
         reference='Reddi et al. 2021: FedAdam'),
      _A('fedyogi', True, 'identity', False, server='fedyogi',
         params={'local.steps': 10, 'local.lr': 10 ** -1.5},
         settings={'server_lr': 0.01}, **fed,
         reference='Reddi et al. 2021: FedYogi'),
      _A('fedprox', True, 'identity', False,
         params={**local, 'local.mu': 1.0}, settings={'server_lr': 1.0},
         **fed, reference='Li et al. 2020: FedProx'),
      _A('scaffold', True, 'identity', False, client='scaffold',
         params={'scaffold.steps': 10, 'scaffold.lr': 0.1},
         settings={'server_lr': 1.0}, absent='drop', weighting='samples',
         reference='Karimireddy et al. 2020: SCAFFOLD, option II'),
      _A('fedpaq', True, 'qsgd', False, params=local,
         settings={'server_lr': 1.0}, **fed,
         reference='Reisizadeh et al. 2020: FedPAQ (QSGD\'s quantizer on '
                   'the model change)'),
      _A('local_sgd', True, 'identity', False, client='local', params=local,
         settings={'server_lr': 1.0}, absent='drop', weighting='uniform',
         reference='local SGD: every client, every round, K steps, the '
                   'models averaged (the LASG code\'s baseline)'),
      _A('fedlaq', True, 'uniform', True, 'laq', params=local,
         settings={'server_lr': 1.0}, **fed,
         reference='ours: LAQ\'s quantizer and trigger on the model change'),
  )


ALGORITHMS: dict[str, Algorithm] = registry.track({
    a.name: a for a in (
        # The LAQ paper's family (Sun et al. 2019).
        _A('gd', False, 'identity', False, 'eager', reference='GD'),
        _A('qgd', False, 'uniform', True, 'eager',
           reference='Sun et al. 2019: QGD, the quantizer that never skips'),
        _A('lag', False, 'identity', False, 'laq',
           reference='Chen et al. 2018: LAG-WK'),
        _A('laq', False, 'uniform', True, 'laq', reference='Sun et al. 2019'),
        _A('sgd', True, 'identity', False, 'eager', reference='SGD'),
        _A('sqgd', True, 'uniform', True, 'eager',
           reference='QGD with minibatch gradients'),
        _A('slag', True, 'identity', False, 'laq',
           reference='LAG with minibatch gradients'),
        _A('slaq', True, 'uniform', True, 'laq',
           reference='Sun et al. 2019: SLAQ'),
        # The field's compressors and rules.
        _A('qsgd', True, 'qsgd', False, 'eager',
           reference='Alistarh et al. 2017: QSGD'),
        _A('ssgd', True, 'rand_p', False, 'eager',
           reference='Wangni et al. 2018: sparsified SGD'),
        _A('terngrad', True, 'terngrad', False, 'eager',
           reference='Wen et al. 2017: TernGrad'),
        _A('ef_signsgd', True, 'sign', False, 'eager', error_feedback=True,
           reference='Karimireddy et al. 2019: EF-SignSGD'),
        _A('topk_ef', True, 'top_k', False, 'eager', error_feedback=True,
           reference='Stich et al. 2018; Lin et al. 2018 (DGC\'s core)'),
        _A('ef21', False, 'top_k', True, 'eager',
           reference='Richtarik, Sokolov, Fatkhullin 2021: EF21'),
        _A('ef21_sgd', True, 'top_k', True, 'eager',
           reference='EF21 with minibatch gradients'),
        _A('clag', False, 'top_k', True, 'clag',
           reference='Richtarik et al. 2022 (3PC): CLAG'),
        _A('two_laq', False, 'uniform', True, 'laq', downlink=True,
           reference='Sun et al., TPAMI 2020: LAQ with a quantized '
                     'broadcast'),
        # The LAQ authors' follow-ups: two gradients on the same sample.
        _A('lasg_wk2', True, 'identity', False, 'lasg_wk2',
           reference='Chen, Sun, Yin 2020: LASG-WK2'),
        _A('lasg_wk1', True, 'identity', False, 'lasg_wk1',
           reference='Chen, Sun, Yin 2020: LASG-WK1'),
        _A('lasg_ps', True, 'identity', False, 'lasg_ps',
           reference='Chen, Sun, Yin 2020: LASG-PS'),
        _A('lasg_wk2_laq', True, 'uniform', True, 'lasg_wk2',
           reference='LASG-WK2 with LAQ\'s quantizer (ours: the journal '
                     'version names the combination)'),
        _A('lasg_wk1_laq', True, 'uniform', True, 'lasg_wk1',
           reference='LASG-WK1 with LAQ\'s quantizer'),
        _A('lasg_ps_laq', True, 'uniform', True, 'lasg_ps',
           reference='LASG-PS with LAQ\'s quantizer'),
        _A('cada1', True, 'identity', False, 'cada_wk1',
           server='cada_amsgrad',
           reference='Chen, Guo, Sun, Yin 2021: CADA1'),
        _A('cada2', True, 'identity', False, 'cada_wk2',
           server='cada_amsgrad',
           reference='Chen, Guo, Sun, Yin 2021: CADA2'),
        _A('cada_adam', True, 'identity', False, 'eager',
           server='cada_amsgrad',
           reference='CADA\'s baseline: distributed Adam (AMSGrad, no '
                     'bias correction), every worker every step'),
        # Rounds with local work (docs/algorithm.md, "Local work"): the
        # upload is the model change Delta_m after K local steps.
        *_local_presets(),
    )
})


def register_algorithm(algorithm: Algorithm, *, replace: bool = False
                       ) -> Algorithm:
  """Adds a preset (e.g. of a compressor or trigger registered from user
  code) so that configs, sweeps and `make_hyper` can name it.

  Raises:
    ValueError: its compressor or trigger is not registered, or its name is
      taken (unless replace=True).
  """
  compressors.index(algorithm.compressor)
  trigger_lib.index(algorithm.trigger)
  servers_lib.index(algorithm.server)
  clients_lib.index(algorithm.client)
  for key, value in algorithm.settings:
    check_value(key, value, f'{algorithm.name}.settings[{key!r}]')
  for key, value in algorithm.params:
    parts_lib.check_value(key, value, f'{algorithm.name}.params[{key!r}]')
  if algorithm.name in ALGORITHMS and not replace:
    raise ValueError(f'algorithm {show(algorithm.name)} is already registered; '
                     'pass replace=True to replace it')
  ALGORITHMS[algorithm.name] = algorithm
  return algorithm


# The slots of a preset a name may fill with another part
# ('laq+server=adam'), each with its registry's module.
SLOTS = {'compressor': compressors, 'trigger': trigger_lib,
         'server': servers_lib, 'client': clients_lib}


def compose(algo: str | Algorithm, **slots: str) -> Algorithm:
  """The preset `algo` with other parts in its slots (compressor, trigger,
  server, client): `compose('laq', server='adam')` is LAQ's uploads and
  trigger stepped by Adam, named 'laq+server=adam', the name configs and
  grids give it (`get_algorithm` reads such names). The preset's own
  settings and parameters stay; a part put in a slot runs at its
  parameters' defaults unless a config or grid names them.

  Raises:
    ValueError: a slot that is not one of SLOTS, or a part that is not
      registered for it (named, with what is allowed).
  """
  base = algo if isinstance(algo, Algorithm) else get_algorithm(algo)
  for slot, part in slots.items():
    if slot not in SLOTS:
      raise ValueError(f'slot {show(slot)} in {show(base.name)}: the slots '
                       f'are {", ".join(SLOTS)}')
    names = SLOTS[slot].REGISTRY.names
    if part not in names:
      raise ValueError(f'{slot}={show(part)} in {show(base.name)}: a '
                       f'{slot} is one of {", ".join(names)}')
  # (a slot given its preset's own part changes nothing: 'laq' stays 'laq')
  slots = {k: v for k, v in slots.items() if getattr(base, k) != v}
  if not slots:
    return base
  name = '+'.join([base.name] + [f'{k}={slots[k]}' for k in SLOTS
                                 if k in slots])
  return dataclasses.replace(base, name=name, **slots)


def get_algorithm(name: str) -> Algorithm:
  """Returns the preset called `name` (or a composed one, 'laq+server=adam':
  `compose`), or a ValueError listing the choices."""
  try:
    return ALGORITHMS[name]
  except (KeyError, TypeError):
    pass
  if isinstance(name, str) and '+' in name:
    base, *items = name.split('+')
    slots = {}
    for item in items:
      slot, eq, part = item.partition('=')
      if not eq or slot in slots:
        raise ValueError(f'algorithm {show(name)}: after the preset, '
                         "'+slot=part' once per slot (slots: "
                         f'{", ".join(SLOTS)})')
      slots[slot] = part
    return compose(get_algorithm(base), **slots)
  raise ValueError(
      f'unknown algorithm {show(name)}; allowed: {", ".join(ALGORITHMS)}'
      " (or a preset with parts in its slots: 'laq+server=adam')")


# ----------------------------------------------------------------------------
# The fields, each declared once: name, kind, default, check and doc. The
# Hyper arrays, DEFAULTS, the casts, the checks and the numeric part of
# configs/default.py all derive from FIELDS.

_INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Field:
  """One field of `Hyper`.

  Attributes:
    name: the field's name in Hyper, configs and sweep grids.
    kind: 'float' (in the run's precision), 'int' (int32), 'schedule' (text
      '300:2,500:6' or (step, factor) pairs, stored as the two arrays
      NAME-without-_schedule + '_steps' / '_factors', `laq_jax.schedule`),
      'network' (a profile name of `laq_jax.network.PROFILES`, or a
      `Network`: the array `network`, a Network of arrays),
      'network_field' (an override of one Network field, None for the
      profile's; no array of its own: it goes into `network`), 'choice'
      (one of `choices` by name, stored as its index, int32), or 'preset'
      (set by the algorithm preset, not by a config: int32 or bool, see
      `dtype`).
    default: the config's and `make_hyper`'s default (None for presets).
    check: element-wise test on a NumPy array of the values (None: any).
    allowed: what `check` allows, in words (for error messages).
    doc: one line for the docs and configs/default.py.
    dtype: a preset's dtype ('int32' or 'bool').
    choices: a 'choice' field's names.
  """
  name: str
  kind: str
  default: Any
  check: Callable[[np.ndarray], np.ndarray] | None
  allowed: str
  doc: str
  dtype: str = ''
  choices: tuple[str, ...] = ()

  @property
  def arrays(self) -> tuple[str, ...]:
    """The Hyper arrays this field fills."""
    if self.kind == 'schedule':
      stem = self.name.removesuffix('_schedule')
      return (f'{stem}_steps', f'{stem}_factors')
    if self.kind == 'network_field':
      return ()
    if self.kind == 'network':
      return ('network',)
    return (self.name,)

  @property
  def value_type(self) -> type:
    """The Python type of a config's value (a network override may also be
    None: the profile's)."""
    if self.kind in ('schedule', 'network', 'choice') or self.network_field in (
        'straggler', 'topology'):
      return str
    return float if self.kind in ('float', 'network_field') else int

  @property
  def network_field(self) -> str:
    """The Network field a 'network_field' overrides ('' otherwise)."""
    return (self.name.removeprefix('network.')
            if self.kind == 'network_field' else '')


def _f(name, kind, default, check, allowed, doc, dtype='', choices=()):
  return Field(name, kind, default, check, allowed, doc, dtype, choices)


_finite = np.isfinite
_ge0 = lambda a: _finite(a) & (a >= 0)
_int_in = lambda low, high: (lambda a: (a >= low) & (a <= high))

FIELDS: tuple[Field, ...] = (
    _f('step_size', 'float', 0.02, lambda a: _finite(a) & (a > 0),
       'a finite number > 0',
       'alpha, on the *sum* of the M worker gradients'),
    _f('bits', 'int', 4, _int_in(1, 32), 'an integer in 1..32',
       'b, bits per coordinate of a quantized upload'),
    _f('xi', 'float', 0.8, _ge0, 'a finite number >= 0',
       'sum of the xi_d = xi / D (times its schedule\'s factor)'),
    _f('err_weight', 'float', 3.0, _ge0, 'a finite number >= 0', 'c_e'),
    _f('threshold_offset', 'float', 0.0, _ge0, 'a finite number >= 0',
       'c_0'),
    _f('max_staleness', 'int', 100, _int_in(0, _INT32_MAX),
       'an integer in 0..2**31-1', 'tbar'),
    _f('l2', 'float', 0.01, _ge0, 'a finite number >= 0', 'lam, per worker'),
    _f('seed', 'int', 0, _int_in(0, _INT32_MAX), 'an integer in 0..2**31-1',
       'model init, minibatch draws, random compressors'),
    _f('downlink_bits', 'int', 0, _int_in(0, 32),
       'an integer in 0..32 (0: the preset\'s default)',
       'two_laq\'s broadcast bits (0: the uplink\'s b)'),
    # Set by the preset (and authors_code by its own argument).
    _f('compressor', 'preset', None, None, '',
       'index into `compressors.COMPRESSORS`', 'int32'),
    _f('innovation', 'preset', None, None, '',
       'compress g - Qhat rather than g', 'bool'),
    _f('trigger', 'preset', None, None, '', 'index into `trigger.TRIGGERS`',
       'int32'),
    _f('error_feedback', 'preset', None, None, '',
       'add the worker\'s error memory before compressing', 'bool'),
    _f('authors_code', 'preset', None, None, '',
       'follow the authors\' released scripts where they depart from '
       'Algorithm 1 (docs/algorithm.md)', 'bool'),
    _f('server', 'preset', None, None, '', 'index into `servers.SERVERS`',
       'int32'),
    _f('client', 'preset', None, None, '', 'index into `clients.CLIENTS`',
       'int32'),
    # The parts' own parameters, {part: {param: array}} (`laq_jax.parts`):
    # set by dotted names ('rand_k.k'), declared by each part.
    _f('params', 'parts', None, None, '',
       'each part\'s own parameters, hyper.params[part][param]'),
    # Last, as Hyper has always held its two arrays.
    _f('xi_schedule', 'schedule', '', None, schedule.ALLOWED,
       'xi\'s multipliers by iteration, \'K1:C1,K2:C2\' (C_j times xi from '
       'iteration K_j on, not cumulative), \'\' for none; the authors\' '
       'minibatch network: \'300:2,500:6\''),
    # Partial participation (docs/algorithm.md, "Partial participation").
    _f('participation', 'float', 1.0,
       lambda a: _finite(a) & (a > 0) & (a <= 1), 'a number in (0, 1]',
       'q: each client takes part in a round with probability q'),
    _f('clients_per_round', 'int', 0, _int_in(0, _INT32_MAX),
       'an integer >= 0 (0: off; at most the number of workers)',
       'S: exactly S clients take part in each round (0: off, q decides)'),
    _f('absent', 'choice', 'auto', None,
       f'one of auto, {", ".join(participation_lib.ABSENT)}',
       'what the server does with an absent client: stale (keeps its last '
       'upload) or drop (steps with the participants\' uploads alone); '
       'auto: the preset\'s (drop for local work, else stale)',
       choices=('auto',) + participation_lib.ABSENT),
    _f('weighting', 'choice', 'auto', None,
       f'one of auto, {", ".join(participation_lib.WEIGHTING)}',
       'how the server combines the uploads: sum (the family\'s: alpha on '
       'their sum; M / |S_k| times the participants\' under drop), '
       'samples (their mean weighted by n_m, FedAvg\'s), uniform (their '
       'mean); auto: the preset\'s (samples for local work, else sum)',
       choices=('auto',) + participation_lib.WEIGHTING),
    _f('deadline_s', 'float', 0.0, _ge0,
       'a finite number >= 0 (0: no deadline)',
       'a round\'s deadline, s: a participant whose compute + upload would '
       'end later is dropped from the round (0: none)'),
    # Local work (docs/algorithm.md, "Local work"): the server's own rate.
    _f('server_lr', 'float', 0.0, _ge0,
       'a finite number >= 0 (0: the preset\'s)',
       'eta_s, the server\'s step on the participants\' model changes for '
       'a client with local steps (FedAvg\'s 1, FedAdam\'s 0.01), in place '
       'of step_size, which stays the rate on gradients; 0: the preset\'s '
       '(1 where it names none)'),
    # The modeled network a run's rounds are timed on (laq_jax.network;
    # docs/algorithm.md, "Time on a modeled network"): a profile, then any
    # of its fields overridden (None: the profile's value); a config's
    # `network` group (config.network.profile, config.network.up_bps, ...).
    _f('network.profile', 'network', 'cross_silo', None,
       f'one of {", ".join(network_lib.PROFILES)} (or a laq_jax.Network)',
       'the network profile the rounds are timed on'),
    *(_f(f'network.{name}', 'network_field', None, None,
         f'{network_lib.allowed(name)}, or None (the profile\'s)',
         network_lib.DOCS[name])
      for name in network_lib.FIELDS),
)
FIELD = {f.name: f for f in FIELDS}
CONFIG_FIELDS = tuple(f for f in FIELDS if f.kind not in ('preset', 'parts'))
# The numeric fields a config or a grid sets directly (the preset sets
# compressor, innovation, trigger and error feedback; downlink_bits 0 means
# "b" for a preset that quantizes the broadcast).
DEFAULTS = {f.name: f.default for f in CONFIG_FIELDS}
FLOAT_FIELDS = tuple(f.name for f in FIELDS if f.kind == 'float')
INT_FIELDS = tuple(f.name for f in FIELDS if f.kind == 'int')
SCHEDULE_FIELDS = tuple(f.name for f in FIELDS if f.kind == 'schedule')
NETWORK_FIELDS = tuple(f.name for f in FIELDS
                       if f.kind in ('network', 'network_field'))
# Every array of Hyper, and those in the run's float precision.
ARRAYS = tuple(a for f in FIELDS for a in f.arrays)
FLOAT_ARRAYS = FLOAT_FIELDS + tuple(f.arrays[1] for f in FIELDS
                                    if f.kind == 'schedule')


class Hyper(collections.namedtuple('Hyper', ARRAYS)):
  """Hyperparameters of one run (scalars) or of a grid (leading G axis).

  One array per field of FIELDS (a schedule gives two: its steps, int32
  [schedule.SLOTS], unused slots at schedule.NEVER, and its factors, not
  cumulative, 1 before the first step). `describe()` lists them with their
  docs; in short: step_size alpha (applied to the *sum* of the worker
  gradients), bits b, xi (xi_d = xi / D), err_weight c_e, threshold_offset
  c_0, max_staleness tbar, l2 lam, seed, downlink_bits, xi_steps / xi_factors, the
  preset's compressor, innovation, trigger, error_feedback and
  authors_code, and `network`, the `laq_jax.Network` the rounds are timed
  on (float64 where x64 is on, whatever the run's precision).
  """
  __slots__ = ()

  @property
  def lazy(self):
    """Whether workers may skip an upload (bool)."""
    return self.trigger != trigger_lib.index('eager')

  @property
  def quantize(self):
    """Whether the uniform (LAQ) quantizer compresses the uploads (bool)."""
    return self.compressor == compressors.index('uniform')


def describe() -> str:
  """Every field: name, kind, default, allowed values and doc (one line
  each)."""
  lines = []
  for f in FIELDS:
    default = '' if f.kind in ('preset', 'parts') else f' = {f.default!r}'
    allowed = f' ({f.allowed})' if f.allowed else ''
    lines.append(f'{f.name}: {f.kind}{default}{allowed}: {f.doc}')
  for reg in parts_lib.registries().values():
    for name in reg.names:
      part = reg.get(name)
      for p in part.params:
        lines.append(f'{name}.{p.name}: {p.kind} = {p.default!r} '
                     f'({p.allowed}): {p.doc or part.doc}')
  return '\n'.join(lines)


def cast(hyper: Hyper, dtype) -> Hyper:
  """`hyper` with its float arrays in `dtype` (the run's precision)."""
  params = {name: {p: (jnp.asarray(v, dtype)
                       if parts_lib.find(name).param(p).kind == 'float'
                       else v) for p, v in group.items()}
            for name, group in hyper.params.items()}
  return hyper._replace(params=params, **{
      f: jnp.asarray(getattr(hyper, f), dtype) for f in FLOAT_ARRAYS})


def is_integer(value) -> bool:
  """A Python or NumPy integer (not a bool)."""
  return isinstance(value, (int, np.integer)) and not isinstance(
      value, (bool, np.bool_))


def is_number(value) -> bool:
  """A finite Python or NumPy integer or float (not a bool)."""
  return (is_integer(value) or isinstance(value, (float, np.floating))
          ) and math.isfinite(float(value))


def _allowed_kind(field: Field) -> str:
  return 'i' if field.kind == 'int' else 'if'


def check_value(name: str, value, where: str | None = None) -> None:
  """The one validator: raises ValueError unless every element of `value`
  (a scalar, or an array for a grid) is allowed for field `name`.

  Integer fields take integers only (not 4.0, not True), the others finite
  numbers (not bools), each in the field's range; a schedule field takes its
  text or pairs. `where` names the value in the message (default `name`).
  """
  if isinstance(name, str) and '.' in name and name not in FIELD:
    parts_lib.check_value(name, value, where)
    return
  field = FIELD.get(name)
  if field is None or field.kind in ('preset', 'parts'):
    raise ValueError(show_lib.unknown(name, hyper_keys(), 'hyperparameter'))
  where = where or name
  if field.kind == 'schedule':
    schedule.parse(value, where)
    return
  if field.kind == 'network':
    if not (isinstance(value, network_lib.Network) or (
        isinstance(value, str) and value in network_lib.PROFILES)):
      raise ValueError(f'{where}={show(value)} is not allowed: it must be '
                       f'{field.allowed}')
    return
  if field.kind == 'network_field':
    if value is not None:
      network_lib.check_field(field.network_field, value, where)
    return
  if field.kind == 'choice':
    if not (isinstance(value, str) and value in field.choices):
      raise ValueError(f'{where}={show(value)} is not allowed: it must be '
                       f'{field.allowed}')
    return
  bad = ValueError(f'{where}={show(value)} is not allowed: it must be '
                   f'{field.allowed}')
  if isinstance(value, (str, bytes)):
    raise bad
  try:
    a = np.asarray(value)
  except (TypeError, ValueError):
    raise bad from None
  if a.dtype.kind not in _allowed_kind(field) or a.size == 0:
    raise bad
  with np.errstate(invalid='ignore'):
    if not (np.all(np.isfinite(a.astype(np.float64)))
            and np.all(field.check(a))):
      raise bad


def validate(**values) -> None:
  """`check_value` for each field given; names that are not fields are
  ignored so callers can pass a whole config."""
  for name, value in values.items():
    if name in DEFAULTS or (isinstance(name, str) and '.' in name):
      check_value(name, value)


def hyper_keys() -> tuple[str, ...]:
  """Every name `make_hyper` takes: the fields of DEFAULTS, then every
  registered part's parameters, dotted ('momentum.momentum')."""
  return tuple(DEFAULTS) + parts_lib.param_keys()


def make_hyper(algo: str | Algorithm = 'laq', *, dtype=jnp.float32,
               authors_code: bool = False, **overrides) -> Hyper:
  """Builds a `Hyper` for one run from a preset name plus overrides.

  Args:
    algo: one of ALGORITHMS (or an Algorithm); sets compressor, innovation,
      trigger, error feedback and whether the broadcast is quantized.
    dtype: float dtype of the numeric fields (float32 or float64).
    authors_code: follow the authors' scripts (see `Hyper`).
    **overrides: any field of DEFAULTS, or a part's own parameter by its
      dotted name (`**{'momentum.momentum': 0.5}`, `hyper_keys()`); the
      preset's `params` first; array values make a grid (see
      `stack_hypers` for the usual way). `xi_schedule` is text
      ('300:2,500:6') or (step, factor) pairs (`laq_jax.schedule`).
      `network` (or 'network.profile') is a profile name, its fields
      overridden by any 'network.FIELD' given (`**{'network.up_bps':
      5e6}`), or a `laq_jax.Network` (e.g. from `make_network(...,
      num_workers=M)` with per-worker values).

  Returns:
    A Hyper of jnp arrays.

  Raises:
    ValueError: an unknown field, a value not allowed, or a ring topology
      for a preset that cannot all-reduce (named, with what is allowed).
  """
  algorithm = algo if isinstance(algo, Algorithm) else get_algorithm(algo)
  if 'network' in overrides:  # the library's name for network.profile
    overrides['network.profile'] = overrides.pop('network')
  dotted = {k: v for k, v in overrides.items()
            if '.' in k and k not in DEFAULTS}
  overrides = {k: v for k, v in overrides.items() if k not in dotted}
  for name in overrides:
    if name not in DEFAULTS:
      raise ValueError('make_hyper: ' + show_lib.unknown(
          name, hyper_keys(), 'hyperparameter'))
  params = parts_lib.param_arrays({**dict(algorithm.params), **dotted}, dtype)
  values = {**DEFAULTS, **dict(algorithm.settings), **overrides}
  validate(**values)
  values['server_lr'] = server_lr(algorithm, values['server_lr'])
  check_participation(values, algorithm)
  values['downlink_bits'] = broadcast_bits(algorithm, values['bits'],
                                           values['downlink_bits'])
  arrays = {'network': make_network(values, algorithm)}
  for f in CONFIG_FIELDS:
    if f.kind == 'schedule':
      arrays.update(zip(f.arrays, schedule.arrays(values[f.name], dtype)))
    elif f.kind in ('network', 'network_field'):
      continue
    elif f.kind == 'choice':
      arrays[f.name] = jnp.asarray(choice_index(f, values[f.name], algorithm),
                                   jnp.int32)
    else:
      arrays[f.name] = jnp.asarray(
          values[f.name], dtype if f.kind == 'float' else jnp.int32)
  return Hyper(
      **arrays,
      compressor=jnp.asarray(compressors.index(algorithm.compressor),
                             jnp.int32),
      innovation=jnp.asarray(algorithm.innovation, bool),
      trigger=jnp.asarray(trigger_lib.index(algorithm.trigger), jnp.int32),
      error_feedback=jnp.asarray(algorithm.error_feedback, bool),
      authors_code=jnp.asarray(authors_code, bool),
      server=jnp.asarray(servers_lib.index(algorithm.server), jnp.int32),
      client=jnp.asarray(clients_lib.index(algorithm.client), jnp.int32),
      params=params,
  )


def server_lr(algorithm: Algorithm, value) -> float:
  """eta_s as a run uses it: `value`, or where it is 0 (the default) the
  preset's own (`Algorithm.settings`), 1 where it names none."""
  own = dict(algorithm.settings).get('server_lr') or 1.0
  array = np.asarray(value)
  if array.ndim:  # a grid's values
    return np.where(array == 0, own, array)
  return value if float(array) else own


def choice_index(field: Field, value, algorithm: Algorithm) -> int:
  """The stored index of a 'choice' field's value: its position among the
  choices after 'auto', 'auto' resolved to the preset's own value."""
  choices = field.choices
  if choices and choices[0] == 'auto':
    choices = choices[1:]
    if value == 'auto':
      value = getattr(algorithm, field.name)
  return choices.index(value)


def check_participation(values, algorithm: Algorithm | None = None,
                        num_workers: int | None = None,
                        where: str = '') -> None:
  """The participation fields together: q and S are not both set, S is at
  most M, and a quantized broadcast (two_laq, which assumes every worker
  received every broadcast) takes every client."""
  get = (values.get if isinstance(values, dict) else
         lambda name: getattr(values, name, None))
  q, s = get('participation'), get('clients_per_round')
  partial = (q is not None and np.any(np.asarray(q) < 1)) or (
      s is not None and np.any(np.asarray(s) > 0))
  if (q is not None and s is not None and np.any(np.asarray(q) < 1)
      and np.any(np.asarray(s) > 0)):
    raise ValueError(f'{where}participation={show(q)} and {where}'
                     f'clients_per_round={show(s)} are not allowed together: '
                     'set one (q < 1, Bernoulli per client) or the other '
                     '(S > 0 clients per round)')
  if num_workers is not None and s is not None and np.any(
      np.asarray(s) > num_workers):
    raise ValueError(f'{where}clients_per_round={show(s)} is not allowed: it '
                     f'must be at most num_workers={num_workers} (or 0)')
  if partial and algorithm is not None and algorithm.downlink:
    raise ValueError(f'{where}algo={show(algorithm.name)} is not allowed with '
                     'partial participation: its quantized broadcast '
                     'assumes every worker received every broadcast; use '
                     'participation=1 and clients_per_round=0, or laq')


def network_overrides(values) -> dict[str, Any]:
  """{Network field: value} of the `network.FIELD` values set (not None)
  in `values` (a dict or a config)."""
  get = (values.get if isinstance(values, dict) else
         lambda name: getattr(values, name, None))
  return {f.network_field: get(f.name) for f in FIELDS
          if f.kind == 'network_field' and get(f.name) is not None}


def make_network(values, algorithm: Algorithm | None = None
                 ) -> network_lib.Network:
  """The Network of `values['network.profile']` (or `values['network']`: a
  profile name or a Network) with the `network.FIELD` overrides, checked against the preset and the
  deadline (`network.check_ring`: a ring needs a preset that can
  all-reduce, and no deadline)."""
  get = (values.get if isinstance(values, dict) else
         lambda name: getattr(values, name, None))
  net = get('network.profile') or get('network') or 'cross_silo'
  overrides = network_overrides(values)
  if isinstance(net, network_lib.Network):
    if overrides:
      raise ValueError(
          f'network.{sorted(overrides)[0]} is not allowed with a Network '
          'value of `network`: give the overrides to laq_jax.make_network')
    if algorithm is not None:
      network_lib.check_topology(net, algorithm, get('deadline_s') or 0.0)
  else:
    if algorithm is not None and net in network_lib.PROFILES:
      network_lib.check_topology(
          overrides.get('topology', network_lib.PROFILES[net]['topology']),
          algorithm, get('deadline_s') or 0.0)
    net = network_lib.make_network(net, **overrides)
  return net


def broadcast_bits(algorithm: Algorithm, bits, requested):
  """The broadcast's bits for `algorithm`: 0 (full precision) unless the
  preset quantizes it, then `requested`, or b when `requested` is 0."""
  if not algorithm.downlink:
    return np.zeros_like(np.asarray(requested))
  return np.where(np.asarray(requested) > 0, requested, bits)


def stack_hypers(hypers: list[Hyper]) -> Hyper:
  """Stacks per-point Hypers into one grid Hyper with a leading G axis.

  A network field that is per worker ([M]) in some points and one number in
  others is broadcast to [M] in all.
  """
  hypers = list(hypers)
  if not hypers:
    raise ValueError('stack_hypers([]) is not allowed: give one Hyper per '
                     'grid point (laq_jax.make_hyper)')
  for i, h in enumerate(hypers):
    if not isinstance(h, Hyper):
      raise ValueError(f'hypers[{i}] is {type(h).__name__}: every grid point '
                       'must be a laq_jax.Hyper (laq_jax.make_hyper)')
    if jnp.ndim(h.step_size):
      raise ValueError(f'hypers[{i}] is already a grid (step_size of shape '
                       f'{jnp.shape(h.step_size)}): stack single-run Hypers')
  networks = [h.network for h in hypers]
  wide = [max((jnp.shape(x) for x in xs), key=len)
          for xs in zip(*networks)]
  networks = [network_lib.Network(*(jnp.broadcast_to(x, shape) for x, shape
                                    in zip(net, wide))) for net in networks]
  hypers = [h._replace(network=n) for h, n in zip(hypers, networks)]
  # A part registered between two make_hyper calls: its defaults in all.
  dtype = jnp.result_type(hypers[0].step_size)
  hypers = [h._replace(params=parts_lib.fill_params(h.params, dtype))
            for h in hypers]
  return jax.tree.map(lambda *xs: jnp.stack(xs), *hypers)
