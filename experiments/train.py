"""One run from a config into a workdir: the launcher's body, notebook-callable.

    summary = train_and_evaluate(config, workdir)

writes into `workdir`:
  config.json      the resolved config;
  metrics.csv      one row per iteration k: step, loss = f(theta^k), residual
                   (loss - f*, empty without f*), uploads and bits of step k,
                   cum_uploads, cum_bits (through step k), test_accuracy of
                   theta^k (at evaluation steps, empty elsewhere);
  uploads.npy      bool [T, M], who uploaded at each step;
  summary.json     totals, final loss / accuracy of theta^T, f* and how it was
                   computed, the iteration / uploads / bits at which the
                   residual first reached config.target_residual (or null);
  loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png,
  upload_raster.png.
Every file is written whole or not at all (temporary file, then rename).

The scan runs in chunks of `config.eval_every` iterations (each chunk one
compiled program); after each chunk a progress line is logged and the test
accuracy evaluated.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import pathlib
import tempfile
import time
from typing import Any, NamedTuple

from absl import logging
import numpy as np

import laq_jax
from laq_jax import build as build_lib
from laq_jax import data as data_lib
from laq_jax import metrics
from laq_jax import plotting

CACHE_ENV_VAR = 'LAQ_JAX_CACHE'
METRICS_COLUMNS = ('step', 'loss', 'residual', 'uploads', 'bits',
                   'cum_uploads', 'cum_bits', 'test_accuracy')
FIGURES = {'iterations': 'loss_vs_iterations.png',
           'uploads': 'loss_vs_uploads.png',
           'bits': 'loss_vs_bits.png'}
RASTER_FIGURE = 'upload_raster.png'


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


def metrics_csv(loss_T, sent_TxM, bits_TxM, fstar: float | None,
                accuracy_at: dict[int, float]) -> str:
  """The text of metrics.csv (see the module docstring)."""
  uploads_T, bits_T = metrics.per_step(sent_TxM, bits_TxM)
  cum_uploads, cum_bits = metrics.cumulative(uploads_T), metrics.cumulative(
      bits_T)
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(METRICS_COLUMNS)
  for k, loss in enumerate(np.asarray(loss_T, np.float64)):
    writer.writerow([
        k, _cell(loss), _cell(None if fstar is None else loss - fstar),
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
        logging.info('f* = %.15g from the cache %s', cached['fstar'], path)
        return {'fstar': float(cached['fstar']),
                'fstar_method': cached['fstar_method'],
                'fstar_source': f'cache:{path}'}
    except (ValueError, KeyError, TypeError, OSError):
      logging.warning('ignoring an unreadable f* cache file %s', path)
  logging.info('solving for f* in float64 (L-BFGS, then Newton-CG)...')
  laq_jax.set_precision('float64')
  from laq_jax import optimum  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  opt = optimum.solve(built.problem, built.data, config.l2)
  seconds = time.perf_counter() - start
  logging.info('f* = %.15g in %.1f s: %s', opt.value, seconds, opt.method)
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
  """f(theta) on all shards (gathered to one device if laid over a mesh)."""
  data = built.data
  if built.run_chunk_fn is not None:
    data = laq_jax.Data(np.asarray(data.x_MxNxD), np.asarray(data.y_MxN))
    theta_P = np.asarray(theta_P)
  return float(laq_jax.objective(built.problem, theta_P, data,
                                 built.hyper.l2))


class _Progress:
  """The per-chunk callback: test accuracy, running totals, a progress line."""

  def __init__(self, built, total_steps: int, fstar: float | None):
    self.built = built
    self.total = total_steps
    self.fstar = fstar
    self.done = 0
    self.uploads = 0
    self.bits = 0
    self.accuracy_at: dict[int, float] = {}
    self.final_accuracy = None
    self.start = time.perf_counter()
    self.first_chunk_end = None
    self.steps_after_first = 0

  def evaluate(self, theta_P) -> float:
    return laq_jax.accuracy(self.built.problem, theta_P, self.built.test_x,
                            self.built.test_y)

  def __call__(self, state, trace):
    steps = trace.loss.shape[0]
    self.done += steps
    uploads_T, bits_T = metrics.per_step(trace.sent_M, trace.bits_M)
    self.uploads += int(uploads_T.sum())
    self.bits += int(bits_T.sum())
    acc = self.evaluate(state.theta_P)
    if self.done < self.total:
      self.accuracy_at[self.done] = acc
    else:
      self.final_accuracy = acc
    now = time.perf_counter()
    if self.first_chunk_end is None:  # includes compilation
      self.first_chunk_end = now
      rate = self.done / max(now - self.start, 1e-9)
      note = ' (incl. compile)'
    else:
      self.steps_after_first += steps
      rate = self.steps_after_first / max(now - self.first_chunk_end, 1e-9)
      note = ''
    eta = (self.total - self.done) / max(rate, 1e-9)
    last_loss = float(trace.loss[-1])
    loss_text = (f'residual {last_loss - self.fstar:.3e}' if self.fstar
                 is not None else f'loss {last_loss:.6g}')
    logging.info(
        'step %d/%d (%3.0f%%) | %.1f it/s%s | ETA %s | %s | uploads %d '
        '(%.1f%% of %d) | bits %.3e | test acc %.4f', self.done, self.total,
        100 * self.done / self.total, rate, note, _duration(eta), loss_text,
        self.uploads, 100 * self.uploads / (self.done * self.built.spec
                                            .num_workers),
        self.done * self.built.spec.num_workers, self.bits, acc)


def train_and_evaluate(config, workdir: str | os.PathLike) -> dict[str, Any]:
  """Runs one config and writes its results into `workdir`.

  Args:
    config: an ml_collections.ConfigDict with the fields of
      `configs/default.py` (checked before anything is loaded or compiled).
    workdir: output folder (created).

  Returns:
    The summary dict (also written to workdir/summary.json).

  Raises:
    laq_jax.build.ConfigError: a field is not allowed.
    laq_jax.data.DataError: the data are missing or corrupt.
  """
  wall_start = time.perf_counter()
  build_lib.validate_config(config)
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  write_json(workdir / 'config.json', config_to_dict(config))
  if config.checkpoint_every:
    logging.warning('config.checkpoint_every=%d: checkpoints are not '
                    'implemented yet; running without them',
                    config.checkpoint_every)

  built = build_lib.build(config)
  logging.info('%s on %s, model %s (P=%d), M=%d, %s, %d iterations, '
               'workers on %s', config.algo, config.dataset, config.model,
               built.num_params, config.num_workers, config.precision,
               config.num_iters, config.workers_on)
  fstar_info = resolve_fstar(config, built)
  fstar = fstar_info['fstar']

  progress = _Progress(built, config.num_iters, fstar)
  theta0_P, _ = laq_jax.flat_params(built.problem, built.hyper.seed,
                                    built.dtype)
  progress.accuracy_at[0] = progress.evaluate(theta0_P)
  run_start = time.perf_counter()
  progress.start = run_start
  state, trace = laq_jax.run(built.spec, built.data, built.hyper,
                             config.num_iters, chunk_size=config.eval_every,
                             callback=progress,
                             run_chunk_fn=built.run_chunk_fn)
  run_end = time.perf_counter()
  run_seconds = run_end - run_start
  final_loss = full_objective(built, state.theta_P)

  sent_TxM = np.asarray(trace.sent_M, bool)
  bits_TxM = np.asarray(trace.bits_M)
  # Iterations per second after the first chunk (which includes compiling).
  steady = (progress.steps_after_first / (run_end - progress.first_chunk_end)
            if progress.steps_after_first else None)
  summary = metrics.summarize(
      loss_T=trace.loss, final_loss=final_loss, sent_TxM=sent_TxM,
      bits_TxM=bits_TxM, fstar=fstar, target=config.target_residual,
      final_test_accuracy=progress.final_accuracy,
      algo=config.algo, model=config.model, dataset=config.dataset,
      num_workers=config.num_workers, num_params=built.num_params,
      precision=config.precision, test_set=built.test_set)
  summary.update(
      fstar_method=fstar_info['fstar_method'],
      fstar_source=fstar_info['fstar_source'],
      run_time_s=round(run_seconds, 3),
      iterations_per_s=round(steady, 3) if steady else None,
      wall_time_s=round(time.perf_counter() - wall_start, 3))

  atomic_write(workdir / 'metrics.csv',
               metrics_csv(trace.loss, sent_TxM, bits_TxM, fstar,
                           progress.accuracy_at))
  write_npy(workdir / 'uploads.npy', sent_TxM)
  uploads_T, bits_T = metrics.per_step(sent_TxM, bits_TxM)
  curve = metrics.make_curve(config.algo, trace.loss, final_loss, uploads_T,
                             bits_T, fstar)
  title = f'{config.algo}, {config.model}, M={config.num_workers}'
  for x, name in FIGURES.items():
    save_figure(plotting.loss_figure([curve], x, title=title), workdir / name)
  save_figure(plotting.upload_raster(sent_TxM, title=config.algo),
              workdir / RASTER_FIGURE)
  summary['wall_time_s'] = round(time.perf_counter() - wall_start, 3)
  write_json(workdir / 'summary.json', summary)
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
