"""Progress of long work, one reporter for every launcher, and quiet logs.

    progress = Progress('train', total=4000, unit='it')
    progress.update(done, 'residual 1.2e-03 | uploads 310')

After each piece of work (a chunk of iterations, a sweep batch's chunk, an
experiment) `update` logs one line: how far, the rate (the first piece
includes compilation, and says so), the time left, and the caller's note.
Only process 0 of a multi-process run logs.
"""

from __future__ import annotations

import logging as std_logging
import os
import time

from absl import logging

from laq_jax import distributed


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


class Progress:
  """Counts units of work done and logs a line per update.

  Attributes:
    what: what is progressing (the line's first word).
    total: units in all.
    unit: the unit's name for the rate ('it', 'point-it', ...).
    steady_rate: units per second after the first update (which includes
      compiling), or None before a second update.
  """

  def __init__(self, what: str, total: int, unit: str = 'it',
               initial: int = 0):
    """`initial` units were done before (a resumed run): not in the rate."""
    self.what = what
    self.total = total
    self.unit = unit
    self.start = time.perf_counter()
    self.first_end = None
    self.initial = self.done_at_first = self.done = initial

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
    """Records that `done` units (in all) are done and logs the line."""
    now = time.perf_counter()
    self.done = done
    if self.first_end is None:  # includes compilation
      self.first_end, self.done_at_first = now, done
      rate = (done - self.initial) / max(now - self.start, 1e-9)
      compile_note = ' (incl. compile)'
    else:
      rate = self.steady_rate or 0.0
      compile_note = ''
    eta = (self.total - done) / max(rate, 1e-9)
    info('%s %d/%d (%3.0f%%) | %.1f %s/s%s | ETA %s%s', self.what, done,
         self.total, 100 * done / max(self.total, 1), rate, self.unit,
         compile_note, duration(eta), f' | {note}' if note else '')


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
