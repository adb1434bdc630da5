"""Tests of laq_jax/devices/distributed.py without starting any process or runtime.

How the settings come from arguments and $LAQ_JAX_*, which values are
refused, and that `maybe_initialize` calls `jax.distributed.initialize`
only when asked (the call itself is mocked). Two real processes are in
multiprocess_test.py (slow).
"""

import os
from unittest import mock

from absl.testing import absltest
import jax

from laq_jax import distributed

ENV = (distributed.ENV_COORDINATOR, distributed.ENV_NUM_PROCESSES,
       distributed.ENV_PROCESS_ID)
NOTHING = dict(coordinator_address=None, num_processes=None, process_id=None)


class SettingsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # Restored after the test, whatever it sets.
    self.enter_context(mock.patch.dict(os.environ))
    for name in ENV:
      os.environ.pop(name, None)

  def test_names(self):
    self.assertEqual(ENV, ('LAQ_JAX_COORDINATOR', 'LAQ_JAX_NUM_PROCESSES',
                           'LAQ_JAX_PROCESS_ID'))

  def test_environment(self):
    os.environ.update({distributed.ENV_COORDINATOR: '10.0.0.1:1234',
                       distributed.ENV_NUM_PROCESSES: '4',
                       distributed.ENV_PROCESS_ID: '3'})
    self.assertEqual(distributed.settings(), dict(
        coordinator_address='10.0.0.1:1234', num_processes=4, process_id=3))

  def test_arguments_win_over_environment(self):
    os.environ.update({distributed.ENV_COORDINATOR: 'env:1',
                       distributed.ENV_NUM_PROCESSES: '4'})
    self.assertEqual(distributed.settings('h:1', 2, 1), dict(
        coordinator_address='h:1', num_processes=2, process_id=1))
    # Each argument left None is filled from its own variable.
    self.assertEqual(distributed.settings(process_id=0), dict(
        coordinator_address='env:1', num_processes=4, process_id=0))

  def test_nothing_given_leaves_detection_to_jax(self):
    self.assertEqual(distributed.settings(), NOTHING)
    os.environ.update({name: '' for name in ENV})  # empty: not set
    self.assertEqual(distributed.settings(), NOTHING)

  def test_bad_values(self):
    with self.assertRaisesRegex(ValueError,
                                r'process_id=2 is not allowed: it must be in '
                                r'0\.\.1 \(num_processes=2\)'):
      distributed.settings('h:1', 2, 2)
    with self.assertRaisesRegex(ValueError, 'process_id=-1 is not allowed: '
                                'it must be an integer >= 0'):
      distributed.settings(process_id=-1)
    with self.assertRaisesRegex(ValueError, "coordinator_address='h' is not "
                                "allowed: it must be 'host:port'"):
      distributed.settings('h', 2, 0)
    with self.assertRaisesRegex(ValueError, 'num_processes=0 is not allowed: '
                                'it must be an integer >= 1'):
      distributed.settings('h:1', 0)
    os.environ[distributed.ENV_NUM_PROCESSES] = 'two'
    with self.assertRaisesRegex(ValueError, r"\$LAQ_JAX_NUM_PROCESSES='two' "
                                'is not allowed: it must be an integer'):
      distributed.settings()
    os.environ[distributed.ENV_NUM_PROCESSES] = '2'
    os.environ[distributed.ENV_PROCESS_ID] = '2'
    with self.assertRaisesRegex(ValueError, 'process_id=2'):
      distributed.settings()


class InitializeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enter_context(mock.patch.dict(os.environ))
    for name in ENV:
      os.environ.pop(name, None)
    self.init = self.enter_context(
        mock.patch.object(jax.distributed, 'initialize'))
    # initialize() picks gloo for CPU collectives: a process-wide setting,
    # kept out of this test process.
    self.config_update = self.enter_context(
        mock.patch.object(jax.config, 'update'))

  def test_maybe_initialize_does_nothing_when_not_asked(self):
    self.assertFalse(distributed.maybe_initialize())
    self.init.assert_not_called()
    self.config_update.assert_not_called()

  def test_maybe_initialize_from_the_environment(self):
    os.environ.update({distributed.ENV_COORDINATOR: '127.0.0.1:9',
                       distributed.ENV_NUM_PROCESSES: '2',
                       distributed.ENV_PROCESS_ID: '1'})
    self.assertTrue(distributed.maybe_initialize(initialization_timeout=7))
    self.init.assert_called_once_with(
        coordinator_address='127.0.0.1:9', num_processes=2, process_id=1,
        initialization_timeout=7)
    self.config_update.assert_called_once_with(
        'jax_cpu_collectives_implementation', 'gloo')

  def test_auto_detect_passes_nothing_given(self):
    self.assertTrue(distributed.maybe_initialize(auto_detect=True))
    self.init.assert_called_once_with(initialization_timeout=300)

  def test_bad_values_fail_before_initializing(self):
    with self.assertRaisesRegex(ValueError, 'process_id=5'):
      distributed.maybe_initialize('h:1', 2, 5)
    self.init.assert_not_called()


class WriterTest(absltest.TestCase):

  def test_only_process_0_writes(self):
    for index, writer in ((0, True), (1, False), (3, False)):
      with mock.patch.object(jax, 'process_index', return_value=index):
        self.assertIs(distributed.is_writer(), writer, index)


if __name__ == '__main__':
  absltest.main()
