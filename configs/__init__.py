"""Experiment configs (ml_collections), one file per paper experiment.

Load one with `--config=configs/NAME.py[:ARG]` (absl + ml_collections
config_flags) or, from Python, `configs.load('mnist_logreg', 'quick')`.
"""

from __future__ import annotations

import importlib

import ml_collections

NAMES = ('default', 'mnist_logreg', 'mnist_mlp', 'mnist_logreg_stochastic',
         'mnist_mlp_stochastic')


def load(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
  """`configs/NAME.py`'s get_config(arg), e.g. load('mnist_logreg', 'quick')."""
  if name not in NAMES:
    raise ValueError(f'unknown config {name!r}; allowed: {", ".join(NAMES)}')
  return importlib.import_module(f'configs.{name}').get_config(arg)
