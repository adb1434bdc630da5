"""From a config to everything a run needs: checked fields, data, model, Hyper.

    validate_config(config)        # every field, before anything compiles
    built = build(config)          # data loaded, sharded and cast
    state, trace = laq_jax.run(built.spec, built.data, built.hyper, T,
                               run_chunk_fn=built.run_chunk_fn)

A config is an `ml_collections.ConfigDict` (or any mapping / attribute
object) with the fields of `configs/default.py`. No files are written and
nothing is printed here; `experiments/` does that.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
from typing import Any, Callable, Iterable, Mapping

import jax.numpy as jnp
import numpy as np

from laq_jax import data as data_lib
from laq_jax.hyper import ALGORITHMS, Algorithm, Hyper, get_algorithm, make_hyper
from laq_jax.hyper import validate as validate_hyper
from laq_jax.loop import Data, RunSpec
from laq_jax.problems import PROBLEMS, Problem, get_problem

PRECISIONS = ('float32', 'float64')
WORKERS_ON = ('vmap', 'devices')
FSTAR_MODES = ('auto', 'none')
MNIST_TRAIN_SIZE = 60_000
HYPER_FIELDS = ('step_size', 'bits', 'xi', 'err_weight', 'threshold_offset',
                'max_staleness', 'l2', 'seed', 'levels', 'keep_prob')
FIELDS = (
    'algo', 'num_workers', 'num_iters', 'step_size', 'bits', 'memory', 'xi',
    'err_weight', 'threshold_offset', 'max_staleness', 'l2', 'batch_size',
    'seed', 'split', 'model', 'precision', 'data_dir', 'eval_every',
    'dataset', 'hidden', 'dirichlet_alpha', 'data_seed', 'train_subset',
    'target_residual', 'workers_on', 'checkpoint_every', 'fstar', 'levels',
    'keep_prob', 'authors_code')


class ConfigError(ValueError):
  """A config field holds a value that is not allowed."""


def _get(config, name):
  if isinstance(config, Mapping):
    return config[name]
  return getattr(config, name)


def _keys(config) -> list[str]:
  if hasattr(config, 'keys'):
    return list(config.keys())
  return [k for k in vars(config) if not k.startswith('_')]


def _is_int(v) -> bool:
  return isinstance(v, (int, np.integer)) and not isinstance(v, (bool,
                                                                 np.bool_))


def _is_number(v) -> bool:
  return (_is_int(v) or isinstance(v, (float, np.floating))) and math.isfinite(
      float(v))


def _bad(name: str, value, allowed: str) -> ConfigError:
  return ConfigError(f'config.{name}={value!r} is not allowed: it must be '
                     f'{allowed}')


def parse_dataset(dataset: str) -> tuple[str, str]:
  """'mnist' -> ('mnist', ''); 'builtin:NAME' / 'libsvm:PATH' -> (kind, rest)."""
  if dataset == 'mnist':
    return 'mnist', ''
  kind, sep, rest = str(dataset).partition(':')
  if sep and kind in ('builtin', 'libsvm') and rest:
    return kind, rest
  raise _bad('dataset', dataset, "'mnist', 'builtin:NAME' (NAME in "
             f"{', '.join(data_lib.BUILTIN_DATASETS)}) or 'libsvm:/path/file'")


def fstar_value(fstar) -> float | None:
  """A number given as config.fstar, or None for 'auto' / 'none'."""
  if isinstance(fstar, str) and fstar in FSTAR_MODES:
    return None
  try:
    value = float(fstar)
  except (TypeError, ValueError):
    value = math.nan
  if isinstance(fstar, bool) or not math.isfinite(value):
    raise _bad('fstar', fstar, "'auto' (solve it, convex models only), "
               "'none', or a finite number")
  return value


def validate_config(config, *, allow_extra: Iterable[str] = ()) -> None:
  """Checks every field of a run config; nothing is loaded or compiled.

  Args:
    config: ConfigDict (or mapping) with the fields of `configs/default.py`.
    allow_extra: names of further fields the caller handles (e.g. a sweep's
      grid); any other unknown field is an error (a typo would be ignored).

  Raises:
    ConfigError: names the first bad field, its value and what is allowed.
  """
  names = set(_keys(config))
  missing = [f for f in FIELDS if f not in names]
  if missing:
    raise ConfigError(f'config lacks field(s) {", ".join(missing)}; start '
                      'from configs/default.py, which sets every field')
  extra = sorted(names - set(FIELDS) - set(allow_extra))
  if extra:
    raise ConfigError(f'config has unknown field(s) {", ".join(extra)}; '
                      f'allowed: {", ".join(FIELDS)}')
  c = {f: _get(config, f) for f in FIELDS}

  def choice(name, allowed):
    if c[name] not in allowed:
      raise _bad(name, c[name], f'one of {", ".join(map(repr, allowed))}')

  def integer(name, low, high=None, extra=''):
    v = c[name]
    if not _is_int(v) or v < low or (high is not None and v > high):
      span = f'>= {low}' if high is None else f'in {low}..{high}'
      raise _bad(name, v, f'an integer {span}{extra}')

  choice('algo', tuple(ALGORITHMS))
  choice('model', PROBLEMS)
  choice('split', data_lib.SPLITS)
  choice('precision', PRECISIONS)
  choice('workers_on', WORKERS_ON)
  integer('num_workers', 1)
  integer('num_iters', 1)
  integer('memory', 1, extra=' (D, the history length)')
  integer('batch_size', 1)
  integer('hidden', 1)
  integer('data_seed', 0)
  integer('train_subset', 0, extra=' (0 uses every training sample)')
  integer('eval_every', 1)
  integer('checkpoint_every', 0, extra=' (0 turns checkpoints off)')
  every, chunk = c['checkpoint_every'], c['eval_every']
  if every % chunk:
    near = [n for n in (every // chunk * chunk, (every // chunk + 1) * chunk)
            if n]
    raise _bad('checkpoint_every', every, f'0 (off) or a multiple of '
               f'eval_every={chunk}, the chunk length: checkpoints are taken '
               f'between chunks (e.g. {" or ".join(map(str, near))})')
  for name in ('bits', 'max_staleness', 'seed', 'levels'):
    if not _is_int(c[name]):
      raise _bad(name, c[name], 'an integer')
  if not isinstance(c['authors_code'], (bool, np.bool_)):
    raise _bad('authors_code', c['authors_code'], 'True or False')
  for name in ('step_size', 'xi', 'err_weight', 'threshold_offset', 'l2',
               'keep_prob'):
    if not _is_number(c[name]):
      raise _bad(name, c[name], 'a finite number')
  try:
    validate_hyper(**{f: c[f] for f in HYPER_FIELDS})
  except ValueError as e:
    raise ConfigError(f'config.{e}') from None
  if not (_is_number(c['dirichlet_alpha']) and c['dirichlet_alpha'] > 0):
    raise _bad('dirichlet_alpha', c['dirichlet_alpha'], 'a finite number > 0')
  if not (_is_number(c['target_residual']) and c['target_residual'] > 0):
    raise _bad('target_residual', c['target_residual'], 'a finite number > 0')
  if not isinstance(c['data_dir'], str):
    raise _bad('data_dir', c['data_dir'], "a path, or '' to search "
               f'${data_lib.DATA_ENV_VAR} and the cache')
  fstar_value(c['fstar'])

  kind, rest = parse_dataset(c['dataset'])
  if kind == 'builtin' and rest not in data_lib.BUILTIN_DATASETS:
    raise _bad('dataset', c['dataset'], 'builtin:NAME with NAME one of '
               f'{", ".join(data_lib.BUILTIN_DATASETS)}')
  if kind == 'libsvm' and not pathlib.Path(rest).expanduser().is_file():
    raise _bad('dataset', c['dataset'], 'libsvm:PATH with PATH an existing '
               'LIBSVM file')
  if kind == 'mnist' and c['data_dir'] and not os.path.isdir(
      os.path.expanduser(c['data_dir'])):
    raise _bad('data_dir', c['data_dir'], "an existing directory holding "
               "the MNIST files, or '' to search "
               f'${data_lib.DATA_ENV_VAR} and the cache')

  subset, workers = c['train_subset'], c['num_workers']
  if subset and subset % workers:
    raise _bad('train_subset', subset, f'0 or a multiple of num_workers='
               f'{workers}, so that every worker gets the same number of '
               f'samples (e.g. {max(subset // workers, 1) * workers})')
  if kind == 'mnist':
    if subset > MNIST_TRAIN_SIZE:
      raise _bad('train_subset', subset, f'at most {MNIST_TRAIN_SIZE} (the '
                 'MNIST training set), or 0 for all of it')
    num_train = subset or MNIST_TRAIN_SIZE
    if num_train % workers:
      raise _bad('num_workers', workers, f'a divisor of the {num_train} '
                 'training samples, or set train_subset to a multiple of it')
    check_batch_size(c['algo'], c['batch_size'], num_train // workers)
  if c['workers_on'] == 'devices':
    import jax  # pylint: disable=g-import-not-at-top
    from laq_jax import sharding  # pylint: disable=g-import-not-at-top
    try:
      sharding.check_layout(workers, jax.device_count())
    except ValueError as e:
      raise ConfigError(f'config.num_workers / config.workers_on: {e}'
                        ) from None


def check_batch_size(algo: str, batch_size: int, shard_size: int) -> None:
  """A minibatch is drawn without replacement from one worker's shard."""
  if get_algorithm(algo).stochastic and batch_size > shard_size:
    raise _bad('batch_size', batch_size, f'at most the shard size '
               f'{shard_size} (samples per worker) for algo={algo!r}')


@dataclasses.dataclass(frozen=True)
class Built:
  """Everything a run needs, built from a config.

  Attributes:
    spec: the static RunSpec (model, M, D, stochastic, batch size).
    data: worker shards, cast to `dtype` (placed on the mesh when
      workers_on='devices').
    hyper: the run's Hyper (scalars).
    test_x: evaluation features (NumPy, dtype `dtype`).
    test_y: evaluation labels (NumPy int32).
    dtype: the run's float dtype.
    problem: the model.
    algorithm: the preset of config.algo.
    num_params: P.
    test_set: what test_x is, for reports.
    objective_key: what determines the objective f (for caching f*).
    host_data: the same shards as `data`, readable by this process alone
      (NumPy when `data` is laid over a mesh, which a process of a
      multi-process run cannot read back whole; else `data` itself): for f*,
      the final objective and other whole-data computations.
    run_chunk_fn: None (the vmap path) or the sharded `run_chunk`.
    mesh: the 'workers' mesh when workers_on='devices', else None.
  """
  spec: RunSpec
  data: Data
  hyper: Hyper
  test_x: np.ndarray
  test_y: np.ndarray
  dtype: Any
  problem: Problem
  algorithm: Algorithm
  num_params: int
  test_set: str
  objective_key: dict
  host_data: Data | None = None
  run_chunk_fn: Callable | None = None
  mesh: Any = None


# Bumped whenever the data or the objective are computed differently, so that
# a cached f* of older code is never served. 2: features scaled in the run's
# precision (MNIST bytes / 255 in float64 for float64 runs).
OBJECTIVE_FORMAT = 2


def objective_key(config) -> dict:
  """What determines f (data, its precision, split, lam, M, model): f*'s key."""
  c = {f: _get(config, f) for f in FIELDS}
  key = {'format': OBJECTIVE_FORMAT, 'precision': c['precision'],
         'dataset': c['dataset'], 'train_subset': c['train_subset'],
         'split': c['split'], 'num_workers': c['num_workers'],
         'l2': float(c['l2']), 'model': c['model']}
  if c['split'] in ('iid', 'dirichlet'):
    key['data_seed'] = c['data_seed']
  if c['split'] == 'dirichlet':
    key['dirichlet_alpha'] = float(c['dirichlet_alpha'])
  if c['model'] == 'mlp':
    key['hidden'] = c['hidden']
  kind, rest = parse_dataset(c['dataset'])
  if kind == 'libsvm':
    stat = pathlib.Path(rest).expanduser().stat()
    key['file'] = {'path': str(pathlib.Path(rest).expanduser().resolve()),
                   'size': stat.st_size, 'mtime_ns': stat.st_mtime_ns}
  return key


def _load_libsvm_pair(path: str, dtype):
  """Train from `path`; test from `path.t` (the LIBSVM convention) if present."""
  x, y = data_lib.load_libsvm(path, dtype=dtype)
  test_path = pathlib.Path(f'{path}.t')
  if not test_path.is_file():
    return x, y, x, y, f'the training data (no {test_path.name} beside it)'
  x_test, y_test = data_lib.load_libsvm(test_path, num_features=x.shape[1],
                                        dtype=dtype)
  train_labels = data_lib.libsvm_label_values(path)
  test_labels = data_lib.libsvm_label_values(test_path)[y_test]
  unknown = np.setdiff1d(test_labels, train_labels)
  if unknown.size:
    raise data_lib.DataError(f'{test_path} has labels {unknown.tolist()} '
                             f'that {path} lacks')
  y_test = np.searchsorted(train_labels, test_labels).astype(np.int32)
  return x, y, x_test, y_test, f'{test_path.name} ({len(y_test)} samples)'


def load_dataset(config, dtype=np.float32):
  """(x_train, y_train, x_test, y_test, test description), NumPy `dtype`.

  Features are scaled in `dtype` (MNIST's bytes / 255), never rounded
  through float32 on the way to float64.
  """
  kind, rest = parse_dataset(_get(config, 'dataset'))
  if kind == 'mnist':
    d = data_lib.load_mnist(_get(config, 'data_dir') or None, dtype=dtype)
    return (d['x_train'], d['y_train'], d['x_test'], d['y_test'],
            f'MNIST test set ({len(d["y_test"])} images)')
  if kind == 'builtin':
    x, y = data_lib.load_builtin(rest, dtype=dtype)
    return x, y, x, y, 'the training data (built-in sets have no test split)'
  return _load_libsvm_pair(os.path.expanduser(rest), dtype)


def build(config) -> Built:
  """Validates `config`, loads and shards its data, builds model and Hyper.

  Float64 (config.precision) turns on jax_enable_x64 for the process.

  Args:
    config: fields as in `configs/default.py`.

  Returns:
    A Built.

  Raises:
    ConfigError: a field is not allowed (see `validate_config`).
    laq_jax.data.DataError: the data are missing or corrupt.
  """
  validate_config(config)
  get = lambda name: _get(config, name)
  from laq_jax import set_precision  # pylint: disable=g-import-not-at-top
  set_precision(get('precision'))
  dtype = jnp.float64 if get('precision') == 'float64' else jnp.float32
  x, y, x_test, y_test, test_set = load_dataset(config, np.dtype(dtype))
  workers, subset = get('num_workers'), get('train_subset')
  if subset:
    if subset > len(y):
      raise _bad('train_subset', subset, f'at most {len(y)} (the training '
                 'samples), or 0 for all of them')
    x, y = x[:subset], y[:subset]
  if len(y) % workers:
    raise _bad('train_subset', subset, f'a multiple of num_workers={workers} '
               f'(the data have {len(y)} samples; try '
               f'train_subset={len(y) // workers * workers})')
  check_batch_size(get('algo'), get('batch_size'), len(y) // workers)
  x_MxNxD, y_MxN = data_lib.make_shards(
      x, y, workers, get('split'), seed=get('data_seed'),
      dirichlet_alpha=get('dirichlet_alpha'))
  algorithm = get_algorithm(get('algo'))
  num_classes = int(max(y.max(), y_test.max())) + 1
  problem = get_problem(get('model'), input_dim=x.shape[1],
                        num_classes=num_classes, hidden=get('hidden'))
  spec = RunSpec(problem, workers, memory=get('memory'),
                 stochastic=algorithm.stochastic,
                 batch_size=get('batch_size'),
                 compressors=(algorithm.compressor,))
  hyper = make_hyper(algorithm, dtype=dtype,
                     authors_code=bool(get('authors_code')),
                     **{f: get(f) for f in HYPER_FIELDS})
  np_dtype = np.dtype(dtype)
  run_chunk_fn = mesh = None
  if get('workers_on') == 'devices':
    from laq_jax import sharding  # pylint: disable=g-import-not-at-top
    host_data = Data(x_MxNxD.astype(np_dtype), np.asarray(y_MxN))
    mesh = sharding.make_mesh()
    data = sharding.shard_data(host_data, mesh)
    run_chunk_fn = sharding.make_run_chunk(mesh)
  else:
    data = host_data = Data(jnp.asarray(x_MxNxD.astype(np_dtype)),
                            jnp.asarray(y_MxN))
  return Built(spec=spec, data=data, hyper=hyper,
               test_x=np.asarray(x_test, np_dtype),
               test_y=np.asarray(y_test, np.int32), dtype=dtype,
               problem=problem, algorithm=algorithm,
               num_params=problem.num_params(), test_set=test_set,
               objective_key=objective_key(config), host_data=host_data,
               run_chunk_fn=run_chunk_fn, mesh=mesh)
