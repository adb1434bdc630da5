"""One run from a config into a workdir: the launcher's body, notebook-callable.

    summary = train_and_evaluate(config, workdir)

writes into `workdir`:
  config.json      the resolved config;
  metrics.csv      one row per iteration k: step, loss = f(theta^k), residual
                   (loss - f*, empty without f*), paper_residual (loss / M
                   minus the smallest such value of the run, the authors'
                   residual), grad_norm_sq (||sum_m g_m||^2 at theta^k),
                   uploads, bits (uplink) and bits_down (the broadcast
                   after it, all workers) of step k, cum_uploads, cum_bits,
                   cum_bits_down (through step k), test_accuracy of theta^k
                   (at evaluation steps, empty elsewhere), time_s (T[k],
                   the simulated seconds of round k on config.network,
                   laq_jax.network), cum_time_s (through step k), slowest
                   (the worker that set T[k]);
  uploads.npy      bool [T, M], who uploaded at each step;
  bits.npy         int64 [T, M], the bits each worker uploaded at each step
                   (what `laq_jax.network.replay` times on any network);
  slowdown.npy     float64 [T, M], the stragglers' compute factors s[k, m]
                   (only for a network with stragglers);
  participants.npy bool [T, M], who took part in each round (every worker
                   without partial participation; participation_raster.png
                   with it);
  summary.json     totals, final loss / accuracy of theta^T, f* and how it was
                   computed, the iteration / uploads / bits at which each
                   residual (exact: target_*; the paper's: paper_target_*)
                   first reached config.target_residual (or null), the
                   network (every field, the profile's name),
                   flops_per_worker_step, total_time_s, target_time_s and
                   paper_target_time_s (simulated seconds);
  loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png,
  loss_vs_total_bits.png (uplink + downlink), loss_vs_time.png (simulated
  seconds; the residual with f*, else the loss), grad_norm_vs_iterations.png,
  grad_norm_vs_uploads.png, grad_norm_vs_bits.png, upload_raster.png;
  tensorboard/     TensorBoard events (loss, residual, uploads, bits up and
                   down, test accuracy; experiments/run/events.py), written
                   after every chunk: `tensorboard --logdir runs/`;
  checkpoints/     with config.checkpoint_every > 0: orbax checkpoints (the
                   full LoopState and the metrics so far, see
                   laq_jax/devices/checkpoint.py), the last few kept.
Every file but the event files is written whole or not at all (temporary
file, then rename), and
only by process 0 of a multi-process run (checkpoints are written by all
processes together, as orbax requires). What the run produced and its
files (summary.json's figures, metrics.csv, the figures) are made by
experiments/run/run_results.py.

The scan runs in chunks of `config.eval_every` iterations (each chunk one
compiled program); after each chunk a progress line is logged, the test
accuracy evaluated, and, every `config.checkpoint_every` iterations, a
checkpoint saved.

Reliability:
  * resume: run the same config into the same workdir again (e.g. after the
    process was killed) and it continues from the last checkpoint; the
    files come out bit-identical to those of a run that never stopped.
  * another config's results in the workdir are refused (WorkdirError)
    unless overwrite=True (`--overwrite`), which deletes them first.
  * divergence: a NaN/inf loss stops the run after that chunk; metrics.csv
    keeps iterations 0..k (k the first non-finite one, its loss written as
    nan/inf), summary.json gets "diverged": true, "diverged_at": k and the
    message. The launcher then exits with status 3.
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

from absl import logging
import numpy as np

import laq_jax
from experiments.run import build as build_lib
from experiments.run import config as config_lib
from experiments.run import events as events_lib
from experiments.run import fstar as fstar_lib
from experiments.run import outputs
from experiments.run import progress as progress_lib
from experiments.run import startup
from experiments.run.progress import info
from experiments.run.run_results import Ran, RunRecord, summarize, write_files
from laq_jax import checkpoint as checkpoint_lib
from laq_jax import distributed
from laq_jax import metrics
from laq_jax.record import Record


def _initial_state(built: build_lib.Built):
  state = laq_jax.init_state(built.spec, built.hyper, built.dtype)
  if built.mesh is not None:
    from laq_jax import sharding  # pylint: disable=g-import-not-at-top
    state = sharding.shard_state(state, built.mesh)
  return state


def train_and_evaluate(config, workdir: str | os.PathLike, *,
                       overwrite: bool = False) -> dict[str, Any]:
  """Runs one config and writes its results into `workdir`.

  The scan runs in chunks of `config.eval_every` iterations. With
  `config.checkpoint_every` = C > 0 the full state and the metrics so far
  are saved (orbax) into workdir/checkpoints every C iterations and at the
  end; calling this again with the same config and workdir (e.g. after the
  process was killed) continues from the last checkpoint, bit-identically.
  A loss that becomes NaN or inf stops the run at that chunk: the files keep
  every iteration up to and including the first non-finite one, and the
  summary has `diverged: true` and `diverged_at: k`.

  Args:
    config: an ml_collections.ConfigDict with the fields of
      `configs/default.py` (checked before anything is loaded or compiled).
    workdir: output folder (created).
    overwrite: replace another config's results in `workdir` (otherwise
      refused), or start this config's run over.

  Returns:
    The summary dict (also written to workdir/summary.json).

  Raises:
    experiments.run.config.ConfigError: a field is not allowed.
    laq_jax.data.DataError: the data are missing or corrupt.
    experiments.run.outputs.WorkdirError: `workdir` holds another config's
      results.
  """
  wall_start = time.perf_counter()
  config_lib.validate_config(config)
  config = config_lib.with_slots_in_algo(config)  # 'laq+server=adam
  progress_lib.quiet_start()
  workdir = outputs.usable_workdir(workdir)
  config_dict = config_lib.to_dict(config)
  outputs.prepare_workdir(workdir, config_dict, overwrite=overwrite)
  # (validated above) DataError before any file is written
  built = build_lib.build(config, validated=True)
  if distributed.is_writer():
    outputs.write_json(workdir / 'config.json', config_dict)
  info('%s on %s, model %s (P=%d), M=%d, %s, %d iterations, workers on %s',
       config.algo, config.dataset, config.model, built.num_params,
       config.num_workers, config.precision, config.num_iters,
       config.workers_on)
  fstar_info = fstar_lib.resolve_fstar(config, built)
  ran = _run(config, built, workdir, config_dict, fstar_info['fstar'])
  try:
    summary = summarize(config, built, ran, fstar_info, workdir)
    if ran.events is not None and not summary['diverged']:
      # f(theta^T); and its accuracy when no chunk ran (resumed at T).
      end = summary['iterations']
      ran.events.at(end, loss=summary['final_loss'],
                    accuracy=(summary['final_test_accuracy']
                              if ran.resumed_from == end else None))
  finally:
    if ran.events is not None:
      ran.events.close()
  if distributed.is_writer():
    write_files(config, workdir, ran, summary)
    summary['wall_time_s'] = round(time.perf_counter() - wall_start, 3)
    outputs.write_json(workdir / 'summary.json', summary)
    if not summary['diverged']:
      logging.info('done in %s: %d uploads, %.4g bits, final loss %.10g, '
                   'test accuracy %s; target %g reached at iteration %s',
                   progress_lib.duration(summary['wall_time_s']),
                   summary['total_uploads'], summary['total_bits'],
                   summary['final_loss'], summary['final_test_accuracy'],
                   config.target_residual, summary['target_iteration'])
  return summary


def _run(config, built, workdir, config_dict, fstar) -> Ran:
  """The chunks of `config.eval_every` iterations, checkpointed, resumed."""
  total, every = config.num_iters, config.checkpoint_every
  workers = config.num_workers
  state = _initial_state(built)
  ckpt = restored = None
  if every:
    # Every process takes part in saving and restoring (orbax's collective
    # writes of a state laid over several processes).
    ckpt = checkpoint_lib.Checkpointer(
        workdir / outputs.CHECKPOINT_DIR,
        checkpoint_lib.fingerprint(config_dict),
        code=build_lib.model_code(built),
        also=outputs.legacy_fingerprints(config_dict))
    restored = ckpt.restore(state)
  if restored is not None:
    state, done = restored.state, restored.step
    record = RunRecord.from_checkpoint(workers, restored)
    info('resuming from the checkpoint at step %d of %d (%s)', done, total,
         ckpt.directory / str(done))
  else:
    done, record = 0, RunRecord(workers)
    record.accuracy_at[0] = laq_jax.accuracy(
        built.problem, np.asarray(state.theta_P), built.test_x, built.test_y)
  resumed_from = done if restored is not None else None

  events = None
  if distributed.is_writer():
    a = record.record
    events = events_lib.Events(
        workdir / events_lib.TENSORBOARD_DIR, done,
        totals=[np.sum(x, dtype=np.float64) for x in
                (a.uploads, a.bits, a.bits_down)] + (
                    [] if a.time_s is None else [float(a.cum_time_s[-1])
                                                 if a.num_steps else 0.0]),
        config=config_dict, fstar=fstar)
    # theta^done's accuracy: the purge at `done` drops an earlier copy.
    events.at(done, accuracy=record.accuracy_at.get(done))

  diverged_at, final_accuracy = None, None
  progress = progress_lib.Progress('step', total, initial=done)
  compile_start = startup.compile_seconds()
  run_start = time.perf_counter()
  progress.restart_clock()

  def on_chunk(chunk: laq_jax.Chunk) -> bool:
    """Record, log, evaluate, checkpoint; True (stop) on a bad loss."""
    nonlocal diverged_at, final_accuracy
    rows = Record.of(chunk.trace)
    length = rows.num_steps
    # (NaN at an iteration that does not log the loss is no divergence)
    bad = np.flatnonzero(~np.isfinite(rows.loss) & metrics.logged(
        length, built.spec.log_every, chunk.start))
    if bad.size:  # keep the steps up to and including the first bad one
      rows = rows.head(int(bad[0]) + 1)
      record.append(rows)
      if events is not None:
        events.steps(chunk.start, rows)
      diverged_at = chunk.start + int(bad[0])
      return True
    record.append(rows)
    if events is not None:
      events.steps(chunk.start, rows)
    done = chunk.start + length
    acc = laq_jax.accuracy(built.problem, np.asarray(chunk.state.theta_P),
                           built.test_x, built.test_y)
    if done < total:
      record.accuracy_at[done] = acc
    else:
      final_accuracy = acc
    if events is not None:
      events.at(done, accuracy=acc)
      events.flush()
    progress.update(done, _progress_note(record, fstar, done, acc))
    if ckpt is not None and (done % every == 0 or done == total):
      ckpt.save(done, chunk.state, record.record.arrays(),
                meta=record.meta())
    return False

  try:
    state, _ = laq_jax.run(built.spec, built.data, built.hyper, total - done,
                           chunk_size=config.eval_every, state=state,
                           callback=on_chunk,
                           run_chunk_fn=built.run_chunk_fn, keep_trace=False,
                           donate=True)
  except BaseException:
    if events is not None:
      events.close()
    if ckpt is not None:  # orbax's threads end before the process does (a
      ckpt.close(quiet=True)  # failed save left them to print at exit)
    raise
  finally:
    progress.close()
  run_seconds = time.perf_counter() - run_start
  compile_seconds = startup.compile_seconds() - compile_start
  if ckpt is not None:
    ckpt.close()
  return Ran(record, state, diverged_at, final_accuracy, resumed_from,
             run_seconds, progress.steady_rate, events, compile_seconds)


def _progress_note(record: RunRecord, fstar, done: int, acc: float) -> str:
  last = record.last_loss
  loss = (f'residual {last - fstar:.3e}' if fstar is not None
          else f'loss {last:.6g}')
  sent = record.num_workers * done
  return (f'{loss} | uploads {record.uploads} ({100 * record.uploads / sent:.1f}'
          f'% of {sent}) | bits {record.bits:.3e} | test acc {acc:.4f}')
