"""experiments.run.startup: float64 and JAX's persistent compilation cache."""
import pathlib
import tempfile

from absl.testing import absltest

from tests import common

PROBE = """
import os, jax, jax.numpy as jnp
from experiments.run import startup
startup.setup_jax()
print('x64', jax.config.jax_enable_x64)
print('dir', jax.config.jax_compilation_cache_dir)
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
print(float(jax.jit(lambda a: jnp.sin(a) @ a.T)(jnp.ones((64, 64))).sum()))
"""


def run(**env):
  # the launcher's own behaviour: not the suite's cache settings
  # (tests/conftest.py), which the child would otherwise inherit
  for key in ('JAX_COMPILATION_CACHE_DIR',
              'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS',
              'JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES'):
    env.setdefault(key, None)
  proc = common.run_script(PROBE, **env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc.stdout


class CompileCacheTest(absltest.TestCase):

  def test_launchers_cache_compiled_programs_where_told(self):
    cache = tempfile.mkdtemp()
    out = run(LAQ_JAX_COMPILE_CACHE=cache)
    self.assertIn('x64 True', out)
    self.assertIn(f'dir {cache}', out)
    self.assertNotEmpty(list(pathlib.Path(cache).iterdir()))  # written

  def test_off_means_no_cache(self):
    home = tempfile.mkdtemp()
    out = run(LAQ_JAX_COMPILE_CACHE='off',
                            XDG_CACHE_HOME=home)
    self.assertIn('dir None', out)
    self.assertFalse((pathlib.Path(home) / 'laq_jax' / 'xla').exists())

  def test_default_is_the_user_cache(self):
    home = tempfile.mkdtemp()
    out = run(LAQ_JAX_COMPILE_CACHE='',
                            XDG_CACHE_HOME=home)
    self.assertIn(f"dir {pathlib.Path(home) / 'laq_jax' / 'xla'}", out)


class CompileSecondsTest(absltest.TestCase):

  def test_counts_compiling_once_and_not_running(self):
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    from experiments.run import startup  # pylint: disable=g-import-not-at-top
    before = startup.compile_seconds()
    f = jax.jit(lambda a: jnp.cos(a) @ a.T + 17.0)  # a program not seen yet
    f(jnp.ones((32, 32))).block_until_ready()
    compiled = startup.compile_seconds()
    self.assertGreater(compiled, before)
    for _ in range(3):  # running it again compiles nothing
      f(jnp.ones((32, 32))).block_until_ready()
    self.assertEqual(startup.compile_seconds(), compiled)
    f(jnp.ones((8, 32))).block_until_ready()  # a new shape: compiled anew
    self.assertGreater(startup.compile_seconds(), compiled)


if __name__ == '__main__':
  absltest.main()
