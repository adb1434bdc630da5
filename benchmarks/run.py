#!/usr/bin/env python
"""laq-jax benchmarks: how fast, against what, and how close to the machine's limit.

    python benchmarks/run.py [--quick] [--out bench.json]

Runs from the repository root (it puts the root on sys.path itself). Needs
MNIST: set LAQ_JAX_DATA (or pass --data_dir). Prints a table and writes JSON.

Every time is a per-iteration wall time of an ahead-of-time compiled program
(`jit(...).lower(...).compile()`, so compile time is measured apart), after one
warm-up call, synchronised with `block_until_ready`; the figure kept is the
minimum over repeats (the least disturbed, on a shared machine), and programs
compared with each other are timed interleaved. Ratios are A's time over B's.

Sections:
  machine   the dense matmul FLOP/s and read bandwidth this machine reaches.
  laq/gd    laq vs gd through `laq_jax.run_chunk` (the same compiled program:
            gd and laq differ only in the Hyper switches), vs a plain
            gradient-descent scan written here (no rule), the rule step alone,
            and the gradient without the worker axis; FLOP/s and bytes/s.
  numpy     laq-jax vs the NumPy reference (benchmarks/numpy_reference.py) on
            full MNIST logistic regression, float32 and float64.
  check     NumPy reference vs laq-jax on an MNIST subset, 20 iterations:
            uploads must be equal in float64 (float32 is reported only).
  sweep     a vmapped sweep of G grid points vs G separate runs of the
            single-point program, for G in (1, 4, 16, 64); memory of the sweep
            program (XLA's memory_analysis) and the largest G that fits.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
  sys.path.insert(0, REPO)

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
import numpy as np

import laq_jax
from laq_jax import data as data_lib
from laq_jax import loop as loop_lib
from laq_jax import rules

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_reference as npref  # pylint: disable=g-import-not-at-top

NUM_WORKERS = 10
LAQ_OVER_GD_TARGET = 1.15


# ---------------------------------------------------------------------------
# Timing.


def _block(out):
  return jax.block_until_ready(out)


def time_interleaved(fns: dict, repeats: int) -> dict:
  """Times each zero-argument fn `repeats` times, round-robin, after a warm-up.

  Returns:
    name -> list of seconds.
  """
  for fn in fns.values():
    _block(fn())
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start = time.perf_counter()
      _block(fn())
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


def aot_run_chunk(spec, state, data, hyper, num_steps):
  """laq_jax.run_chunk compiled ahead of time: (compiled, compile seconds).

  The compiled object takes (state, data, hyper); spec and num_steps are
  static and baked in.
  """
  start = time.perf_counter()
  compiled = laq_jax.run_chunk.lower(spec, state, data, hyper,
                                     num_steps).compile()
  seconds = time.perf_counter() - start
  return compiled, seconds


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


# ---------------------------------------------------------------------------
# Machine.


def _lscpu_field(name: str) -> str | None:
  try:
    out = subprocess.run(['lscpu'], capture_output=True, text=True,
                         timeout=10).stdout
  except (OSError, subprocess.SubprocessError):
    return None
  for line in out.splitlines():
    if line.startswith(name + ':'):
      return line.split(':', 1)[1].strip()
  return None


def _meminfo(field: str) -> int | None:
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith(field + ':'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def describe_machine() -> dict:
  devices = jax.devices()
  return {
      'cpu_model': _lscpu_field('Model name') or platform.processor(),
      'cpu_count': os.cpu_count(),
      'cpus_usable': len(os.sched_getaffinity(0)),
      'threads_per_core': _lscpu_field('Thread(s) per core'),
      'l3_cache': _lscpu_field('L3 cache'),
      'hypervisor': _lscpu_field('Hypervisor vendor'),
      'mem_total_bytes': _meminfo('MemTotal'),
      'mem_available_bytes': _meminfo('MemAvailable'),
      'load_average_start': os.getloadavg(),
      'platform': platform.platform(),
      'python': platform.python_version(),
      'jax': jax.__version__,
      'jaxlib': getattr(jax.lib, '__version__', None) or _jaxlib_version(),
      'numpy': np.__version__,
      'backend': jax.default_backend(),
      'devices': [f'{d.platform}:{d.device_kind}' for d in devices],
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
  }


def _jaxlib_version():
  try:
    import jaxlib  # pylint: disable=g-import-not-at-top
    return jaxlib.__version__
  except Exception:  # pylint: disable=broad-except
    return None


def device_memory_limit() -> tuple[int | None, str]:
  """Bytes a program may use on the default device, and where that came from."""
  device = jax.devices()[0]
  try:
    stats = device.memory_stats()
  except Exception:  # pylint: disable=broad-except
    stats = None
  if stats and stats.get('bytes_limit'):
    return int(stats['bytes_limit']) - int(stats.get('bytes_in_use', 0)), (
        'device memory_stats: bytes_limit - bytes_in_use')
  return _meminfo('MemAvailable'), '/proc/meminfo MemAvailable (host RAM)'


class Probe:
  """A machine-limit probe: a compiled call and the work (FLOPs or bytes) it does."""

  def __init__(self, name, fn, work, unit):
    self.name, self.fn, self.work, self.unit = name, fn, work, unit

  def rate(self, seconds: float) -> float:
    return self.work / seconds


def matmul_probe(n: int, dtype=jnp.float32) -> Probe:
  """Dense n x n matmul: the practical compute limit (FLOP/s) of this machine."""
  key_a, key_b = jax.random.split(jax.random.key(0))
  a = jax.random.normal(key_a, (n, n), dtype)
  b = jax.random.normal(key_b, (n, n), dtype)
  compiled, _ = aot(jnp.matmul, a, b)
  return Probe(f'matmul {jnp.dtype(dtype).name} {n}^2', lambda: compiled(a, b),
               2 * n**3, 'FLOP/s')


def bandwidth_probe(num_bytes: int) -> Probe:
  """Read bandwidth (bytes/s): a float32 sum over an array beyond the caches."""
  x = jnp.ones((num_bytes // 4,), jnp.float32)
  compiled, _ = aot(jnp.sum, x)
  return Probe(f'sum of {num_bytes / 2**20:.0f} MiB', lambda: compiled(x),
               num_bytes, 'B/s')


def bench_probe(probe: Probe, repeats: int) -> dict:
  times = time_interleaved({'probe': probe.fn}, repeats)['probe']
  return {'probe': probe.name, 'seconds': min(times), 'work': probe.work,
          'rate': probe.rate(min(times)), 'unit': probe.unit}


# ---------------------------------------------------------------------------
# Workloads.


def load_shards(data_dir, per_worker: int | None):
  """Full MNIST (or the first `per_worker` rows of every shard), float32 NumPy."""
  mnist = data_lib.load_mnist(data_dir)
  x, y = data_lib.make_shards(mnist['x_train'], mnist['y_train'], NUM_WORKERS)
  if per_worker is not None:
    x, y = x[:, :per_worker], y[:, :per_worker]
  return np.ascontiguousarray(x), np.ascontiguousarray(y)


def to_data(x, y, dtype) -> laq_jax.Data:
  return laq_jax.Data(jnp.asarray(x, dtype), jnp.asarray(y, jnp.int32))


def gradient_flops(problem_name: str, num_samples: int, dim: int = 784,
                   classes: int = 10, hidden: int = 200) -> int:
  """Matmul FLOPs of one full gradient (forward + backward) over all samples.

  logreg: logits X W (2NDC), dW = X^T dlogits (2NDC).
  mlp: X W1 (2NDH), A W2 (2NHC); dW2 = A^T dlogits (2NHC),
    dA = dlogits W2^T (2NHC), dW1 = X^T dpre (2NDH). (No dX is needed.)
  Elementwise work (softmax, ReLU, the rule) is O(N(C+H) + MP), not counted.
  """
  if problem_name == 'logreg':
    return 4 * num_samples * dim * classes
  return 4 * num_samples * dim * hidden + 6 * num_samples * hidden * classes


def sum_workers(a_MxP):
  """sum_m a_m as M vector adds.

  Not jnp.sum(axis=0): on XLA:CPU (jaxlib 0.10.2) that becomes a YNNPACK reduce
  fusion over the major axis, ~100x slower than M adds for [10, 159010].
  """
  return functools.reduce(jnp.add, [a_MxP[m] for m in range(a_MxP.shape[0])])


def plain_gd_chunk(problem, data: laq_jax.Data, theta_P, step_size, l2,
                   num_steps: int):
  """Gradient descent with per-worker gradients and no rule: the floor.

  The same per-worker objective and gradient as laq_jax's loop, summed (fast,
  see `sum_workers`) and applied; emits the loss as the loop does.
  """
  unravel = loop_lib.flat_params(problem, 0, theta_P.dtype)[1]
  objective = lambda th, x, y: loop_lib.worker_objective(problem, unravel, th,
                                                         x, y, l2)
  value_and_grad = jax.vmap(jax.value_and_grad(objective), in_axes=(None, 0, 0))

  def body(theta, _):
    losses_M, grads_MxP = value_and_grad(theta, data.x_MxNxD, data.y_MxN)
    return theta - step_size * sum_workers(grads_MxP), jnp.sum(losses_M)

  return jax.lax.scan(body, theta_P, None, length=num_steps)


def unsharded_gd_chunk(problem, x_NxD, y_N, theta_P, step_size, l2,
                       num_steps: int):
  """Gradient descent on all samples as one batch (no worker axis)."""
  unravel = loop_lib.flat_params(problem, 0, theta_P.dtype)[1]
  objective = lambda th: loop_lib.worker_objective(problem, unravel, th, x_NxD,
                                                   y_N, l2)

  def body(theta, _):
    loss, grad = jax.value_and_grad(objective)(theta)
    return theta - step_size * grad, loss

  return jax.lax.scan(body, theta_P, None, length=num_steps)


def rule_chunk(grads_MxP, state: rules.RuleState, theta_P, hyper,
               num_steps: int):
  """The rule step alone, on fixed gradients (its cost without the gradient)."""

  def body(carry, _):
    theta, rule_state = carry
    theta, rule_state, stats = rules.step(grads_MxP, rule_state, theta, hyper,
                                          num_workers=grads_MxP.shape[0])
    row = (stats.sent_M, stats.bits_M, stats.innovation_M, stats.threshold_M,
           stats.error_M)
    return (theta, rule_state), row

  return jax.lax.scan(body, (theta_P, state), None, length=num_steps)


def bench_laq_vs_gd(problem_name: str, x, y, num_steps: int, repeats: int,
                    probes: dict, dtype=jnp.float32) -> dict:
  """laq vs gd (same program), vs plain GD, the rule alone, no worker axis.

  The machine-limit `probes` ('matmul', 'bandwidth') are timed interleaved
  with the programs, so the fractions compare runs under the same load.
  """
  problem = laq_jax.get_problem(problem_name)
  data = to_data(x, y, dtype)
  spec = laq_jax.RunSpec(problem, NUM_WORKERS)
  hypers = {a: laq_jax.make_hyper(a, dtype=dtype) for a in ('laq', 'gd')}
  state = laq_jax.init_state(spec, hypers['laq'], dtype)
  compiled, compile_s = aot_run_chunk(spec, state, data, hypers['laq'],
                                      num_steps)
  hyper = hypers['laq']
  plain, plain_compile_s = aot(
      functools.partial(plain_gd_chunk, problem), data, state.theta_P,
      hyper.step_size, hyper.l2, num_steps, static_argnums=(4,))
  x_all = data.x_MxNxD.reshape(-1, data.x_MxNxD.shape[-1])
  y_all = data.y_MxN.reshape(-1)
  unsharded, _ = aot(functools.partial(unsharded_gd_chunk, problem), x_all,
                     y_all, state.theta_P, hyper.step_size, hyper.l2, num_steps,
                     static_argnums=(5,))
  # The rule alone, on this problem's real first gradients.
  grads_MxP = jax.jit(jax.vmap(
      jax.grad(lambda th, xs, ys: loop_lib.worker_objective(
          problem, loop_lib.flat_params(problem, 0, dtype)[1], th, xs, ys,
          hyper.l2)), in_axes=(None, 0, 0)))(state.theta_P, data.x_MxNxD,
                                             data.y_MxN)
  rule_only, _ = aot(rule_chunk, grads_MxP, state.rule, state.theta_P, hyper,
                     num_steps, static_argnums=(4,))
  times = time_interleaved({
      'laq': lambda: compiled(state, data, hypers['laq']),
      'gd': lambda: compiled(state, data, hypers['gd']),
      'plain_gd': lambda: plain(data, state.theta_P, hyper.step_size,
                                hyper.l2),
      'rule_only': lambda: rule_only(grads_MxP, state.rule, state.theta_P,
                                     hyper),
      'unsharded_gd': lambda: unsharded(x_all, y_all, state.theta_P,
                                        hyper.step_size, hyper.l2),
      **{'probe_' + k: p.fn for k, p in probes.items()},
  }, repeats)
  per_iter = {k: min(v) / num_steps for k, v in times.items()
              if not k.startswith('probe_')}
  limits = {k: probes[k].rate(min(times['probe_' + k])) for k in probes}
  num_samples = x.shape[0] * x.shape[1]
  flops = gradient_flops(problem_name, num_samples)
  x_bytes = data.x_MxNxD.size * data.x_MxNxD.dtype.itemsize
  return {
      'problem': problem_name,
      'num_params': problem.num_params(),
      'num_samples': num_samples,
      'num_steps': num_steps,
      'repeats': repeats,
      'compile_s': compile_s,
      'plain_gd_compile_s': plain_compile_s,
      'per_iter_s': per_iter,
      'all_times_s': times,
      'laq_over_gd': paired_ratio(times, 'laq', 'gd')['median'],
      'laq_over_plain_gd': paired_ratio(times, 'laq', 'plain_gd')['median'],
      'ratios': {'laq/gd': paired_ratio(times, 'laq', 'gd'),
                 'laq/plain_gd': paired_ratio(times, 'laq', 'plain_gd'),
                 'gd/plain_gd': paired_ratio(times, 'gd', 'plain_gd'),
                 'plain_gd/unsharded_gd': paired_ratio(times, 'plain_gd',
                                                       'unsharded_gd')},
      'rule_fraction': per_iter['rule_only'] / per_iter['laq'],
      'gradient_flops': flops,
      'flops_per_s_laq': flops / per_iter['laq'],
      'flops_per_s_plain_gd': flops / per_iter['plain_gd'],
      'flops_per_s_unsharded': flops / per_iter['unsharded_gd'],
      # The gradient reads X twice (the forward and the dW matmuls).
      'x_bytes': x_bytes,
      'bytes_per_s_laq': 2 * x_bytes / per_iter['laq'],
      'matmul_flops_per_s': limits['matmul'],
      'read_bytes_per_s': limits['bandwidth'],
      'matmul_fraction': flops / per_iter['laq'] / limits['matmul'],
      'bandwidth_fraction': 2 * x_bytes / per_iter['laq'] / limits['bandwidth'],
      'memory': memory_bytes(compiled),
  }


# ---------------------------------------------------------------------------
# laq-jax vs NumPy.


def numpy_hyper(algo: str) -> npref.Hyper:
  """The NumPy reference's Hyper with laq_jax's defaults for `algo`."""
  defaults = laq_jax.hyper.DEFAULTS
  return npref.hyper_for(
      algo, step_size=defaults['step_size'], bits=defaults['bits'],
      xi=defaults['xi'], err_weight=defaults['err_weight'],
      threshold_offset=defaults['threshold_offset'],
      max_staleness=defaults['max_staleness'], l2=defaults['l2'])


def numpy_loss_grad(problem_name: str):
  if problem_name == 'logreg':
    return npref.logreg_loss_grad
  return npref.make_mlp_loss_grad(hidden=200)


def bench_jax_vs_numpy(x, y, dtype, jax_steps: int, numpy_steps: int,
                       repeats: int) -> dict:
  """laq on logistic regression: laq-jax vs the NumPy reference, per iteration."""
  problem = laq_jax.get_problem('logreg')
  data = to_data(x, y, dtype)
  spec = laq_jax.RunSpec(problem, NUM_WORKERS)
  hyper = laq_jax.make_hyper('laq', dtype=dtype)
  state = laq_jax.init_state(spec, hyper, dtype)
  compiled, compile_s = aot_run_chunk(spec, state, data, hyper, jax_steps)
  x_np = np.asarray(x, dtype)
  y_np = np.asarray(y)
  theta0 = np.asarray(state.theta_P)
  np_hyper = numpy_hyper('laq')

  def numpy_run():
    npref.run(npref.logreg_loss_grad, x_np, y_np,
              npref.init(theta0, NUM_WORKERS), np_hyper, numpy_steps)

  times = time_interleaved({
      'jax': lambda: compiled(state, data, hyper),
      'numpy': numpy_run,
  }, repeats)
  jax_s = min(times['jax']) / jax_steps
  numpy_s = min(times['numpy']) / numpy_steps
  ratio = paired_ratio(times, 'jax', 'numpy')
  ratio = {k: v * numpy_steps / jax_steps for k, v in ratio.items()}
  return {'dtype': jnp.dtype(dtype).name, 'jax_per_iter_s': jax_s,
          'numpy_per_iter_s': numpy_s, 'jax_over_numpy': ratio['median'],
          'ratio': ratio,
          'jax_steps': jax_steps, 'numpy_steps': numpy_steps,
          'compile_s': compile_s, 'all_times_s': times}


def self_check(x, y, per_worker: int, num_steps: int) -> list[dict]:
  """NumPy reference vs laq-jax on a subset: uploads, bits, losses, theta.

  float64 must agree exactly on every upload decision and to ~1e-9 on the
  losses; float32 is reported only. Why the subset matters: 2^b - 1 is odd,
  so the quantizer has no zero level and a zero innovation lies exactly on a
  rounding midpoint (it rounds up to +tau R). A coordinate that is zero only
  up to rounding (e.g. a bias gradient 0.1 - n_c / N when class c is exactly
  a tenth of a shard) then lands on +tau R or -tau R depending on the sign of
  1e-17 noise, which differs between any two summation orders. With 128
  samples per worker no class can be exactly a tenth.
  """
  results = []
  cases = [('logreg', 'laq', jnp.float64), ('logreg', 'lag', jnp.float64),
           ('logreg', 'qgd', jnp.float64), ('mlp', 'laq', jnp.float64),
           ('mlp', 'qgd', jnp.float64), ('mlp', 'lag', jnp.float64),
           ('logreg', 'laq', jnp.float32), ('mlp', 'laq', jnp.float32)]
  xs = np.ascontiguousarray(x[:, :per_worker])
  ys = np.ascontiguousarray(y[:, :per_worker])
  for problem_name, algo, dtype in cases:
    problem = laq_jax.get_problem(problem_name)
    data = to_data(xs, ys, dtype)
    spec = laq_jax.RunSpec(problem, NUM_WORKERS)
    hyper = laq_jax.make_hyper(algo, dtype=dtype)
    state0 = laq_jax.init_state(spec, hyper, dtype)
    state, trace = laq_jax.run(spec, data, hyper, num_steps, state=state0)
    np_state, np_trace = npref.run(
        numpy_loss_grad(problem_name), np.asarray(xs, dtype), ys,
        npref.init(np.asarray(state0.theta_P), NUM_WORKERS),
        numpy_hyper(algo), num_steps)
    sent_mismatch = int(np.sum(np.asarray(trace.sent_M) != np_trace['sent']))
    bits_mismatch = int(np.sum(np.asarray(trace.bits_M) != np_trace['bits']))
    loss_rel = float(np.max(np.abs(np.asarray(trace.loss) - np_trace['loss'])
                            / np.abs(np_trace['loss'])))
    theta_diff = float(np.max(np.abs(np.asarray(state.theta_P)
                                     - np_state.theta_P)))
    strict = jnp.dtype(dtype) == jnp.float64
    ok = sent_mismatch == 0 and bits_mismatch == 0 and loss_rel < (
        1e-9 if strict else 1e-3)
    results.append({
        'problem': problem_name, 'algo': algo, 'dtype': jnp.dtype(dtype).name,
        'steps': num_steps, 'samples_per_worker': per_worker,
        'uploads_jax': int(np.sum(trace.sent_M)),
        'uploads_numpy': int(np.sum(np_trace['sent'])),
        'sent_mismatches': sent_mismatch, 'bits_mismatches': bits_mismatch,
        'loss_max_rel_diff': loss_rel, 'theta_max_abs_diff': theta_diff,
        'strict': bool(strict), 'ok': bool(ok),
    })
  return results


# ---------------------------------------------------------------------------
# Sweeps.


def grid_point(index: int, dtype) -> laq_jax.Hyper:
  """The index-th point of a bits x xi x seed grid of laq."""
  bits = (2, 3, 4, 8)[index % 4]
  xi = (0.2, 0.4, 0.8, 1.6)[(index // 4) % 4]
  return laq_jax.make_hyper('laq', dtype=dtype, bits=bits, xi=xi,
                            seed=index // 16)


def bench_sweep(problem_name: str, x, y, grid_sizes, num_steps: int,
                repeats: int, dtype=jnp.float32) -> dict:
  """A vmapped G-point sweep vs G separate runs of the one-point program."""
  problem = laq_jax.get_problem(problem_name)
  data = to_data(x, y, dtype)
  spec = laq_jax.RunSpec(problem, NUM_WORKERS)
  max_g = max(grid_sizes)
  points = [grid_point(i, dtype) for i in range(max_g)]
  states = [laq_jax.init_state(spec, h, dtype) for h in points]

  single, single_compile_s = aot_run_chunk(spec, states[0], data, points[0],
                                           num_steps)
  _block(single(states[0], data, points[0]))
  sweeps = {}
  for g in grid_sizes:
    grid = laq_jax.stack_hypers(points[:g])
    grid_state = laq_jax.init_state(spec, grid, dtype)
    compiled, compile_s = aot_run_chunk(spec, grid_state, data, grid,
                                        num_steps)
    _block(compiled(grid_state, data, grid))  # warm-up
    sweeps[g] = (compiled, grid_state, grid, compile_s, maxrss_bytes())

  # Interleaved, so both sides see the same load: each repeat runs the sweep
  # of G points, then the separate runs G_prev..G-1 (one at a time); G
  # separate runs = the first G of them.
  run_times = np.full((repeats, max_g), np.inf)
  sweep_times = {g: [] for g in grid_sizes}
  for r in range(repeats):
    done = 0
    for g in grid_sizes:
      compiled, grid_state, grid, _, _ = sweeps[g]
      start = time.perf_counter()
      _block(compiled(grid_state, data, grid))
      sweep_times[g].append(time.perf_counter() - start)
      for i in range(done, g):
        start = time.perf_counter()
        _block(single(states[i], data, points[i]))
        run_times[r, i] = time.perf_counter() - start
      done = g
  per_run = run_times.min(axis=0)

  rows = []
  for g in grid_sizes:
    compiled, _, _, compile_s, rss = sweeps[g]
    sweep_s = min(sweep_times[g])
    separate_s = float(np.sum(per_run[:g]))
    rows.append({
        'G': g, 'sweep_s': sweep_s, 'separate_s': separate_s,
        'sweep_speedup': separate_s / sweep_s,
        'sweep_per_point_iter_s': sweep_s / g / num_steps,
        'sweep_over_G1': sweep_s / min(sweep_times[grid_sizes[0]]),
        'compile_s': compile_s, 'memory': memory_bytes(compiled),
        'maxrss_bytes_after_warmup': rss,
    })
  return {'problem': problem_name, 'num_steps': num_steps, 'repeats': repeats,
          'single_compile_s': single_compile_s,
          'single_per_iter_s': float(np.median(per_run)) / num_steps,
          'rows': rows}


def largest_grid(problem_name: str, x_shape, grid_sizes, num_steps: int,
                 dtype=jnp.float32, rows=None) -> dict:
  """Largest G whose sweep program fits, from XLA's memory analysis.

  The program's bytes (arguments + outputs + temporaries) are measured for
  two grid sizes (compiling on abstract shapes, nothing is allocated, unless
  `rows` from `bench_sweep` already have them); they grow linearly in G, so
  G_max = (available - intercept) / slope.
  """
  if rows is None:
    problem = laq_jax.get_problem(problem_name)
    spec = laq_jax.RunSpec(problem, NUM_WORKERS)
    data = laq_jax.Data(jax.ShapeDtypeStruct(x_shape, dtype),
                        jax.ShapeDtypeStruct(x_shape[:2], jnp.int32))
    rows = []
    for g in grid_sizes:
      grid = laq_jax.stack_hypers([grid_point(i, dtype) for i in range(g)])
      state = jax.eval_shape(lambda h: laq_jax.init_state(spec, h, dtype),
                             grid)
      compiled = laq_jax.run_chunk.lower(spec, state, data, grid,
                                         num_steps).compile()
      rows.append({'G': g, 'memory': memory_bytes(compiled)})
  sizes = [(r['G'], r['memory'].get('total')) for r in rows
           if r['memory'].get('total')]
  if len(sizes) < 2:
    return {'problem': problem_name, 'largest_G': None,
            'how': 'memory_analysis unavailable on this backend'}
  (g0, b0), (g1, b1) = sizes[-2], sizes[-1]
  slope = (b1 - b0) / (g1 - g0)
  intercept = b0 - slope * g0
  available, source = device_memory_limit()
  largest = int((available - intercept) // slope) if slope > 0 else None
  return {
      'problem': problem_name, 'num_steps': num_steps,
      'bytes_by_G': {g: b for g, b in sizes},
      'bytes_per_point': slope, 'bytes_fixed': intercept,
      'available_bytes': available, 'available_source': source,
      'largest_G': largest,
      'how': (f'linear fit of XLA memory_analysis totals at G={g0} and '
              f'G={g1}; (available - fixed) / per-point'),
  }


# ---------------------------------------------------------------------------
# Report.


def _ms(s):
  return f'{s * 1e3:9.2f} ms'


def _g(v, unit=''):
  return f'{v / 1e9:9.2f} G{unit}'


def _spread(r, key):
  return f"[{r['ratios'][key]['min']:.2f}..{r['ratios'][key]['max']:.2f}]"


def print_table(res: dict) -> None:
  m = res['machine']
  lines = [
      f"machine: {m['cpu_model']}, {m['cpus_usable']} usable CPUs, "
      f"{(m['mem_total_bytes'] or 0) / 2**30:.1f} GiB RAM, backend "
      f"{m['backend']} {m['devices']}, jax {m['jax']}, "
      f"load avg start {m['load_average_start'][0]:.2f} "
      f"end {m['load_average_end'][0]:.2f}",
      '',
      f"{'measure':<46}{'value':>16}",
      '-' * 62,
      f"{res['matmul']['probe']:<46}"
      f"{_g(res['matmul']['rate'], 'FLOP/s'):>16}",
      f"{'read bandwidth, ' + res['bandwidth']['probe']:<46}"
      f"{_g(res['bandwidth']['rate'], 'B/s'):>16}",
  ]
  for name in ('logreg', 'mlp'):
    r = res['laq_vs_gd'][name]
    p = r['per_iter_s']
    lines += [
        '',
        f"[{name}: P={r['num_params']}, N={r['num_samples']}, M={NUM_WORKERS}, "
        f"float32, T={r['num_steps']}, compile {r['compile_s']:.1f} s]",
        f"{'  laq  per iteration (run_chunk)':<46}{_ms(p['laq']):>16}",
        f"{'  gd   per iteration (run_chunk, same program)':<46}"
        f"{_ms(p['gd']):>16}",
        f"{'  plain GD scan, no rule (written here)':<46}"
        f"{_ms(p['plain_gd']):>16}",
        f"{'  rule step alone (fixed gradients)':<46}"
        f"{_ms(p['rule_only']):>16}",
        f"{'  GD on one batch, no worker axis':<46}"
        f"{_ms(p['unsharded_gd']):>16}",
        f"{'  laq / gd, median of paired ' + _spread(r, 'laq/gd'):<46}"
        f"{r['laq_over_gd']:>14.3f} x",
        f"{'  laq / plain GD ' + _spread(r, 'laq/plain_gd'):<46}"
        f"{r['laq_over_plain_gd']:>14.3f} x",
        f"{'  rule / laq iteration':<46}{r['rule_fraction']:>14.3f}",
        f"{'  gradient matmul FLOP/s (laq)':<46}"
        f"{_g(r['flops_per_s_laq'], 'FLOP/s'):>16}",
        f"{'  dense matmul FLOP/s (interleaved)':<46}"
        f"{_g(r['matmul_flops_per_s'], 'FLOP/s'):>16}",
        f"{'  fraction of matmul FLOP/s':<46}{r['matmul_fraction']:>16.3f}",
        f"{'  X read bytes/s (2 passes, laq)':<46}"
        f"{_g(r['bytes_per_s_laq'], 'B/s'):>16}",
        f"{'  read bandwidth (interleaved)':<46}"
        f"{_g(r['read_bytes_per_s'], 'B/s'):>16}",
        f"{'  fraction of read bandwidth':<46}{r['bandwidth_fraction']:>16.3f}",
    ]
  lines += ['', f"[laq-jax vs NumPy reference, logreg laq, "
                f"N={res['laq_vs_gd']['logreg']['num_samples']}]"]
  for dtype, r in res['jax_vs_numpy'].items():
    lines += [
        f"{'  ' + dtype + ' laq-jax per iteration':<46}"
        f"{_ms(r['jax_per_iter_s']):>16}",
        f"{'  ' + dtype + ' NumPy per iteration':<46}"
        f"{_ms(r['numpy_per_iter_s']):>16}",
        f"{'  ' + dtype + ' laq-jax / NumPy':<46}{r['jax_over_numpy']:>14.3f} x",
    ]
  s = res['sweep']
  lines += ['', f"[sweep: {s['problem']} laq, T={s['num_steps']}, one-point "
                f"program {_ms(s['single_per_iter_s']).strip()}/iter]",
            f"{'  G':<6}{'sweep':>12}{'separate':>12}{'speedup':>10}"
            f"{'vs G=1':>8}{'ms/pt/it':>10}{'compile':>9}{'XLA MiB':>9}"]
  for r in s['rows']:
    mem = r['memory'].get('total')
    lines.append(
        f"  {r['G']:<4}{r['sweep_s']:>11.3f}s{r['separate_s']:>11.3f}s"
        f"{r['sweep_speedup']:>9.2f}x{r['sweep_over_G1']:>7.2f}x"
        f"{r['sweep_per_point_iter_s'] * 1e3:>10.2f}{r['compile_s']:>8.1f}s"
        f"{(mem or 0) / 2**20:>9.1f}")
  for name, r in res['largest_grid'].items():
    lines.append(f"{'  largest G that fits, ' + name:<46}"
                 f"{str(r.get('largest_G')):>16}")
  lines += ['', '[self-check: NumPy reference vs laq-jax]']
  for r in res['self_check']:
    lines.append(
        f"  {r['problem']:<7}{r['algo']:<5}{r['dtype']:<8}"
        f"uploads {r['uploads_jax']:>4}/{r['uploads_numpy']:<4}"
        f"mismatches {r['sent_mismatches']:<3}"
        f"loss rel {r['loss_max_rel_diff']:.1e}  "
        f"{'ok' if r['ok'] else ('MISMATCH' if r['strict'] else 'differs')}")
  lines += ['', 'headline: ' + json.dumps(
      {k: res[k] for k in HEADLINE_KEYS}, default=float)]
  print('\n'.join(lines))


HEADLINE_KEYS = (
    'laq_over_gd_logreg', 'laq_over_gd_mlp', 'laq_over_plain_gd_logreg',
    'laq_over_plain_gd_mlp', 'jax_over_numpy', 'jax_over_numpy_float32',
    'jax_over_numpy_float64', 'sweep_speedup', 'matmul_fraction',
    'matmul_fraction_logreg', 'bandwidth_fraction_logreg', 'self_check_ok')


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='a data subset and smaller grids (under a minute)')
  parser.add_argument('--out', default=None, help='where to write the JSON')
  parser.add_argument('--data_dir', default=None,
                      help='MNIST directory (default: LAQ_JAX_DATA, ...)')
  parser.add_argument('--repeats', type=int, default=None,
                      help='timed repeats per measurement (min is kept)')
  args = parser.parse_args(argv)

  start = time.perf_counter()
  laq_jax.set_precision('float64')  # float64 arrays are asked for explicitly
  quick = args.quick
  repeats = args.repeats or (3 if quick else 5)
  result = {'command': ' '.join([os.path.basename(sys.executable)]
                                + sys.argv),
            'quick': quick, 'machine': describe_machine()}
  x_full, y_full = load_shards(args.data_dir, None)
  x, y = (x_full[:, :600], y_full[:, :600]) if quick else (x_full, y_full)

  def log(msg):
    print(f'[{time.perf_counter() - start:6.1f}s] {msg}', file=sys.stderr,
          flush=True)

  log('machine limits')
  probes = {'matmul': matmul_probe(1024 if quick else 2048),
            'bandwidth': bandwidth_probe(2**26 if quick else 2**28)}
  result['matmul'] = bench_probe(probes['matmul'], repeats + 2)
  result['bandwidth'] = bench_probe(probes['bandwidth'], repeats + 2)

  result['laq_vs_gd'] = {}
  for name, steps in (('logreg', 10), ('mlp', 2)):
    log(f'laq vs gd: {name}')
    result['laq_vs_gd'][name] = bench_laq_vs_gd(name, x, y, steps, repeats,
                                                probes)

  result['jax_vs_numpy'] = {}
  for dtype in (jnp.float32, jnp.float64):
    log(f'laq-jax vs NumPy: {jnp.dtype(dtype).name}')
    result['jax_vs_numpy'][jnp.dtype(dtype).name] = bench_jax_vs_numpy(
        x, y, dtype, jax_steps=5, numpy_steps=2, repeats=repeats)

  log('self-check')
  # 128 samples per worker: no class is exactly a tenth of a shard, so no
  # gradient coordinate is zero up to rounding (see self_check).
  result['self_check'] = self_check(x_full, y_full, per_worker=128,
                                    num_steps=20)

  log('sweep')
  grid_sizes = (1, 4, 16) if quick else (1, 4, 16, 64)
  result['sweep'] = bench_sweep('logreg', x, y, grid_sizes, num_steps=3,
                                repeats=2 if quick else 3)
  log('largest grid')
  result['largest_grid'] = {
      'logreg': largest_grid('logreg', x.shape, None, 3,
                             rows=result['sweep']['rows']),
      'mlp': largest_grid('mlp', x_full.shape, (2, 4) if quick else (4, 16),
                          3),
  }

  lg, mlp = result['laq_vs_gd']['logreg'], result['laq_vs_gd']['mlp']
  result.update({
      'laq_over_gd_logreg': lg['laq_over_gd'],
      'laq_over_gd_mlp': mlp['laq_over_gd'],
      'laq_over_plain_gd_logreg': lg['laq_over_plain_gd'],
      'laq_over_plain_gd_mlp': mlp['laq_over_plain_gd'],
      'laq_over_gd_target': LAQ_OVER_GD_TARGET,
      'jax_over_numpy_float32': result['jax_vs_numpy']['float32'][
          'jax_over_numpy'],
      'jax_over_numpy_float64': result['jax_vs_numpy']['float64'][
          'jax_over_numpy'],
      'sweep_speedup': result['sweep']['rows'][-1]['sweep_speedup'],
      'sweep_speedup_by_G': {r['G']: r['sweep_speedup']
                             for r in result['sweep']['rows']},
      # The MLP gradient is matmul-bound; logreg (C = 10 columns) is not.
      'matmul_fraction': mlp['matmul_fraction'],
      'matmul_fraction_logreg': lg['matmul_fraction'],
      'bandwidth_fraction_logreg': lg['bandwidth_fraction'],
      'self_check_ok': all(r['ok'] for r in result['self_check']
                           if r['strict']),
      'maxrss_bytes': maxrss_bytes(),
  })
  result['jax_over_numpy'] = result['jax_over_numpy_float32']
  result['machine']['load_average_end'] = os.getloadavg()
  result['seconds'] = time.perf_counter() - start
  print_table(result)
  log('done')
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(result, f, indent=1, default=_json_default)
  return 0 if result['self_check_ok'] else 1


def _json_default(value):
  if isinstance(value, (np.generic,)):
    return value.item()
  if isinstance(value, np.ndarray):
    return value.tolist()
  return str(value)


if __name__ == '__main__':
  sys.exit(main())
