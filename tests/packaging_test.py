"""`pip install .` installs the library alone: laq_jax, its data package and
the shipped data set; no top-level `experiments` or `configs`."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

from absl.testing import absltest
import pytest

from tests import common

# What a clean checkout holds besides the sources: never copied.
_SKIP = ('.git', '.venv*', 'runs', 'build', '.pytest_cache', '.ruff_cache',
         '__pycache__', '*.egg-info', 'docs', 'notebooks')


class WheelTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix='laq_packaging_test_'))
    source = cls.tmp / 'source'
    shutil.copytree(common.ROOT, source,
                    ignore=shutil.ignore_patterns(*_SKIP))
    # Offline: the build uses the setuptools of this environment
    # (requirements.txt pins one).
    done = subprocess.run(
        [sys.executable, '-m', 'pip', 'wheel', '--no-deps',
         '--no-build-isolation', '-q', '-w', str(cls.tmp / 'dist'),
         str(source)], capture_output=True, text=True, timeout=300,
        check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert 'importable' not in done.stderr, done.stderr[-3000:]
    cls.wheel, = (cls.tmp / 'dist').glob('laq_jax-*.whl')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def test_only_the_library(self):
    names = zipfile.ZipFile(self.wheel).namelist()
    top = {n.split('/')[0] for n in names}
    self.assertEqual({t for t in top if not t.endswith('.dist-info')},
                     {'laq_jax'})
    self.assertIn('laq_jax/datasets/heart_scale', names)
    self.assertIn('laq_jax/data/libsvm.py', names)
    # every module of the clone's library, its layers' subpackages too
    root = pathlib.Path(__file__).resolve().parent.parent
    modules = sorted(p.relative_to(root).as_posix()
                     for p in (root / 'laq_jax').rglob('*.py')
                     if '__pycache__' not in p.parts)
    self.assertEqual([m for m in modules if m not in names], [])
    metadata = next(n for n in names if n.endswith('METADATA'))
    requires = [line for line in zipfile.ZipFile(self.wheel).read(metadata)
                .decode().splitlines() if line.startswith('Requires-Dist')]
    self.assertTrue(any('scikit-learn' in r for r in requires), requires)

  @pytest.mark.slow  # pip installs the wheel, a process imports it
  def test_installed_it_works_away_from_the_clone(self):
    target = self.tmp / 'site'
    done = subprocess.run(
        [sys.executable, '-m', 'pip', 'install', '--no-deps', '-q',
         '--target', str(target), str(self.wheel)], capture_output=True,
        text=True, timeout=300, check=False)
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    script = (
        'import importlib.util, laq_jax\n'
        'from laq_jax import data\n'
        'x, y = data.load_builtin("heart_scale")\n'
        'print(laq_jax.__file__, x.shape, y.sum())\n'
        'print(importlib.util.find_spec("experiments"),'
        ' importlib.util.find_spec("configs"))\n')
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['PYTHONPATH'] = str(target)
    run = subprocess.run([sys.executable, '-c', script], cwd=self.tmp,
                         env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    self.assertEqual(run.returncode, 0, run.stderr[-3000:])
    first, second = run.stdout.strip().splitlines()
    self.assertTrue(first.startswith(str(target)), first)
    self.assertIn('(270, 13) 120', first)
    self.assertEqual(second, 'None None')


if __name__ == '__main__':
  absltest.main()
