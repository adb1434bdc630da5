"""Which layout of the features the fast full-batch gradient reads, per machine.

`objective.fast_layout` can keep the features in two layouts beside x:

- 'transposed': x transposed ([M, D, N], the data's dtype), so X^T R is a
  plain row-major product;
- 'bf16_split': integer features (MNIST's bytes, x = n / 255) as exact
  bfloat16 integers, with the float32 factor split into three bfloat16
  parts (float32 runs only): half the bytes, three times the products.

Which is faster depends on the machine. On the two CPU kinds this was
measured on, an Intel Xeon with AVX-512 and an AMD EPYC with AVX2 only
(docs/benchmarks.md, "Layouts"), 'transposed' was 1.6-2.1x faster (XLA:CPU
has no fast bfloat16 dot there and runs the three parts as float32
products). So on a CPU the rule is 'transposed'; on an accelerator, where
no measurement exists yet, a short probe at start times both on the run's
own shapes, once per machine and shape, and caches the winner in
`~/.cache/laq_jax/layouts.json`.

LAQ_JAX_LAYOUT=transposed|bf16_split forces a layout; =probe probes on a CPU
too.
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

LAYOUTS = ('transposed', 'bf16_split')
ENV = 'LAQ_JAX_LAYOUT'
_MEMO: dict[str, str] = {}


def machine_key() -> str:
  """What the probe's answer depends on: backend, device, JAX."""
  device = jax.devices()[0]
  kind = getattr(device, 'device_kind', '') or ''
  if device.platform == 'cpu':
    kind = _cpu_model() or kind
  return f'{device.platform}|{kind}|jax {jax.__version__}'


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return ''


def _cache_path():
  from laq_jax.data.base import default_cache_dir
  return default_cache_dir() / 'layouts.json'


def _read_cache() -> dict:
  try:
    return json.loads(_cache_path().read_text())
  except (OSError, ValueError):
    return {}


def _write_cache(key: str, value: dict) -> None:
  cache = _read_cache()
  cache[key] = value
  path = _cache_path()
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix('.tmp')
    tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
    os.replace(tmp, path)
  except OSError:
    pass  # a read-only home: the choice is memoized in the process


def time_layouts(data, integer_scale: float | None, problem=None,
                 repeats: int = 3) -> dict[str, float]:
  """Seconds per full-batch gradient of every worker, best of `repeats`,
  on each layout that applies ('bf16_split' needs integer features and
  float32), plus 'plain' (autodiff of the loss on x alone)."""
  from laq_jax import problems
  from laq_jax.problems.objective import fast_layout, full_batch
  if problem is None:
    problem = problems.logistic_regression(data.x_MxNxD.shape[-1],
                                           int(np.max(data.y_MxN)) + 1)
  out = {}
  candidates = {'plain': data,
                'transposed': fast_layout(data, None)}
  if integer_scale is not None and data.x_MxNxD.dtype == jnp.float32:
    candidates['bf16_split'] = fast_layout(data, integer_scale)
  theta = jnp.zeros((problem.num_params(),), data.x_MxNxD.dtype)
  fn = jax.jit(lambda th, d: full_batch(problem, d, 0.0)[0](th))
  for name, laid_out in candidates.items():
    compiled = fn.lower(theta, laid_out).compile()
    jax.block_until_ready(compiled(theta, laid_out))
    best = float('inf')
    for _ in range(repeats):
      start = time.perf_counter()
      jax.block_until_ready(compiled(theta, laid_out))
      best = min(best, time.perf_counter() - start)
    out[name] = best
  return out


def choose(data, integer_scale: float | None,
           probe: Callable | None = None) -> str:
  """The layout `fast_layout` should build for `data` on this machine."""
  forced = os.environ.get(ENV, 'auto')
  if forced in LAYOUTS:
    if forced == 'bf16_split' and (integer_scale is None or
                                   data.x_MxNxD.dtype != jnp.float32):
      return 'transposed'
    return forced
  if forced not in ('auto', 'probe'):
    raise ValueError(f'{ENV}={forced!r} is not allowed; allowed: auto, probe, '
                     + ', '.join(LAYOUTS))
  if integer_scale is None or data.x_MxNxD.dtype != jnp.float32:
    return 'transposed'  # the only layout that applies
  if jax.default_backend() == 'cpu' and forced != 'probe':
    return 'transposed'  # the rule measured on both CPU kinds
  key = (f'{machine_key()}|{"x".join(map(str, data.x_MxNxD.shape))}'
         f'|{data.x_MxNxD.dtype}')
  if key in _MEMO:
    return _MEMO[key]
  cached = _read_cache().get(key)
  if cached and cached.get('choice') in LAYOUTS:
    _MEMO[key] = cached['choice']
    return _MEMO[key]
  times = (probe or time_layouts)(data, integer_scale)
  choice = min((t, name) for name, t in times.items() if name in LAYOUTS)[1]
  _MEMO[key] = choice
  _write_cache(key, {'choice': choice, 'seconds': times})
  return choice


def auto_layout(data, integer_scale: float | None = None):
  """`data` with the fast gradient's layout this machine runs fastest
  (`choose`)."""
  from laq_jax.problems.objective import fast_layout
  if choose(data, integer_scale) == 'bf16_split':
    return fast_layout(data, integer_scale)
  return fast_layout(data, None)
