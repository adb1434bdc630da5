"""TensorBoard event files of runs and sweeps: `tensorboard --logdir runs/`.

A run writes WORKDIR/tensorboard/ as it goes (after every chunk); a sweep
writes WORKDIR/tensorboard/<point>_<its settings>/ per grid point when it
finishes, so TensorBoard lists every point as a run of its own. Each step k
carries the figures of metrics.csv's row k:

  objective/loss            f(theta^k)
  objective/residual        f(theta^k) - f* (when f* is known)
  objective/grad_norm_sq    ||sum_m g_m||^2 of step k
  communication/uploads     uploads through step k (all workers)
  communication/bits_up     uplink bits through step k
  communication/bits_down   downlink bits through step k
  eval/test_accuracy        at the evaluation steps (and theta^T at T)

and at step T the final iterate's loss and residual, f(theta^T) (which
summary.json calls final_loss); the run's config as text. Only process 0
of a multi-process run writes. A run that starts again at step s (resumed
from a checkpoint at s, or run anew at 0) marks its first event so
TensorBoard drops what an earlier process wrote from step s on.

The writer is tensorboardX's `FileWriter`: pure Python (numpy and protobuf),
no TensorFlow or PyTorch; every step's figures go in one event (a Summary
with several values), which keeps a sweep of thousands of steps per point
to seconds.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import re
import time
from typing import Sequence

import numpy as np

from experiments.run import errors
from laq_jax import record as record_lib

TENSORBOARD_DIR = 'tensorboard'
TAGS = ('objective/loss', 'objective/residual', 'objective/grad_norm_sq',
        'communication/uploads', 'communication/bits_up',
        'communication/bits_down', 'eval/test_accuracy')
# A sweep writes at most this many steps per point (evenly spaced, the last
# one always); TensorBoard shows 1,000 per curve by default anyway.
SWEEP_MAX_STEPS = 2000


class Events:
  """The event file of one run (or one grid point).

  Attributes:
    logdir: the folder of the event files.
    totals: [uploads, uplink bits, downlink bits] through the last step
      written (the cumulative figures continue from them).
  """

  def __init__(self, logdir: str | pathlib.Path, start_step: int = 0,
               totals: Sequence[float] = (0, 0, 0), config: dict | None = None,
               fstar: float | None = None):
    """Opens the writer; steps from `start_step` on replace earlier ones.

    Args:
      logdir: the folder (created).
      start_step: the first step this writer will write.
      totals: uploads, uplink bits, downlink bits (and simulated seconds)
        before `start_step`.
      config: written as text at the first step (a fresh run).
      fstar: f*, for the residual.
    """
    from tensorboardX.event_file_writer import EventsWriter  # pylint: disable=g-import-not-at-top
    from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
    self.logdir = pathlib.Path(logdir)
    self._failed = False
    # The file name holds the second it was made and, so that a restart
    # within the same second neither overwrites the earlier file nor sorts
    # before it (TensorBoard reads files in name order), the nanosecond.
    # Written in this thread (tensorboardX's EventsWriter, not its
    # FileWriter's background thread), so that a failing write (a full
    # disk) is an error here, with the files written so far intact.
    with self._writing():
      self.logdir.mkdir(parents=True, exist_ok=True)
      self._writer = EventsWriter(str(self.logdir / 'events'),
                                  f'.{time.time_ns()}')
    # TensorBoard drops the steps >= start_step that older files hold.
    self._add(event_pb2.Event(
        step=start_step, session_log=event_pb2.SessionLog(
            status=event_pb2.SessionLog.START)))
    self.totals = np.zeros(4, np.float64)
    self.totals[:len(totals)] = np.asarray(totals, np.float64)
    self.fstar = fstar
    if config is not None and start_step == 0:
      from tensorboardX import summary  # pylint: disable=g-import-not-at-top
      text = '    ' + json.dumps(config, indent=1).replace('\n', '\n    ')
      self._add_summary(summary.text('config', text), 0)

  def steps(self, first_step: int, record: record_lib.Record,
            stride: int = 1) -> None:
    """Writes the record's steps first_step .. first_step + T - 1 (every
    `stride`-th one and the last; the totals count every step), the
    simulated time (`network/time_s`, T[k], and `network/cum_time_s`) when
    the record has it, and each extra recorded field as `trace/NAME`."""
    from tensorboardX.proto import summary_pb2  # pylint: disable=g-import-not-at-top
    timed = record.time_s is not None
    time_T = (np.asarray(record.time_s, np.float64) if timed
              else np.zeros(len(record.uploads)))
    per_step = np.stack([record.uploads, record.bits, record.bits_down,
                         time_T], axis=-1).astype(np.float64)
    cumulative = self.totals + np.cumsum(per_step, axis=0)
    loss_T = np.asarray(record.loss, np.float64)
    grad_T = np.asarray(record.grad_norm_sq, np.float64)
    extras = {n: np.asarray(record.per_step(n), np.float64)
              for n in record_lib.extras()
              if record.fields[n] is not None}
    count = len(loss_T)
    for t in range(count):
      step = first_step + t
      if t != count - 1 and step % stride:
        continue
      values = []
      if not np.isnan(loss_T[t]):  # NaN: not logged (RunSpec.loss_every)
        values.append(('objective/loss', loss_T[t]))
        if self.fstar is not None:
          values.append(('objective/residual', loss_T[t] - self.fstar))
      values += [('objective/grad_norm_sq', grad_T[t]),
                 ('communication/uploads', cumulative[t, 0]),
                 ('communication/bits_up', cumulative[t, 1]),
                 ('communication/bits_down', cumulative[t, 2])]
      if timed:
        values += [('network/time_s', time_T[t]),
                   ('network/cum_time_s', cumulative[t, 3])]
      values += [(f'trace/{n.removesuffix("_M")}', x[t])
                 for n, x in extras.items()]
      self._add_summary(summary_pb2.Summary(value=[
          summary_pb2.Summary.Value(tag=tag, simple_value=float(v))
          for tag, v in values]), step)
    if count:
      self.totals = cumulative[-1]

  def at(self, step: int, *, accuracy: float | None = None,
         loss: float | None = None) -> None:
    """eval/test_accuracy of theta^step, and f(theta^step) (with the
    residual) for the final iterate theta^T, which no step row holds."""
    from tensorboardX.proto import summary_pb2  # pylint: disable=g-import-not-at-top
    values = []
    if accuracy is not None:
      values.append(('eval/test_accuracy', accuracy))
    if loss is not None:
      values.append(('objective/loss', loss))
      if self.fstar is not None:
        values.append(('objective/residual', loss - self.fstar))
    if values:
      self._add_summary(summary_pb2.Summary(value=[
          summary_pb2.Summary.Value(tag=tag, simple_value=float(v))
          for tag, v in values]), step)

  def flush(self) -> None:
    """Writes what is buffered to disk (a killed process loses nothing
    written before its last flush)."""
    if not self._failed:
      with self._writing():
        self._writer.flush()

  def close(self) -> None:
    """Flushes and closes the file (nothing more after a failed write)."""
    if not self._failed:
      self._failed = True  # closed: later calls do nothing
      with self._writing():
        self._writer.close()

  def _add(self, event) -> None:
    if self._failed:
      return
    if event.wall_time == 0:
      event.wall_time = time.time()
    with self._writing():
      self._writer.write_event(event)

  def _add_summary(self, summary, step: int) -> None:
    from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
    self._add(event_pb2.Event(summary=summary, step=int(step)))

  @contextlib.contextmanager
  def _writing(self):
    """Turns a failing write (a full disk) into `errors.WorkdirError`,
    saying what is intact; later writes are skipped."""
    try:
      yield
    except OSError as e:
      self._failed = True
      raise errors.WorkdirError(
          f'could not write the TensorBoard events in {self.logdir}: '
          f'{e.strerror or e}; the event files up to the last flush, the '
          'other files and the checkpoints are intact. Free space and run '
          'the same command again (a run with checkpoints resumes).'
      ) from e


def point_folder(index: int, point: dict, varying: Sequence[str]) -> str:
  """'003_algo=laq,bits=4': the grid point's folder (its run name)."""
  label = ','.join(f'{k}={point[k]}' for k in varying) or 'point'
  return f'{index:03d}_' + re.sub(r'[^A-Za-z0-9_.,=+-]+', '_', label)


def write_sweep(logdir: pathlib.Path, points: Sequence[dict],
                varying: Sequence[str], result, fstar_G: Sequence,
                accuracy_G: Sequence, config: dict) -> None:
  """One folder per grid point under `logdir`, from a finished sweep.

  Args:
    logdir: WORKDIR/tensorboard.
    points: the grid points (dicts of settings).
    varying: the keys that vary (the folder names).
    result: the laq_jax.sweep.SweepResult.
    fstar_G: f* per point (None: no residual).
    accuracy_G: final test accuracy per point.
    config: the sweep's config (text of every point).
  """
  num_steps = result.loss_GxT.shape[1]
  stride = max(1, -(-num_steps // SWEEP_MAX_STEPS))
  for g, point in enumerate(points):
    events = Events(logdir / point_folder(g, point, varying), 0,
                    config={'point': point, 'sweep': config},
                    fstar=fstar_G[g])
    events.steps(0, result.record.point(g), stride=stride)
    events.at(num_steps, accuracy=accuracy_G[g],
              loss=float(result.final_loss_G[g]))
    events.close()
