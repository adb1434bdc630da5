"""Errors and places shared by the data modules."""

from __future__ import annotations

import os
import pathlib


class DataError(ValueError):
  """A data set is missing, malformed, or asked for with invalid arguments."""


def default_cache_dir() -> pathlib.Path:
  """Returns `$XDG_CACHE_HOME/laq_jax`, or `~/.cache/laq_jax` without it."""
  xdg = os.environ.get('XDG_CACHE_HOME')
  base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / '.cache'
  return base / 'laq_jax'
