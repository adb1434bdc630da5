"""What every launcher sets up in JAX before it builds anything.

- float64 on (`jax_enable_x64`): float64 configs need it, float32 ones stay
  float32 (every array carries its dtype);
- JAX's persistent compilation cache in `~/.cache/laq_jax/xla` (or
  `$LAQ_JAX_COMPILE_CACHE`), so a second launch of the same program, a
  resumed run or the next experiment of a report with the same shapes,
  loads the compiled program instead of compiling it again.
  `LAQ_JAX_COMPILE_CACHE=off` turns it off. Programs that compile in a
  second or more are kept (`$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`
  overrides it).
"""

from __future__ import annotations

import os

ENV = 'LAQ_JAX_COMPILE_CACHE'
OFF = ('0', 'off', 'false', 'no', 'none')


def compile_cache_dir() -> str | None:
  """The persistent cache's folder, None when the user turned it off."""
  value = os.environ.get(ENV, '').strip()
  if value.lower() in OFF:
    return None
  if value:
    return value
  from laq_jax.data import default_cache_dir  # pylint: disable=g-import-not-at-top
  return str(default_cache_dir() / 'xla')


def setup_jax() -> None:
  """float64 on and the persistent compilation cache (see the module)."""
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_enable_x64', True)
  path = compile_cache_dir()
  if path is not None:
    jax.config.update('jax_compilation_cache_dir', path)
    # Only programs worth it: compiles of a second or more, unless
    # $JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS says otherwise (the test
    # suite keeps every program: 0).
    if 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS' not in os.environ:
      jax.config.update('jax_persistent_cache_min_compile_time_secs', 1.0)


# What `compile_seconds` counts: tracing a jitted function, lowering it and
# compiling it (or loading it from the persistent cache), as JAX reports them
# (`jax.monitoring`).
COMPILE_EVENTS = ('/jax/core/compile/jaxpr_trace_duration',
                  '/jax/core/compile/jaxpr_to_mlir_module_duration',
                  '/jax/core/compile/backend_compile_duration')
_compile_total = [0.0]
_listening = [False]


def _on_duration(event: str, duration: float, **unused_kwargs) -> None:
  if event in COMPILE_EVENTS:
    _compile_total[0] += duration


def compile_seconds() -> float:
  """Seconds this process has spent tracing, lowering and compiling jitted
  programs (or loading them from the persistent cache) since the first
  call: the difference of two calls is what a run spent compiling, which
  the reports keep out of its time "in the compiled program". It listens
  from its first call on (`jax.monitoring`), so call it before the run."""
  if not _listening[0]:
    import jax  # pylint: disable=g-import-not-at-top
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    _listening[0] = True
  return _compile_total[0]
