"""laq-jax: LAQ (lazily aggregated quantized gradients) and its family in JAX.

Sun, Chen, Giannakis, Yang, "Communication-Efficient Distributed Learning via
Lazily Aggregated Quantized Gradients", NeurIPS 2019 (arXiv 1909.07588).

The library is plain values and pure functions: no configs, no files, no
process-wide switches. For float64 runs turn on `jax_enable_x64` once at
startup (`jax.config.update('jax_enable_x64', True)`); every array the
library makes carries an explicit dtype, so float32 runs stay float32.
"""

from laq_jax import broadcasts as _broadcasts  # (its registry: parts.KINDS)
from laq_jax import compressors as _compressors
from laq_jax import estimators as _estimators  # (its registry: parts.KINDS)
from laq_jax import problems as _problems
# (models registers cnn, lasg_cnn, resnet20 and char_lstm as problems)
from laq_jax import models as _models
from laq_jax import registry as _registry
from laq_jax import trigger
from laq_jax.hyper import (ALGORITHMS, Algorithm, Hyper, get_algorithm,
                           make_hyper, register_algorithm, stack_hypers,
                           validate)
from laq_jax.loop import (Chunk, Data, LoopState, RunSpec, Trace, accuracy,
                          fast_layout, flat_params, flops_per_worker_step,
                          init_state, objective, predict, run, run_chunk)
from laq_jax.network import PROFILES, Network, make_network
from laq_jax.problems import (Problem, get_problem, logistic_regression,
                              mlp)
from laq_jax.quantize import quantize_innovation
from laq_jax.record import Record
from laq_jax.rules import LAQ, Rule, RuleState, StepStats

__version__ = '0.2.0'


# The registries' names, as they are now (parts registered later included).
__getattr__ = _registry.names_attribute(
    __name__, COMPRESSORS=_compressors.REGISTRY,
    PROBLEMS=_problems.REGISTRY, TRIGGERS=trigger.REGISTRY)


__all__ = [
    'ALGORITHMS', 'Algorithm', 'COMPRESSORS', 'Chunk', 'Data', 'Hyper', 'LAQ',
    'LoopState', 'Network', 'PROBLEMS', 'PROFILES', 'Problem', 'Record',
    'Rule', 'RuleState', 'RunSpec',
    'StepStats', 'Trace', 'accuracy', 'fast_layout', 'flat_params',
    'flops_per_worker_step', 'get_algorithm', 'make_network',
    'get_problem', 'init_state', 'logistic_regression', 'make_hyper', 'mlp',
    'register_algorithm', 'TRIGGERS', 'trigger',
    'objective', 'predict', 'quantize_innovation', 'run', 'run_chunk',
    'stack_hypers', 'validate']
