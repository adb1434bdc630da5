"""Models the paper trains: multinomial logistic regression and a 200-ReLU MLP.

A `Problem` is a model as pure functions: `init(key) -> params` and
`apply(params, x_NxD) -> logits_NxC`. Losses are softmax cross-entropy; the
L2 term of the spec (lam / 2 ||theta||^2 per worker) is added by the loop, so
it can be a hyperparameter of a sweep. Problems are cached by their sizes so
the same object (and so the same compiled program) comes back every time.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

PROBLEMS = ('logreg', 'mlp')


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
  """A model as pure functions. Compared and hashed by identity.

  Attributes:
    name: a label for reports.
    init: key -> params pytree (the dtype is cast by the loop).
    apply: (params, x_NxD) -> logits_NxC.
    num_classes: C.
  """
  name: str
  init: Callable[[jax.Array], Any]
  apply: Callable[[Any, jax.Array], jax.Array]
  num_classes: int

  def loss(self, params, x_NxD, y_N) -> jax.Array:
    """Mean softmax cross-entropy over the batch (no regularizer)."""
    logits = self.apply(params, x_NxD)
    return jnp.mean(
        optax.softmax_cross_entropy_with_integer_labels(logits, y_N))

  def num_params(self) -> int:
    """P, the total number of parameters."""
    shapes = jax.eval_shape(self.init, jax.random.key(0))
    return sum(math.prod(s.shape) for s in jax.tree.leaves(shapes))


class MLP(nn.Module):
  """One hidden layer of ReLU units, then a linear read-out to the logits."""
  hidden: int = 200
  num_classes: int = 10

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(self.hidden, name='hidden')(x))
    return nn.Dense(self.num_classes, name='out')(x)


@functools.cache
def logistic_regression(input_dim: int = 784, num_classes: int = 10) -> Problem:
  """Multinomial logistic regression, zero-initialized (convex; unique optimum)."""

  def init(key):
    del key
    return {'w': jnp.zeros((input_dim, num_classes)),
            'b': jnp.zeros((num_classes,))}

  def apply(params, x):
    return x @ params['w'] + params['b']

  return Problem('logreg', init, apply, num_classes)


@functools.cache
def mlp(input_dim: int = 784, num_classes: int = 10, hidden: int = 200) -> Problem:
  """The paper's nonconvex model: input -> hidden ReLU -> softmax (flax)."""
  module = MLP(hidden=hidden, num_classes=num_classes)

  def init(key):
    return module.init(key, jnp.zeros((1, input_dim)))['params']

  def apply(params, x):
    return module.apply({'params': params}, x)

  return Problem(f'mlp{hidden}', init, apply, num_classes)


def get_problem(name: str, input_dim: int = 784, num_classes: int = 10,
                hidden: int = 200) -> Problem:
  """Problem by name ('logreg' or 'mlp'); ValueError naming the allowed ones."""
  if name == 'logreg':
    return logistic_regression(input_dim, num_classes)
  if name == 'mlp':
    return mlp(input_dim, num_classes, hidden)
  raise ValueError(f'unknown model {name!r}; allowed: {", ".join(PROBLEMS)}')
