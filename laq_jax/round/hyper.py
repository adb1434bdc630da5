"""Hyperparameters as data (`Hyper`, `make_hyper`), with the fields they are
made of (`laq_jax.fields`) and the algorithm presets (`laq_jax.presets`),
whose names this module serves too.

Every number a sweep may vary lives in `Hyper` as an array, so a new value never
recompiles and a grid of values is a batch of Hypers (leading axis G). That
includes the choices that make one algorithm another: which compressor, whether
it compresses the gradient or the innovation, whether workers may skip. Only
shapes (worker count M, history length D, chunk length T, batch size, model,
full-batch or minibatch gradients) are static.
"""

from __future__ import annotations

import collections
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import network as network_lib
from laq_jax import parts as parts_lib
from laq_jax import show as show_lib
from laq_jax.parts import broadcasts
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import compressors
from laq_jax.parts import estimators
from laq_jax.parts import privatizers
from laq_jax.parts import servers as servers_lib
from laq_jax.parts import triggers as trigger_lib
from laq_jax.round import schedule
from laq_jax.show import show
# The fields and the presets, served here as they always were.
from laq_jax.parts.presets import (  # pylint: disable=unused-import
    ALGORITHMS, SLOTS, Algorithm, compose, get_algorithm, parse_slot,
    register_algorithm, slot_value)
from laq_jax.round.fields import (  # pylint: disable=unused-import
    ARRAYS, CONFIG_FIELDS, DEFAULTS, FIELD, FIELDS, FLOAT_ARRAYS, FLOAT_FIELDS,
    INT_FIELDS, MAX_MEMORY, NETWORK_FIELDS, RUN_INTEGERS, SCHEDULE_FIELDS,
    Field, RunInteger, check_run_integer, check_value, hyper_keys, is_integer,
    is_number, validate)


class Hyper(collections.namedtuple('Hyper', ARRAYS)):
  """Hyperparameters of one run (scalars) or of a grid (leading G axis).

  One array per field of FIELDS (a schedule gives two: its steps, int32
  [schedule.SLOTS], unused slots at schedule.NEVER, and its factors, not
  cumulative, 1 before the first step). `describe()` lists them with their
  docs; in short: step_size alpha (applied to the *sum* of the worker
  gradients), bits b, xi (xi_d = xi / D), err_weight c_e, threshold_offset
  c_0, max_staleness tbar, l2 lam, seed, downlink_bits, xi_steps / xi_factors, the
  preset's compressor, estimator, trigger, broadcast, error_feedback and
  authors_code, and `network`, the `laq_jax.Network` the rounds are timed
  on (float64 where x64 is on, whatever the run's precision).
  """
  __slots__ = ()

  @property
  def lazy(self):
    """Whether workers may skip an upload (bool)."""
    return self.trigger != trigger_lib.index('eager')

  @property
  def innovation(self):
    """Whether the worker compresses g - Qhat, the innovation (bool)."""
    return self.estimator == estimators.index('innovation')

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


def make_hyper(algo: str | Algorithm = 'laq', *, dtype=jnp.float32,
               authors_code: bool = False, **overrides) -> Hyper:
  """Builds a `Hyper` for one run from a preset name plus overrides.

  Args:
    algo: one of ALGORITHMS (or an Algorithm); sets compressor, estimator,
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
  given = {**dict(algorithm.params), **dotted}
  params = parts_lib.param_arrays(given, dtype)
  clients_lib.check_work(given)  # (FedNova's E_min..E_max together)
  values = {**DEFAULTS, **dict(algorithm.settings), **overrides}
  validate(**values)
  values['server_lr'] = server_lr(algorithm, values['server_lr'])
  check_participation(values, algorithm)
  privatizers.check(algorithm, values)
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
      compressor_b=jnp.asarray(compressors.index(algorithm.compressor_b),
                               jnp.int32),
      estimator=jnp.asarray(estimators.index(algorithm.estimator), jnp.int32),
      broadcast=jnp.asarray(broadcasts.index(algorithm.broadcast), jnp.int32),
      trigger=jnp.asarray(trigger_lib.index(algorithm.trigger), jnp.int32),
      error_feedback=jnp.asarray(algorithm.error_feedback, bool),
      warm_start=jnp.asarray(algorithm.warm_start, bool),
      authors_code=jnp.asarray(authors_code, bool),
      server=jnp.asarray(servers_lib.index(algorithm.server), jnp.int32),
      client=jnp.asarray(clients_lib.index(algorithm.client), jnp.int32),
      privacy=jnp.asarray(privatizers.index(algorithm.privacy), jnp.int32),
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
  absent = get('absent') or (algorithm.absent if algorithm else None)
  weighting = get('weighting')
  if (algorithm is not None and algorithm.client == 'fednova'
      and weighting == 'sum'):
    raise ValueError(f"{where}weighting='sum' is not allowed with "
                     f'algo={show(algorithm.name)}: its step is tau_eff times '
                     "a weighted mean; use weighting='uniform' or 'samples'")
  if (partial and algorithm is not None and algorithm.client == 'fednova'
      and absent == 'stale'):
    raise ValueError(f'{where}absent={show(absent)} is not allowed with '
                     f'algo={show(algorithm.name)} and partial participation: '
                     'its tau_eff is over the round\'s participants; use '
                     "absent='drop'")
  deadline = get('deadline_s')
  if (algorithm is not None and algorithm.client == 'scaffnew'
      and (partial or (deadline is not None
                       and np.any(np.asarray(deadline) > 0)))):
    raise ValueError(f'{where}algo={show(algorithm.name)} is not allowed with '
                     'partial participation or a deadline: its consensus '
                     'step needs every client (the sum of the h_m stays 0); '
                     'use participation=1, clients_per_round=0 and '
                     'deadline_s=0')
  if partial and algorithm is not None and algorithm.estimator == 'marina':
    raise ValueError(f'{where}algo={show(algorithm.name)} is not allowed with '
                     'partial participation: its full-gradient rounds (the '
                     'coin) need every worker; use participation=1 and '
                     'clients_per_round=0')


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
