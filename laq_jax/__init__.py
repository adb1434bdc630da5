"""laq-jax: LAQ (lazily aggregated quantized gradients) and its family in JAX.

Sun, Chen, Giannakis, Yang, "Communication-Efficient Distributed Learning via
Lazily Aggregated Quantized Gradients", NeurIPS 2019 (arXiv 1909.07588).

The library is plain values and pure functions: no configs, no files, no
process-wide switches. For float64 runs turn on `jax_enable_x64` once at
startup (`jax.config.update('jax_enable_x64', True)`); every array the
library makes carries an explicit dtype, so float32 runs stay float32.

The code lies in layers, each a subpackage (docs/guide/architecture.md)::

    laq_jax/parts/     the parts a round is built of: compressors, quantize,
                       codecs, estimators, triggers, broadcasts, clients,
                       servers, presets (the package itself: Param, Part)
    laq_jax/round/     one round and the loop of rounds: hyper, fields,
                       schedule, spec, points, rule_state, rules, stages,
                       participation, loop
    laq_jax/problems/  losses and models: models, objective, optimum,
                       layouts (the package itself: Problem and its registry)
    laq_jax/network/   the clock of the modeled network: profiles (the
                       package itself: Network, round_time)
    laq_jax/sweeps/    grids of points and what they measure: sweep,
                       sweep_metrics, metrics, record, plotting
    laq_jax/devices/   several devices and processes: sharding, distributed,
                       checkpoint
    laq_jax/deploy/    a round split between real clients and a server: wire,
                       flower (the package itself: the two halves)
    laq_jax/data/      the datasets
    registry, show, randomness, collectives: the foundations every layer uses.

Every module keeps its flat name as well: `from laq_jax import compressors`
and `import laq_jax.loop` are `laq_jax.parts.compressors` and
`laq_jax.round.loop`, the same module objects (`MOVED`; `laq_jax.trigger` is
`laq_jax.parts.triggers`), so user code and
notebooks written against the flat layout run unchanged.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import types

from laq_jax import problems as _problems
from laq_jax import registry as _registry
from laq_jax.network import PROFILES, Network, make_network
from laq_jax.parts import broadcasts as _broadcasts  # (its registry: parts.KINDS)
from laq_jax.parts import compressors as _compressors
from laq_jax.parts import estimators as _estimators  # (its registry: parts.KINDS)
from laq_jax.parts import privatizers as _privatizers  # (its registry: parts.KINDS)
from laq_jax.parts import triggers as trigger
from laq_jax.parts.quantize import quantize_innovation
from laq_jax.problems import (Problem, get_problem, logistic_regression,
                              mlp)
# (models registers cnn, lasg_cnn, resnet20, char_lstm and pfl_cnn as problems)
from laq_jax.problems import models as _models
from laq_jax.round.hyper import (ALGORITHMS, Algorithm, Hyper, get_algorithm,
                                 make_hyper, register_algorithm, stack_hypers,
                                 validate)
from laq_jax.round.loop import (Chunk, Data, LoopState, RunSpec, Trace,
                                accuracy, fast_layout, flat_params,
                                flat_range,
                                flops_per_worker_step, init_state, objective,
                                predict, run, run_chunk)
from laq_jax.round.rules import LAQ, Rule, RuleState, StepStats
from laq_jax.sweeps.record import Record

# The flat name of each module in a layer's subpackage -> its path there.
_LAYERS = {
    'parts': ('compressors', 'quantize', 'codecs', 'estimators', 'triggers',
              'broadcasts', 'clients', 'servers', 'presets', 'privatizers'),
    'round': ('hyper', 'spec', 'fields', 'schedule', 'rule_state', 'rules',
              'stages', 'loop', 'participation', 'points'),
    'problems': ('models', 'objective', 'optimum', 'layouts'),
    'network': ('profiles',),
    'sweeps': ('sweep', 'sweep_metrics', 'metrics', 'plotting', 'record'),
    'devices': ('sharding', 'distributed', 'checkpoint'),
    'deploy': ('wire', 'flower'),
}
MOVED = {name: f'{package}.{name}' for package, names in _LAYERS.items()
         for name in names}
MOVED['trigger'] = MOVED.pop('triggers')  # (parts.trigger is the factory)


def _moved(name: str):
  """The module `laq_jax.<name>` names (its layer's path), imported."""
  return importlib.import_module(f'{__name__}.{MOVED[name]}')


class _FlatNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """`import laq_jax.<flat name>` gives the layer's module itself (one
  module object under both names; its own __spec__ kept)."""

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    package, _, name = fullname.rpartition('.')
    if package == __name__ and name in MOVED:
      return importlib.util.spec_from_loader(fullname, self)
    return None

  def create_module(self, spec):
    module = _moved(spec.name.rpartition('.')[2])
    self._spec = module.__spec__  # the import system overwrites it next
    return module

  def exec_module(self, module):
    module.__spec__ = self._spec


if not any(isinstance(f, _FlatNames) for f in sys.meta_path):
  sys.meta_path.append(_FlatNames())


class _Package(types.ModuleType):
  """The package: importing a module by its flat name sets the package's
  attribute of that name to the module, except where the package exports
  a value of that name (`laq_jax.objective`, the function; the module is
  `laq_jax.problems.objective`)."""

  def __setattr__(self, name, value):
    held = self.__dict__.get(name)
    if (name in MOVED and isinstance(value, types.ModuleType)
        and held is not None and not isinstance(held, types.ModuleType)):
      return
    super().__setattr__(name, value)

__version__ = '0.2.0'


# The registries' names, as they are now (parts registered later included).
_names = _registry.names_attribute(
    __name__, COMPRESSORS=_compressors.REGISTRY,
    PROBLEMS=_problems.REGISTRY, TRIGGERS=trigger.REGISTRY)


def __getattr__(name):
  if name in MOVED:  # `laq_jax.loop`, `from laq_jax import loop`
    return _moved(name)
  return _names(name)


__all__ = [
    'ALGORITHMS', 'Algorithm', 'COMPRESSORS', 'Chunk', 'Data', 'Hyper', 'LAQ',
    'LoopState', 'Network', 'PROBLEMS', 'PROFILES', 'Problem', 'Record',
    'Rule', 'RuleState', 'RunSpec',
    'StepStats', 'Trace', 'accuracy', 'fast_layout', 'flat_params',
    'flat_range',
    'flops_per_worker_step', 'get_algorithm', 'make_network',
    'get_problem', 'init_state', 'logistic_regression', 'make_hyper', 'mlp',
    'register_algorithm', 'TRIGGERS', 'trigger',
    'objective', 'predict', 'quantize_innovation', 'run', 'run_chunk',
    'stack_hypers', 'validate']

sys.modules[__name__].__class__ = _Package
