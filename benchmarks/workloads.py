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
from experiments.run import roofline
from laq_jax import collectives
from laq_jax import data as data_lib
from laq_jax import layouts
from laq_jax import sweep as sweep_lib
from laq_jax import loop as loop_lib
from laq_jax import rules
from benchmarks.timing import aot, aot_run_chunk, memory_bytes, paired_ratio
from benchmarks.timing import time_interleaved

NUM_WORKERS = 10


def load_shards(data_dir, per_worker: int | None, dtype=np.float32):
  """Full MNIST (or the first `per_worker` rows of every shard), NumPy
  `dtype` (pixels divided by 255 in it, as the launchers load them)."""
  mnist = data_lib.load_mnist(data_dir, dtype=dtype)
  x, y = data_lib.make_shards(mnist['x_train'], mnist['y_train'], NUM_WORKERS)
  if per_worker is not None:
    x, y = x[:, :per_worker], y[:, :per_worker]
  return np.ascontiguousarray(x), np.ascontiguousarray(y)


def to_data(x, y, dtype, layout: bool = False) -> laq_jax.Data:
  """Data in `dtype`; `layout`: with the fast gradient's layout this machine
  runs fastest (`laq_jax.layouts.auto_layout`: the features transposed on a
  CPU; MNIST's pixels as bfloat16 integers where a probe finds that faster),
  as the launchers run logistic regression."""
  data = laq_jax.Data(jnp.asarray(x, dtype), jnp.asarray(y, jnp.int32))
  if layout:
    data = layouts.auto_layout(data, integer_scale=1 / 255)
  return data


gradient_flops = roofline.gradient_flops


def plain_gd_chunk(problem, data: laq_jax.Data, theta_P, step_size, l2,
                   num_steps: int):
  """Gradient descent with per-worker gradients and no rule: the floor.

  The loop's own full-batch gradient (`loop.full_batch`: the fast one when
  the data carry its layouts), summed as the loop sums and applied; emits
  the loss as the loop does.
  """
  value_and_grad = loop_lib.full_batch(problem, data, l2)[0]

  def body(theta, _):
    losses_M, grads_MxP = value_and_grad(theta)
    return (theta - step_size * collectives.sum_workers(grads_MxP),
            jnp.sum(losses_M))

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
  the parts of a default RunSpec (every compressor, error feedback and the
  quantized broadcast compiled in: the program laq runs in).
  """
  num_workers = grads_MxP.shape[0]
  worker_ids_M = jnp.arange(num_workers, dtype=jnp.int32)

  def body(carry, _):
    step, theta, rule_state = carry
    theta, rule_state, stats = rule.step(
        grads_MxP, rule_state, theta, hyper, step_count=step,
        worker_ids_M=worker_ids_M, num_workers=num_workers, axis_name=None,
        parts=rules.Parts.of(error_feedback=True, downlink=True))
    row = (stats.sent_M, stats.bits_M, stats.innovation_M, stats.threshold_M,
           stats.error_M)
    return (step + 1, theta, rule_state), row

  return jax.lax.scan(body, (jnp.int32(0), theta_P, state), None,
                      length=num_steps)


def bench_laq_vs_gd(problem_name: str, x, y, num_steps: int, repeats: int,
                    probes: dict, dtype=jnp.float32) -> dict:
  """laq vs gd (same program), vs plain GD, the rule alone, no worker axis.

  Logistic regression runs on the layouts the launchers give it
  (`laq_jax.fast_layout`). The machine-limit `probes` ('matmul',
  'bandwidth') are timed interleaved with the programs, so the fractions
  compare runs under the same load.
  """
  problem = laq_jax.get_problem(problem_name)
  data = to_data(x, y, dtype, layout=problem_name == 'logreg')
  # the parts laq and gd need, as the launchers compile them
  spec = laq_jax.RunSpec(problem, NUM_WORKERS, **sweep_lib.parts_of(
      [{'algo': 'laq'}, {'algo': 'gd'}]))
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
  grads_MxP = jax.jit(lambda th: loop_lib.full_batch(problem, data, hyper.l2)[0](
      th)[1])(state.theta_P)
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
  read = data.x_MxNxD if data.xq_MxNxD is None else data.xq_MxNxD
  x_bytes = read.size * read.dtype.itemsize  # what the gradient reads
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
      # The gradient reads X twice (the forward and the dW matmuls), as
      # stored (bfloat16 integers with the layout).
      'x_bytes': x_bytes,
      'bytes_per_s_laq': 2 * x_bytes / per_iter['laq'],
      'matmul_flops_per_s': limits['matmul'],
      'read_bytes_per_s': limits['bandwidth'],
      'matmul_fraction': flops / per_iter['laq'] / limits['matmul'],
      'bandwidth_fraction': 2 * x_bytes / per_iter['laq'] / limits['bandwidth'],
      'memory': memory_bytes(compiled),
  }



def bench_logreg_floor(x, y, dtype, num_steps: int, repeats: int) -> dict:
  """Logistic regression's LAQ iteration against its floor, and before/after.

  The floor of one iteration is max(gradient matmul FLOPs / the dense
  matmul rate in `dtype`, the features' bytes as stored / the read
  bandwidth) (`experiments.run.roofline`), both rates measured interleaved with
  the programs. Programs: laq through `run_chunk` on the launchers' layouts
  (`laq_jax.fast_layout`) and on plain data (autodiff of the loss: the
  code before the fast gradient), and plain gradient descent on each (the
  gradient without the rule); and the paper's program, gd/qgd/lag/laq as
  one 4-point grid (4 gradients' FLOPs; 4 passes over the features with
  its points mapped, one with them vmapped).
  """
  problem = laq_jax.get_problem('logreg')
  fast, plain = to_data(x, y, dtype, layout=True), to_data(x, y, dtype)
  spec = laq_jax.RunSpec(problem, NUM_WORKERS,  # laq's parts, as launched
                         **sweep_lib.parts_of([{'algo': 'laq'}]))
  hyper = laq_jax.make_hyper('laq', dtype=dtype)
  state = laq_jax.init_state(spec, hyper, dtype)
  programs, compile_s = {}, {}
  for name, data in (('laq', fast), ('laq_autodiff', plain)):
    compiled, compile_s[name] = aot_run_chunk(spec, state, data, hyper,
                                              num_steps)
    programs[name] = functools.partial(compiled, state, data, hyper)
  for name, data in (('gradient', fast), ('gradient_autodiff', plain)):
    compiled, compile_s[name] = aot(
        functools.partial(plain_gd_chunk, problem), data, state.theta_P,
        hyper.step_size, hyper.l2, num_steps, static_argnums=(4,))
    programs[name] = functools.partial(compiled, data, state.theta_P,
                                       hyper.step_size, hyper.l2)
  # The paper's program: gd, qgd, lag and laq as one 4-point grid (the
  # parts of those four compiled in), its points mapped (the default: each
  # reads the data itself) and vmapped (one pass over the data for all).
  paper = ('gd', 'qgd', 'lag', 'laq')
  grid = laq_jax.stack_hypers([laq_jax.make_hyper(a, dtype=dtype)
                               for a in paper])
  for name, axis in (('paper_grid', 'map'), ('paper_grid_vmap', 'vmap')):
    grid_spec = laq_jax.RunSpec(problem, NUM_WORKERS, grid_axis=axis,
                                **sweep_lib.parts_of([{'algo': a}
                                                      for a in paper]))
    grid_state = laq_jax.init_state(grid_spec, grid, dtype)
    compiled, compile_s[name] = aot_run_chunk(grid_spec, grid_state, fast,
                                              grid, num_steps)
    programs[name] = functools.partial(compiled, grid_state, fast, grid)
  probes = {'matmul': roofline.matmul_probe(2048, dtype),
            'bandwidth': roofline.bandwidth_probe(2**28)}
  times = time_interleaved({**programs, **{'probe_' + k: p.fn
                                           for k, p in probes.items()}},
                           repeats)
  per_iter = {k: min(times[k]) / num_steps for k in programs}
  rates = {k: probes[k].rate(min(times['probe_' + k])) for k in probes}
  num_samples = x.shape[0] * x.shape[1]
  flops = roofline.gradient_flops('logreg', num_samples)
  stored = fast.x_MxNxD if fast.xq_MxNxD is None else fast.xq_MxNxD
  read_bytes = stored.size * stored.dtype.itemsize
  floor = max(flops / rates['matmul'], read_bytes / rates['bandwidth'])
  floor_grid = max(len(paper) * flops / rates['matmul'],
                   len(paper) * read_bytes / rates['bandwidth'])
  floor_grid_vmap = max(len(paper) * flops / rates['matmul'],
                        read_bytes / rates['bandwidth'])
  return {
      'dtype': jnp.dtype(dtype).name, 'num_samples': num_samples,
      'num_steps': num_steps, 'repeats': repeats, 'compile_s': compile_s,
      'per_iter_s': per_iter, 'all_times_s': times,
      'gradient_flops': flops, 'feature_bytes': read_bytes,
      'feature_layout': str(stored.dtype),
      'matmul_flops_per_s': rates['matmul'],
      'read_bytes_per_s': rates['bandwidth'],
      'floor_s': floor,
      'floor_bound': ('matmul' if flops / rates['matmul']
                      >= read_bytes / rates['bandwidth'] else 'bandwidth'),
      'floor_fraction': floor / per_iter['laq'],
      'floor_fraction_gradient': floor / per_iter['gradient'],
      'floor_fraction_before': floor / per_iter['laq_autodiff'],
      'floor_s_paper_grid': floor_grid,
      'floor_fraction_paper_grid': floor_grid / per_iter['paper_grid'],
      'floor_s_paper_grid_vmap': floor_grid_vmap,
      'floor_fraction_paper_grid_vmap': (floor_grid_vmap
                                         / per_iter['paper_grid_vmap']),
      'speedup': paired_ratio(times, 'laq_autodiff', 'laq')['median'],
  }


def bench_loss_every(x, y, num_steps: int, repeats: int,
                     dtype=jnp.float32) -> dict:
  """The minibatch network (SLAQ, 500 per worker, M = 10) with its logged
  full objective every iteration vs every 10 (`RunSpec.loss_every`), and
  with none at all (the minibatch step alone), timed interleaved.

  `num_steps` should be a multiple of 10 (then loss_every = 10 evaluates the
  objective num_steps / 10 times).
  """
  problem = laq_jax.get_problem('mlp')
  data = to_data(x, y, dtype, layout=True)  # the launchers' layouts
  hyper = laq_jax.make_hyper('slaq', dtype=dtype, bits=6, step_size=0.02,
                             xi=3.0, xi_schedule='300:2,500:6')
  programs = {}
  compile_s = {}
  for name, every in (('loss_every_1', 1), ('loss_every_10', 10),
                      ('no_loss', 2**30)):
    spec = laq_jax.RunSpec(problem, NUM_WORKERS, stochastic=True,
                           batch_size=500, compressors=('uniform',),
                           error_feedback=False, downlink=False,
                           loss_every=every)
    state = laq_jax.init_state(spec, hyper, dtype)
    programs[name], compile_s[name] = aot_run_chunk(spec, state, data, hyper,
                                                    num_steps)
  state = laq_jax.init_state(spec, hyper, dtype)
  times = time_interleaved(
      {name: (lambda c=c: c(state, data, hyper)) for name, c in
       programs.items()}, repeats)
  per_iter = {k: min(v) / num_steps for k, v in times.items()}
  return {
      'problem': 'mlp', 'algo': 'slaq', 'batch_size': 500,
      'num_samples': int(x.shape[0] * x.shape[1]),
      'num_steps': num_steps, 'repeats': repeats, 'compile_s': compile_s,
      'per_iter_s': per_iter, 'all_times_s': times,
      'ratios': {
          'every_1_over_every_10': paired_ratio(times, 'loss_every_1',
                                                'loss_every_10'),
          'every_10_over_no_loss': paired_ratio(times, 'loss_every_10',
                                                'no_loss')},
  }

