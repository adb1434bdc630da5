"""laq_jax.data.kinds: the dataset kinds a config names, and their loaders.

(tests/registry_test.py holds a kind registered from user code.) Here: how
'kind[:argument]' is parsed and refused, each built-in kind's loader on
small files (LIBSVM text with and without its '.t' test file; MNIST through
a stand-in for `mnist.load_mnist`, so no MNIST files are read), the checks
a config runs before loading, and the f* cache key of a LIBSVM file.
"""

import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import data
from laq_jax.data import kinds
from laq_jax.data import mnist as mnist_lib


class ParseTest(parameterized.TestCase):

  @parameterized.parameters(
      ('mnist', ('mnist', '')),
      ('builtin:heart_scale', ('builtin', 'heart_scale')),
      ('libsvm:/data/a9a', ('libsvm', '/data/a9a')),
      ('libsvm:C:/x:y', ('libsvm', 'C:/x:y')),  # only the first ':' splits
  )
  def test_kind_and_argument(self, text, want):
    self.assertEqual(kinds.parse(text), want)

  @parameterized.parameters('mnist:train', 'builtin', 'builtin:', 'libsvm',
                            'cifar100', 'shakespeare:', '', 3, None)
  def test_refusals_list_every_usage(self, dataset):
    with self.assertRaises(ValueError) as caught:
      kinds.parse(dataset)
    message = str(caught.exception)
    self.assertTrue(message.startswith(f'dataset={dataset!r} is not allowed: '
                                       'it must be one of '), message)
    for usage in ("'mnist'", "'fashion_mnist'",
                  "'builtin:NAME' (NAME in heart_scale)",
                  "'libsvm:/path/file'"):
      self.assertIn(usage, message)


class LoadTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.folder = pathlib.Path(self.enter_context(
        tempfile.TemporaryDirectory()))

  def test_builtin_is_its_own_test_set(self):
    loaded = kinds.load('builtin:heart_scale', dtype=np.float64)
    self.assertIsInstance(loaded, data.Loaded)
    self.assertEqual(loaded.x_train.shape, (270, 13))
    self.assertEqual(loaded.x_train.dtype, np.float64)
    self.assertIs(loaded.x_test, loaded.x_train)
    self.assertIn('no test split', loaded.test_set)
    self.assertIsNone(loaded.integer_scale)

  def test_libsvm_without_a_test_file(self):
    path = self.folder / 'small'
    path.write_text('1 1:0.5\n-1 2:2\n')
    loaded = kinds.load(f'libsvm:{path}')
    np.testing.assert_array_equal(loaded.x_train, [[0.5, 0], [0, 2]])
    np.testing.assert_array_equal(loaded.y_train, [1, 0])
    self.assertIs(loaded.y_test, loaded.y_train)
    self.assertEqual(loaded.test_set, 'the training data (no small.t beside '
                     'it)')

  def test_libsvm_with_its_test_file(self):
    path = self.folder / 'small'
    path.write_text('1 1:0.5\n-1 2:2\n')
    (self.folder / 'small.t').write_text('-1 1:3\n1 3:1\n-1 1:1\n')
    loaded = kinds.load(f'libsvm:{path}')
    # Read as a pair: the test file's third column widens the training set.
    np.testing.assert_array_equal(loaded.x_train, [[0.5, 0, 0], [0, 2, 0]])
    np.testing.assert_array_equal(loaded.x_test, [[3, 0, 0], [0, 0, 1],
                                                  [1, 0, 0]])
    np.testing.assert_array_equal(loaded.y_test, [0, 1, 0])
    self.assertEqual(loaded.test_set, 'small.t (3 samples)')

  def test_libsvm_path_with_a_tilde(self):
    (self.folder / 'small').write_text('1 1:1\n')
    with mock.patch.dict(os.environ, {'HOME': str(self.folder)}):
      self.assertEqual(kinds.load('libsvm:~/small').x_train.tolist(), [[1.0]])
      self.assertIsNone(kinds.REGISTRY.get('libsvm').check('~/small', ''))

  def test_mnist_maps_the_arrays_and_says_its_scale(self):
    fake = {'x_train': np.zeros((4, 784)), 'y_train': np.arange(4),
            'x_test': np.ones((2, 784)), 'y_test': np.arange(2)}
    with mock.patch.object(mnist_lib, 'load_mnist',
                           return_value=fake) as load:
      loaded = kinds.load('mnist', dtype=np.float64, data_dir='/somewhere')
    load.assert_called_once_with('/somewhere', dtype=np.float64)
    self.assertIs(loaded.x_train, fake['x_train'])
    self.assertIs(loaded.y_test, fake['y_test'])
    self.assertEqual(loaded.test_set, 'MNIST test set (2 images)')
    self.assertEqual(loaded.integer_scale, 1 / 255)
    # An empty data_dir (a config's default) looks MNIST up.
    with mock.patch.object(mnist_lib, 'load_mnist',
                           return_value=fake) as load:
      kinds.load('mnist', data_dir='')
    load.assert_called_once_with(None, dtype=np.float32)


class EntriesTest(absltest.TestCase):

  def test_checks_before_loading(self):
    builtin, libsvm = kinds.REGISTRY.get('builtin'), kinds.REGISTRY.get(
        'libsvm')
    self.assertIsNone(builtin.check('heart_scale', ''))
    self.assertEqual(builtin.check('iris', ''),
                     'builtin:NAME with NAME one of heart_scale')
    self.assertEqual(libsvm.check('/nonexistent/file', ''),
                     'libsvm:PATH with PATH an existing LIBSVM file')
    self.assertIsNone(kinds.REGISTRY.get('mnist').check)

  def test_what_is_known_before_loading(self):
    entry = kinds.REGISTRY.get('mnist')
    self.assertEqual((entry.num_train, entry.integer_scale), (60_000, 1 / 255))
    self.assertFalse(entry.takes_argument)
    self.assertTrue(kinds.REGISTRY.get('libsvm').takes_argument)

  def test_a_libsvm_files_key_changes_with_the_file(self):
    with tempfile.TemporaryDirectory() as tmp:
      path = pathlib.Path(tmp) / 'f'
      path.write_text('1 1:1\n')
      key = kinds.REGISTRY.get('libsvm').key
      first = key(str(path))['file']
      self.assertEqual(first['path'], str(path.resolve()))
      self.assertEqual(first['size'], 6)
      path.write_text('1 1:1\n0 1:2\n')
      os.utime(path, ns=(first['mtime_ns'] + 10**9,) * 2)
      second = key(str(path))['file']
      self.assertEqual(second['size'], 12)
      self.assertNotEqual(second['mtime_ns'], first['mtime_ns'])


if __name__ == '__main__':
  absltest.main()
