"""laq-jax: LAQ (lazily aggregated quantized gradients) and its family in JAX.

Sun, Chen, Giannakis, Yang, "Communication-Efficient Distributed Learning via
Lazily Aggregated Quantized Gradients", NeurIPS 2019 (arXiv 1909.07588).
"""

from laq_jax.hyper import ALGORITHMS, Algorithm, Hyper, get_algorithm, make_hyper, stack_hypers, validate
from laq_jax.loop import Data, LoopState, RunSpec, Trace, accuracy, flat_params, init_state, objective, predict, run, run_chunk
from laq_jax.problems import PROBLEMS, Problem, get_problem, logistic_regression, mlp
from laq_jax.compressors import COMPRESSORS
from laq_jax.quantize import quantize_innovation
from laq_jax.rules import RULE, Rule, RuleState, StepStats

__version__ = '0.1.0'


def set_precision(precision: str) -> None:
  """'float32' or 'float64'; float64 turns on jax_enable_x64 (process-wide)."""
  import jax
  if precision == 'float64':
    jax.config.update('jax_enable_x64', True)
  elif precision != 'float32':
    raise ValueError(f'precision={precision!r} is not allowed: use '
                     "'float32' or 'float64'")
