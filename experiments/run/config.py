"""The config layer: its schema, its validation, and a sweep's grid points.

    validate_config(config)               # every field, before anything loads
    points = points_from_config(config)   # a sweep config's grid points

The schema is `configs/default.py`: its fields are every field a run config
has (FIELDS), with their defaults; a sweep config adds SWEEP_FIELDS. A config
is an `ml_collections.ConfigDict` (or any mapping / attribute object). Errors
name the field, the value given and what is allowed.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

import ml_collections
import numpy as np

from configs import default as default_config
from experiments.run import cli
from laq_jax import clients as clients_lib
from laq_jax import data as data_lib
from laq_jax import parts as parts_lib
from laq_jax import sharding
from laq_jax import sweep as sweep_lib
from laq_jax.hyper import (ALGORITHMS, DEFAULTS, RUN_INTEGERS, SLOTS,
                           Algorithm, check_value, check_participation,
                           compose, get_algorithm, is_integer, is_number,
                           make_network, parse_slot)
from laq_jax.loop import GRID_AXES
from laq_jax import problems as problems_lib
from laq_jax.problems import models as models_lib

FIELDS = tuple(default_config.get_config().keys())
HYPER_FIELDS = tuple(DEFAULTS)  # the run's numeric hyperparameters
PRECISIONS = ('float32', 'float64')
FSTAR_MODES = ('auto', 'none')
MNIST_TRAIN_SIZE = data_lib.kinds.MNIST_TRAIN_SIZE
# A sweep config: config.sweep = {key: [values]}; config.sweep_batch_size:
# grid points per compiled call (0: all at once); optionally
# config.algo_settings = {algo: {key: value}}, values that replace the
# config's for that algorithm's points (e.g. minibatch presets at their own
# step size), still data of the same programs; optionally
# config.sweep_grid_axis: 'auto' (default: 'vmap' on an accelerator and for
# full-batch logistic regression on a CPU, where it is faster; 'map'
# elsewhere), 'map' (each point computes exactly as its run alone) or 'vmap'
# (points batched into wider products, equal to the run alone to rounding
# only), see `laq_jax.RunSpec.grid_axis`.
SWEEP_FIELDS = ('sweep', 'sweep_batch_size')
OPTIONAL_SWEEP_FIELDS = ('algo_settings', 'sweep_grid_axis')


class ConfigError(ValueError):
  """A config field holds a value that is not allowed."""


def get(config, name):
  """config[name] or config.name; a dotted name reads a nested group
  ('network.up_bps': config.network.up_bps), or a flat key of that name."""
  if isinstance(config, Mapping) and name in config:
    return config[name]
  group, dot, rest = name.partition('.')
  if dot:
    return get(get(config, group), rest)
  if isinstance(config, Mapping):
    return config[name]
  return getattr(config, name)


def set_path(values: dict, name: str, value) -> None:
  """values[name] = value, a dotted name into its nested group."""
  group, dot, rest = name.partition('.')
  if dot:
    set_path(values.setdefault(group, {}), rest, value)
  else:
    values[name] = value


def keys(config) -> list[str]:
  """The field names of a ConfigDict, mapping or attribute object."""
  if hasattr(config, 'keys'):
    return list(config.keys())
  return [k for k in vars(config) if not k.startswith('_')]


def to_dict(config) -> dict:
  """The config as a plain dict (what config.json holds)."""
  return config.to_dict() if hasattr(config, 'to_dict') else dict(config)


def bad(name: str, value, allowed: str) -> ConfigError:
  """The error for config.NAME=VALUE, naming what is allowed."""
  from laq_jax.show import lookalikes  # pylint: disable=g-import-not-at-top
  return ConfigError(f'config.{name}={value!r}{lookalikes(value)} is not '
                     f'allowed: it must be {allowed}')


def parse_dataset(dataset: str) -> tuple[str, str]:
  """'mnist' -> ('mnist', ''); 'builtin:NAME' / 'libsvm:PATH' -> (kind, rest);
  any kind registered in `laq_jax.data.REGISTRY`."""
  try:
    return data_lib.kinds.parse(dataset)
  except ValueError as e:
    raise ConfigError(f'config.{e}') from None


def fstar_value(fstar) -> float | None:
  """A number given as config.fstar, or None for 'auto' / 'none'."""
  if isinstance(fstar, str) and fstar in FSTAR_MODES:
    return None
  if isinstance(fstar, str):  # --config.fstar=5.551 arrives as text
    try:
      fstar = float(fstar)
    except ValueError:
      pass
  if not is_number(fstar):
    raise bad('fstar', fstar, "'auto' (solve it, convex models only), "
              "'none', or a finite number")
  return float(fstar)


def algorithm_of(config) -> Algorithm:
  """The preset a run config runs: `algo` with the parts its slot fields
  (compressor, trigger, server, client; '' is the preset's) name, as
  `laq_jax.hyper.compose` ('laq' with server='adam' is 'laq+server=adam').

  Raises:
    ConfigError: a part that is not registered for its slot.
  """
  try:
    return compose(get(config, 'algo'), **{
        slot: get(config, slot) for slot in SLOTS
        if slot in keys(config) and get(config, slot)})
  except ValueError as e:
    raise ConfigError(f'config.{e}') from None


def with_slots_in_algo(config):
  """`config` with its slot fields folded into `algo` ('laq' and
  server='adam' as algo='laq+server=adam', the slots ''), so that what reads
  `config.algo` (results, labels, reports) names the parts it runs; a copy
  where there is something to fold, else `config` itself."""
  if not any(slot in keys(config) and get(config, slot) for slot in SLOTS):
    return config
  name = algorithm_of(config).name
  if not hasattr(config, 'copy_and_resolve_references'):  # a mapping
    return {**config, 'algo': name, **{slot: '' for slot in SLOTS}}
  config = config.copy_and_resolve_references()
  config.algo = name
  for slot in SLOTS:
    config[slot] = ''
  return config


def check_batch_size(algo: str, batch_size: int, shard_size: int) -> None:
  """A minibatch is drawn without replacement from one worker's shard."""
  if get_algorithm(algo).stochastic and batch_size > shard_size:
    raise bad('batch_size', batch_size, f'at most the shard size '
              f'{shard_size} (samples per worker) for algo={algo!r}')


def validate_config(config, *, allow_extra: Iterable[str] = ()) -> None:
  """Checks every field of a run config; nothing is loaded or compiled.

  Args:
    config: the fields of `configs/default.py`.
    allow_extra: names of further fields the caller handles (e.g. a sweep's
      grid); any other unknown field is an error (a typo would be ignored).

  Raises:
    ConfigError: names the first bad field, its value and what is allowed.
  """
  names = set(keys(config))
  modules = get(config, 'modules') if 'modules' in names else ''
  if not isinstance(modules, str):
    raise bad('modules', modules, "module names, comma-separated ('' for "
              'none)')
  try:  # a user's parts and presets register on import: first
    parts_lib.import_modules(modules)
  except ValueError as e:
    raise ConfigError(f'config.{e}') from None
  missing = [f for f in FIELDS if f not in names]
  if missing:
    raise ConfigError(f'config lacks field(s) {", ".join(missing)}; start '
                      'from configs/default.py, which sets every field')
  extra = sorted(names - set(FIELDS) - set(allow_extra))
  if 'sweep' in extra:  # a sweep config handed to a single run's launcher
    raise ConfigError('this is a sweep config (it declares config.sweep, a '
                      'grid of points): run it with python -m '
                      'experiments.sweep --config=... --workdir=...')
  if extra:
    known = FIELDS + tuple(allow_extra)
    raise ConfigError('config: ' + '; '.join(
        cli.unknown(name, known) for name in extra))
  c = {f: get(config, f) for f in FIELDS}
  for group in dict.fromkeys(f.partition('.')[0] for f in HYPER_FIELDS
                             if '.' in f):  # the nested groups: network
    known = [f.partition('.')[2] for f in HYPER_FIELDS
             if f.startswith(group + '.')]
    if isinstance(c[group], (str, int, float, bool)) or c[group] is None:
      raise bad(group, c[group], f'a group of fields ({", ".join(known)}): '
                f'set them one by one, e.g. --config.{group}.{known[0]}=...')
    missing = [k for k in known if k not in keys(c[group])]
    if missing:
      raise ConfigError(
          f'config.{group} lacks field(s) {", ".join(missing)}: set the '
          f"group's fields one by one (e.g. --config.{group}.{missing[0]}"
          '=...), not the whole group')
    extra = [k for k in keys(c[group]) if k not in known]
    if extra:
      raise ConfigError(f'config.{group}: ' + '; '.join(
          cli.unknown(k, known) for k in extra))
    c.update({f: get(config, f) for f in HYPER_FIELDS
              if f.startswith(group + '.')})

  def choice(name, allowed):
    if c[name] not in allowed:
      raise bad(name, c[name], f'one of {", ".join(map(repr, allowed))}')

  def integer(name):  # the run's schema (laq_jax.round.fields)
    field = RUN_INTEGERS[name]
    if not field.ok(c[name]):
      raise bad(name, c[name], field.allowed)

  if isinstance(c['algo'], str) and '+' in c['algo']:  # 'laq+server=adam'
    try:
      get_algorithm(c['algo'])
    except ValueError as e:
      raise ConfigError(f"config.algo={c['algo']!r} is not allowed: {e}"
                        ) from None
  else:
    choice('algo', tuple(ALGORITHMS))
  for slot, module in SLOTS.items():
    if c[slot] != '':
      try:
        parse_slot(slot, c[slot])
      except ValueError:
        raise bad(slot, c[slot], 'one of ' + ', '.join(map(repr, ('',) + tuple(
            module.REGISTRY.names))) + (
                ' (or ef(one of them): error feedback around it; '
                'chain(a,b): b compressing what a sent)'
                if slot == 'compressor' else '')) from None
  algorithm = algorithm_of(c)
  choice('model', problems_lib.REGISTRY.names)
  choice('init', problems_lib.INITS)
  if c['init'] != 'default':
    try:
      problems_lib.check_model_init(c['model'], c['init'])
    except ValueError as e:
      raise bad('init', c['init'], f"'default' for model={c['model']!r} "
                f'({e})') from None
  choice('lstm', models_lib.LSTM_IMPLS)
  if c['lstm'] != 'flax' and c['model'] != 'char_lstm':
    raise bad('lstm', c['lstm'], f"'flax' for model={c['model']!r} (lstm "
              "chooses how model='char_lstm' runs its layers)")
  choice('split', data_lib.SPLITS)
  choice('precision', PRECISIONS)
  choice('workers_on', sharding.WORKERS_ON)
  for name in ('num_workers', 'num_iters', 'memory', 'batch_size', 'hidden',
               'data_seed', 'train_subset', 'eval_every', 'loss_every',
               'checkpoint_every', 'client_batch'):
    integer(name)
  every, chunk = c['checkpoint_every'], c['eval_every']
  if every % chunk:
    near = [n for n in (every // chunk * chunk, (every // chunk + 1) * chunk)
            if n]
    raise bad('checkpoint_every', every, f'0 (off) or a multiple of '
              f'eval_every={chunk}, the chunk length: checkpoints are taken '
              f'between chunks (e.g. {" or ".join(map(str, near))})')
  for name in HYPER_FIELDS:
    try:
      check_value(name, c[name], where=f'config.{name}')
    except ValueError as e:
      raise ConfigError(str(e)) from None
  try:  # a ring needs a preset that can all-reduce, and no deadline
    make_network(c, algorithm)
  except ValueError as e:
    raise ConfigError(f'config.{e}') from None
  try:
    check_participation(c, algorithm, c['num_workers'],
                        where='config.')
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if not isinstance(c['authors_code'], (bool, np.bool_)):
    raise bad('authors_code', c['authors_code'], 'True or False')
  if not (is_number(c['dirichlet_alpha']) and c['dirichlet_alpha'] > 0):
    raise bad('dirichlet_alpha', c['dirichlet_alpha'], 'a finite number > 0')
  if not (is_number(c['target_residual']) and c['target_residual'] > 0):
    raise bad('target_residual', c['target_residual'], 'a finite number > 0')
  if not isinstance(c['data_dir'], str):
    raise bad('data_dir', c['data_dir'], "a path, or '' to search "
              f'${data_lib.DATA_ENV_VAR} and the cache')
  fstar_value(c['fstar'])
  try:
    explicit = sweep_lib.part_values(c)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  if not allow_extra:  # a single run: only its own parts' parameters
    used = sweep_lib.algorithm_parts(algorithm.name)
    for key in explicit:
      if key.split('.')[0] not in used:
        raise bad(f'params.{key}', explicit[key], 'its default: '
                  f"algo={algorithm.name!r} does not use the part "
                  f"{key.split('.')[0]!r} (it uses {', '.join(used)})")
  try:  # a client's parameters together (FedNova's epochs_min..epochs_max)
    clients_lib.check_work({**dict(algorithm.params), **explicit})
  except ValueError as e:
    raise ConfigError(f'config.params: {e}') from None

  kind, rest = parse_dataset(c['dataset'])
  dataset_kind = data_lib.REGISTRY.get(kind)
  if dataset_kind.check is not None:
    problem = dataset_kind.check(rest, c['data_dir'])
    if problem:
      raise bad('dataset', c['dataset'], problem)
  named = {'mnist': ('MNIST', data_lib.DATA_ENV_VAR),
           'fashion_mnist': ('Fashion-MNIST', data_lib.fashion_mnist.ENV_VAR),
           'cifar10': ('CIFAR-10', data_lib.cifar10.ENV_VAR)}
  if kind in named and c['data_dir'] and not (
      os.path.isdir(os.path.expanduser(c['data_dir']))):
    name, env = named[kind]
    raise bad('data_dir', c['data_dir'], 'an existing directory holding '
              f"the {name} files, or '' to search ${env} and the cache")

  subset, workers = c['train_subset'], c['num_workers']
  if not (is_number(c['dirichlet_size_alpha'])
          and c['dirichlet_size_alpha'] > 0):
    raise bad('dirichlet_size_alpha', c['dirichlet_size_alpha'],
              'a finite number > 0')
  if c['split'] in data_lib.UNEQUAL_SPLITS:
    # Clients of unequal sizes: no divisibility rule; a minibatch is
    # min(batch_size, the client's samples).
    if subset and subset < workers or (
        dataset_kind.num_train is not None
        and (subset or dataset_kind.num_train) < workers):
      raise bad('num_workers', workers, 'at most the training samples '
                f"(split={c['split']!r} gives every client at least one)")
  elif (subset or dataset_kind.num_train or workers) < workers:
    # (so that what the next refusal suggests is itself allowed)
    total = subset or dataset_kind.num_train
    raise bad('num_workers', workers, f'at most the {total:,} training '
              'samples ' + (f'(train_subset={subset})' if subset else
                            f'(the {kind} training set)')
              + ': every worker needs its own')
  elif subset and subset % workers:
    raise bad('train_subset', subset, f'0 or a multiple of num_workers='
              f'{workers}, so that every worker gets the same number of '
              f'samples (e.g. {subset // workers * workers})')
  if dataset_kind.num_train is not None:
    if subset > dataset_kind.num_train:
      raise bad('train_subset', subset, f'at most {dataset_kind.num_train} '
                f'(the {kind} training set), or 0 for all of it')
    num_train = subset or dataset_kind.num_train
    if c['split'] not in data_lib.UNEQUAL_SPLITS:
      if num_train % workers:
        raise bad('num_workers', workers, f'a divisor of the {num_train} '
                  'training samples, or set train_subset to a multiple of '
                  'it')
      check_batch_size(algorithm.name, c['batch_size'], num_train // workers)
  if c['workers_on'] == 'devices':
    import jax  # pylint: disable=g-import-not-at-top
    try:
      sharding.check_layout(workers, jax.device_count())
    except ValueError as e:
      raise ConfigError(f'config.num_workers / config.workers_on: {e}'
                        ) from None


# ----------------------------------------------------------------------------
# Sweep configs: a run config plus the grid.

def point_config(config, point: Mapping[str, Any]
                 ) -> ml_collections.ConfigDict:
  """The run config of one grid point: `config` without the sweep fields,
  with the point's algo and hyperparameters (what `experiments.run.train` runs).
  """
  values = to_dict(config)
  for name in SWEEP_FIELDS + OPTIONAL_SWEEP_FIELDS:
    values.pop(name, None)
  for key in sweep_lib.GRID_KEYS:
    set_path(values, key, point[key])
  for slot in SLOTS:  # (the point's algo names them: expand_grid)
    if slot in values:
      values[slot] = ''
  params = parts_lib.default_groups()
  for key, value in point.items():
    if '.' in key and key not in sweep_lib.GRID_KEYS:  # a part's parameter
      part, name = key.split('.')
      params[part][name] = value
  values['params'] = params
  return ml_collections.ConfigDict(values)


def partial_participation(values) -> bool:
  """Whether a config or grid point may leave clients out of a round
  (q < 1, S > 0, or a deadline): its program compiles participation in."""
  return (get(values, 'participation') < 1
          or get(values, 'clients_per_round') > 0
          or get(values, 'deadline_s') > 0)


def grid_axis(config) -> str:
  """config.sweep_grid_axis, 'auto' when the config has none."""
  return (get(config, 'sweep_grid_axis')
          if 'sweep_grid_axis' in keys(config) else 'auto')


def points_from_config(config) -> list[dict[str, Any]]:
  """Checks a sweep config and returns its grid points.

  Args:
    config: the fields of `configs/default.py` (the values of every key the
      grid does not vary) plus `sweep` ({key: [values]}, keys from
      `laq_jax.sweep.GRID_KEYS`) and `sweep_batch_size` (integer >= 0).

  Returns:
    The points, as `laq_jax.sweep.expand_grid`.

  Raises:
    ConfigError: a field is missing or not allowed (named, with its value and
      what is allowed).
  """
  for name in SWEEP_FIELDS:
    if name not in keys(config):
      raise ConfigError(
          f'config lacks field {name!r}: a sweep config declares the grid as '
          "config.sweep = {'bits': [2, 4], 'xi': [0.4, 0.8], ...} and "
          'config.sweep_batch_size (0: every point in one program); see '
          'configs/sweep_bits_xi.py')
  validate_config(config, allow_extra=SWEEP_FIELDS + OPTIONAL_SWEEP_FIELDS)
  size = get(config, 'sweep_batch_size')
  if not is_integer(size) or size < 0:
    raise bad('sweep_batch_size', size, 'an integer >= 0 (0 runs every grid '
              'point in one program)')
  axis = grid_axis(config)
  if axis not in GRID_AXES:
    raise bad('sweep_grid_axis', axis, ' or '.join(map(repr, GRID_AXES)))
  grid = get(config, 'sweep')
  grid = grid.to_dict() if hasattr(grid, 'to_dict') else grid
  if hasattr(grid, 'keys'):
    grid = sweep_lib.flatten(grid)  # nested groups: {'clag': {'zeta': ...}}
  try:
    points = sweep_lib.expand_grid(grid, config)
  except ValueError as e:
    raise ConfigError(f'config.{e}' if str(e).startswith('sweep')
                      else str(e)) from None
  settings = (get(config, 'algo_settings')
              if 'algo_settings' in keys(config) else {})
  settings = settings.to_dict() if hasattr(settings, 'to_dict') else settings
  points = apply_algo_settings(points, settings, varied=set(grid))
  # Every point as a single run's config (a minibatch must fit a shard,
  # clients_per_round at most the workers, ...): a grid value is checked as
  # the same value given alone would be.
  seen = set()
  for point in points:
    key = json.dumps(point, sort_keys=True, default=str)
    if key not in seen:
      seen.add(key)
      validate_config(point_config(config, point))
  return points


def apply_algo_settings(points: list[dict[str, Any]],
                        settings: Mapping[str, Mapping[str, Any]],
                        varied=frozenset()) -> list[dict[str, Any]]:
  """The points with each algorithm's settings applied (see SWEEP_FIELDS).

  Raises:
    ConfigError: an unknown algorithm or key, a key the grid varies, or a
      value that is not allowed (named, with what is allowed).
  """
  if not isinstance(settings, Mapping):
    raise bad('algo_settings', settings, 'a mapping {algo: {key: value}}')
  keys_allowed = [k for k in sweep_lib.grid_keys() if k != 'algo']
  settings = {algo: (sweep_lib.flatten(values) if hasattr(values, 'keys')
                    else values) for algo, values in settings.items()}
  for algo, values in settings.items():
    try:
      get_algorithm(algo)
    except (ValueError, TypeError):
      raise bad('algo_settings', algo, 'keyed by algorithms: one of '
                f'{", ".join(ALGORITHMS)} (or a composed one: '
                "'laq+server=adam')") from None
    for key, value in values.items():
      where = f'config.algo_settings.{algo}.{key}'
      if key not in keys_allowed:
        raise ConfigError(f'{where} is not allowed: keys are '
                          f'{", ".join(keys_allowed)}')
      if key in varied:
        raise ConfigError(f'{where} is not allowed: the grid (config.sweep) '
                          f'varies {key}')
      try:
        sweep_lib.check_value(key, value, where=where)
      except ValueError as e:
        raise ConfigError(str(e)) from None
  return [{**p, **settings.get(p['algo'], {})} for p in points]


__all__ = ['ConfigError', 'FIELDS', 'HYPER_FIELDS', 'PRECISIONS',
           'SWEEP_FIELDS', 'bad', 'check_batch_size', 'fstar_value', 'get',
           'keys', 'parse_dataset', 'point_config', 'points_from_config',
           'to_dict', 'validate_config']
