"""f*: given in the config, read from the cache, or solved once in float64.

f* is the minimum of the full objective f = sum_m f_m (convex models only),
solved by `laq_jax.optimum.solve` and cached under $LAQ_JAX_CACHE (default
`~/.cache/laq_jax`) by a key of everything that determines f
(`experiments.run.build.objective_key`, which carries a format version, and
the fingerprint of the model's loss as XLA sees it, `Problem.fingerprint`,
so that a model registered again under its name is solved again).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import time
from typing import Any, Sequence

from absl import logging

from experiments.run import build as build_lib
from experiments.run import config as config_lib
from experiments.run import outputs
from experiments.run.progress import info
from laq_jax import data as data_lib
from laq_jax import distributed

CACHE_ENV_VAR = 'LAQ_JAX_CACHE'


def cache_dir() -> pathlib.Path:
  """$LAQ_JAX_CACHE, else `laq_jax.data.default_cache_dir()`."""
  env = os.environ.get(CACHE_ENV_VAR)
  return pathlib.Path(env).expanduser() if env else (
      data_lib.default_cache_dir())


def fstar_cache_path(key: dict) -> pathlib.Path:
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()
                          ).hexdigest()[:20]
  return cache_dir() / 'fstar' / f'{digest}.json'


def cache_key(built: build_lib.Built) -> dict[str, Any]:
  """f*'s cache key: `built.objective_key` (the data, its split and
  precision, lam, M, the model's options) and the model's code as XLA sees
  it (`Problem.fingerprint`), not its name: a model registered again under
  its name with other logits is solved again, never served the old f*."""
  return dict(built.objective_key, loss=build_lib.model_code(built))


def resolve_fstar(config, built: build_lib.Built) -> dict[str, Any]:
  """f* for the run: given, cached, solved, or none.

  Returns:
    {'fstar': float or None, 'fstar_method': words, 'fstar_source': 'config'
    | 'cache:PATH' | 'computed (cached at PATH)' | 'none'}.
  """
  given = config_lib.fstar_value(config.fstar)
  if given is not None:
    return {'fstar': given, 'fstar_method': 'given in config.fstar',
            'fstar_source': 'config'}
  if config.fstar == 'none':
    return {'fstar': None, 'fstar_method': 'not computed (config.fstar=none)',
            'fstar_source': 'none'}
  if not built.problem.convex:
    return {'fstar': None,
            'fstar_method': f'unknown: model={config.model!r} is nonconvex',
            'fstar_source': 'none'}
  key = cache_key(built)
  path = fstar_cache_path(key)
  if path.is_file():
    try:
      cached = json.loads(path.read_text())
      if cached.get('key') == key:
        info('f* = %.15g from the cache %s', cached['fstar'], path)
        return {'fstar': float(cached['fstar']),
                'fstar_method': cached['fstar_method'],
                'fstar_source': f'cache:{path}'}
    except (ValueError, KeyError, TypeError, OSError):
      logging.warning('ignoring an unreadable f* cache file %s', path)
  info('solving for f* in float64 (L-BFGS, then Newton-CG)...')
  from laq_jax import optimum  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  opt = optimum.solve(built.problem, built.host_data, config.l2)
  seconds = time.perf_counter() - start
  info('f* = %.15g in %.1f s: %s', opt.value, seconds, opt.method)
  if distributed.is_writer():
    outputs.write_json(path, {'key': key, 'fstar': opt.value,
                      'fstar_method': opt.method, 'grad_norm': opt.grad_norm,
                      'gap_bound': opt.gap_bound, 'seconds': seconds})
  return {'fstar': opt.value, 'fstar_method': opt.method,
          'fstar_source': f'computed (cached at {path})'}


def resolve_fstars(config, built: build_lib.Built,
                   points: Sequence[dict[str, Any]]
                   ) -> dict[float, dict[str, Any]]:
  """`resolve_fstar` for each l2 of a sweep's grid points (f depends on l2)."""
  out = {}
  for point in points:
    if point['l2'] in out:
      continue
    run_config = config_lib.point_config(config, point)
    for_l2 = dataclasses.replace(
        built, objective_key=build_lib.objective_key(run_config))
    out[point['l2']] = resolve_fstar(run_config, for_l2)
  return out
