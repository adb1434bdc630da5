"""How the benchmarks time a program.

Every time is a wall time of an ahead-of-time compiled program
(`jit(...).lower(...).compile()`, so compile time is measured apart), after
one warm-up call, synchronised with `block_until_ready`. Programs compared
with each other are timed interleaved, and ratios are the median of the
per-repeat ratios.
"""

from __future__ import annotations

import resource
import time

import jax
import numpy as np

import laq_jax


def block(out):
  """Waits for every array of `out` (a pytree) to be computed."""
  return jax.block_until_ready(out)


def time_interleaved(fns: dict, repeats: int) -> dict:
  """Times each zero-argument fn `repeats` times, round-robin, after a warm-up.

  Returns:
    name -> list of seconds.
  """
  for fn in fns.values():
    block(fn())
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start = time.perf_counter()
      block(fn())
      times[name].append(time.perf_counter() - start)
  return times


def paired_ratio(times: dict, a: str, b: str) -> dict:
  """A's time over B's from interleaved repeats: median of per-repeat ratios.

  Each repeat times A right next to B, so a slow phase of a shared machine
  hits both; the median of the paired ratios is steadier than min(A)/min(B).
  The spread (min, max) says how noisy the machine was.
  """
  ratios = np.asarray(times[a]) / np.asarray(times[b])
  return {'median': float(np.median(ratios)), 'min': float(ratios.min()),
          'max': float(ratios.max()),
          'of_minima': float(min(times[a]) / min(times[b]))}


def aot(fn, *args, static_argnums=()):
  """(compiled, seconds to lower and compile) for jit(fn) at these arguments."""
  start = time.perf_counter()
  compiled = jax.jit(fn, static_argnums=static_argnums).lower(*args).compile()
  return compiled, time.perf_counter() - start


def aot_run_chunk(spec, state, data, hyper, num_steps, donate=False):
  """laq_jax.run_chunk compiled ahead of time: (compiled, compile seconds).

  The compiled object takes (state, data, hyper); spec and num_steps are
  static and baked in. With `donate` it consumes the state it is given
  (`chained` calls it on its own output).
  """
  start = time.perf_counter()
  compiled = laq_jax.run_chunk.lower(spec, state, data, hyper, num_steps,
                                     donate=donate).compile()
  return compiled, time.perf_counter() - start


def chained(compiled, state, *args):
  """A zero-argument fn for `time_interleaved` that runs a donating
  compiled chunk on a copy of `state`, then on its own last output (as a
  run's chunks follow each other)."""
  held = [jax.tree.map(lambda a: a.copy(), state)]

  def call():
    held[0], trace = compiled(held[0], *args)
    return held[0], trace
  return call


def memory_bytes(compiled) -> dict:
  """Argument, output, temp and total bytes from XLA's memory analysis."""
  try:
    stats = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except
    stats = None
  if stats is None:
    return {}
  out = {k: int(getattr(stats, f'{k}_size_in_bytes', 0))
         for k in ('argument', 'output', 'alias', 'temp')}
  out['total'] = out['argument'] + out['output'] - out['alias'] + out['temp']
  return out


def maxrss_bytes() -> int:
  """Peak resident memory of this process so far (Linux reports KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
