"""One run from a config into a workdir: the launcher's body, notebook-callable.

    summary = train_and_evaluate(config, workdir)

writes into `workdir`:
  config.json      the resolved config;
  metrics.csv      one row per iteration k: step, loss = f(theta^k), residual
                   (loss - f*, empty without f*), paper_residual (loss / M
                   minus the smallest such value of the run, the authors'
                   residual), grad_norm_sq (||sum_m g_m||^2 at theta^k),
                   uploads and bits of step k, cum_uploads, cum_bits
                   (through step k), test_accuracy of theta^k (at
                   evaluation steps, empty elsewhere);
  uploads.npy      bool [T, M], who uploaded at each step;
  summary.json     totals, final loss / accuracy of theta^T, f* and how it was
                   computed, the iteration / uploads / bits at which each
                   residual (exact: target_*; the paper's: paper_target_*)
                   first reached config.target_residual (or null);
  loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png (the
  residual with f*, else the loss), grad_norm_vs_iterations.png,
  grad_norm_vs_uploads.png, grad_norm_vs_bits.png, upload_raster.png;
  checkpoints/     with config.checkpoint_every > 0: orbax checkpoints (the
                   full LoopState and the metrics so far, see
                   laq_jax/checkpoint.py), the last few kept.
Every file is written whole or not at all (temporary file, then rename), and
only by process 0 of a multi-process run (checkpoints are written by all
processes together, as orbax requires).

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

import csv
import hashlib
import io
import json
import logging as std_logging
import math
import os
import pathlib
import shutil
import tempfile
import time
from typing import Any, NamedTuple, Sequence

from absl import logging
import numpy as np

import laq_jax
from laq_jax import build as build_lib
from laq_jax import checkpoint as checkpoint_lib
from laq_jax import data as data_lib
from laq_jax import distributed
from laq_jax import metrics
from laq_jax import plotting

CACHE_ENV_VAR = 'LAQ_JAX_CACHE'
METRICS_COLUMNS = ('step', 'loss', 'residual', 'paper_residual',
                   'grad_norm_sq', 'uploads', 'bits', 'cum_uploads',
                   'cum_bits', 'test_accuracy')
FIGURES = {'iterations': 'loss_vs_iterations.png',
           'uploads': 'loss_vs_uploads.png',
           'bits': 'loss_vs_bits.png'}
GRAD_NORM_FIGURES = {'iterations': 'grad_norm_vs_iterations.png',
                     'uploads': 'grad_norm_vs_uploads.png',
                     'bits': 'grad_norm_vs_bits.png'}
RASTER_FIGURE = 'upload_raster.png'
RUN_FILES = ('config.json', 'metrics.csv', 'uploads.npy', 'summary.json',
             *FIGURES.values(), *GRAD_NORM_FIGURES.values(), RASTER_FIGURE)
CHECKPOINT_DIR = 'checkpoints'


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp gives 0600


# ----------------------------------------------------------------------------
# Files, written atomically.

def atomic_write(path: str | os.PathLike, content: bytes | str) -> None:
  """Writes `content` to `path` via a temporary file and `os.replace`."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  if isinstance(content, str):
    content = content.encode()
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.',
                             suffix='.tmp')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(content)
    os.chmod(tmp, _FILE_MODE)
    os.replace(tmp, path)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise


def write_json(path, obj) -> None:
  atomic_write(path, json.dumps(obj, indent=2, sort_keys=False) + '\n')


def write_npy(path, array) -> None:
  buffer = io.BytesIO()
  np.save(buffer, np.asarray(array))
  atomic_write(path, buffer.getvalue())


def save_figure(fig, path, dpi: int = 110) -> None:
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=dpi)
  atomic_write(path, buffer.getvalue())


def _cell(x) -> str:
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return ''
  return repr(float(x)) if isinstance(x, (float, np.floating)) else str(x)


def metrics_csv(loss_T, grad_norm_sq_T, sent_TxM, bits_TxM,
                fstar: float | None, accuracy_at: dict[int, float],
                paper_reference: float) -> str:
  """The text of metrics.csv (see the module docstring)."""
  uploads_T, bits_T = metrics.per_step(sent_TxM, bits_TxM)
  paper, _ = metrics.paper_residual(loss_T, np.shape(sent_TxM)[-1],
                                    paper_reference)
  cum_uploads, cum_bits = metrics.cumulative(uploads_T), metrics.cumulative(
      bits_T)
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(METRICS_COLUMNS)
  # A diverged run's last loss is written as nan or inf, never left empty.
  value = lambda x: repr(float(x))
  for k, loss in enumerate(np.asarray(loss_T, np.float64)):
    writer.writerow([
        k, value(loss), '' if fstar is None else value(loss - fstar),
        value(paper[k]), value(grad_norm_sq_T[k]),
        int(uploads_T[k]), int(bits_T[k]), int(cum_uploads[k]),
        int(cum_bits[k]), _cell(accuracy_at.get(k))])
  return out.getvalue()


def config_to_dict(config) -> dict:
  return config.to_dict() if hasattr(config, 'to_dict') else dict(config)


# ----------------------------------------------------------------------------
# f*.

def cache_dir() -> pathlib.Path:
  """$LAQ_JAX_CACHE, else `laq_jax.data.default_cache_dir()`."""
  env = os.environ.get(CACHE_ENV_VAR)
  return pathlib.Path(env).expanduser() if env else (
      data_lib.default_cache_dir())


def fstar_cache_path(key: dict) -> pathlib.Path:
  digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()
                          ).hexdigest()[:20]
  return cache_dir() / 'fstar' / f'{digest}.json'


def resolve_fstar(config, built: build_lib.Built) -> dict[str, Any]:
  """f* for the run: given, cached, solved, or none.

  Returns:
    {'fstar': float or None, 'fstar_method': words, 'fstar_source': 'config'
    | 'cache:PATH' | 'computed (cached at PATH)' | 'none'}.
  """
  given = build_lib.fstar_value(config.fstar)
  if given is not None:
    return {'fstar': given, 'fstar_method': 'given in config.fstar',
            'fstar_source': 'config'}
  if config.fstar == 'none':
    return {'fstar': None, 'fstar_method': 'not computed (config.fstar=none)',
            'fstar_source': 'none'}
  if config.model != 'logreg':
    return {'fstar': None,
            'fstar_method': f'unknown: model={config.model!r} is nonconvex',
            'fstar_source': 'none'}
  path = fstar_cache_path(built.objective_key)
  if path.is_file():
    try:
      cached = json.loads(path.read_text())
      if cached.get('key') == built.objective_key:
        _info('f* = %.15g from the cache %s', cached['fstar'], path)
        return {'fstar': float(cached['fstar']),
                'fstar_method': cached['fstar_method'],
                'fstar_source': f'cache:{path}'}
    except (ValueError, KeyError, TypeError, OSError):
      logging.warning('ignoring an unreadable f* cache file %s', path)
  _info('solving for f* in float64 (L-BFGS, then Newton-CG)...')
  laq_jax.set_precision('float64')
  from laq_jax import optimum  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  opt = optimum.solve(built.problem, built.host_data, config.l2)
  seconds = time.perf_counter() - start
  _info('f* = %.15g in %.1f s: %s', opt.value, seconds, opt.method)
  if distributed.is_writer():
    write_json(path, {'key': built.objective_key, 'fstar': opt.value,
                      'fstar_method': opt.method, 'grad_norm': opt.grad_norm,
                      'gap_bound': opt.gap_bound, 'seconds': seconds})
  return {'fstar': opt.value, 'fstar_method': opt.method,
          'fstar_source': f'computed (cached at {path})'}


# ----------------------------------------------------------------------------
# The run.

def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f'{seconds}s'
  minutes, seconds = divmod(seconds, 60)
  if minutes < 60:
    return f'{minutes}m{seconds:02d}s'
  hours, minutes = divmod(minutes, 60)
  return f'{hours}h{minutes:02d}m'


def full_objective(built: build_lib.Built, theta_P) -> float:
  """f(theta) on all shards, from the process's own copy of the data.

  `built.host_data`, not `built.data`: over a mesh of several processes the
  placed shards cannot be read back whole by one process.
  """
  return float(laq_jax.objective(built.problem, np.asarray(theta_P),
                                 built.host_data, built.hyper.l2))


class _OrbaxInfoFilter(std_logging.Filter):
  """Drops orbax's INFO lines (a dozen per checkpoint); keeps its warnings."""

  def filter(self, record):
    return (record.levelno > std_logging.INFO
            or f'{os.sep}orbax{os.sep}' not in record.pathname)


def quiet_orbax() -> None:
  """Installs `_OrbaxInfoFilter` on absl's logger (once)."""
  logger = logging.get_absl_logger()
  if not any(isinstance(f, _OrbaxInfoFilter) for f in logger.filters):
    logger.addFilter(_OrbaxInfoFilter())


def _info(*args) -> None:
  """logging.info on the writer process only."""
  if distributed.is_writer():
    logging.info(*args)


class _Record:
  """What a run has produced so far: per-step rows and test accuracies.

  Exactly what a checkpoint keeps besides the LoopState, so that a resumed
  run writes the same files as one that never stopped.
  """

  def __init__(self, num_workers: int):
    self.num_workers = num_workers
    self.parts: list[tuple[np.ndarray, ...]] = []
    self.uploads = 0
    self.bits = 0
    self.accuracy_at: dict[int, float] = {}

  def append(self, loss_T, grad_norm_sq_T, sent_TxM, bits_TxM) -> None:
    part = (np.asarray(loss_T), np.asarray(grad_norm_sq_T),
            np.asarray(sent_TxM, bool), np.asarray(bits_TxM))
    self.parts.append(part)
    uploads_T, bits_T = metrics.per_step(part[2], part[3])
    self.uploads += int(uploads_T.sum())
    self.bits += int(bits_T.sum())

  @property
  def last_loss(self) -> float:
    return float(self.parts[-1][0][-1])

  def arrays(self) -> dict[str, np.ndarray]:
    """{'loss': [K], 'grad_norm': [K], 'sent': bool [K, M], 'bits': [K, M]}
    of steps 0..K-1."""
    if not self.parts:
      m = self.num_workers
      return {'loss': np.zeros((0,)), 'grad_norm': np.zeros((0,)),
              'sent': np.zeros((0, m), bool),
              'bits': np.zeros((0, m), np.int32)}
    loss, grad_norm, sent, bits = (np.concatenate(x) for x in zip(*self.parts))
    return {'loss': loss, 'grad_norm': grad_norm, 'sent': sent, 'bits': bits}

  def meta(self) -> dict[str, Any]:
    # JSON floats round-trip exactly (repr), so resumed accuracies are equal.
    return {'accuracy_at': {str(k): v for k, v in self.accuracy_at.items()}}

  @classmethod
  def from_checkpoint(cls, num_workers: int,
                      restored: checkpoint_lib.Restored) -> _Record:
    record = cls(num_workers)
    a = restored.arrays
    record.append(a['loss'], a['grad_norm'], a['sent'], a['bits'])
    record.accuracy_at = {int(k): float(v) for k, v in
                          restored.meta['accuracy_at'].items()}
    return record


class _Progress:
  """The progress line after each chunk: rate, ETA, loss, uploads, accuracy."""

  def __init__(self, built, total_steps: int, fstar: float | None):
    self.built = built
    self.total = total_steps
    self.fstar = fstar
    self.start = time.perf_counter()
    self.first_chunk_end = None
    self.steps_after_first = 0

  def __call__(self, done: int, steps: int, record: _Record, acc: float):
    now = time.perf_counter()
    if self.first_chunk_end is None:  # includes compilation
      self.first_chunk_end = now
      rate = steps / max(now - self.start, 1e-9)
      note = ' (incl. compile)'
    else:
      self.steps_after_first += steps
      rate = self.steps_after_first / max(now - self.first_chunk_end, 1e-9)
      note = ''
    eta = (self.total - done) / max(rate, 1e-9)
    last_loss = record.last_loss
    loss_text = (f'residual {last_loss - self.fstar:.3e}' if self.fstar
                 is not None else f'loss {last_loss:.6g}')
    workers = self.built.spec.num_workers
    _info('step %d/%d (%3.0f%%) | %.1f it/s%s | ETA %s | %s | uploads %d '
          '(%.1f%% of %d) | bits %.3e | test acc %.4f', done, self.total,
          100 * done / self.total, rate, note, _duration(eta), loss_text,
          record.uploads, 100 * record.uploads / (done * workers),
          done * workers, record.bits, acc)


# ----------------------------------------------------------------------------
# The workdir: one config's results.

class WorkdirError(ValueError):
  """The workdir holds another config's results (and overwrite is off)."""


def _config_diff(old: dict, new: dict, limit: int = 4) -> str:
  names = sorted(set(old) | set(new))
  changed = [n for n in names if old.get(n, '<absent>') != new.get(n,
                                                                   '<absent>')]
  text = ', '.join(f'{n}: {old.get(n, "<absent>")!r} -> '
                   f'{new.get(n, "<absent>")!r}' for n in changed[:limit])
  if len(changed) > limit:
    text += f', and {len(changed) - limit} more'
  return text


def _clear_run_files(workdir: pathlib.Path, files: Sequence[str]) -> None:
  for name in files:
    (workdir / name).unlink(missing_ok=True)
  shutil.rmtree(workdir / CHECKPOINT_DIR, ignore_errors=True)


def _remove_stale_temporaries(workdir: pathlib.Path,
                              files: Sequence[str]) -> None:
  """Temporary files of an `atomic_write` that a killed process left."""
  for path in workdir.glob('.*.tmp'):
    if any(path.name.startswith(f'.{name}.') for name in files):
      path.unlink(missing_ok=True)


def prepare_workdir(workdir: pathlib.Path, config_dict: dict, *,
                    overwrite: bool = False,
                    files: Sequence[str] = RUN_FILES) -> None:
  """Checks that `workdir` is free or holds this same config's run.

  A workdir whose config.json equals `config_dict` is this run's own: its
  checkpoints are resumed. One holding another config's results (or run
  files without a config.json) is refused, unless `overwrite`, which
  deletes the run files and checkpoints (nothing else) first.

  Args:
    workdir: the run's folder (need not exist).
    config_dict: the resolved config, as `config_to_dict` gives it.
    overwrite: discard whatever run the workdir holds.
    files: the names of the run's files (default: a single run's; the
      sweep passes its own).

  Raises:
    WorkdirError: another config's results are there and `overwrite` is off.
  """
  present = [n for n in (*files, CHECKPOINT_DIR) if (workdir / n).exists()]
  if present and not overwrite:
    config_path = workdir / 'config.json'
    new = json.loads(json.dumps(config_dict))
    try:
      old = json.loads(config_path.read_text())
    except (OSError, ValueError):
      old = None
    if old != new:
      what = (f'another config\'s results ({_config_diff(old, new)})'
              if isinstance(old, dict) else
              f'run files ({", ".join(present)}) without a readable '
              'config.json')
      raise WorkdirError(
          f'workdir {str(workdir)!r} holds {what}. Pass --overwrite '
          '(train_and_evaluate(..., overwrite=True)) to replace them, or '
          'choose another --workdir.')
  if distributed.is_writer():
    workdir.mkdir(parents=True, exist_ok=True)
    if present and overwrite:
      _clear_run_files(workdir, files)
    _remove_stale_temporaries(workdir, files)
  _barrier('laq_jax_prepare_workdir')


def _barrier(name: str) -> None:
  """Waits for every process (a no-op in a single-process run)."""
  if distributed.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


# ----------------------------------------------------------------------------
# The run.

def _initial_state(built: build_lib.Built):
  state = laq_jax.init_state(built.spec, built.hyper, built.dtype)
  if built.mesh is not None:
    from laq_jax import sharding  # pylint: disable=g-import-not-at-top
    state = sharding.shard_state(state, built.mesh)
  return state


def _diverged_message(at: int, value: float, rows: int, workdir, config
                      ) -> str:
  return (f'diverged: the loss f(theta^k) is {value} at iteration k={at}; '
          f'the run stopped there. {pathlib.Path(workdir) / "metrics.csv"} '
          f'keeps iterations 0..{rows - 1} and summary.json says '
          f'"diverged": true, "diverged_at": {at}. Try a smaller step_size '
          f'(now {config.step_size}).')


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
    laq_jax.build.ConfigError: a field is not allowed.
    laq_jax.data.DataError: the data are missing or corrupt.
    WorkdirError: `workdir` holds another config's results.
  """
  wall_start = time.perf_counter()
  build_lib.validate_config(config)
  quiet_orbax()
  workdir = pathlib.Path(workdir)
  config_dict = config_to_dict(config)
  prepare_workdir(workdir, config_dict, overwrite=overwrite)
  built = build_lib.build(config)  # DataError before any file is written
  writer = distributed.is_writer()
  if writer:
    write_json(workdir / 'config.json', config_dict)
  _info('%s on %s, model %s (P=%d), M=%d, %s, %d iterations, workers on %s',
        config.algo, config.dataset, config.model, built.num_params,
        config.num_workers, config.precision, config.num_iters,
        config.workers_on)
  fstar_info = resolve_fstar(config, built)
  fstar = fstar_info['fstar']

  total, every = config.num_iters, config.checkpoint_every
  workers = config.num_workers
  state = _initial_state(built)
  ckpt = restored = None
  if every:
    # Every process takes part in saving and restoring (orbax's collective
    # writes of a state laid over several processes).
    ckpt = checkpoint_lib.Checkpointer(
        workdir / CHECKPOINT_DIR, checkpoint_lib.fingerprint(config_dict))
    restored = ckpt.restore(state)
  progress = _Progress(built, total, fstar)
  if restored is not None:
    state, done = restored.state, restored.step
    record = _Record.from_checkpoint(workers, restored)
    _info('resuming from the checkpoint at step %d of %d (%s)', done, total,
          ckpt.directory / str(done))
  else:
    done, record = 0, _Record(workers)
    record.accuracy_at[0] = laq_jax.accuracy(
        built.problem, np.asarray(state.theta_P), built.test_x, built.test_y)
  resumed_from = done if restored is not None else None

  run_chunk = built.run_chunk_fn or laq_jax.run_chunk
  diverged_at, final_accuracy = None, None
  run_start = progress.start = time.perf_counter()
  while done < total:
    length = min(config.eval_every, total - done)
    state, trace = run_chunk(built.spec, state, built.data, built.hyper,
                             length)
    rows = (np.asarray(trace.loss), np.asarray(trace.grad_norm_sq),
            np.asarray(trace.sent_M), np.asarray(trace.bits_M))
    bad = np.flatnonzero(~np.isfinite(rows[0]))
    if bad.size:  # keep the steps up to and including the first bad one
      keep = int(bad[0]) + 1
      record.append(*(r[:keep] for r in rows))
      diverged_at = done + int(bad[0])
      break
    record.append(*rows)
    done += length
    acc = laq_jax.accuracy(built.problem, np.asarray(state.theta_P),
                           built.test_x, built.test_y)
    if done < total:
      record.accuracy_at[done] = acc
    else:
      final_accuracy = acc
    progress(done, length, record, acc)
    if ckpt is not None and (done % every == 0 or done == total):
      ckpt.save(done, state, record.arrays(), meta=record.meta())
  run_end = time.perf_counter()
  if ckpt is not None:
    ckpt.close()

  arrays = record.arrays()
  loss_K, sent_KxM, bits_KxM = arrays['loss'], arrays['sent'], arrays['bits']
  grad_norm_K = arrays['grad_norm']
  final_loss = (math.nan if diverged_at is not None else
                full_objective(built, state.theta_P))
  diverged_at = metrics.diverged_at(loss_K, final_loss)  # or at theta^T
  if diverged_at is None and final_accuracy is None:  # resumed at the end
    final_accuracy = laq_jax.accuracy(
        built.problem, np.asarray(state.theta_P), built.test_x, built.test_y)
  message = None
  if diverged_at is not None:
    value = loss_K[diverged_at] if diverged_at < len(loss_K) else final_loss
    message = _diverged_message(diverged_at, float(value), len(loss_K),
                                workdir, config)
    final_accuracy = None
    if writer:
      logging.error('%s', message)

  # Iterations per second after the first chunk (which includes compiling).
  steady = (progress.steps_after_first / (run_end - progress.first_chunk_end)
            if progress.steps_after_first else None)
  summary = metrics.summarize(
      loss_T=loss_K, final_loss=final_loss, sent_TxM=sent_KxM,
      bits_TxM=bits_KxM, fstar=fstar, target=config.target_residual,
      final_test_accuracy=final_accuracy, grad_norm_sq_T=grad_norm_K,
      algo=config.algo, model=config.model, dataset=config.dataset,
      num_workers=config.num_workers, num_params=built.num_params,
      precision=config.precision, test_set=built.test_set)
  summary.update(
      diverged=diverged_at is not None, diverged_at=diverged_at,
      diverged_message=message,
      fstar_method=fstar_info['fstar_method'],
      fstar_source=fstar_info['fstar_source'],
      resumed_from=resumed_from,
      run_time_s=round(run_end - run_start, 3),
      iterations_per_s=round(steady, 3) if steady else None,
      wall_time_s=round(time.perf_counter() - wall_start, 3))
  if not writer:
    return summary

  atomic_write(workdir / 'metrics.csv',
               metrics_csv(loss_K, grad_norm_K, sent_KxM, bits_KxM, fstar,
                           record.accuracy_at, summary['paper_reference']))
  write_npy(workdir / 'uploads.npy', sent_KxM)
  uploads_K, bits_K = metrics.per_step(sent_KxM, bits_KxM)
  # Figures skip non-finite points (NaN leaves a gap; inf breaks log axes).
  finite = lambda x: np.where(np.isfinite(x), x, np.nan)
  curve = metrics.make_curve(config.algo, finite(loss_K), final_loss,
                             uploads_K, bits_K, fstar)
  curve = curve._replace(value=finite(curve.value))
  title = f'{config.algo}, {config.model}, M={config.num_workers}'
  if diverged_at is not None:
    title += f' (diverged at k={diverged_at})'
  norm_curve = metrics.value_curve(config.algo, finite(grad_norm_K),
                                   uploads_K, bits_K, 'grad_norm_sq')
  for x, name in FIGURES.items():
    save_figure(plotting.loss_figure([curve], x, title=title), workdir / name)
  for x, name in GRAD_NORM_FIGURES.items():
    save_figure(plotting.loss_figure([norm_curve], x, title=title),
                workdir / name)
  save_figure(plotting.upload_raster(sent_KxM, title=config.algo),
              workdir / RASTER_FIGURE)
  summary['wall_time_s'] = round(time.perf_counter() - wall_start, 3)
  write_json(workdir / 'summary.json', summary)
  if diverged_at is None:
    logging.info('done in %s: %d uploads, %.4g bits, final loss %.10g, test '
                 'accuracy %s; target %g reached at iteration %s',
                 _duration(summary['wall_time_s']), summary['total_uploads'],
                 summary['total_bits'], final_loss,
                 summary['final_test_accuracy'], config.target_residual,
                 summary['target_iteration'])
  return summary


# ----------------------------------------------------------------------------
# Reading a finished run back (for compare and notebooks).

class RunResult(NamedTuple):
  """A finished run read from its workdir."""
  workdir: pathlib.Path
  config: dict
  summary: dict
  metrics: dict[str, np.ndarray]
  sent_TxM: np.ndarray


def read_metrics(path) -> dict[str, np.ndarray]:
  """metrics.csv as columns: ints as int64, others float64 (empty -> NaN)."""
  with open(path, newline='') as f:
    rows = list(csv.reader(f))
  header, body = rows[0], rows[1:]
  columns = {}
  for j, name in enumerate(header):
    cells = [r[j] for r in body]
    if name in ('step', 'uploads', 'bits', 'cum_uploads', 'cum_bits'):
      columns[name] = np.array([int(c) for c in cells], np.int64)
    else:
      columns[name] = np.array([float(c) if c else np.nan for c in cells],
                               np.float64)
  return columns


def load_run(workdir) -> RunResult:
  """Reads config.json, summary.json, metrics.csv and uploads.npy."""
  workdir = pathlib.Path(workdir)
  missing = [n for n in ('config.json', 'summary.json', 'metrics.csv',
                         'uploads.npy') if not (workdir / n).is_file()]
  if missing:
    raise FileNotFoundError(f'{workdir} is not a finished run: missing '
                            f'{", ".join(missing)}')
  return RunResult(workdir, json.loads((workdir / 'config.json').read_text()),
                   json.loads((workdir / 'summary.json').read_text()),
                   read_metrics(workdir / 'metrics.csv'),
                   np.load(workdir / 'uploads.npy'))


def run_curve(run: RunResult, label: str | None = None,
              residual: bool = True) -> metrics.Curve:
  """The run's Curve; `residual=False` (or no f*) gives the loss itself."""
  fstar = run.summary.get('fstar') if residual else None
  final_loss = run.summary.get('final_loss')
  return metrics.make_curve(label or run.summary['algo'],
                            run.metrics['loss'],
                            np.nan if final_loss is None else final_loss,
                            run.metrics['uploads'], run.metrics['bits'],
                            fstar)
