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


# Where the time goes (tests/_compile_stats.py): with $LAQ_JAX_COMPILE_STATS
# set, this process and every Python process it starts (tests/_site on
# PYTHONPATH loads the hook) record their tracing, lowering and compile time.
_STATS = bool(os.environ.get('LAQ_JAX_COMPILE_STATS'))
if _STATS:
  _HERE = os.path.dirname(os.path.abspath(__file__))
  sys.path.insert(0, _HERE)
  import _compile_stats  # pylint: disable=g-import-not-at-top
  _site = os.path.join(_HERE, '_site')
  os.environ['PYTHONPATH'] = os.pathsep.join(
      p for p in (_site, ROOT, os.environ.get('PYTHONPATH', '')) if p)

import jax  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

# The pytest processes of `./test.sh` (scripts/run_tests.py sets
# LAQ_JAX_TEST_EMITTERS=legacy) also generate code with XLA's older loop
# emitters (`--xla_cpu_use_fusion_emitters=false`), which compile the
# suite's small programs about 40% faster (tests/BUDGETS.md). Like the
# optimization level, this process's alone: XLA reads $XLA_FLAGS once, when
# the backend starts, so the flag is set, the backend started, and
# $XLA_FLAGS given back before any test starts a process (they keep XLA's
# defaults, as a user's do). The two code generators round differently in
# the last bits (and a quantized round can turn such a bit into a level), so
# a module that compares its results with another code path's within a
# tolerance that only the default generator meets sets
# `XLA_DEFAULT_EMITTERS = True` (deploy_test: a client's program against
# the vmapped simulation; bit_exact_test: a grid point against its run
# alone, bit for bit), as do the `XLA_DEFAULTS` modules; run_tests.py
# runs those in processes of their own, with the default emitters.
LEGACY_EMITTERS = '--xla_cpu_use_fusion_emitters=false'
_LEGACY = (os.environ.pop('LAQ_JAX_TEST_EMITTERS', '') == 'legacy'
           and os.environ.get('LAQ_JAX_TEST_OPTIMIZE', '0') != '1')
if _LEGACY:
  from jax._src import xla_bridge as _xb  # pylint: disable=g-import-not-at-top,wrong-import-position
  if _xb.backends_are_initialized():
    raise RuntimeError('LAQ_JAX_TEST_EMITTERS=legacy: JAX\'s backend started '
                       'before tests/conftest.py could set XLA_FLAGS')
  _flags = os.environ.get('XLA_FLAGS')
  os.environ['XLA_FLAGS'] = f'{_flags or ""} {LEGACY_EMITTERS}'.strip()
  jax.devices()
  if _flags is None:
    del os.environ['XLA_FLAGS']
  else:
    os.environ['XLA_FLAGS'] = _flags

if _STATS:
  _compile_stats.register()


# Every program is compiled once per run of the suite: JAX's persistent
# compilation cache, every program in it however fast it compiled, for this
# process and, through the environment, every process it starts (the
# launchers' `startup.setup_jax` takes $LAQ_JAX_COMPILE_CACHE and keeps the
# minimum compile time given here; notebooks' kernels, the documentation's
# examples, Flower's ClientApps and the sharded checks read JAX's own
# variables).
from tests import common  # pylint: disable=g-import-not-at-top,wrong-import-position
# Every registry of names a user (or a test) can add to exists once these
# are imported; `registry.scoped` restores them all, and the presets.
import laq_jax  # pylint: disable=g-import-not-at-top,wrong-import-position,unused-import
from laq_jax import registry  # pylint: disable=g-import-not-at-top,wrong-import-position
from laq_jax.data import kinds  # pylint: disable=g-import-not-at-top,wrong-import-position,unused-import

_CACHE = common.compile_cache_dir()
if _CACHE is not None:
  os.makedirs(_CACHE, exist_ok=True)
  os.environ.update({
      'LAQ_JAX_COMPILE_CACHE': _CACHE,
      'JAX_COMPILATION_CACHE_DIR': _CACHE,
      'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '0',
      'JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES': '-1',
  })
  jax.config.update('jax_compilation_cache_dir', _CACHE)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', -1)
else:
  os.environ['LAQ_JAX_COMPILE_CACHE'] = 'off'

jax.config.update('jax_enable_x64', True)

# A pytest process compiles its own programs with XLA's optimizations mostly
# off (`jax_disable_most_optimizations`: LLVM at -O0): the suite compiles
# thousands of small programs once each, and runs most of them for a few
# steps, so compiling is most of its time (tests/BUDGETS.md). The processes
# the tests start (launchers, reports, notebooks' kernels, the Flower
# deployment, the multi-device checks) keep XLA's defaults, as a user's
# processes do: the flag is JAX's configuration of this process, not an
# environment variable they inherit, and it is part of the compilation
# cache's key. The two levels round differently in the last bits, so a
# test module that compares this process's results with a started
# process's bit for bit sets `XLA_DEFAULTS = True` and compiles at the
# defaults too (resume_test, flower_test, train_test).
# LAQ_JAX_TEST_OPTIMIZE=1 compiles every module at the defaults.
_OPTIMIZE = os.environ.get('LAQ_JAX_TEST_OPTIMIZE', '0') == '1'

def needs_default_emitters(module) -> bool:
  return bool(getattr(module, 'XLA_DEFAULTS', False)
              or getattr(module, 'XLA_DEFAULT_EMITTERS', False))


@pytest.fixture(autouse=True, scope='module')
def _release_compiled_programs(request):
  """Sets the module's optimization level (above), and drops JAX's in-memory
  caches of traced and compiled programs after each test module: a process
  that kept every one of the suite's grew until XLA's compiler crashed
  (SIGSEGV). The next module that needs one of them loads it from the
  persistent cache instead of compiling it again."""
  jax.config.update('jax_disable_most_optimizations', not (
      _OPTIMIZE or getattr(request.module, 'XLA_DEFAULTS', False)))
  if _LEGACY and needs_default_emitters(request.module):
    pytest.fail(f'{os.path.basename(request.module.__file__)} needs XLA\'s '
                'default emitters (XLA_DEFAULTS or XLA_DEFAULT_EMITTERS): run '
                'it in a pytest process without LAQ_JAX_TEST_EMITTERS=legacy '
                '(scripts/run_tests.py groups it so)', pytrace=False)
  # A preset or part a test module registers stays in that module: the next
  # one in the same process sees the library's (reference_test and
  # hyper_test compare the presets with their tables; a registered part's
  # parameters join every config, and reproduce_test compares configs with
  # its launcher's).
  scope = registry.scoped()
  scope.__enter__()
  if _STATS:
    import time  # pylint: disable=g-import-not-at-top
    module = os.path.basename(request.module.__file__)
    os.environ['LAQ_JAX_STATS_TAG'] = module
    _compile_stats.take()
    start = time.time()
  yield
  if _STATS:
    record = _compile_stats.take()
    record.update(module=module, wall=time.time() - start)
    _compile_stats.append(record)
  scope.__exit__(None, None, None)
  jax.clear_caches()


def pytest_configure(config):
  config.addinivalue_line(
      'markers', 'slow: an integration test (launchers end to end, '
      'subprocesses, devices, notebooks, reproduce); deselect with '
      '-m "not slow"')
