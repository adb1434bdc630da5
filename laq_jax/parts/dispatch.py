"""How a compiled step picks and calls a part: the part's parameter arrays
in the Hyper, its initial state, and the `lax.switch` among the parts a
program compiled in, by the Hyper's index into a registry. All of it is
`laq_jax.parts`'s too (`parts.switch`, `parts.own_params`, ...)."""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from laq_jax.show import show

# (a `laq_jax.parts.Part` and `PartRegistry` where these functions take one)
Part = PartRegistry = Any


def own_params(hyper, part: Part):
  """The part's parameter arrays in `hyper` (None when it declares none)."""
  if not part.params:
    return None
  try:
    return hyper.params[part.name]
  except (KeyError, TypeError):
    raise ValueError(f'hyper.params has no group {show(part.name)}: build the '
                     'Hyper after registering the part (laq_jax.make_hyper)'
                     ) from None


def init_state(part: Part, num_params: int, dtype, theta_P=None):
  """One worker's initial state of a compressor or trigger: `init(num_params,
  dtype)`, with `theta_P=` (theta^0) where the init declares it."""
  import inspect  # pylint: disable=g-import-not-at-top
  try:
    takes = 'theta_P' in inspect.signature(part.init).parameters
  except (TypeError, ValueError):
    takes = False
  if not takes:
    return part.init(num_params, dtype)
  if theta_P is None:
    raise ValueError(f'{part.kind} {show(part.name)} starts from theta^0: its '
                     'init needs theta_P')
  return part.init(num_params, dtype, theta_P=theta_P)


def num_bits(x) -> int:
  """ceil(log2 x) for x >= 2, else 0 (index widths)."""
  return math.ceil(math.log2(x)) if x > 1 else 0


def switch(index, parts: Sequence[Part], branch: Callable, *operands):
  """`branch(part, *operands)` for parts[index] (a lax.switch among them; one
  part: a direct call)."""
  branches = [lambda *ops, p=p: branch(p, *ops) for p in parts]
  if len(branches) == 1:
    return branches[0](*operands)
  return jax.lax.switch(index, branches, *operands)


def switch_merged(global_index, parts: Sequence[Part], reg: PartRegistry,
                  branch: Callable, *operands):
  """`switch` on the registry index `global_index` (a Hyper field), the
  parts with one function and no parameters or state of their own merged
  into one branch: built-ins that read which of them runs from the Hyper
  (the estimators direct and innovation, the broadcasts full and
  quantized) then compile as one function, as before they were parts."""
  branches, table = [], []
  for part in parts:
    same = [i for i, b in enumerate(branches) if b.fn is part.fn and not (
        b.params or b.stateful or part.params or part.stateful)]
    if not same:
      branches.append(part)
    table.append(same[0] if same else len(branches) - 1)
  index = jnp.asarray(table, jnp.int32)[local_index(global_index, parts, reg)]
  return switch(index, branches, branch, *operands)


def local_index(global_index, parts: Sequence[Part], reg: PartRegistry):
  """The position among `parts` of the registry index `global_index` (a
  Hyper field); an index outside them maps to 0 (callers refuse it first:
  `RunSpec.check_hyper`)."""
  table = [next((i for i, p in enumerate(parts) if p.name == n), 0)
           for n in reg.names]
  return jnp.asarray(table, jnp.int32)[global_index]
