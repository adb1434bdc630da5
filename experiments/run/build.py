"""From a config to everything a run needs: data, model, RunSpec, Hyper.

    built = build(config)      # checked, loaded, sharded, cast
    state, trace = laq_jax.run(built.spec, built.data, built.hyper, T,
                               run_chunk_fn=built.run_chunk_fn)

The config-to-run adapter of the launchers (and notebooks run from a clone):
`laq_jax` itself knows no configs. No files are written and nothing is
printed here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from experiments.run import config as config_lib
from laq_jax import data as data_lib
from laq_jax import layouts
from laq_jax import participation
from laq_jax import privatizers
from laq_jax import sharding
from laq_jax import sweep as sweep_lib
from laq_jax.hyper import (DEFAULTS, Algorithm, Hyper,
                           make_hyper)
from laq_jax.loop import Data, RunSpec, fast_layout
from laq_jax.problems import Problem, get_problem


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
  c = {f: config_lib.get(config, f) for f in config_lib.FIELDS}
  key = {'format': OBJECTIVE_FORMAT, 'precision': c['precision'],
         'dataset': c['dataset'], 'train_subset': c['train_subset'],
         'split': c['split'], 'num_workers': c['num_workers'],
         'l2': float(c['l2']), 'model': c['model']}
  if c['split'] in ('iid', 'dirichlet', 'dirichlet_unequal', 'shards'):
    key['data_seed'] = c['data_seed']
  if c['split'] in ('dirichlet', 'dirichlet_unequal'):
    key['dirichlet_alpha'] = float(c['dirichlet_alpha'])
  if c['split'] == 'dirichlet_unequal':
    key['dirichlet_size_alpha'] = float(c['dirichlet_size_alpha'])
  if c['model'] == 'mlp':
    key['hidden'] = c['hidden']
  kind, rest = config_lib.parse_dataset(c['dataset'])
  kind_key = data_lib.REGISTRY.get(kind).key
  if kind_key is not None:
    key.update(kind_key(rest))
  return key


def model_code(built: 'Built') -> str | None:
  """The run's model as XLA sees it (`Problem.fingerprint` at its features),
  what f*'s cache and the checkpoints key on; None for a model whose loss
  cannot be lowered at a batch of two (then only the config keys them)."""
  try:
    return built.problem.fingerprint(int(built.host_data.x_MxNxD.shape[-1]))
  except Exception:  # pylint: disable=broad-except
    return None


def load_dataset(config, dtype=np.float32) -> data_lib.Loaded:
  """The config's dataset through its kind's loader
  (`laq_jax.data.REGISTRY`), NumPy `dtype`.

  Features are scaled in `dtype` (MNIST's bytes / 255), never rounded
  through float32 on the way to float64.
  """
  return data_lib.kinds.load(config_lib.get(config, 'dataset'), dtype=dtype,
                             data_dir=config_lib.get(config, 'data_dir')
                             or None)


def _layout(data: Data, integer_scale: float | None, spec: RunSpec) -> Data:
  """`data` with the layouts of the problem's fast full-batch gradient, the
  one this machine runs fastest (`laq_jax.layouts.choose`: the transposed
  features on a CPU, a timed probe on an accelerator).

  Minibatch runs use them only for the full loss, which reads x alone
  unless the layout is the bfloat16 integers: a transposed copy would be
  memory for nothing.
  """
  if spec.problem.workers_value_and_grad is None:
    return data
  choice = layouts.choose(data, integer_scale)
  if spec.stochastic and choice != 'bf16_split':
    return data
  return fast_layout(data, integer_scale if choice == 'bf16_split' else None)


def build(config, *, validated: bool = False) -> Built:
  """Validates `config` (unless the caller did: `validated`, so a run checks
  its config once), loads and shards its data, builds model and Hyper.

  float64 runs need `jax_enable_x64`, turned on once at startup (the
  launchers do it; nothing here flips it).

  Args:
    config: fields as in `configs/default.py`.

  Returns:
    A Built.

  Raises:
    experiments.run.config.ConfigError: a field is not allowed (see
      `validate_config`).
    laq_jax.data.DataError: the data are missing or corrupt.
  """
  if not validated:
    config_lib.validate_config(config)
  get = lambda name: config_lib.get(config, name)
  dtype = jnp.float64 if get('precision') == 'float64' else jnp.float32
  if dtype == jnp.float64 and not jax.config.jax_enable_x64:
    raise config_lib.ConfigError(
        "config.precision='float64' needs float64 turned on: call "
        "jax.config.update('jax_enable_x64', True) once at startup (the "
        'launchers do); float32 runs stay float32 with it on')
  loaded = load_dataset(config, np.dtype(dtype))
  x, y, x_test, y_test, test_set = loaded[:5]
  owner = loaded.owner_train
  workers, subset = get('num_workers'), get('train_subset')
  if get('split') == 'natural' and subset:
    raise config_lib.bad('train_subset', subset, "0 with split='natural' "
                         '(the clients are the data\'s own; choose them with '
                         'the dataset\'s options)')
  if subset:
    if subset > len(y):
      raise config_lib.bad('train_subset', subset, f'at most {len(y)} (the '
                           'training samples), or 0 for all of them')
    x, y = x[:subset], y[:subset]
  unequal = get('split') in data_lib.UNEQUAL_SPLITS
  if unequal:
    if len(y) < workers:
      raise config_lib.bad('num_workers', workers, f'at most the {len(y)} '
                           'training samples (every client holds one)')
  else:
    if len(y) % workers:
      raise config_lib.bad('train_subset', subset, f'a multiple of num_workers={workers} '
                 f'(the data have {len(y)} samples; try '
                 f'train_subset={len(y) // workers * workers})')
    config_lib.check_batch_size(config_lib.algorithm_of(config).name,
                                get('batch_size'), len(y) // workers)
  x_MxNxD, y_MxN, count_M = data_lib.split_clients(
      x, y, workers, get('split'), seed=get('data_seed'),
      dirichlet_alpha=get('dirichlet_alpha'),
      size_alpha=get('dirichlet_size_alpha'), owner=owner)
  algorithm = config_lib.algorithm_of(config)  # (its slot fields composed)
  num_classes = loaded.num_classes or int(max(y.max(), y_test.max())) + 1
  try:
    problem = get_problem(get('model'), input_dim=x.shape[1],
                          num_classes=num_classes, hidden=get('hidden'),
                          init=get('init'), lstm=get('lstm'))
  except ValueError as e:  # a model that does not fit the data
    raise config_lib.bad('model', get('model'),
                         f'a model for dataset={get("dataset")!r}: {e}'
                         ) from None
  if problem.labels is not None:  # (binary: the digits' parity)
    y_MxN, y_test = problem.labels(y_MxN), problem.labels(y_test)
  spec = RunSpec(problem, workers, memory=get('memory'),
                 stochastic=algorithm.stochastic,
                 batch_size=get('batch_size'),
                 compressors=(algorithm.compressor,),
                 triggers=(algorithm.trigger,),
                 error_feedback=algorithm.error_feedback,
                 warm_start=algorithm.warm_start,
                 downlink=algorithm.downlink,
                 loss_every=get('loss_every'),
                 client_batch=get('client_batch'),
                 participation=config_lib.partial_participation(config),
                 servers=(algorithm.server,), clients=(algorithm.client,),
                 estimators=(algorithm.estimator,),
                 broadcasts=(algorithm.broadcast,),
                 compressors_b=(algorithm.compressor_b,),
                 privacy=(algorithm.privacy,),
                 weighting=(algorithm.weighting if get('weighting') == 'auto'
                            else get('weighting')) != 'sum',
                 upload_memory=sweep_lib.needs_upload_memory(
                     {'absent': get('absent'), 'weighting': get('weighting')},
                     algorithm),
                 # a round computes its participants' rows alone where that
                 # saves half of it or more (a sweep covers all its points)
                 round_size=participation.chosen_round_size(
                     [{k: get(k) for k in ('participation',
                                           'clients_per_round')}], workers)
                 if config_lib.partial_participation(config) else 0)
  fields = {f: get(f) for f in config_lib.HYPER_FIELDS}
  for key, value in algorithm.settings:  # where the config left the default
    if key in fields and fields[key] == DEFAULTS[key]:
      fields[key] = value
  try:  # (a part's parameters together: FedNova's epochs_min..epochs_max)
    hyper = make_hyper(algorithm, dtype=dtype,
                       authors_code=bool(get('authors_code')), **fields,
                       **sweep_lib.part_values(config))
  except ValueError as e:
    raise config_lib.ConfigError(f'config.params: {e}') from None
  if algorithm.privacy != 'off':  # what the accounting refuses, before a run
    try:
      privatizers.accounting(
          algorithm.privacy, hyper.params[algorithm.privacy], rounds=0,
          num_clients=workers, participation=float(get('participation')),
          clients_per_round=int(get('clients_per_round')))
    except ValueError as e:
      raise config_lib.ConfigError(
          f'config.params.{algorithm.privacy}: {e}') from None
  if not np.any(np.asarray(hyper.network.straggler) != 0):
    # no straggler model: no draws of their slowdowns (RunSpec.stragglers)
    spec = dataclasses.replace(spec, stragglers=False)
  np_dtype = np.dtype(dtype)
  run_chunk_fn = mesh = None
  if get('workers_on') == 'devices':
    host_data = Data(x_MxNxD.astype(np_dtype), np.asarray(y_MxN),
                     count_M=count_M)
    mesh = sharding.make_mesh()
    data = sharding.shard_data(
        _layout(host_data, loaded.integer_scale, spec), mesh)
    run_chunk_fn = sharding.make_run_chunk(mesh)
  else:
    host_data = Data(jnp.asarray(x_MxNxD.astype(np_dtype)),
                     jnp.asarray(y_MxN),
                     count_M=None if count_M is None else jnp.asarray(count_M))
    data = _layout(host_data, loaded.integer_scale, spec)
  return Built(spec=spec, data=data, hyper=hyper,
               test_x=np.asarray(x_test, np_dtype),
               test_y=np.asarray(y_test, np.int32), dtype=dtype,
               problem=problem, algorithm=algorithm,
               num_params=problem.num_params(), test_set=test_set,
               objective_key=objective_key(config), host_data=host_data,
               run_chunk_fn=run_chunk_fn, mesh=mesh)
