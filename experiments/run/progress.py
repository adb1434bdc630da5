"""Progress of long work, one reporter for every launcher, and a quiet start.

    with Progress('train', total=4000, unit='it') as progress:
      ...
      progress.update(done, 'residual 1.2e-03 | uploads 310')

On a terminal, a progress bar (rich) per piece of work in progress: how
far, the rate (the first piece includes compilation, and says so), the time
left and the caller's note; nested work (a reproduction's experiments, each
one's sweep) shows one bar each, and log lines print above the bars. When
the output is not a terminal (a file, CI, a notebook's captured stderr),
each `update` logs one line with the same figures instead. Only process 0 of
a multi-process run reports. LAQ_JAX_PROGRESS=log asks for the log lines on
a terminal too; =bar for the bars where stderr is not a terminal.

`quiet_start` silences what JAX and orbax log at INFO that says nothing
about the run (the probing of absent TPU/GPU backends, orbax's dozen lines
per checkpoint); every launcher calls it first.
"""

from __future__ import annotations

import logging as std_logging
import os
import sys
import time

from absl import logging

from laq_jax import distributed

PROGRESS_ENV_VAR = 'LAQ_JAX_PROGRESS'


def duration(seconds: float) -> str:
  """'42s', '3m05s', '2h07m'."""
  seconds = int(round(seconds))
  if seconds < 60:
    return f'{seconds}s'
  minutes, seconds = divmod(seconds, 60)
  if minutes < 60:
    return f'{minutes}m{seconds:02d}s'
  hours, minutes = divmod(minutes, 60)
  return f'{hours}h{minutes:02d}m'


def info(*args) -> None:
  """logging.info on the writer process only."""
  if distributed.is_writer():
    logging.info(*args)


# Log lines name the caller of `info`, not this module.
logging.ABSLLogger.register_frame_to_skip(__file__, 'info')
logging.ABSLLogger.register_frame_to_skip(__file__, 'update')


def bars_wanted() -> bool:
  """Bars, not log lines: stderr is a terminal (or LAQ_JAX_PROGRESS=bar),
  LAQ_JAX_PROGRESS is not 'log', and this process writes."""
  mode = os.environ.get(PROGRESS_ENV_VAR, 'auto')
  if mode not in ('auto', 'bar', 'log'):
    raise ValueError(f'{PROGRESS_ENV_VAR}={mode!r}; allowed: auto, bar, log')
  if mode == 'log' or not distributed.is_writer():
    return False
  return mode == 'bar' or sys.stderr.isatty()


class _Display:
  """The one live display of every open bar (rich), and log lines above it.

  Started with the first bar and stopped when the last closes. While it
  runs, absl's handler writes through rich's stderr proxy, so log lines
  print above the bars instead of through them.
  """

  def __init__(self):
    self.bars = None
    self.open = set()
    self._handler_stream = None

  def add(self, description: str, total: int, completed: int, console=None):
    if self.bars is None:
      self._start(console)
    task = self.bars.add_task(description, total=total, completed=completed,
                              rate='', note='')
    self.open.add(task)
    return task

  def _start(self, console) -> None:
    from rich import console as rich_console  # pylint: disable=g-import-not-at-top
    from rich import progress as rich_progress  # pylint: disable=g-import-not-at-top
    self.bars = rich_progress.Progress(
        rich_progress.TextColumn('{task.description}'),
        rich_progress.BarColumn(bar_width=24),
        rich_progress.MofNCompleteColumn(),
        rich_progress.TextColumn('{task.fields[rate]}'),
        rich_progress.TimeRemainingColumn(),
        rich_progress.TextColumn('{task.fields[note]}'),
        console=console or rich_console.Console(stderr=True))
    stderr_before = sys.stderr
    self.bars.start()
    handler = logging.get_absl_handler().python_handler
    if handler.stream is stderr_before and sys.stderr is not stderr_before:
      self._handler_stream = handler.stream
      handler.stream = sys.stderr  # rich's proxy while the display is live

  def close(self, task) -> None:
    self.bars.stop_task(task)
    self.open.discard(task)
    if not self.open:
      self.bars.stop()
      if self._handler_stream is not None:
        logging.get_absl_handler().python_handler.stream = (
            self._handler_stream)
      self.bars = self._handler_stream = None


_DISPLAY = _Display()


class Progress:
  """Counts units of work done; a bar on a terminal, else a line per update.

  Attributes:
    what: what is progressing (the bar's label, the line's first word).
    total: units in all.
    unit: the unit's name for the rate ('it', 'point-it', ...).
    steady_rate: units per second after the first update (which includes
      compiling), or None before a second update.
  """

  def __init__(self, what: str, total: int, unit: str = 'it',
               initial: int = 0, *, bar: bool | None = None, console=None):
    """`initial` units were done before (a resumed run): not in the rate.

    `bar`: a progress bar (True) or log lines (False); None decides by
    `bars_wanted`. `console`: the rich Console of the bar (default stderr).
    """
    self.what = what
    self.total = total
    self.unit = unit
    self.start = time.perf_counter()
    self.first_end = None
    self.initial = self.done_at_first = self.done = initial
    self.bar = bars_wanted() if bar is None else bar
    self._task = (_DISPLAY.add(what, total, initial, console) if self.bar
                  else None)

  def __enter__(self) -> Progress:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def close(self) -> None:
    """Ends the bar (it stays on screen; the display stops with the last)."""
    if self._task is not None:
      task, self._task = self._task, None
      _DISPLAY.close(task)

  def restart_clock(self) -> None:
    """Times from now (after set-up that should not count)."""
    self.start = time.perf_counter()

  @property
  def steady_rate(self) -> float | None:
    if self.first_end is None or self.done <= self.done_at_first:
      return None
    return (self.done - self.done_at_first) / max(
        time.perf_counter() - self.first_end, 1e-9)

  def update(self, done: int, note: str = '') -> None:
    """Records that `done` units (in all) are done; shows or logs it."""
    now = time.perf_counter()
    self.done = done
    if self.first_end is None:  # includes compilation
      self.first_end, self.done_at_first = now, done
      rate = (done - self.initial) / max(now - self.start, 1e-9)
      compile_note = ' (incl. compile)'
    else:
      rate = self.steady_rate or 0.0
      compile_note = ''
    if self._task is not None:
      _DISPLAY.bars.update(self._task, completed=done,
                           rate=f'{rate:.1f} {self.unit}/s{compile_note}',
                           note=note)
      return
    eta = (self.total - done) / max(rate, 1e-9)
    info('%s %d/%d (%3.0f%%) | %.1f %s/s%s | ETA %s%s', self.what, done,
         self.total, 100 * done / max(self.total, 1), rate, self.unit,
         compile_note, duration(eta), f' | {note}' if note else '')


class _InfoFilter(std_logging.Filter):
  """Drops INFO (and lower) lines of the named loggers or files; keeps their
  warnings."""

  def __init__(self, loggers=(), paths=()):
    super().__init__()
    self.loggers, self.paths = tuple(loggers), tuple(paths)

  def filter(self, record):
    if record.levelno > std_logging.INFO:
      return True
    return not (record.name.startswith(self.loggers)
                or any(p in record.pathname for p in self.paths))


# JAX's backend probing ("Unable to initialize backend 'tpu'", on every
# CPU-only machine) and orbax's per-checkpoint lines.
_QUIET_LOGGERS = ('jax._src.xla_bridge',)
_QUIET_PATHS = (f'{os.sep}orbax{os.sep}',)


def quiet_start() -> None:
  """Installs the filter on absl's handler and on JAX's backend logger
  (once): no backend probing or orbax chatter in a launcher's output."""
  for target in (logging.get_absl_handler(),
                 std_logging.getLogger(_QUIET_LOGGERS[0])):
    if not any(isinstance(f, _InfoFilter) for f in target.filters):
      target.addFilter(_InfoFilter(_QUIET_LOGGERS, _QUIET_PATHS))
