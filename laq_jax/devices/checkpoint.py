"""Checkpoints of a run with `orbax-checkpoint`: save, find, restore.

    ckpt = Checkpointer(workdir / 'checkpoints', fingerprint(config_dict))
    restored = ckpt.restore(state_like)      # None when nothing was saved
    ...                                      # after a chunk ending at step k:
    ckpt.save(k, state, arrays={'loss': loss_K, 'sent': sent_KxM, ...},
              meta={'accuracy_at': {...}})

A checkpoint is one orbax step folder `<directory>/<k>/` holding
  state   the whole `LoopState` at step k: the step counter, theta^k, every
          worker's last upload Qhat_m, its last quantization error ehat_m,
          its staleness clock t_m, the server aggregate and the D-long history
          of parameter steps (leading G axis for a sweep). Restoring it and
          running on gives bit-identical results to never having stopped;
  arrays  what the run has recorded so far (e.g. the loss, uploads and bits of
          steps 0..k-1), NumPy;
  meta    JSON: the config fingerprint, the step, the arrays' shapes and
          dtypes, and the caller's own fields (e.g. test accuracies so far).

There are no PRNG keys to save: `laq_jax.loop` derives every minibatch key
statelessly as fold_in(fold_in(fold_in(key(seed), 1), k), m) from the seed
(in the Hyper, i.e. the config), the step k and the global worker id m, so
the step counter in `state` *is* the random state.

Orbax writes a step into a temporary folder and renames it when complete,
so a process killed mid-save leaves the previous checkpoints intact (the
unfinished folder is removed the next time a Checkpointer opens the
directory). The last `keep` checkpoints are kept.

With several processes (`laq_jax.distributed`) every process must call
`save` and `restore` (orbax writes each process's shards of a global array
and lets process 0 write the metadata); the caller must not limit them to
the writer process.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import json
import logging
import os
import pathlib
import shutil
import time
from typing import Any, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

FORMAT = 3  # bumped when the layout changes; older checkpoints are refused


class _OrbaxWithoutTraceback(logging.Filter):
  """Keeps orbax's own error lines but drops their tracebacks: a failing
  save (a full disk) is reported by `Checkpointer.save` in one line, and
  orbax's background threads would otherwise print a traceback of the same
  error, depending on which of its files the disk ran out on."""

  def filter(self, record: logging.LogRecord) -> bool:
    if record.exc_info and _from_orbax(record):
      record.exc_info = None
      record.exc_text = None
    return True


def _from_orbax(record: logging.LogRecord) -> bool:
  """Logged by orbax, or an exception raised in orbax's code (asyncio's
  "Task exception was never retrieved" of orbax's writes)."""
  if 'orbax' in (record.pathname or ''):
    return True
  tb = record.exc_info[2] if isinstance(record.exc_info, tuple) else None
  while tb is not None:
    if 'orbax' in tb.tb_frame.f_code.co_filename:
      return True
    tb = tb.tb_next
  return False


for _name in ('absl', 'asyncio'):
  logging.getLogger(_name).addFilter(_OrbaxWithoutTraceback())
# 3: the rule state holds the parts' state (parts_M) and the server's (server).
KEEP = 3


class CheckpointError(ValueError):
  """A checkpoint belongs to another config, has an unknown layout, or
  could not be written (a full disk)."""


def fingerprint(config: Mapping[str, Any]) -> str:
  """A SHA-256 of the config's canonical JSON: equal iff the configs are.

  Args:
    config: a JSON-serializable mapping (e.g. `ConfigDict.to_dict()`).

  Returns:
    64 hex digits.
  """
  text = json.dumps(config, sort_keys=True, separators=(',', ':'),
                    default=str)
  return hashlib.sha256(text.encode()).hexdigest()


# How long a failed save's temporary folder is watched for a writing thread
# that makes it again (s), and how long it must stay away to stop earlier.
_PARTIAL_WATCH_S = 5.0
_PARTIAL_QUIET_S = 0.5


def _remove_partial(directory: pathlib.Path, step: int) -> bool:
  """Removes the temporary folders of a failed save of `step`; whether
  there were any."""
  found = False
  for path in pathlib.Path(directory).glob(f'{step}.orbax-checkpoint-tmp*'):
    shutil.rmtree(path, ignore_errors=True)
    found = True
  return found


class Restored(NamedTuple):
  """A checkpoint read back.

  Attributes:
    step: k, the iterations done.
    state: the LoopState at step k, laid out like `state_like`.
    arrays: the recorded arrays, NumPy, as saved.
    meta: the caller's JSON fields, as saved.
  """
  step: int
  state: Any
  arrays: dict[str, np.ndarray]
  meta: dict[str, Any]


def abstract(tree):
  """Shapes, dtypes and shardings of a pytree of arrays (restore targets)."""
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def _empty(leaf) -> bool:
  """Whether an array (or jax.ShapeDtypeStruct) holds no elements."""
  shape = leaf.shape if hasattr(leaf, 'shape') else np.shape(leaf)
  return int(np.prod(shape)) == 0


def _without_empty(tree):
  """`tree` with its zero-size arrays as None, which orbax saves as an
  empty subtree (it refuses to save an array with no elements; error
  feedback's memory has no width where it is compiled out)."""
  return jax.tree.map(lambda a: None if _empty(a) else a, tree)


def _fill_empty(restored, like):
  """`restored` with `like`'s zero-size arrays back where it holds None."""
  def fill(template, got):
    if not _empty(template):
      return got
    zeros = jnp.zeros(template.shape, template.dtype)
    sharding = getattr(template, 'sharding', None)
    return zeros if sharding is None else jax.device_put(zeros, sharding)
  return jax.tree.map(fill, like, restored, is_leaf=lambda x: x is None)


def _reason(error: BaseException) -> str:
  """The cause of a failed write, in one line (no space left on device,
  ...)."""
  while error.__cause__ is not None or error.__context__ is not None:
    if isinstance(error, OSError) and error.strerror:
      break
    error = error.__cause__ or error.__context__
  if isinstance(error, OSError) and error.strerror:
    return error.strerror
  text = ' '.join(str(error).split())
  for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS,
               errno.EACCES, errno.EIO):  # tensorstore's text holds them
    if os.strerror(code) in text:
      return os.strerror(code)
  return (text[:200] + '...') if len(text) > 200 else (text or
                                                       type(error).__name__)


class Checkpointer:
  """Saves and restores one run's (or one sweep batch's) checkpoints.

  Attributes:
    directory: the folder holding one sub-folder per saved step.
    fingerprint: identifies the config; `restore` refuses other configs'
      checkpoints.
    code: identifies the model's code (`Problem.fingerprint`), or None;
      `restore` refuses a checkpoint saved with other code, whose state
      would resume another objective under the same config.
  """

  def __init__(self, directory: str | os.PathLike, fingerprint: str, *,
               keep: int = KEEP, code: str | None = None,
               also: Sequence[str] = ()):
    """Opens (creating it) `directory`.

    Args:
      directory: checkpoint folder, e.g. workdir/checkpoints.
      fingerprint: `fingerprint(config)` of the run.
      keep: how many of the latest checkpoints to keep (>= 1).
      code: `Problem.fingerprint` of the run's model (None: not checked).
      also: other fingerprints that stand for the same config (the same
        config written before the schema grew a field it leaves at its
        default: `experiments.run.outputs.legacy_fingerprints`); restore
        accepts them, save writes `fingerprint`.
    """
    if keep < 1:
      raise ValueError(f'keep={keep} is not allowed: it must be an integer '
                       '>= 1')
    self.directory = pathlib.Path(directory).expanduser().resolve()
    self.fingerprint = fingerprint
    self.also = tuple(also)
    self.code = code
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=True, enable_async_checkpointing=False,
        cleanup_tmp_directories=True)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def steps(self) -> list[int]:
    """The steps with a complete checkpoint, ascending."""
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    """The last complete checkpoint's step, or None."""
    steps = self.steps()
    return steps[-1] if steps else None

  def save(self, step: int, state, arrays: Mapping[str, np.ndarray], *,
           meta: Mapping[str, Any] | None = None) -> None:
    """Saves a checkpoint for `step` and waits until it is on disk.

    Args:
      step: k, the iterations done (the folder name).
      state: the LoopState (or any pytree of arrays) at step k.
      arrays: NumPy arrays recorded so far (any shapes).
      meta: JSON-serializable fields to keep with it.
    """
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    record = {
        'format': FORMAT, 'fingerprint': self.fingerprint, 'step': int(step),
        'code': self.code,
        'arrays': {name: {'shape': list(a.shape), 'dtype': a.dtype.str}
                   for name, a in arrays.items()},
        'meta': dict(meta or {}),
    }
    previous = self.latest_step()
    try:
      self._manager.save(int(step), args=ocp.args.Composite(
          state=ocp.args.StandardSave(_without_empty(state)),
          arrays=ocp.args.StandardSave(arrays),
          meta=ocp.args.JsonSave(record)), force=True)
      self._manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      # A full disk or a failing write: orbax writes a step into a
      # temporary folder and renames it when complete, so the earlier
      # checkpoints are whole; the partial one is removed here.
      self._discard_partial(int(step))
      kept = (f'the previous checkpoint (step {previous}) is intact and a '
              f'run resumes from it' if previous is not None else
              'no earlier checkpoint exists')
      raise CheckpointError(
          f'could not save the checkpoint of step {step} in '
          f'{self.directory}: {_reason(e)}; {kept}; the files written '
          'before it are intact. Free space and run the same command '
          'again.') from e

  def _discard_partial(self, step: int) -> None:
    """Removes what a failed save of `step` left: its temporary folder
    (a step folder appears only by the rename of a complete one). Orbax's
    writing threads are waited for first: a save that raised early can
    still have threads writing into that folder, which would make it
    again after its removal (seen on a full disk under load)."""
    try:
      self._manager.wait_until_finished()
    except Exception:  # pylint: disable=broad-except
      pass  # the same failure, already reported by the caller
    _remove_partial(self.directory, step)
    # A writing thread that outlived the wait can make the folder again
    # (seen once on a full disk under load): watch it a moment, and remove
    # what is left again when the process exits, after its threads.
    quiet_since = time.monotonic()
    end = quiet_since + _PARTIAL_WATCH_S
    while time.monotonic() < end:
      if _remove_partial(self.directory, step):
        quiet_since = time.monotonic()
      elif time.monotonic() - quiet_since > _PARTIAL_QUIET_S:
        break
      time.sleep(0.05)
    atexit.register(_remove_partial, self.directory, step)
    try:
      self._manager.reload()
    except Exception:  # pylint: disable=broad-except
      pass

  def restore(self, state_like, step: int | None = None) -> Restored | None:
    """Reads the checkpoint of `step` (default: the latest).

    Args:
      state_like: a pytree with the structure of the saved state; its
        arrays (or `jax.ShapeDtypeStruct`s, see `abstract`) give the dtype
        and placement (sharding) of the restored arrays.
      step: which checkpoint; None for the latest.

    Returns:
      A Restored, or None when there is no checkpoint.

    Raises:
      CheckpointError: the checkpoint was saved for another config
        (fingerprint), by other code of the model (`code`) or in another
        layout.
    """
    if step is None:
      step = self.latest_step()
      if step is None:
        return None
    record = self._manager.restore(step, args=ocp.args.Composite(
        meta=ocp.args.JsonRestore())).meta
    if record.get('format') != FORMAT:
      raise CheckpointError(
          f'checkpoint {self.directory / str(step)} has format '
          f'{record.get("format")!r}; this version reads format {FORMAT}. '
          'Delete the checkpoints folder (or run with --overwrite) to start '
          'over.')
    if record.get('fingerprint') not in (self.fingerprint, *self.also):
      raise CheckpointError(
          f'checkpoint {self.directory / str(step)} was saved by another '
          f'config (fingerprint {str(record.get("fingerprint"))[:12]}..., '
          f'this config: {self.fingerprint[:12]}...). Use another workdir, '
          'or run with --overwrite to discard it.')
    saved_code = record.get('code')
    if self.code is not None and saved_code is not None and (
        saved_code != self.code):
      raise CheckpointError(
          f'checkpoint {self.directory / str(step)} was saved by other code '
          f'of the model (its loss\'s fingerprint {saved_code}, now '
          f'{self.code}: Problem.fingerprint), so its state would resume '
          'another objective. Use another workdir, or run with --overwrite '
          'to discard it.')
    arrays_like = {name: np.zeros(spec['shape'], np.dtype(spec['dtype']))
                   for name, spec in record['arrays'].items()}
    target = abstract(state_like)
    try:
      restored = self._manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(_without_empty(target)),
          arrays=ocp.args.StandardRestore(arrays_like)))
      state = restored.state
    except (ValueError, KeyError) as e:
      # Saved before the empty arrays went unsaved (error feedback's memory
      # at full width where it is compiled out): read those at the saved
      # shapes, then keep the target's empty ones.
      saved = self._manager.item_metadata(step).state
      if saved is None or not any(map(_empty, jax.tree.leaves(target))):
        raise
      wide = jax.tree.map(
          lambda t, m: jax.ShapeDtypeStruct(m.shape, t.dtype) if _empty(t)
          else t, target, saved, is_leaf=lambda x: x is None)
      try:
        restored = self._manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(wide),
            arrays=ocp.args.StandardRestore(arrays_like)))
      except Exception:  # pylint: disable=broad-except
        raise e from None
      state = jax.tree.map(lambda t, got: None if _empty(t) else got,
                           target, restored.state)
    arrays = {name: np.asarray(a) for name, a in restored.arrays.items()}
    return Restored(int(record['step']), _fill_empty(state, target), arrays,
                    record['meta'])

  def close(self, *, quiet: bool = False) -> None:
    """Closes the manager, ending orbax's threads before the process does.

    Args:
      quiet: swallow an error from closing (on the way out of another
        error, which is the one the user should read).
    """
    try:
      self._manager.close()
    except Exception:  # pylint: disable=broad-except
      if not quiet:
        raise

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
