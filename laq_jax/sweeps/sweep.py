"""Sweeps: a grid of hyperparameters and algorithms as ONE compiled program. ::

    points = expand_grid({'bits': [2, 4], 'xi': [0.4, 0.8]}, base=values)
    result = run_sweep(spec, data, points, num_steps=300, batch_size=16)
    accuracy_G = accuracies(problem, result.theta_GxP, x_test, y_test)
    rows = sweep_metrics.summarize_sweep(result, fstar=f_star, target=1e-6,
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

The grid's declaration and points are `laq_jax.points` (its names are
re-exported here). Outputs are NumPy; a result's per-step arrays are one
`laq_jax.record.Record` (`SweepResult.record`). Summaries are in
`laq_jax.sweep_metrics` (`summarize_sweep`, `curve_arrays`), figures in
`laq_jax.plotting` (`heatmap_figure`, `pareto_figure`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import numpy as np

from laq_jax.problems import Problem
from laq_jax.round import loop
from laq_jax.round import participation
from laq_jax.round.loop import Data, LoopState, RunSpec, Trace
from laq_jax.round.points import (GRID_KEYS, HYPER_KEYS, batches,  # noqa: F401
                                  algorithm_parts, check_grid, check_value,
                                  expand_grid, flatten, grid_keys,
                                  needs_stragglers, needs_upload_memory,
                                  part_values, parts_of,
                                  point_label, programs, stack_points,
                                  varying_keys)
from laq_jax.sweeps.record import RECORDED, Record


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
    extra: any further RECORDED fields, {name: [G, T(, M)]}.
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
  extra: dict[str, np.ndarray] | None = None

  @property
  def record(self) -> Record:
    """The per-step arrays as one Record ([G, T] / [G, T, M])."""
    return Record.from_arrays(
        loss=self.loss_GxT, grad_norm_sq=self.grad_norm_sq_GxT,
        sent_M=self.sent_GxTxM, bits_M=self.bits_GxTxM,
        bits_down_M=self.bits_down_GxTxM, **(self.extra or {}))


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
    state: the batch's LoopState after the chunk (padded rows included;
      under `run_sweep(donate=True)` valid until the callback returns).
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


class _Batch(NamedTuple):
  """One compiled call's points: its program, real and padded indices."""
  program: RunSpec
  real: list[int]
  padded: list[int]


class _Finished(NamedTuple):
  """A finished batch's real rows."""
  record: Record
  final_G: np.ndarray
  theta_GxP: np.ndarray


class _Resume(NamedTuple):
  """Where a checkpointed sweep continues: batch `batch` after
  `steps_done` iterations, with its grid state and record so far."""
  batch: int
  steps_done: int
  state: LoopState | None
  record: Record | None


def _plan(spec: RunSpec, points, batch_size) -> list[_Batch]:
  plan = []
  for stochastic, members in programs(points):
    program = dataclasses.replace(
        spec, stochastic=stochastic,
        **parts_of([points[i] for i in members]))
    if spec.round_size:  # rounds on their participants: cover every point
      program = dataclasses.replace(
          program, round_size=participation.chosen_round_size(
              [points[i] for i in members], spec.num_workers)
          if program.participation else 0)
    for real, padded in batches(len(members), batch_size):
      plan.append(_Batch(program, [members[i] for i in real],
                         [members[i] for i in padded]))
  return plan


def batch_sizes(spec: RunSpec, points: Sequence[Mapping[str, Any]],
                batch_size: int | None = None) -> list[int]:
  """The grid points each compiled call of `run_sweep` runs, in its order
  (what a resumed sweep has done before its checkpoint's batch)."""
  return [len(b.real) for b in _plan(spec, points, batch_size)]


def _checkpoint_arrays(finished: list[_Finished], current: Record | None
                       ) -> dict[str, np.ndarray]:
  """What a sweep checkpoint holds besides the batch's state: every
  finished batch's rows (done_*) and the running batch's record so far."""
  out = {}
  if finished:
    done = Record.concat_points([f.record for f in finished]).arrays()
    out.update({f'done_{n}': v for n, v in done.items()})
    out['done_final'] = np.concatenate([f.final_G for f in finished])
    out['done_theta'] = np.concatenate([f.theta_GxP for f in finished])
  if current is not None:
    out.update(current.arrays())
  return out


def _restore(checkpointer, like: LoopState, num_steps: int
             ) -> tuple[list[_Finished], _Resume]:
  """The finished batches and where to continue, from the latest
  checkpoint (nothing finished, batch 0, step 0 without one)."""
  restored = checkpointer.restore(like)
  if restored is None:
    return [], _Resume(0, 0, None, None)
  a, meta = restored.arrays, restored.meta
  batch = meta.get('batch', restored.step // num_steps)
  steps_done = meta.get('steps_done', restored.step % num_steps)
  finished = []
  if 'done_final' in a:
    done = Record.from_arrays(**{n: a[f'done_{n}'] for n in RECORDED
                                 if f'done_{n}' in a})
    finished.append(_Finished(done, a['done_final'], a['done_theta']))
  if not steps_done:
    return finished, _Resume(batch, 0, None, None)
  current = Record.from_arrays(**{n: a[n] for n in RECORDED if n in a})
  return finished, _Resume(batch, steps_done, restored.state, current)


def run_sweep(spec: RunSpec, data: Data, points: Sequence[Mapping[str, Any]],
              num_steps: int, batch_size: int | None = None,
              chunk_size: int | None = None,
              callback: Callable[[Progress], None] | None = None, *,
              run_chunk_fn: Callable | None = None,
              checkpointer=None, checkpoint_every: int = 0,
              authors_code: bool = False, donate: bool = False
              ) -> SweepResult:
  """Runs every grid point for `num_steps` iterations, batches of one program.

  Full-batch and minibatch algorithms run as two programs (`programs`), each
  compiling only the parts its points use (`parts_of`); everything else the
  points vary is data. Each batch is one `laq_jax.run` (the one chunk
  driver).

  Each program's RunSpec is `spec` with the parts its points need
  (`parts_of`); where `spec.round_size` > 0, its round size is chosen
  anew to cover its points (`participation.chosen_round_size`).

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
      a batch and at the end of each batch (its meta says which batch and
      how many of its iterations: {'batch': b, 'steps_done': k}). A
      checkpoint holds the batch's grid LoopState, its record so far and
      every finished batch's results, so the result equals, bit for bit, a
      sweep that never stopped.
    checkpoint_every: iterations between checkpoints inside a batch, a
      multiple of `chunk_size` (0: only at the end of each batch).
    authors_code: every point follows the authors' scripts (see
      `laq_jax.Hyper`).
    donate: each chunk updates the batch's state in place (`laq_jax.run`'s
      donate): the state a callback's Progress holds is valid until it
      returns.

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
  plan = _plan(spec, points, batch_size)
  finished, resume = [], _Resume(0, 0, None, None)
  if checkpointer is not None:
    like = loop.init_state(plan[0].program, stack(plan[0].padded), dtype)
    finished, resume = _restore(checkpointer, like, num_steps)

  def save(b, done, state, current):
    # (the orbax step only orders the checkpoints; the meta says where)
    checkpointer.save(b * num_steps + done, state,
                      _checkpoint_arrays(finished, current),
                      meta={'batch': b, 'steps_done': done})

  for b, batch in enumerate(plan):
    if b < resume.batch:
      continue
    hyper = stack(batch.padded)
    keep = len(batch.real)
    resuming = b == resume.batch and resume.steps_done
    state = resume.state if resuming else None
    recorded = [resume.record] if resuming else []
    done = resume.steps_done if resuming else 0

    def on_chunk(c: loop.Chunk, b=b, batch=batch, keep=keep,
                 recorded=recorded):
      record = Record.of(c.trace).point(slice(0, keep))
      recorded.append(record)
      steps = c.start + record.num_steps
      if callback is not None:
        callback(Progress(b, len(plan), batch.real, steps, num_steps,
                          c.state, jax.tree.map(lambda a: a[:keep], c.trace)))
      if (checkpointer is not None and checkpoint_every
          and steps % checkpoint_every == 0 and steps < num_steps):
        save(b, steps, c.state, Record.join(recorded))

    state, _ = loop.run(batch.program, data, hyper, num_steps - done,
                        chunk_size=chunk_size, state=state,
                        callback=on_chunk, run_chunk_fn=run_chunk_fn,
                        keep_trace=False, donate=donate)
    final = _final_losses(batch.program.problem, state.theta_P, data,
                          hyper.l2)
    finished.append(_Finished(Record.join(recorded),
                              np.asarray(final)[:keep],
                              np.asarray(state.theta_P)[:keep]))
    if checkpointer is not None:
      save(b + 1, 0, state, None)
  # Back to the order of `points` (the programs ran kind by kind).
  order = np.argsort(np.concatenate([batch.real for batch in plan]),
                     kind='stable')
  record = Record.concat_points([f.record for f in finished]).point(order)
  every = np.empty(len(points), np.int64)
  for batch in plan:
    every[batch.real] = batch.program.log_every
  a = record.arrays()
  extra = {n: a[n] for n in RECORDED[5:] if n in a}
  return SweepResult(points, a['loss'], a['grad_norm_sq'], a['sent_M'],
                     a['bits_M'], a['bits_down_M'],
                     np.concatenate([f.final_G for f in finished])[order],
                     np.concatenate([f.theta_GxP for f in finished])[order],
                     every, extra or None)


def accuracies(problem: Problem, theta_GxP, x_NxD, y_N) -> np.ndarray:
  """Accuracy of each point's parameters on (x, y): [G] float64 (NaN for a
  problem that classifies nothing)."""
  if not problem.classifier:
    return np.full(np.shape(theta_GxP)[0], np.nan)
  predicted_GxN = np.asarray(loop.predict(problem, theta_GxP, x_NxD))
  return np.mean(predicted_GxN == np.asarray(y_N)[None], axis=1)

