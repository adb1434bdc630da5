"""Sweeps: a grid of hyperparameters and algorithms as ONE compiled program.

    points = expand_grid({'bits': [2, 4], 'xi': [0.4, 0.8]}, base=config)
    result = run_sweep(spec, data, points, num_steps=300, batch_size=16)
    accuracy_G = accuracies(problem, result.theta_GxP, x_test, y_test)
    rows = summarize(result, fstar=f_star, target=1e-6,
                     test_accuracy=accuracy_G)

A grid point is a dict of the run's numeric hyperparameters plus its
algorithm; every point of a sweep shares the static part of the run (model,
data, M, D, precision, chunk length and full-batch vs minibatch gradients),
so the points become a leading axis G of the `Hyper` pytree and
`laq_jax.run_chunk` vmaps the whole scan over it (the data is shared, not
copied). The algorithms gd/qgd/lag/laq (or sgd/qsgd/slag/slaq) differ only in
the `quantize` / `lazy` switches, which are arrays too, so `algo` is a grid
axis like any other; full-batch and minibatch algorithms cannot share one
program and are rejected together.

A grid too large for memory runs in batches of `batch_size` points; the last
batch is padded (with copies of its last point, dropped from the results) to
the same size, so every batch reuses the one compiled program.

Outputs are NumPy. Figures are returned as matplotlib Figures, never shown or
saved; `experiments/sweep.py` writes the files.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import compressors
from laq_jax import loop
from laq_jax import metrics
from laq_jax.hyper import ALGORITHMS, DEFAULTS, Hyper, get_algorithm, make_hyper
from laq_jax.hyper import validate as validate_hyper
from laq_jax.loop import Data, LoopState, RunSpec, Trace
from laq_jax.problems import Problem

HYPER_KEYS = tuple(DEFAULTS)  # step_size, bits, xi, ..., seed
# Every key a grid may vary, in the order points are enumerated (the first
# key varies slowest, the last fastest), whatever order the grid lists them.
GRID_KEYS = ('algo',) + HYPER_KEYS
INT_KEYS = ('bits', 'max_staleness', 'seed', 'levels')


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
  is_bool = isinstance(value, (bool, np.bool_))
  is_int = isinstance(value, (int, np.integer)) and not is_bool
  is_num = (is_int or isinstance(value, (float, np.floating))) and (
      math.isfinite(float(value)))
  if key in INT_KEYS and not is_int:
    raise ValueError(f'{where} value {value!r} is not allowed: it must be an '
                     'integer')
  if not is_num:
    raise ValueError(f'{where} value {value!r} is not allowed: it must be a '
                     'finite number')
  try:
    validate_hyper(**{key: value})
  except ValueError as e:
    raise ValueError(f'{where}: {e}') from None


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
    ValueError: as `check_grid`, or the points mix full-batch and stochastic
      algorithms.
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
  check_algorithms(points)
  return points


def check_algorithms(points: Sequence[Mapping[str, Any]]) -> bool:
  """Returns whether the points are stochastic; all must agree.

  Raises:
    ValueError: the points mix full-batch and minibatch algorithms (the
      gradient is a static part of the compiled program).
  """
  if not points:
    raise ValueError('a sweep needs at least one grid point')
  algos = list(dict.fromkeys(p['algo'] for p in points))
  kinds = {a: get_algorithm(a).stochastic for a in algos}
  if len(set(kinds.values())) > 1:
    full = [a for a in algos if not kinds[a]]
    stochastic = [a for a in algos if kinds[a]]
    raise ValueError(
        f'sweep algorithms {algos} mix full-batch ({", ".join(full)}) and '
        f'stochastic ({", ".join(stochastic)}) gradients, which are different '
        'compiled programs: sweep gd/qgd/lag/laq and sgd/qsgd/slag/slaq '
        'separately')
  return next(iter(kinds.values()))


def varying_keys(points: Sequence[Mapping[str, Any]]) -> list[str]:
  """The GRID_KEYS whose value differs between points."""
  return [k for k in GRID_KEYS if len({p[k] for p in points}) > 1]


def point_label(point: Mapping[str, Any], keys: Sequence[str]) -> str:
  """'algo=laq bits=4' from the given keys (for legends and logs)."""
  return ' '.join(f'{k}={point[k]:g}' if isinstance(point[k], float)
                  else f'{k}={point[k]}' for k in keys)


def stack_points(points: Sequence[Mapping[str, Any]], dtype=jnp.float32,
                 authors_code: bool = False) -> Hyper:
  """The grid Hyper [G] of the points (compressor, innovation and lazy from
  each point's algo)."""
  check_algorithms(points)
  values = {k: np.asarray([p[k] for p in points]) for k in HYPER_KEYS}
  hyper = make_hyper(points[0]['algo'], dtype=dtype,
                     authors_code=authors_code, **values)
  algos = [get_algorithm(p['algo']) for p in points]
  return hyper._replace(
      compressor=jnp.asarray([compressors.index(a.compressor) for a in algos],
                             jnp.int32),
      innovation=jnp.asarray([a.innovation for a in algos], bool),
      lazy=jnp.asarray([a.lazy for a in algos], bool),
      authors_code=jnp.full((len(points),), authors_code, bool))


def compressors_of(points: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
  """The compressors the points' algorithms use (what a program compiles)."""
  return compressors.check_names(
      {get_algorithm(p['algo']).compressor for p in points})


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
# Sweep configs: a run config (configs/default.py's fields) plus the grid.

# config.sweep: {key: [values]}; config.sweep_batch_size: grid points per
# compiled call (0: all at once).
SWEEP_FIELDS = ('sweep', 'sweep_batch_size')


def _field(config, name):
  return config[name] if isinstance(config, Mapping) else getattr(config, name)


def _has(config, name) -> bool:
  if hasattr(config, 'keys'):
    return name in config.keys()
  return hasattr(config, name)


def _grid_dict(grid) -> Any:
  return grid.to_dict() if hasattr(grid, 'to_dict') else grid


def point_config(config, point: Mapping[str, Any]):
  """The run config of one grid point: `config` without the sweep fields,
  with the point's algo and hyperparameters (for `experiments.train`).

  Returns:
    A new (unlocked) ml_collections.ConfigDict.
  """
  import ml_collections  # pylint: disable=g-import-not-at-top
  values = config.to_dict() if hasattr(config, 'to_dict') else dict(config)
  for name in SWEEP_FIELDS:
    values.pop(name, None)
  values.update({k: point[k] for k in GRID_KEYS})
  return ml_collections.ConfigDict(values)


def points_from_config(config) -> list[dict[str, Any]]:
  """Checks a sweep config and returns its grid points.

  Args:
    config: the fields of `configs/default.py` (the values of every key the
      grid does not vary) plus `sweep` ({key: [values]}, keys from GRID_KEYS)
      and `sweep_batch_size` (integer >= 0).

  Returns:
    The points, as `expand_grid`.

  Raises:
    laq_jax.build.ConfigError: a field is missing or not allowed (named, with
      its value and what is allowed).
  """
  from laq_jax import build as build_lib  # pylint: disable=g-import-not-at-top
  for name in SWEEP_FIELDS:
    if not _has(config, name):
      raise build_lib.ConfigError(
          f'config lacks field {name!r}: a sweep config declares the grid as '
          "config.sweep = {'bits': [2, 4], 'xi': [0.4, 0.8], ...} and "
          'config.sweep_batch_size (0: every point in one program); see '
          'configs/sweep_bits_xi.py')
  build_lib.validate_config(config, allow_extra=SWEEP_FIELDS)
  size = _field(config, 'sweep_batch_size')
  if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or (
      size < 0):
    raise build_lib.ConfigError(
        f'config.sweep_batch_size={size!r} is not allowed: it must be an '
        'integer >= 0 (0 runs every grid point in one program)')
  try:
    points = expand_grid(_grid_dict(_field(config, 'sweep')), config)
  except ValueError as e:
    raise build_lib.ConfigError(f'config.{e}' if str(e).startswith('sweep')
                                else str(e)) from None
  # Checks that depend on the algorithm (a minibatch must fit a shard).
  for algo in dict.fromkeys(p['algo'] for p in points):
    first = next(p for p in points if p['algo'] == algo)
    build_lib.validate_config(point_config(config, first))
  return points


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
    final_loss_G: f(theta^T) after the last step.
    theta_GxP: the final parameters theta^T.
  """
  points: list[dict[str, Any]]
  loss_GxT: np.ndarray
  grad_norm_sq_GxT: np.ndarray
  sent_GxTxM: np.ndarray
  bits_GxTxM: np.ndarray
  final_loss_G: np.ndarray
  theta_GxP: np.ndarray


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

  Args:
    spec: the static RunSpec shared by every point; `spec.stochastic` must
      match the points' algorithms.
    data: worker shards (their dtype is the run's precision).
    points: from `expand_grid`.
    num_steps: T, iterations per point.
    batch_size: grid points per compiled call (None or 0: all at once). The
      last batch is padded to this size, so all batches share one program.
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
    A SweepResult (padding dropped). The program compiles the compressors of
    the points' algorithms (`spec.compressors` is set to them).

  Raises:
    ValueError: the points mix full-batch and stochastic algorithms, or do
      not match `spec.stochastic`; checkpoint_every is not a multiple of
      chunk_size.
  """
  points = [dict(p) for p in points]
  stochastic = check_algorithms(points)
  if stochastic != spec.stochastic:
    kind = 'stochastic' if stochastic else 'full-batch'
    raise ValueError(f'the grid points are {kind} algorithms '
                     f'({sorted({p["algo"] for p in points})}) but '
                     f'spec.stochastic={spec.stochastic}; build the RunSpec '
                     'for the grid\'s algorithms')
  if num_steps < 1:
    raise ValueError(f'num_steps={num_steps} is not allowed: it must be an '
                     'integer >= 1')
  spec = dataclasses.replace(spec, compressors=compressors_of(points))
  stack = lambda pts: stack_points(pts, dtype, authors_code)
  chunk = chunk_size or num_steps
  if checkpoint_every < 0 or checkpoint_every % chunk:
    raise ValueError(f'checkpoint_every={checkpoint_every} is not allowed: '
                     f'it must be 0 or a multiple of chunk_size={chunk}')
  dtype = data.x_MxNxD.dtype
  plan = batches(len(points), batch_size)
  parts = []  # finished batches: _PART_NAMES, real rows
  start_batch, resume = 0, None
  if checkpointer is not None:
    like = loop.init_state(spec, stack([points[i] for i in plan[0][1]]),
                           dtype)
    restored = checkpointer.restore(like)
    if restored is not None:
      start_batch, steps_done = divmod(restored.step, num_steps)
      a = restored.arrays
      if 'done_loss' in a:
        parts.append(tuple(a[f'done_{n}'] for n in _PART_NAMES))
      if steps_done:
        resume = (restored.state, steps_done,
                  tuple(a[n] for n in _TRACE_NAMES))

  def finished_arrays():
    if not parts:
      return {}
    return {f'done_{n}': np.concatenate(x)
            for n, x in zip(_PART_NAMES, zip(*parts))}

  for b, (real, padded) in enumerate(plan):
    if b < start_batch:
      continue
    hyper = stack([points[i] for i in padded])
    keep = len(real)
    state, done, recorded = None, 0, []
    if resume is not None and b == start_batch:
      state, done, head = resume
      recorded.append(head)
    steps_before = done

    def on_chunk(state, trace, b=b, real=real, keep=keep, recorded=recorded):
      nonlocal done
      done += trace.loss.shape[1]
      recorded.append((trace.loss[:keep], trace.grad_norm_sq[:keep],
                       trace.sent_M[:keep], trace.bits_M[:keep]))
      if callback is not None:
        callback(Progress(b, len(plan), real, done, num_steps, state,
                          jax.tree.map(lambda a: a[:keep], trace)))
      if (checkpointer is not None and checkpoint_every
          and done % checkpoint_every == 0 and done < num_steps):
        checkpointer.save(b * num_steps + done, state,
                          {**finished_arrays(), **_joined(recorded)})

    state, _ = loop.run(spec, data, hyper, num_steps - steps_before,
                        chunk_size=chunk_size, state=state,
                        callback=on_chunk, run_chunk_fn=run_chunk_fn)
    final = _final_losses(spec.problem, state.theta_P, data, hyper.l2)
    joined = _joined(recorded)
    parts.append(tuple(joined[n] for n in _TRACE_NAMES)
                 + (np.asarray(final)[:keep],
                    np.asarray(state.theta_P)[:keep]))
    if checkpointer is not None:
      checkpointer.save((b + 1) * num_steps, state, finished_arrays())
  loss, grad_norm, sent, bits, final, theta = (np.concatenate(x)
                                               for x in zip(*parts))
  return SweepResult(points, loss, grad_norm, sent.astype(bool), bits, final,
                     theta)


# What a batch records per step, and what a finished batch keeps.
_TRACE_NAMES = ('loss', 'grad_norm', 'sent', 'bits')
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
# Summaries.

def paper_references(result: SweepResult) -> np.ndarray:
  """[G] the paper's residual reference of each point: the smallest average
  worker loss (1/M) f(theta^k), k = 0..T, that any point with the same
  objective (the same l2) reached. Diverged values are ignored."""
  num_workers = result.sent_GxTxM.shape[-1]
  average = np.concatenate([result.loss_GxT, result.final_loss_G[:, None]],
                           axis=1) / num_workers
  average = np.where(np.isfinite(average), average, np.inf)
  lowest = average.min(axis=1)
  l2 = np.asarray([p['l2'] for p in result.points], np.float64)
  out = np.empty(len(result.points))
  for value in np.unique(l2):
    group = l2 == value
    out[group] = lowest[group].min()
  return np.where(np.isfinite(out), out, np.nan)


def summarize(result: SweepResult, *, fstar, target: float,
              test_accuracy=None) -> list[dict[str, Any]]:
  """One row per point: its hyperparameters, then `metrics.summarize`'s figures.

  Args:
    result: from `run_sweep`.
    fstar: f* (a number or None), or one per point (a sequence; the points
      may differ in l2 and so in f).
    target: the residual the at-target figures refer to (both the exact and
      the paper's residual; see `metrics.summarize`).
    test_accuracy: [G] accuracies of the final parameters, or None.

  Returns:
    JSON-ready dicts: 'point' (index), every GRID_KEYS key, then the keys of
    `metrics.summarize` (iterations, total_uploads, total_bits, final_loss,
    final_residual, final_test_accuracy, fstar, target_residual,
    target_iteration, target_uploads, target_bits, paper_reference,
    paper_final_residual, paper_target_iteration, paper_target_uploads,
    paper_target_bits, last_grad_norm_sq; None where unknown / not
    reached), diverged, diverged_at. The paper's residual of every point is
    measured from the smallest average loss any point of the sweep with the
    same objective reached (`paper_references`), as the authors did across
    the algorithms of an experiment.

  A point whose loss became NaN or inf at step k (`metrics.diverged_at`) is
  summarized as `experiments.train` summarizes a run stopped there: its
  steps 0..k count, its final loss and accuracy are None, `diverged` is
  True and `diverged_at` is k. The other points are unaffected (each point
  of the vmapped program computes on its own).
  """
  num = len(result.points)
  if fstar is None or np.ndim(fstar) == 0:
    fstar = [fstar] * num
  references = paper_references(result)
  rows = []
  for g, point in enumerate(result.points):
    acc = None if test_accuracy is None else float(test_accuracy[g])
    final = float(result.final_loss_G[g])
    at = metrics.diverged_at(result.loss_GxT[g], final)
    steps = slice(None) if at is None else slice(0, at + 1)
    if at is not None:
      final, acc = math.nan, None
    row = metrics.summarize(
        loss_T=result.loss_GxT[g][steps], final_loss=final,
        sent_TxM=result.sent_GxTxM[g][steps],
        bits_TxM=result.bits_GxTxM[g][steps],
        fstar=None if fstar[g] is None else float(fstar[g]), target=target,
        final_test_accuracy=acc,
        grad_norm_sq_T=result.grad_norm_sq_GxT[g][steps],
        paper_reference=float(references[g]), point=g, **point)
    row['diverged_at'] = at
    rows.append(row)
  return rows


def columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
  """The rows as NumPy columns (None -> NaN in numeric columns)."""
  out = {}
  for key in rows[0]:
    values = [r[key] for r in rows]
    if all(isinstance(v, str) for v in values):
      out[key] = np.asarray(values)
    elif all(isinstance(v, (bool, np.bool_)) for v in values):
      out[key] = np.asarray(values, bool)
    elif all(isinstance(v, (int, np.integer)) for v in values):
      out[key] = np.asarray(values, np.int64)
    else:
      out[key] = np.asarray([np.nan if v is None else v for v in values],
                            np.float64)
  return out


def curve_arrays(result: SweepResult, *, max_upload_elements: int = 10**8
                 ) -> dict[str, np.ndarray]:
  """[G, T] curves plus each point's hyperparameters, for an .npz file.

  Returns:
    loss [G,T] (f(theta^k) before step k), final_loss [G] (f(theta^T)),
    grad_norm_sq [G,T] (||sum_m g_m||^2 at theta^k), paper_reference [G]
    (see `paper_references`), cum_uploads and cum_bits [G,T] (int64, through
    step k, summed over workers), uploads [G,T,M] bool (who uploaded at step
    k; only when G*T*M <= max_upload_elements), and one [G] array per
    GRID_KEYS key (algo as strings).
  """
  uploads_GxT, bits_GxT = metrics.per_step(result.sent_GxTxM,
                                           result.bits_GxTxM)
  out = {
      'loss': np.asarray(result.loss_GxT, np.float64),
      'final_loss': np.asarray(result.final_loss_G, np.float64),
      'grad_norm_sq': np.asarray(result.grad_norm_sq_GxT, np.float64),
      'paper_reference': paper_references(result),
      'cum_uploads': metrics.cumulative(uploads_GxT),
      'cum_bits': metrics.cumulative(bits_GxT),
  }
  if result.sent_GxTxM.size <= max_upload_elements:
    out['uploads'] = np.asarray(result.sent_GxTxM, bool)
  out.update(columns([{k: p[k] for k in GRID_KEYS} for p in result.points]))
  return out


def pareto_front(cost, value, maximize: bool = True) -> np.ndarray:
  """Indices of the points no other point beats on both cost and value.

  A point is dominated when another costs no more and is no worse, and is
  strictly better in one of the two. NaNs are never on the front.

  Returns:
    Indices sorted by increasing cost.
  """
  cost = np.asarray(cost, np.float64)
  value = np.asarray(value, np.float64)
  if not maximize:
    value = -value
  ok = np.isfinite(cost) & np.isfinite(value)
  front = []
  for i in np.flatnonzero(ok):
    others = ok & (cost <= cost[i]) & (value >= value[i]) & (
        (cost < cost[i]) | (value > value[i]))
    if not others.any():
      front.append(i)
  front = np.asarray(front, np.int64)
  return front[np.argsort(cost[front], kind='stable')]


# ----------------------------------------------------------------------------
# Figures.

def heatmap_quantity(rows: Sequence[Mapping[str, Any]]) -> str:
  """What the heat map shows.

  Returns:
    'target_bits' (every point reached the target residual),
    'target_bits+final_residual' (cells that reached it show their bits,
    the others their final residual, in grey), 'final_residual' (no point
    reached it) or 'final_loss' (f* unknown).
  """
  reached = [r['target_bits'] is not None for r in rows]
  if all(reached):
    return 'target_bits'
  if any(r['final_residual'] is None for r in rows):
    return 'final_loss'
  return 'target_bits+final_residual' if any(reached) else 'final_residual'


def _heat_cells(rows, bits, xis, field):
  """[bits, xi] means over seeds of `field`, and whether every seed reached."""
  value = np.full((len(bits), len(xis)), np.nan)
  residual = np.full((len(bits), len(xis)), np.nan)
  reached = np.zeros((len(bits), len(xis)), bool)
  for i, b in enumerate(bits):
    for j, xi in enumerate(xis):
      cell = [r for r in rows if r['bits'] == b and r['xi'] == xi]
      if not cell:
        continue
      as_float = lambda v: np.nan if v is None else float(v)
      reached[i, j] = all(r['target_bits'] is not None for r in cell)
      if reached[i, j] and field.startswith('target_bits'):
        value[i, j] = np.mean([as_float(r['target_bits']) for r in cell])
      residual[i, j] = np.mean([
          as_float(r['final_loss' if field == 'final_loss' else
                     'final_residual']) for r in cell])
  return value, residual, reached


def heatmap_figure(rows: Sequence[Mapping[str, Any]], *,
                   max_panels: int = 16):
  """Bits to the target residual over bits x xi (final residual if missed).

  Points that differ only in `seed` share a cell (the mean over seeds; a cell
  counts as reached when every seed reached the target). One panel per value
  of the other varying keys (algo, step_size, ...), at most `max_panels`.
  Which quantity is shown: see `heatmap_quantity`; the title says it.

  Args:
    rows: from `summarize`.
    max_panels: raise if more panels would be needed.

  Returns:
    A matplotlib Figure.
  """
  from matplotlib import colors  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  field = heatmap_quantity(rows)
  bits = sorted({r['bits'] for r in rows})
  xis = sorted({r['xi'] for r in rows})
  panel_keys = [k for k in varying_keys(rows)
                if k not in ('bits', 'xi', 'seed')]
  panels: dict[tuple, list] = {}
  for r in rows:
    panels.setdefault(tuple(r[k] for k in panel_keys), []).append(r)
  if len(panels) > max_panels:
    raise ValueError(f'the heat map would need {len(panels)} panels (one per '
                     f'value of {", ".join(panel_keys)}); at most '
                     f'{max_panels}: sweep fewer values of those keys')
  cells = {key: _heat_cells(members, bits, xis, field)
           for key, members in panels.items()}
  coloured = 0 if field.startswith('target_bits') else 1
  finite = np.concatenate([c[coloured][np.isfinite(c[coloured])
                                       & (c[coloured] > 0)]
                           for c in cells.values()])
  norm = (colors.LogNorm(finite.min(), max(finite.max(), finite.min() * 1.001))
          if finite.size else None)
  cols = min(len(panels), 4)
  nrows = math.ceil(len(panels) / cols)
  fig = Figure(figsize=(2.2 + 3.2 * cols, 0.9 + 2.9 * nrows),
               layout='constrained')
  axes = fig.subplots(nrows, cols, squeeze=False)
  image = None
  for ax, (key, (value, residual, reached)) in zip(axes.flat, cells.items()):
    shown = value if coloured == 0 else residual
    shown = np.where(shown > 0, shown, np.nan)
    ax.set_facecolor('0.85')  # cells without a colour: target missed / n/a
    image = ax.imshow(shown, norm=norm, cmap='viridis_r', aspect='auto',
                      origin='lower')
    for i in range(len(bits)):
      for j in range(len(xis)):
        if np.isfinite(shown[i, j]):
          text = f'{shown[i, j]:.2g}'
          red, green, blue, _ = image.cmap(norm(shown[i, j]))
          colour = ('black' if 0.3 * red + 0.6 * green + 0.1 * blue > 0.5
                    else 'white')
        elif np.isfinite(residual[i, j]):  # missed: its final residual
          text, colour = f'res\n{residual[i, j]:.1e}', 'black'
        else:
          text, colour = 'n/a', 'black'
        ax.text(j, i, text, ha='center', va='center', fontsize=7,
                color=colour)
    ax.set_xticks(range(len(xis)), [f'{x:g}' for x in xis])
    ax.set_yticks(range(len(bits)), [str(b) for b in bits])
    ax.set_xlabel(r'$\xi$')
    ax.set_ylabel('bits b')
    if panel_keys:
      ax.set_title(point_label(dict(zip(panel_keys, key)), panel_keys),
                   fontsize=9)
  for ax in list(axes.flat)[len(cells):]:
    ax.set_visible(False)
  labels = {'target_bits': 'bits to the target residual',
            'target_bits+final_residual': 'bits to the target residual',
            'final_residual': r'final residual $f(\theta^T) - f^*$',
            'final_loss': r'final loss $f(\theta^T)$'}
  if image is not None and norm is not None:
    fig.colorbar(image, ax=axes, label=labels[field], shrink=0.9)
  target = rows[0]['target_residual']
  missed = sum(r['target_bits'] is None for r in rows)
  titles = {
      'target_bits': f'bits to reach residual <= {target:g}',
      'target_bits+final_residual': (
          f'bits to reach residual <= {target:g}\ngrey: {missed} of '
          f'{len(rows)} points never reached it, final residual shown'),
      'final_residual': (f'target residual {target:g} never reached:\nfinal '
                         'residual shown instead of bits to target'),
      'final_loss': 'f* unknown: final loss shown instead of bits to target',
  }
  title = titles[field]
  seeds = len({r['seed'] for r in rows})
  if seeds > 1:
    title += f' (mean over {seeds} seeds)'
  fig.suptitle(title, fontsize=10)
  return fig


def pareto_figure(rows: Sequence[Mapping[str, Any]]):
  """Test accuracy (and final residual) against total bits, front marked.

  One panel per quality measure available: test accuracy (higher is better)
  and the final residual (lower is better; only with f*). Points are
  coloured by algorithm when the grid varies it, else by bits.

  Returns:
    A matplotlib Figure.
  """
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top

  cols = columns(rows)
  measures = []
  if np.isfinite(cols['final_test_accuracy']).any():
    measures.append(('final_test_accuracy', 'test accuracy', True, False))
  if np.isfinite(cols['final_residual']).any():
    measures.append(('final_residual', r'final residual $f(\theta^T) - f^*$',
                     False, True))
  if not measures:
    measures.append(('final_loss', r'final loss $f(\theta^T)$', False, True))
  varying = varying_keys(rows)
  colour_key = 'algo' if 'algo' in varying else 'bits'
  groups = list(dict.fromkeys(r[colour_key] for r in rows))
  fig = Figure(figsize=(5.2 * len(measures), 4.2), layout='constrained')
  axes = fig.subplots(1, len(measures), squeeze=False)[0]
  total_bits = cols['total_bits'].astype(np.float64)
  silent = int(np.sum(total_bits <= 0))
  # A log axis cannot show a point that uploaded nothing.
  total_bits = np.where(total_bits > 0, total_bits, np.nan)
  for ax, (field, label, maximize, log_y) in zip(axes, measures):
    y = cols[field]
    for value in groups:
      mask = np.asarray([r[colour_key] == value for r in rows])
      ax.scatter(total_bits[mask], y[mask], s=18, alpha=0.75,
                 label=f'{colour_key}={value}')
    front = pareto_front(total_bits, y, maximize=maximize)
    if front.size:
      ax.step(total_bits[front], y[front], where='post', color='black',
              linewidth=1.0, label='Pareto front')
      ax.scatter(total_bits[front], y[front], s=46, facecolors='none',
                 edgecolors='black')
      labelled = set()
      for i in front:
        if (total_bits[i], y[i]) in labelled or len(labelled) >= 12:
          continue  # identical points (e.g. seeds of a full-batch run)
        labelled.add((total_bits[i], y[i]))
        ax.annotate(point_label(rows[i], varying), (total_bits[i], y[i]),
                    fontsize=6, xytext=(3, 3), textcoords='offset points')
    ax.set_xscale('log')
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    if log_y:
      ax.set_yscale('log')
    ax.set_xlabel('total bits uploaded')
    ax.set_ylabel(label)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
  note = (f'; {silent} point(s) uploaded nothing and are not shown'
          if silent else '')
  fig.suptitle(f'Pareto front: quality against total bits ({len(rows)} '
               f'points{note})', fontsize=10)
  return fig
