"""Sweeps: a grid of hyperparameters and algorithms as ONE compiled program.

    points = expand_grid({'bits': [2, 4], 'xi': [0.4, 0.8]}, base=values)
    result = run_sweep(spec, data, points, num_steps=300, batch_size=16)
    accuracy_G = accuracies(problem, result.theta_GxP, x_test, y_test)
    rows = metrics.summarize_sweep(result, fstar=f_star, target=1e-6,
                                   test_accuracy=accuracy_G)

A grid point is a dict of the run's numeric hyperparameters plus its
algorithm; every point of a sweep shares the static part of the run (model,
data, M, D, precision, chunk length and full-batch vs minibatch gradients),
so the points become a leading axis G of the `Hyper` pytree and
`laq_jax.run_chunk` runs the whole scan for each of them, one after another
(`RunSpec.grid_axis='map'`, each point bit for bit its run alone) or vmapped
('vmap'); the data are shared, not copied. The algorithms differ only in
data (`Hyper.compressor`, `innovation`, `lazy`), so `algo` is a grid axis
like any other; full-batch and minibatch algorithms cannot share one program,
so `run_sweep` runs them as two (`programs`).

A grid too large for memory runs in batches of `batch_size` points; the last
batch is padded (with copies of its last point, dropped from the results) to
the same size, so every batch reuses the one compiled program.

Outputs are NumPy. Summaries are in `laq_jax.metrics` (`summarize_sweep`,
`curve_arrays`), figures in `laq_jax.plotting` (`heatmap_figure`,
`pareto_figure`).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import compressors
from laq_jax import loop
from laq_jax.hyper import (ALGORITHMS, DEFAULTS, Hyper, check_scalar,
                           get_algorithm, make_hyper, stack_hypers)
from laq_jax.loop import Data, LoopState, RunSpec, Trace
from laq_jax.problems import Problem

HYPER_KEYS = tuple(DEFAULTS)  # step_size, bits, xi, ..., seed
# Every key a grid may vary, in the order points are enumerated (the first
# key varies slowest, the last fastest), whatever order the grid lists them.
GRID_KEYS = ('algo',) + HYPER_KEYS


# ----------------------------------------------------------------------------
# Grid declaration -> points.

def check_grid(grid: Mapping[str, Sequence[Any]]) -> dict[str, list]:
  """Checks a grid declaration; returns it as {key: list of values}.

  Args:
    grid: {key: non-empty list of values}, keys from GRID_KEYS.

  Returns:
    The axes in GRID_KEYS order.

  Raises:
    ValueError: an unknown key (named, with the allowed ones), an empty or
      non-list axis, a repeated value, or a value that is not allowed.
  """
  if not isinstance(grid, Mapping) and not hasattr(grid, 'keys'):
    raise ValueError(f'sweep grid={grid!r} is not allowed: it must be a '
                     'mapping {key: [values]} with keys from '
                     f'{", ".join(GRID_KEYS)}')
  keys = list(grid.keys())
  unknown = [k for k in keys if k not in GRID_KEYS]
  if unknown:
    raise ValueError(f'unknown sweep key(s) {", ".join(map(repr, unknown))}; '
                     f'allowed: {", ".join(GRID_KEYS)}')
  axes = {}
  for key in GRID_KEYS:
    if key not in keys:
      continue
    values = grid[key]
    if isinstance(values, (str, bytes)) or not isinstance(
        values, (list, tuple, np.ndarray)) or len(values) == 0:
      raise ValueError(f'sweep[{key!r}]={values!r} is not allowed: it must '
                       'be a non-empty list of values')
    values = [v.item() if isinstance(v, np.generic) else v for v in values]
    for value in values:
      check_value(key, value, where=f'sweep[{key!r}]')
    if len(set(values)) != len(values):
      raise ValueError(f'sweep[{key!r}]={values!r} repeats a value; list '
                       'each value once')
    axes[key] = values
  return axes


def check_value(key: str, value, where: str | None = None) -> None:
  """Raises ValueError unless `value` is allowed for grid key `key`."""
  where = where or key
  if key == 'algo':
    try:
      get_algorithm(value)
    except ValueError:
      raise ValueError(f'{where} value {value!r} is not allowed: use one of '
                       f'{", ".join(ALGORITHMS)}') from None
    return
  check_scalar(key, value, where)


def expand_grid(grid: Mapping[str, Sequence[Any]], base: Any
                ) -> list[dict[str, Any]]:
  """The Cartesian product of the grid's axes, over the values of `base`.

  Args:
    grid: {key: [values]} (see `check_grid`); {} gives the single base point.
    base: a run config (ConfigDict, mapping or attribute object) holding
      `algo` and every Hyper field (step_size, bits, ..., seed): the values of
      the keys the grid does not vary.

  Returns:
    One dict per point with every key of GRID_KEYS, in GRID_KEYS order with
    the last key varying fastest.

  Raises:
    ValueError: as `check_grid`.
  """
  axes = check_grid(grid)
  fixed = {}
  for key in GRID_KEYS:
    if key in axes:
      continue
    value = base[key] if isinstance(base, Mapping) else getattr(base, key)
    check_value(key, value, where=f'config.{key}')
    fixed[key] = value
  points = []
  for combo in itertools.product(*axes.values()):
    point = {**fixed, **dict(zip(axes, combo))}
    points.append({k: point[k] for k in GRID_KEYS})
  return points


def programs(points: Sequence[Mapping[str, Any]]
             ) -> list[tuple[bool, list[int]]]:
  """The compiled programs a sweep needs: one per kind of gradient.

  Full-batch and minibatch gradients are different programs (the gradient
  is static); every other choice is data in one program.

  Returns:
    [(stochastic, indices of its points)], in the order the kinds first
    appear.
  """
  if not points:
    raise ValueError('a sweep needs at least one grid point')
  groups: dict[bool, list[int]] = {}
  for i, p in enumerate(points):
    groups.setdefault(get_algorithm(p['algo']).stochastic, []).append(i)
  return list(groups.items())


def parts_of(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """The RunSpec parts the points' algorithms need (what a program
  compiles in): compressors, error_feedback, downlink."""
  algos = [get_algorithm(p['algo']) for p in points]
  return dict(
      compressors=compressors.check_names({a.compressor for a in algos}),
      error_feedback=any(a.error_feedback for a in algos),
      downlink=any(a.downlink for a in algos))


def varying_keys(points: Sequence[Mapping[str, Any]]) -> list[str]:
  """The GRID_KEYS whose value differs between points."""
  return [k for k in GRID_KEYS if len({p[k] for p in points}) > 1]


def point_label(point: Mapping[str, Any], keys: Sequence[str]) -> str:
  """'algo=laq bits=4' from the given keys (for legends and logs)."""
  return ' '.join(f'{k}={point[k]:g}' if isinstance(point[k], float)
                  else f'{k}={point[k]}' for k in keys)


def stack_points(points: Sequence[Mapping[str, Any]], dtype=jnp.float32,
                 authors_code: bool = False) -> Hyper:
  """The grid Hyper [G] of the points (compressor, innovation, trigger,
  error feedback and the broadcast's bits from each point's algo)."""
  return stack_hypers([
      make_hyper(p['algo'], dtype=dtype, authors_code=authors_code,
                 **{k: p[k] for k in HYPER_KEYS}) for p in points])


def batches(num_points: int, batch_size: int | None
            ) -> list[tuple[list[int], list[int]]]:
  """Splits range(num_points) into equal batches, the last one padded.

  Returns:
    [(real point indices, padded indices of length batch_size)]: the padding
    repeats the batch's last point.
  """
  if num_points < 1:
    raise ValueError('a sweep needs at least one grid point')
  size = num_points if not batch_size else min(batch_size, num_points)
  if size < 1:
    raise ValueError(f'batch_size={batch_size} is not allowed: it must be an '
                     'integer >= 1, or None / 0 for all points at once')
  out = []
  for start in range(0, num_points, size):
    real = list(range(start, min(start + size, num_points)))
    out.append((real, real + [real[-1]] * (size - len(real))))
  return out


# ----------------------------------------------------------------------------
# Running.

class SweepResult(NamedTuple):
  """Every point's run, NumPy, leading axis G in the order of `points`.

  Attributes:
    points: the grid points.
    loss_GxT: f(theta^k) before step k.
    grad_norm_sq_GxT: ||sum_m g_m||^2 at theta^k.
    sent_GxTxM: who uploaded at each step.
    bits_GxTxM: bits each worker uploaded at each step (int32).
    bits_down_GxTxM: bits each worker received at each step (int32).
    final_loss_G: f(theta^T) after the last step.
    theta_GxP: the final parameters theta^T.
    loss_every_G: each point's logged-loss interval (`RunSpec.log_every` of
      its program: loss_GxT is NaN at the other iterations); None: every
      iteration.
  """
  points: list[dict[str, Any]]
  loss_GxT: np.ndarray
  grad_norm_sq_GxT: np.ndarray
  sent_GxTxM: np.ndarray
  bits_GxTxM: np.ndarray
  bits_down_GxTxM: np.ndarray
  final_loss_G: np.ndarray
  theta_GxP: np.ndarray
  loss_every_G: np.ndarray | None = None


class Progress(NamedTuple):
  """What `run_sweep` passes its callback after each chunk.

  Attributes:
    batch: index of the batch running (0-based).
    num_batches: how many batches the sweep has.
    point_indices: the grid points of this batch (indices into `points`);
      the first len(point_indices) rows of `state` and `trace` are theirs,
      the rest (if any) is padding.
    steps_done: iterations of this batch done so far.
    num_steps: iterations per point.
    state: the batch's LoopState after the chunk (padded rows included).
    trace: the chunk's Trace as NumPy, padded rows dropped.
  """
  batch: int
  num_batches: int
  point_indices: list[int]
  steps_done: int
  num_steps: int
  state: LoopState
  trace: Trace


@jax.jit(static_argnums=0)
def _final_losses(problem: Problem, theta_GxP, data: Data, l2_G):
  return jax.vmap(lambda theta, l2: loop.objective(problem, theta, data, l2))(
      theta_GxP, l2_G)


def run_sweep(spec: RunSpec, data: Data, points: Sequence[Mapping[str, Any]],
              num_steps: int, batch_size: int | None = None,
              chunk_size: int | None = None,
              callback: Callable[[Progress], None] | None = None, *,
              run_chunk_fn: Callable | None = None,
              checkpointer=None, checkpoint_every: int = 0,
              authors_code: bool = False) -> SweepResult:
  """Runs every grid point for `num_steps` iterations, batches of one program.

  Full-batch and minibatch algorithms run as two programs (`programs`), each
  compiling only the parts its points use (`parts_of`); everything else the
  points vary is data.

  Args:
    spec: the static RunSpec shared by every point (its `stochastic` and
      parts are set per program from the points).
    data: worker shards (their dtype is the run's precision).
    points: from `expand_grid`.
    num_steps: T, iterations per point.
    batch_size: grid points per compiled call (None or 0: all of a program's
      points at once). The last batch of a program is padded to this size,
      so its batches share one compiled program.
    chunk_size: iterations per compiled call (default: all T at once); a
      shorter last chunk compiles once more, the same for every batch.
    callback: called with a `Progress` after each chunk of each batch.
    run_chunk_fn: replaces `laq_jax.run_chunk` (e.g.
      `laq_jax.sharding.make_run_chunk(mesh)`, workers on devices).
    checkpointer: a `laq_jax.checkpoint.Checkpointer` fingerprinted with the
      sweep's config, or None. The sweep first resumes from its latest
      checkpoint, then saves one after every `checkpoint_every` iterations of
      a batch and at the end of each batch (checkpoint step
      b * T + k: batch b after k iterations). A checkpoint holds the batch's
      grid LoopState, its trace so far and every finished batch's results,
      so the result equals, bit for bit, a sweep that never stopped.
    checkpoint_every: iterations between checkpoints inside a batch, a
      multiple of `chunk_size` (0: only at the end of each batch).
    authors_code: every point follows the authors' scripts (see
      `laq_jax.Hyper`).

  Returns:
    A SweepResult in the order of `points` (padding dropped).

  Raises:
    ValueError: num_steps < 1; checkpoint_every is not a multiple of
      chunk_size.
  """
  points = [dict(p) for p in points]
  if num_steps < 1:
    raise ValueError(f'num_steps={num_steps} is not allowed: it must be an '
                     'integer >= 1')
  chunk = chunk_size or num_steps
  if checkpoint_every < 0 or checkpoint_every % chunk:
    raise ValueError(f'checkpoint_every={checkpoint_every} is not allowed: '
                     f'it must be 0 or a multiple of chunk_size={chunk}')
  dtype = data.x_MxNxD.dtype
  stack = lambda indices: stack_points([points[i] for i in indices], dtype,
                                       authors_code)
  # (the program's spec, real point indices, padded indices) per batch.
  plan = []
  for stochastic, members in programs(points):
    program = dataclasses.replace(
        spec, stochastic=stochastic,
        **parts_of([points[i] for i in members]))
    for real, padded in batches(len(members), batch_size):
      plan.append((program, [members[i] for i in real],
                   [members[i] for i in padded]))
  finished = []  # finished batches: _PART_NAMES, real rows
  start_batch, resume = 0, None
  if checkpointer is not None:
    like = loop.init_state(plan[0][0], stack(plan[0][2]), dtype)
    restored = checkpointer.restore(like)
    if restored is not None:
      start_batch, steps_done = divmod(restored.step, num_steps)
      a = restored.arrays
      if 'done_loss' in a:
        finished.append(tuple(a[f'done_{n}'] for n in _PART_NAMES))
      if steps_done:
        resume = (restored.state, steps_done,
                  tuple(a[n] for n in _TRACE_NAMES))

  def finished_arrays():
    if not finished:
      return {}
    return {f'done_{n}': np.concatenate(x)
            for n, x in zip(_PART_NAMES, zip(*finished))}

  for b, (program, real, padded) in enumerate(plan):
    if b < start_batch:
      continue
    hyper = stack(padded)
    keep = len(real)
    state, done, recorded = None, 0, []
    if resume is not None and b == start_batch:
      state, done, head = resume
      recorded.append(head)
    steps_before = done

    def on_chunk(state, trace, b=b, real=real, keep=keep, recorded=recorded):
      nonlocal done
      done += trace.loss.shape[1]
      recorded.append(tuple(
          np.asarray(getattr(trace, field))[:keep]
          for field in _TRACE_FIELDS))
      if callback is not None:
        callback(Progress(b, len(plan), real, done, num_steps, state,
                          jax.tree.map(lambda a: a[:keep], trace)))
      if (checkpointer is not None and checkpoint_every
          and done % checkpoint_every == 0 and done < num_steps):
        checkpointer.save(b * num_steps + done, state,
                          {**finished_arrays(), **_joined(recorded)})

    state, _ = loop.run(program, data, hyper, num_steps - steps_before,
                        chunk_size=chunk_size, state=state,
                        callback=on_chunk, run_chunk_fn=run_chunk_fn)
    final = _final_losses(program.problem, state.theta_P, data, hyper.l2)
    joined = _joined(recorded)
    finished.append(tuple(joined[n] for n in _TRACE_NAMES)
                    + (np.asarray(final)[:keep],
                       np.asarray(state.theta_P)[:keep]))
    if checkpointer is not None:
      checkpointer.save((b + 1) * num_steps, state, finished_arrays())
  # Back to the order of `points` (the programs ran kind by kind).
  order = np.argsort(np.concatenate([real for _, real, _ in plan]),
                     kind='stable')
  columns = [np.concatenate(x)[order] for x in zip(*finished)]
  loss, grad_norm, sent, bits, bits_down, final, theta = columns
  every = np.empty(len(points), np.int64)
  for program, real, _ in plan:
    every[real] = program.log_every
  return SweepResult(points, loss, grad_norm, sent.astype(bool), bits,
                     bits_down, final, theta, every)


# What a batch records per step (the Trace fields), and what a finished
# batch keeps.
_TRACE_NAMES = ('loss', 'grad_norm', 'sent', 'bits', 'bits_down')
_TRACE_FIELDS = ('loss', 'grad_norm_sq', 'sent_M', 'bits_M', 'bits_down_M')
_PART_NAMES = _TRACE_NAMES + ('final', 'theta')


def _joined(recorded) -> dict[str, np.ndarray]:
  """The recorded chunks of a batch, joined along time, by _TRACE_NAMES."""
  out = {n: np.concatenate(x, axis=1)
         for n, x in zip(_TRACE_NAMES, zip(*recorded))}
  out['sent'] = out['sent'].astype(bool)
  return out


def accuracies(problem: Problem, theta_GxP, x_NxD, y_N) -> np.ndarray:
  """Accuracy of each point's parameters on (x, y): [G] float64."""
  predicted_GxN = np.asarray(loop.predict(problem, theta_GxP, x_NxD))
  return np.mean(predicted_GxN == np.asarray(y_N)[None], axis=1)


# ----------------------------------------------------------------------------
