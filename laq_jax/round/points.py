"""A sweep's grid: declaration -> checked points -> the grid Hyper.

    points = expand_grid({'bits': [2, 4], 'xi': [0.4, 0.8]}, base=values)
    hyper_G = stack_points(points)

A grid point is a dict of the run's numeric hyperparameters (every field of
`hyper.DEFAULTS`) plus its algorithm. `laq_jax.sweep.run_sweep` runs them.
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from laq_jax import parts as parts_lib
from laq_jax import show as show_lib
from laq_jax.parts import broadcasts as broadcasts_lib
from laq_jax.parts import privatizers
from laq_jax.parts import clients as clients_lib
from laq_jax.parts import compressors
from laq_jax.parts import estimators as estimators_lib
from laq_jax.parts import servers as servers_lib
from laq_jax.parts import triggers as trigger_lib
from laq_jax.parts.presets import parse_slot
from laq_jax.round.hyper import (ALGORITHMS, DEFAULTS, SLOTS, Hyper,
                                 check_value as check_field, compose,
                                 get_algorithm, make_hyper, make_network,
                                 stack_hypers)

HYPER_KEYS = tuple(DEFAULTS)  # step_size, bits, xi, ..., seed
# Every built-in key a grid may vary, in the order points are enumerated (the
# first key varies slowest, the last fastest), whatever order the grid lists
# them; then the parts' own parameters, dotted ('momentum.momentum').
GRID_KEYS = ('algo',) + HYPER_KEYS


def grid_keys() -> tuple[str, ...]:
  """Every key a grid may vary now: GRID_KEYS, then every registered part's
  parameters, dotted."""
  return GRID_KEYS + parts_lib.param_keys()


def algorithm_parts(algo: str) -> tuple[str, ...]:
  """The names of the parts a preset uses (compressor, trigger, server,
  client, estimator, broadcast, second compressor, privacy), then the parts whose
  parameters they read (`Part.reads`: EF21-BC's `top_k_down`)."""
  a = get_algorithm(algo)
  slots = (a.compressor, a.trigger, a.server, a.client, a.estimator,
           a.broadcast, a.compressor_b, a.privacy)
  kinds = ('compressor', 'trigger', 'server', 'client', 'estimator',
           'broadcast', 'compressor', 'privacy')
  registries = parts_lib.registries()
  read = tuple(r for kind, name in zip(kinds, slots)
               if name in registries[kind]
               for r in registries[kind].get(name).reads)
  return slots + read


def flatten(grid: Mapping[str, Any]) -> dict[str, Any]:
  """{'clag': {'zeta': [1, 5]}, 'network': {'up_bps': [...]}} as
  {'clag.zeta': [1, 5], 'network.up_bps': [...]}: a nested group (a
  mapping or ConfigDict value) as dotted keys, as a config must write them
  (ConfigDict keys hold no dots)."""
  out = {}
  for key in list(grid.keys()):
    value = grid[key]
    if isinstance(value, Mapping) or hasattr(value, 'to_dict'):
      value = value.to_dict() if hasattr(value, 'to_dict') else value
      for sub, v in flatten(value).items():
        out[f'{key}.{sub}'] = v
    else:
      out[key] = value
  return out


def check_grid(grid: Mapping[str, Sequence[Any]]) -> dict[str, list]:
  """Checks a grid declaration; returns it as {key: list of values}.

  Args:
    grid: {key: non-empty list of values}, keys from `grid_keys()`; a
      nested group stands for dotted keys ({'clag': {'zeta': [1, 5]}} is
      {'clag.zeta': [1, 5]}, `flatten`).

  Returns:
    The axes in `grid_keys()` order.

  Raises:
    ValueError: an unknown key (named, with the closest allowed), an empty
      or non-list axis, a repeated value, or a value that is not allowed.
  """
  # (a preset's slots, right after algo: `expand_grid` composes them in)
  allowed = ('algo',) + tuple(SLOTS) + grid_keys()[1:]
  if not isinstance(grid, Mapping) and not hasattr(grid, 'keys'):
    raise ValueError(f'sweep grid={grid!r} is not allowed: it must be a '
                     'mapping {key: [values]} with keys from '
                     f'{", ".join(allowed)}')
  grid = flatten(grid)
  keys = list(grid.keys())
  unknown = [k for k in keys if k not in allowed]
  if unknown:
    raise ValueError('sweep: ' + '; '.join(
        show_lib.unknown(k, allowed, 'sweep key') for k in unknown))
  axes = {}
  for key in allowed:
    if key not in keys:
      continue
    values = grid[key]
    if isinstance(values, (str, bytes)) or not isinstance(
        values, (list, tuple, np.ndarray)) or len(values) == 0:
      raise ValueError(f'sweep[{key!r}]={values!r} is not allowed: it must '
                       'be a non-empty list of values')
    values = [v.item() if isinstance(v, np.generic) else v for v in values]
    for value in values:
      check_value(key, value, where=f'sweep[{key!r}]')
    if len(set(values)) != len(values):
      raise ValueError(f'sweep[{key!r}]={values!r} repeats a value; list '
                       'each value once')
    axes[key] = values
  return axes


def check_value(key: str, value, where: str | None = None) -> None:
  """Raises ValueError unless `value` is allowed for grid key `key`."""
  where = where or key
  if key in SLOTS:
    try:
      parse_slot(key, value)
    except ValueError as e:
      raise ValueError(f'{where} value {value!r} is not allowed: '
                       f'{str(e).partition(": ")[2]}') from None
    return
  if key == 'algo':
    try:
      get_algorithm(value)
    except ValueError as e:
      if isinstance(value, str) and '+' in value:  # a composed preset
        raise ValueError(f'{where} value {value!r} is not allowed: {e}'
                         ) from None
      raise ValueError(f'{where} value {value!r} is not allowed: use one of '
                       f'{", ".join(ALGORITHMS)}') from None
    return
  check_field(key, value, where)


def _get(base, key, default=None):
  """base[key] (a flat mapping), or a nested group's ('network.up_bps':
  base.network.up_bps), else `default`."""
  if isinstance(base, Mapping) and key in base:
    return base[key]
  group, dot, rest = key.partition('.')
  if dot:
    inner = _get(base, group)
    return default if inner is None else _get(inner, rest, default)
  if isinstance(base, Mapping):
    return base.get(key, default)
  return getattr(base, key, default)


_MISSING = object()


def _base_value(base, key):
  value = _get(base, key, _MISSING)
  if value is _MISSING:
    raise ValueError(f'config lacks field {key!r} (the base of the sweep)')
  return value


def part_values(base) -> dict[str, Any]:
  """The dotted part parameters `base` sets: the values of `base['params']`,
  a mapping {part: {param: value}} (a config's `params` group, every part at
  its defaults unless changed), that differ from the part's default; every
  value is checked."""
  params = _get(base, 'params') or {}
  params = params.to_dict() if hasattr(params, 'to_dict') else params
  out = {}
  for part, group in dict(params).items():
    group = group.to_dict() if hasattr(group, 'to_dict') else group
    if not isinstance(group, Mapping):
      raise ValueError(f'params.{part}={group!r} is not allowed: it must be a '
                       'mapping {param: value}')
    for name, value in group.items():
      key = f'{part}.{name}'
      check_value(key, value, where=f'config.params.{part}.{name}')
      if value != parts_lib.split_key(key)[1].default:
        out[key] = value
  return out


def _same(a, b) -> bool:
  try:
    return bool(a == b)
  except (TypeError, ValueError):
    return False


def expand_grid(grid: Mapping[str, Sequence[Any]], base: Any
                ) -> list[dict[str, Any]]:
  """The product of the grid's axes over the values of `base`, each part's
  parameters varied only for the points whose preset uses that part.

  Args:
    grid: {key: [values]} (see `check_grid`); {} gives the single base point.
      A slot of the presets (`hyper.SLOTS`: {'server': ['sgd', 'adam']})
      composes each preset with each of its parts ('laq+server=adam',
      `hyper.compose`), as an `algo` axis would list them.
    base: a run config (ConfigDict, mapping or attribute object) holding
      `algo` and every Hyper field (step_size, bits, ..., seed): the values of
      the keys the grid does not vary; its optional `params` group
      ({part: {param: value}}) sets parts' own parameters.

  Returns:
    One dict per point: every key of GRID_KEYS (a field the base leaves at
    its library default takes the preset's `settings` value where it has
    one: FedAvg's server step 1), then the dotted parameters
    of the parts the sweep's presets use (their value from the grid, else
    `base`'s params, else the preset's, else the part's default), the last
    grid key varying fastest. A key of a part a point does not use holds
    that part's default there (a built-in field one part alone reads, its
    base value), and points made equal by that are listed once.

  Raises:
    ValueError: as `check_grid`; a grid key of a part no point uses.
  """
  axes = check_grid(grid)
  fixed = {}
  for key in GRID_KEYS:
    if key in axes:
      continue
    value = _base_value(base, key)
    check_value(key, value, where=f'config.{key}')
    fixed[key] = value
  slots = {k: axes.pop(k) for k in list(axes) if k in SLOTS}
  for slot in SLOTS:  # a base's slot field ('': the preset's part)
    value = _get(base, slot, '')
    if slot not in slots and isinstance(value, str) and value:
      check_value(slot, value, where=f'config.{slot}')
      slots[slot] = [value]
  if slots:  # each preset with each combination of the slots' parts
    algos = axes.pop('algo') if 'algo' in axes else [fixed.pop('algo')]
    axes = {'algo': list(dict.fromkeys(
        compose(a, **dict(zip(slots, combo))).name for a in algos
        for combo in itertools.product(*slots.values()))), **axes}
  explicit = part_values(base)
  algos = axes.get('algo', [fixed.get('algo')])
  used = {name for algo in algos for name in algorithm_parts(algo)}
  dotted = [k for k in parts_lib.param_keys() if k.split('.')[0] in used]
  for key in axes:
    if '.' in key and key not in GRID_KEYS and key not in dotted:
      raise ValueError(f'sweep[{key!r}] is not allowed: no point of the sweep '
                       f'uses the part {key.split(".")[0]!r} (its presets: '
                       f'{", ".join(map(str, algos))})')
  for key in explicit:
    if key.split('.')[0] not in used:
      raise ValueError(f'config.params.{key} is not allowed: no point of the '
                       f'run uses the part {key.split(".")[0]!r}')
  keys = GRID_KEYS + tuple(dotted)
  points, seen = [], set()
  for combo in itertools.product(*axes.values()):
    point = {**fixed, **dict(zip(axes, combo))}
    algorithm = get_algorithm(point['algo'])
    # The preset's settings (its paper's server step, ...) where the base
    # leaves a field at the library's default, as its parts' parameters.
    for key, value in algorithm.settings:
      if key not in axes and _same(fixed[key], DEFAULTS[key]):
        point[key] = value
    own = set(algorithm_parts(point['algo']))
    preset = dict(algorithm.params)
    for key in dotted:
      part, name = key.split('.')
      default = explicit.get(key, preset.get(
          key, parts_lib.find(part).param(name).default))
      if key not in axes or part not in own:
        point[key] = default if part in own else parts_lib.find(
            part).param(name).default
    point = {k: point[k] for k in keys}
    frozen = repr(tuple(point.items()))  # values may be unhashable (lists)
    if frozen not in seen:
      seen.add(frozen)
      points.append(point)
  return points


def programs(points: Sequence[Mapping[str, Any]]
             ) -> list[tuple[bool, list[int]]]:
  """The compiled programs a sweep needs: one per kind of gradient.

  Full-batch and minibatch gradients are different programs (the gradient
  is static); every other choice is data in one program.

  Returns:
    [(stochastic, indices of its points)], in the order the kinds first
    appear.
  """
  if not points:
    raise ValueError('a sweep needs at least one grid point')
  groups: dict[bool, list[int]] = {}
  for i, p in enumerate(points):
    groups.setdefault(get_algorithm(p['algo']).stochastic, []).append(i)
  return list(groups.items())


def needs_upload_memory(point: Mapping[str, Any], algorithm=None) -> bool:
  """Whether a point reads the server's copy of the workers' last uploads
  (`RunSpec.upload_memory`): every one but those with the eager trigger,
  the direct estimator, `absent` drop and a weighted mean (FedAvg and its
  family: the step is the round's uploads' weighted mean). `algorithm`: the
  point's Algorithm where a config composed its own (default: its preset's).
  """
  a = algorithm or get_algorithm(point['algo'])
  absent = point.get('absent', 'auto')
  weighting = point.get('weighting', 'auto')
  return not (a.trigger == 'eager' and a.estimator == 'direct'
              and (a.absent if absent == 'auto' else absent) == 'drop'
              and (a.weighting if weighting == 'auto' else weighting)
              != 'sum')


def needs_stragglers(point: Mapping[str, Any]) -> bool:
  """Whether a point's network has a straggler model (`RunSpec.stragglers`):
  its profile's, or its `network.straggler`, other than 'none'."""
  network = make_network(dict(point))
  return bool(np.any(np.asarray(network.straggler) != 0))


def parts_of(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """The RunSpec parts the points need (what a program compiles in):
  compressors, triggers, servers, error_feedback, warm_start, downlink,
  clients, estimators, broadcasts, compressors_b, privacy, weighting,
  participation, upload_memory, stragglers."""
  algos = [get_algorithm(p['algo']) for p in points]
  return dict(
      upload_memory=any(map(needs_upload_memory, points)),
      stragglers=any(map(needs_stragglers, points)),
      compressors=compressors.check_names({a.compressor for a in algos}),
      triggers=trigger_lib.REGISTRY.check_names({a.trigger for a in algos}),
      servers=servers_lib.REGISTRY.check_names({a.server for a in algos}),
      error_feedback=any(a.error_feedback for a in algos),
      warm_start=any(a.warm_start for a in algos),
      downlink=any(a.downlink for a in algos),
      clients=clients_lib.REGISTRY.check_names({a.client for a in algos}),
      estimators=estimators_lib.check_names({a.estimator for a in algos}),
      broadcasts=broadcasts_lib.check_names({a.broadcast for a in algos}),
      compressors_b=compressors.check_names({a.compressor_b for a in algos}),
      privacy=privatizers.check_names({a.privacy for a in algos}),
      weighting=any(
          (a.weighting if p.get('weighting', 'auto') == 'auto'
           else p['weighting']) != 'sum' for a, p in zip(algos, points)),
      participation=any(p.get('participation', 1) < 1
                        or p.get('clients_per_round', 0) > 0
                        or p.get('deadline_s', 0) > 0 for p in points))


def varying_keys(points: Sequence[Mapping[str, Any]]) -> list[str]:
  """The keys (GRID_KEYS, then dotted part parameters) whose value differs
  between points."""
  keys = GRID_KEYS + tuple(k for k in points[0]
                           if '.' in k and k not in GRID_KEYS)
  return [k for k in keys if len({p[k] for p in points}) > 1]


def point_label(point: Mapping[str, Any], keys: Sequence[str]) -> str:
  """'algo=laq bits=4' from the given keys (for legends and logs)."""
  return ' '.join(f'{k}={point[k]:g}' if isinstance(point[k], float)
                  else f'{k}={point[k]}' for k in keys)


def stack_points(points: Sequence[Mapping[str, Any]], dtype=jnp.float32,
                 authors_code: bool = False) -> Hyper:
  """The grid Hyper [G] of the points (compressor, estimator, trigger,
  error feedback and the broadcast's bits from each point's algo)."""
  return stack_hypers([
      make_hyper(p['algo'], dtype=dtype, authors_code=authors_code,
                 **{k: v for k, v in p.items() if k != 'algo'})
      for p in points])


def batches(num_points: int, batch_size: int | None
            ) -> list[tuple[list[int], list[int]]]:
  """Splits range(num_points) into equal batches, the last one padded.

  Returns:
    [(real point indices, padded indices of length batch_size)]: the padding
    repeats the batch's last point.
  """
  if num_points < 1:
    raise ValueError('a sweep needs at least one grid point')
  size = num_points if not batch_size else min(batch_size, num_points)
  if size < 1:
    raise ValueError(f'batch_size={batch_size} is not allowed: it must be an '
                     'integer >= 1, or None / 0 for all points at once')
  out = []
  for start in range(0, num_points, size):
    real = list(range(start, min(start + size, num_points)))
    out.append((real, real + [real[-1]] * (size - len(real))))
  return out


