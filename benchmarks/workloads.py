"""laq vs gd, and the programs laq is measured against.

The data (MNIST in M = 10 contiguous shards), the gradient's FLOP count, and
`bench_laq_vs_gd`: laq and gd through `laq_jax.run_chunk` (the same compiled
program: they differ only in the Hyper switches), a plain gradient-descent
scan with no rule, the rule step alone on fixed gradients, and gradient
descent without the worker axis, timed interleaved with the machine-limit
probes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import laq_jax
from laq_jax import data as data_lib
from laq_jax import loop as loop_lib
from laq_jax import rules
from benchmarks.timing import aot, aot_run_chunk, memory_bytes, paired_ratio
from benchmarks.timing import time_interleaved

NUM_WORKERS = 10


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
               num_steps: int, rule: rules.Rule = rules.LAQ):
  """The rule step alone, on fixed gradients (its cost without the gradient).

  Called as `laq_jax.loop` calls it: the step count, every worker's id and
  every compressor of a default RunSpec (the program laq runs in).
  """
  num_workers = grads_MxP.shape[0]
  worker_ids_M = jnp.arange(num_workers, dtype=jnp.int32)

  def body(carry, _):
    step, theta, rule_state = carry
    theta, rule_state, stats = rule.step(
        grads_MxP, rule_state, theta, hyper, step_count=step,
        worker_ids_M=worker_ids_M, num_workers=num_workers, axis_name=None,
        compressor_names=laq_jax.COMPRESSORS)
    row = (stats.sent_M, stats.bits_M, stats.innovation_M, stats.threshold_M,
           stats.error_M)
    return (step + 1, theta, rule_state), row

  return jax.lax.scan(body, (jnp.int32(0), theta_P, state), None,
                      length=num_steps)


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

