"""A run's files: written whole or not at all, one config per workdir, read back.

    prepare_workdir(workdir, config_dict)     # refuse another config's results
    atomic_write(workdir / 'summary.json', text)
    run = load_run(workdir)                   # a finished run, for compare

Every file goes to a temporary file in the same folder, then `os.replace`,
so a reader (or a killed process) never sees half of one. Writing is for
process 0 of a multi-process run (`laq_jax.distributed.is_writer`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import pathlib
import re
import shutil
import tempfile
from typing import Any, NamedTuple, Sequence

import numpy as np

from configs import default as default_config
from experiments.run import config as config_lib
from experiments.run import errors
from experiments.run import events
from laq_jax import distributed
from laq_jax import metrics
from laq_jax import record as record_lib

METRICS_COLUMNS = ('step', 'loss', 'residual', 'paper_residual',
                   'grad_norm_sq', 'uploads', 'bits', 'bits_down',
                   'cum_uploads', 'cum_bits', 'cum_bits_down',
                   'test_accuracy', 'time_s', 'cum_time_s', 'slowest')
# Integer columns of metrics.csv (the others are floats).
INT_COLUMNS = ('step', 'uploads', 'bits', 'bits_down', 'cum_uploads',
               'cum_bits', 'cum_bits_down', 'slowest', 'grads')
FIGURES = {'iterations': 'loss_vs_iterations.png',
           'uploads': 'loss_vs_uploads.png',
           'bits': 'loss_vs_bits.png',
           'bits_total': 'loss_vs_total_bits.png',
           'time': 'loss_vs_time.png'}
GRAD_NORM_FIGURES = {'iterations': 'grad_norm_vs_iterations.png',
                     'uploads': 'grad_norm_vs_uploads.png',
                     'bits': 'grad_norm_vs_bits.png'}
RASTER_FIGURE = 'upload_raster.png'
SLOWDOWN_FILE = 'slowdown.npy'  # only for a network with stragglers
PARTICIPANTS_FILE = 'participants.npy'
# Only for a run whose workers did not all take one gradient every step
# (LASG's and CADA's pairs, LASG-PS, absent clients): the gradients each
# took, and the bits each downloaded (PS: theta^k to the selected alone).
GRADS_FILE = 'grads.npy'
BITS_DOWN_FILE = 'bits_down.npy'
PARTICIPATION_FIGURE = 'participation_raster.png'  # partial participation
RUN_FILES = ('config.json', 'metrics.csv', 'uploads.npy', 'bits.npy',
             SLOWDOWN_FILE, PARTICIPANTS_FILE, GRADS_FILE, BITS_DOWN_FILE,
             PARTICIPATION_FIGURE,
             'summary.json',
             *FIGURES.values(), *GRAD_NORM_FIGURES.values(), RASTER_FIGURE)
CHECKPOINT_DIR = 'checkpoints'
# Folders a run owns besides its files: checkpoints and TensorBoard events.
RUN_DIRS = (CHECKPOINT_DIR, events.TENSORBOARD_DIR)


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp gives 0600


# ----------------------------------------------------------------------------
# Files, written atomically.

def usable_workdir(text: str | os.PathLike | None) -> pathlib.Path:
  """`text` as a results folder, or a WorkdirError in one line: empty (it
  would write into the current folder), a file, under a file, or in a folder
  this process cannot write. The folder itself need not exist."""
  if text is None or not str(text).strip():
    raise WorkdirError(f'--workdir={str(text or "")!r} is empty: give a '
                       'folder for the results (it is created)')
  workdir = pathlib.Path(text).expanduser()
  if workdir.exists() and not workdir.is_dir():
    raise WorkdirError(f'workdir {str(workdir)!r} is a file: give a folder '
                       'for the results')
  existing = workdir
  while not existing.exists() and existing != existing.parent:
    existing = existing.parent
  if not existing.is_dir():
    raise WorkdirError(f'workdir {str(workdir)!r} cannot be created: '
                       f'{str(existing)!r} is a file')
  if not os.access(existing, os.W_OK | os.X_OK):
    raise WorkdirError(f'workdir {str(workdir)!r} is not writable: '
                       f'{str(existing)!r} refuses this user ('
                       'permission denied); choose another --workdir')
  return workdir


def atomic_write(path: str | os.PathLike, content: bytes | str) -> None:
  """Writes `content` to `path` via a temporary file and `os.replace`; a
  folder it cannot write, or a full disk, is a WorkdirError in one line."""
  path = pathlib.Path(path)
  if isinstance(content, str):
    content = content.encode()
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.',
                               suffix='.tmp')
  except OSError as e:  # not writable, or a file where a folder should be
    raise WorkdirError(f'could not write {path}: {e.strerror or e}; it was '
                       'not written. Choose a --workdir this user can write '
                       '(a folder).') from e
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(content)
    os.chmod(tmp, _FILE_MODE)
    os.replace(tmp, path)
  except OSError as e:  # a full disk: the file as it was, and say so
    pathlib.Path(tmp).unlink(missing_ok=True)
    before = ('its previous content is intact' if path.exists() else
              'it was not written')
    raise WorkdirError(f'could not write {path}: {e.strerror or e}; '
                       f'{before}. Free space and run the same command '
                       'again (a run with checkpoints resumes).') from e
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise


def strict_json(obj):
  """`obj` with every non-finite float (NaN, +-inf; Python's or NumPy's) as
  None: JSON has no literal for them (Python's `Infinity` breaks strict
  parsers), and a value that is not a number is null."""
  if isinstance(obj, dict):
    return {k: strict_json(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [strict_json(v) for v in obj]
  if isinstance(obj, (float, np.floating)) and not np.isfinite(obj):
    return None
  return obj


def write_json(path, obj) -> None:
  """`obj` as strict JSON (`strict_json`: no NaN or Infinity literals)."""
  atomic_write(path, json.dumps(strict_json(obj), indent=2, sort_keys=False,
                                allow_nan=False, default=_json_default)
               + '\n')


def _json_default(value):
  """NumPy scalars and arrays as their Python values."""
  if isinstance(value, np.generic):
    return strict_json(value.item())
  if isinstance(value, np.ndarray):
    return strict_json(value.tolist())
  raise TypeError(f'{type(value).__name__} is not JSON serializable')


def write_npy(path, array) -> None:
  buffer = io.BytesIO()
  np.save(buffer, np.asarray(array))
  atomic_write(path, buffer.getvalue())


def save_figure(fig, path, dpi: int = 110) -> None:
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png', dpi=dpi)
  atomic_write(path, buffer.getvalue())


def write_npz(path, arrays: dict[str, np.ndarray]) -> None:
  buffer = io.BytesIO()
  np.savez_compressed(buffer, **arrays)
  atomic_write(path, buffer.getvalue())


def cell(x) -> str:
  """A CSV cell: '' for None/NaN, repr of floats (exact round trip)."""
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return ''
  return repr(float(x)) if isinstance(x, (float, np.floating)) else str(x)


def parse_cell(text: str):
  """A results.csv cell as int, float, bool, str or None (empty): what
  `cell` wrote, read back."""
  if text == '':
    return None
  if text in ('True', 'False'):
    return text == 'True'
  try:
    return int(text)
  except ValueError:
    pass
  try:
    return float(text)
  except ValueError:
    return text


def metrics_columns() -> tuple[str, ...]:
  """metrics.csv's header: METRICS_COLUMNS, then one column per extra
  recorded field (`laq_jax.record.extras()`; a per-worker one summed over
  the workers, named without its _M: grads_M -> grads)."""
  return METRICS_COLUMNS + tuple(n.removesuffix('_M')
                                 for n in record_lib.extras())


def metrics_csv(record: record_lib.Record, fstar: float | None,
                accuracy_at: dict[int, float], paper_reference: float,
                loss_every: int = 1) -> str:
  """The text of metrics.csv (see experiments/run/train.py's docstring) from a
  run's record; the loss and residual cells of iterations that do not log
  the objective (`laq_jax.metrics.logged`) are empty."""
  loss_T = record.loss
  paper, _ = metrics.paper_residual(loss_T, record.num_workers,
                                    paper_reference)
  extras = [record.per_step(n) for n in record_lib.extras()]
  timed = record.time_s is not None
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(metrics_columns())
  # A diverged run's last loss is written as nan or inf, never left empty.
  value = lambda x: repr(float(x))
  logged = metrics.logged(len(loss_T), loss_every)
  for k, loss in enumerate(np.asarray(loss_T, np.float64)):
    if not logged[k]:
      loss_cells = ['', '', '']
    else:
      loss_cells = [value(loss), '' if fstar is None else value(loss - fstar),
                    value(paper[k])]
    writer.writerow([
        k, *loss_cells, value(record.grad_norm_sq[k]),
        int(record.uploads[k]), int(record.bits[k]),
        int(record.bits_down[k]), int(record.cum_uploads[k]),
        int(record.cum_bits[k]), int(record.cum_bits_down[k]),
        cell(accuracy_at.get(k)),
        *((value(record.time_s[k]), value(record.cum_time_s[k]),
           int(record.slowest[k])) if timed else ('', '', '')),
        *('' if x is None else int(x[k]) if x.dtype.kind in 'iu'
          else value(x[k]) for x in extras)])
  return out.getvalue()


def results_csv(rows: list[dict[str, Any]]) -> str:
  """The text of a sweep's results.csv: a header, then one line per point."""
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(list(rows[0]))
  for row in rows:
    writer.writerow([cell(v) for v in row.values()])
  return out.getvalue()


def read_results(path) -> list[dict[str, str]]:
  """results.csv as a list of {column: text} (empty text: no value)."""
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def sweep_divergence(sweep_dir) -> list[int | None]:
  """Where each point of a sweep's folder diverged, by the one rule
  (`laq_jax.metrics.diverged_at`: a logged loss NaN/inf or above 10x
  f(theta^0)), read from its curves.npz; None for a point that did not.

  Reports call this rather than trusting results.csv's `diverged` column,
  which results written before the rule (NaN/inf only) do not apply.
  """
  with np.load(pathlib.Path(sweep_dir) / 'curves.npz') as curves:
    loss, final = curves['loss'], curves['final_loss']
    every = (curves['loss_every'] if 'loss_every' in curves.files
             else np.ones(len(loss), np.int64))
    return [metrics.diverged_at(loss[g], float(final[g]), int(every[g]))
            for g in range(len(loss))]


def mark_divergence(rows: list[dict[str, Any]], sweep_dir
                    ) -> list[dict[str, Any]]:
  """Sets each row's `diverged` and `diverged_at` (a results.csv row of
  `sweep_dir`, parsed, in point order) by `sweep_divergence`; returns rows."""
  for row, at in zip(rows, sweep_divergence(sweep_dir), strict=True):
    row['diverged'], row['diverged_at'] = at is not None, at
  return rows


# ----------------------------------------------------------------------------
# The workdir: one config's results.

WorkdirError = errors.WorkdirError  # (defined below events, which raises it)


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
  for name in RUN_DIRS:
    shutil.rmtree(workdir / name, ignore_errors=True)


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
  deletes the run files, checkpoints and TensorBoard events (nothing else)
  first.

  Args:
    workdir: the run's folder (need not exist).
    config_dict: the resolved config, as `config_to_dict` gives it.
    overwrite: discard whatever run the workdir holds.
    files: the names of the run's files (default: a single run's; the
      sweep passes its own).

  Raises:
    WorkdirError: another config's results are there and `overwrite` is
      off, or `workdir` is not a folder this process can write
      (`usable_workdir`).
  """
  workdir = usable_workdir(workdir)
  present = [n for n in (*files, *RUN_DIRS) if (workdir / n).exists()]
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
  barrier('laq_jax_prepare_workdir')


def as_json(obj) -> Any:
  """JSON round trip (tuples become lists), to compare configs."""
  return json.loads(json.dumps(obj))


def sweep_done(config, workdir: pathlib.Path) -> bool:
  """Whether `workdir` holds a finished sweep of `config` (its config.json
  the same config, and sweep.json written): a report's resume test."""
  try:
    return (same_config(json.loads((workdir / 'config.json').read_text()),
                        as_json(config_lib.to_dict(config)))
            and (workdir / 'sweep.json').is_file())
  except (OSError, ValueError):
    return False


def _presets(config_dict: dict) -> set[str]:
  """The presets a run or sweep config runs (its algo, its grid's)."""
  grid = config_dict.get('sweep') or {}
  algos = grid.get('algo', ()) if isinstance(grid, dict) else ()
  return {config_dict.get('algo'), *algos} - {None}


def _no_local_preset(config_dict: dict) -> bool:
  """server_lr: before it, a local preset's server stepped by the config's
  step_size where one was given (FedAvg at SGD's alpha), so a config that
  runs any preset with local steps ran otherwise then (conservatively: all
  of them); one without such a preset did not."""
  from laq_jax.hyper import get_algorithm  # pylint: disable=g-import-not-at-top

  def local(algo):
    try:
      return get_algorithm(algo).local
    except (ValueError, TypeError):
      return False
  return not any(local(a) for a in _presets(config_dict))


# Fields the config schema gained after checkpoints were first written:
# name -> (the value that keeps the behaviour from before it, whether a
# config ran the same before the field existed). A checkpoint or result
# written then stands for a config that leaves the field at that value and
# for which the field's arrival changed nothing.
ADDED_FIELDS = {'server_lr': (0.0, _no_local_preset),
                # a preset's slots, '' its own parts (as before them)
                **{slot: ('', lambda _: True)
                   for slot in ('compressor', 'trigger', 'server', 'client',
                                'estimator', 'broadcast', 'compressor_b')},
                # flax's initializers, the only ones before it
                'init': ('default', lambda _: True),
                # every client vmapped at once, as before it
                'client_batch': (0, lambda _: True),
                # flax's LSTM, the only one before it
                'lstm': ('flax', lambda _: True),
                # the preset's privacy slot (its own part: off, as before)
                'privacy': ('', lambda _: True)}


def behaves_as_before(name: str, config_dict: dict) -> bool:
  """Whether the config ran the same before ADDED_FIELDS[name] existed."""
  return ADDED_FIELDS[name][1](config_dict)


def legacy_fingerprints(config_dict: dict) -> tuple[str, ...]:
  """The checkpoint fingerprints (`laq_jax.checkpoint.fingerprint`) the
  same config had before the schema grew the ADDED_FIELDS it leaves at
  their old behaviour: a run or sweep checkpointed then resumes after (as
  `same_config` keeps its finished results), unless the field's arrival
  changed what the config runs (`behaves_as_before`)."""
  from laq_jax import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
  out, older = [], dict(config_dict)
  # (the newest first: a checkpoint of each era between two fields matches)
  for name, (value, _) in reversed(ADDED_FIELDS.items()):
    if (name in older and older[name] == value
        and behaves_as_before(name, config_dict)):
      del older[name]
      out.append(checkpoint_lib.fingerprint(older))
  return tuple(out)


def same_config(written: dict, wanted: dict) -> bool:
  """Whether a config.json `written` by a run stands for the config `wanted`.

  Equal, or written before the schema grew a field that `wanted` leaves at
  its default (configs/default.py): such a field did not exist then, and
  its default keeps the behaviour it had (so too `absent='stale'`,
  written before 'auto' existed, for `absent='auto'`).
  """
  defaults = as_json(config_lib.to_dict(default_config.get_config()))
  if ('weighting' not in written and written.get('absent') == 'stale'
      and wanted.get('absent') == 'auto'):
    # Written before `weighting` and absent='auto' existed: 'stale' was
    # then every preset's default, which 'auto' still means for them.
    written = {**written, 'absent': 'auto'}
  if any(name in wanted and name not in written
         and not behaves_as_before(name, wanted) for name in ADDED_FIELDS):
    return False  # written before the field, and it ran otherwise then
  return _same_group(written, wanted, defaults)


def _same_group(written: dict, wanted: dict, defaults) -> bool:
  """`same_config` on one level: a group (`params`, `network`) compares
  the same way, so a part registered since (its parameters at their
  defaults) does not make a finished run another config."""
  defaults = defaults if isinstance(defaults, dict) else {}
  new = set(wanted) - set(written)
  if not set(written) <= set(wanted):
    return False
  for k in written:
    if isinstance(written[k], dict) and isinstance(wanted[k], dict):
      if not _same_group(written[k], wanted[k], defaults.get(k)):
        return False
    elif written[k] != wanted[k]:
      return False
  return all(k in defaults and wanted[k] == defaults[k] for k in new)


def barrier(name: str) -> None:
  """Waits for every process (a no-op in a single-process run)."""
  if distributed.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


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
    if name in INT_COLUMNS and all(cells):
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
  time_T = run.metrics.get('time_s')
  if time_T is not None and np.isnan(time_T).any():
    time_T = None  # a run from before the network model
  return metrics.make_curve(label or run.summary['algo'],
                            run.metrics['loss'],
                            np.nan if final_loss is None else final_loss,
                            run.metrics['uploads'], run.metrics['bits'],
                            fstar, run.metrics.get('bits_down'), time_T)


# ----------------------------------------------------------------------------
# A study's report, copied (e.g. into docs/).

def copy_report(workdir: pathlib.Path, dest: pathlib.Path,
                report: str = 'REPORT.md') -> list[str]:
  """Copies a study's REPORT.md, the PNGs it links and its results.json
  into `dest` (same layout)."""
  text = (workdir / report).read_text()
  paths = re.findall(r'!\[[^\]]*\]\(([^)]+\.png)\)', text)
  dest.mkdir(parents=True, exist_ok=True)
  for path in paths:
    (dest / path).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(workdir / path, dest / path)
  shutil.copyfile(workdir / report, dest / report)
  extra = [name for name in ('results.json',) if (workdir / name).exists()]
  for name in extra:  # the report's numbers as data (results_data)
    shutil.copyfile(workdir / name, dest / name)
  return [report] + paths + extra
