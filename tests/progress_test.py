"""experiments/run/progress.py: bars on a terminal, log lines elsewhere, a quiet
start."""

import io
import logging as std_logging
import os
from unittest import mock

from absl import logging
from absl.testing import absltest
from rich import console as rich_console

from experiments.run import progress


def _console(buffer):
  return rich_console.Console(file=buffer, force_terminal=True, width=200,
                              color_system=None)


class LogLinesTest(absltest.TestCase):

  def test_a_line_per_update_with_rate_and_eta(self):
    with self.assertLogs(logging.get_absl_logger(), 'INFO') as logs:
      with progress.Progress('step', 30, bar=False) as p:
        p.update(10, 'residual 1e-3')
        p.update(30, 'residual 1e-4')
    self.assertLen(logs.output, 2)
    self.assertRegex(logs.output[0], r'step 10/30 \( 33%\) \| [\d.]+ it/s '
                     r'\(incl. compile\) \| ETA \d+s \| residual 1e-3')
    self.assertRegex(logs.output[1], r'step 30/30 \(100%\) \| [\d.]+ it/s '
                     r'\| ETA 0s \| residual 1e-4')
    self.assertIsNotNone(p.steady_rate)

  def test_lines_name_the_caller(self):
    with self.assertLogs(logging.get_absl_logger(), 'INFO') as logs:
      progress.info('hello %d', 3)
    self.assertEqual(logs.records[0].filename, 'progress_test.py')

  def test_mode_from_the_environment(self):
    with mock.patch.dict(os.environ, {progress.PROGRESS_ENV_VAR: 'log'}):
      self.assertFalse(progress.bars_wanted())
    with mock.patch.dict(os.environ, {progress.PROGRESS_ENV_VAR: 'bar'}):
      self.assertTrue(progress.bars_wanted())
    with mock.patch.dict(os.environ, {progress.PROGRESS_ENV_VAR: 'auto'}):
      with mock.patch('sys.stderr', io.StringIO()):  # not a terminal
        self.assertFalse(progress.bars_wanted())
    with mock.patch.dict(os.environ, {progress.PROGRESS_ENV_VAR: 'fancy'}):
      with self.assertRaisesRegex(ValueError, "'fancy'; allowed: auto, bar, "
                                  'log'):
        progress.bars_wanted()


class BarsTest(absltest.TestCase):

  def test_nested_bars_share_one_display(self):
    buffer = io.StringIO()
    handler = logging.get_absl_handler().python_handler
    stream_before = handler.stream
    with self.assertNoLogs(logging.get_absl_logger(), 'INFO'):
      outer = progress.Progress('experiments', 2, unit='experiment',
                                bar=True, console=_console(buffer))
      inner = progress.Progress('point-steps', 40, unit='point-it',
                                bar=True)
      self.assertIsNotNone(progress._DISPLAY.bars)
      inner.update(20, 'best residual 1.0e-02')
      inner.update(40, 'best residual 1.0e-05')
      inner.close()
      self.assertIsNotNone(progress._DISPLAY.bars)  # the outer one is open
      outer.update(1, 'logreg done')
      outer.close()
    self.assertIsNone(progress._DISPLAY.bars)
    self.assertIs(handler.stream, stream_before)
    text = buffer.getvalue()
    for piece in ('experiments', '1/2', 'logreg done', 'point-steps',
                  '40/40', 'point-it/s', 'best residual 1.0e-05'):
      self.assertIn(piece, text)

  def test_closing_twice_and_an_unfinished_bar(self):
    p = progress.Progress('step', 10, bar=True,
                          console=_console(io.StringIO()))
    p.update(3)
    p.close()
    p.close()
    self.assertIsNone(progress._DISPLAY.bars)


class QuietStartTest(absltest.TestCase):

  def test_backend_probing_dropped_warnings_kept(self):
    progress.quiet_start()
    progress.quiet_start()  # once
    jax_logger = std_logging.getLogger('jax._src.xla_bridge')
    self.assertLen([f for f in jax_logger.filters
                    if isinstance(f, progress._InfoFilter)], 1)
    with self.assertLogs(jax_logger, 'INFO') as logs:
      jax_logger.info("Unable to initialize backend 'tpu': no libtpu")
      jax_logger.warning('a real warning')
    self.assertEqual([r.getMessage() for r in logs.records],
                     ['a real warning'])
    record = std_logging.LogRecord(
        'absl', std_logging.INFO, f'{os.sep}x{os.sep}orbax{os.sep}y.py', 1,
        'saved', None, None)
    self.assertFalse(logging.get_absl_handler().filter(record))
    record.levelno = std_logging.WARNING
    self.assertTrue(logging.get_absl_handler().filter(record))


if __name__ == '__main__':
  absltest.main()
