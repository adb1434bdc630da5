"""Shared test set-up.

float64 is turned on for the whole session, before any test runs, as the
launchers do at startup, so that no test depends on which module happened to
enable it first. Code paths in float32 still run in float32: every array in
laq_jax carries an explicit dtype. `tests/x32_test.py` checks the default
(x64 off) mode in a subprocess.

Tiers: unit tests of one module each run in every `pytest -m "not slow"`;
integration tests (launchers end to end, resume after SIGKILL, several
processes or devices, the notebooks, reproduce) are marked `slow` (module
level `pytestmark`) and run in the full suite (`.ci/run`).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

# The launchers' persistent compilation cache stays off in the suite (the
# launchers run in subprocesses, which inherit this); tests/startup_test.py
# turns it on in a folder of its own.
os.environ.setdefault('LAQ_JAX_COMPILE_CACHE', 'off')

import jax  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

jax.config.update('jax_enable_x64', True)


@pytest.fixture(autouse=True, scope='module')
def _release_compiled_programs():
  """Drops JAX's caches of traced and compiled programs after each test
  module: a module's programs are its own, and a process that kept every
  one of the suite's grew until XLA's compiler crashed."""
  yield
  jax.clear_caches()


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'slow: an integration test (launchers end to end, '
      'subprocesses, devices, notebooks, reproduce); deselect with '
      '-m "not slow"')
