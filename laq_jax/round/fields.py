"""The fields of `laq_jax.Hyper`, each declared once: its name, kind,
default, check and doc (`laq_jax.hyper` builds Hyper from them; the config's
numeric part and every check of a value derive from FIELDS). ::

    fields.check_value('bits', 40)   # ValueError: bits=40 is not allowed...
    fields.DEFAULTS['step_size']     # 0.02

Its names are `laq_jax.hyper`'s too, where they are documented.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from laq_jax import network as network_lib
from laq_jax import parts as parts_lib
from laq_jax import show as show_lib
from laq_jax.round import participation as participation_lib
from laq_jax.round import schedule
from laq_jax.show import show

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
    _f('compressor_b', 'preset', None, None, '',
       'index into `compressors.COMPRESSORS`: the second compressor an '
       'estimator may call (`estimators.Inputs.compress_b`)', 'int32'),
    _f('estimator', 'preset', None, None, '',
       'index into `estimators.ESTIMATORS` (direct: compress g; '
       'innovation: g - Qhat)', 'int32'),
    _f('broadcast', 'preset', None, None, '',
       'index into `broadcasts.BROADCASTS` (full: theta; quantized: LAQ\'s '
       'quantizer on its change)', 'int32'),
    _f('trigger', 'preset', None, None, '', 'index into `trigger.TRIGGERS`',
       'int32'),
    _f('error_feedback', 'preset', None, None, '',
       'add the worker\'s error memory before compressing', 'bool'),
    _f('warm_start', 'preset', None, None, '',
       'a worker\'s first upload is its gradient uncompressed (32 p bits, '
       'counted): the 3PC family\'s and MARINA\'s start', 'bool'),
    _f('authors_code', 'preset', None, None, '',
       'follow the authors\' released scripts where they depart from '
       'Algorithm 1 (docs/algorithm.md)', 'bool'),
    _f('server', 'preset', None, None, '', 'index into `servers.SERVERS`',
       'int32'),
    _f('client', 'preset', None, None, '', 'index into `clients.CLIENTS`',
       'int32'),
    _f('privacy', 'preset', None, None, '',
       'index into `privatizers.PRIVACY` (off; dp_central, dp_distributed, '
       'dp_local: differential privacy\'s clipping and noise)', 'int32'),
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

# The run's integer fields (RunSpec's, the config's): one schema, read by
# `laq_jax.RunSpec` and by experiments/run/config.py's `validate_config`
# (its messages say config.NAME=VALUE, RunSpec's NAME=VALUE; the words after
# "it must be" are `RunInteger.allowed` for both).
# D, LAQ's history length (the paper's 10): D floats in every program, and a
# threshold summing them every step; beyond this a typo, not a setting.
MAX_MEMORY = 100_000
MINIBATCH_LOSS_EVERY = 10  # a minibatch run's loss_every by default


@dataclasses.dataclass(frozen=True)
class RunInteger:
  """One integer field of a run, and what it allows: low..high (high None:
  no bound), `note` said after the range."""
  name: str
  low: int
  high: int | None = None
  note: str = ''

  @property
  def allowed(self) -> str:
    return (f'an integer >= {self.low}'
            + (f' and <= {self.high:,}' if self.high is not None else '')
            + (f' ({self.note})' if self.note else ''))

  def ok(self, value) -> bool:
    return is_integer(value) and self.low <= value and (
        self.high is None or value <= self.high)


RUN_INTEGERS = {f.name: f for f in (
    RunInteger('num_workers', 1),
    RunInteger('num_iters', 1, _INT32_MAX, 'the step counter is int32'),
    RunInteger('memory', 1, MAX_MEMORY, 'D, the history length'),
    RunInteger('batch_size', 1),
    RunInteger('round_size', 0, None, '0: every client computed'),
    RunInteger('client_batch', 0, None, '0: every row at once, vmapped'),
    RunInteger('hidden', 1),
    RunInteger('data_seed', 0),
    RunInteger('train_subset', 0, None, '0 uses every training sample'),
    RunInteger('eval_every', 1, _INT32_MAX),
    RunInteger('loss_every', 0, None, '0: 1 for full-batch runs, '
               f'{MINIBATCH_LOSS_EVERY} for minibatch runs, at least '
               'ceil(M / S) where a round computes S of M clients'),
    RunInteger('checkpoint_every', 0, _INT32_MAX,
               '0 turns checkpoints off'),
)}


def check_run_integer(name: str, value, where: str | None = None) -> None:
  """Raises ValueError unless `value` is allowed for the run's integer field
  `name` (RUN_INTEGERS); `where` names it in the message (default name)."""
  field = RUN_INTEGERS[name]
  if not field.ok(value):
    raise ValueError(f'{where or name}={show(value)} is not allowed: it must '
                     f'be {field.allowed}')


def is_integer(value) -> bool:
  """A Python or NumPy integer (not a bool)."""
  return isinstance(value, (int, np.integer)) and not isinstance(
      value, (bool, np.bool_))


def is_number(value) -> bool:
  """A finite Python or NumPy integer or float (not a bool)."""
  return (is_integer(value) or isinstance(value, (float, np.floating))
          ) and math.isfinite(float(value))


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
  parts_lib.check_number(value, field.kind, field.check, field.allowed,
                         where)


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
