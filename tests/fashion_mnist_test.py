"""laq_jax.data.fashion_mnist: finding, checking and loading Fashion-MNIST.

On the real files where Debian's dataset-fashion-mnist is installed (CI
installs it; elsewhere those tests skip, naming the package): their SHA-256,
shapes, balanced classes, and a run of the logistic model on them. On
copies in temporary folders: the lookup order, a corrupted file, a missing
one, and the config's refusals.
"""

import gzip
import hashlib
import os
import pathlib
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from experiments.run import config as config_lib
from laq_jax import data
from laq_jax.data import fashion_mnist as fm
from laq_jax.data import kinds
from laq_jax.data import mnist as mnist_lib


def _installed() -> pathlib.Path | None:
  try:
    return fm.find_dir()
  except data.DataError:
    return None


class RealFilesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.folder = _installed()
    if self.folder is None:
      self.skipTest('Fashion-MNIST not installed (apt-get install '
                    'dataset-fashion-mnist, or python -m '
                    'experiments.fetch_data --dataset=fashion_mnist)')

  def test_the_files_are_the_release(self):
    for name, want in fm.FASHION_FILES.items():
      path = mnist_lib.idx_file(self.folder, name)
      raw = path.read_bytes()
      if raw[:2] == b'\x1f\x8b':
        raw = gzip.decompress(raw)
      self.assertEqual(hashlib.sha256(raw).hexdigest(), want, name)

  def test_shapes_classes_and_pixels(self):
    d = data.load_fashion_mnist(dtype=np.float64)
    self.assertEqual(d['x_train'].shape, (60000, 784))
    self.assertEqual(d['x_test'].shape, (10000, 784))
    np.testing.assert_array_equal(np.bincount(d['y_train']), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(d['y_test']), [1000] * 10)
    self.assertEqual(d['x_train'].dtype, np.float64)
    # bytes / 255: every pixel times 255 is an integer in [0, 255]
    scaled = d['x_test'] * 255
    np.testing.assert_allclose(scaled, np.round(scaled), atol=1e-9)
    self.assertEqual((scaled.min(), scaled.max()), (0, 255))
    loaded = kinds.load('fashion_mnist')
    self.assertEqual(loaded.integer_scale, 1 / 255)
    self.assertIn('Fashion-MNIST test set (10000 images)', loaded.test_set)
    self.assertEqual(len(fm.CLASSES), 10)

  def test_a_run_on_fashion_mnist(self):
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    from configs import default  # pylint: disable=g-import-not-at-top
    config = default.get_config(
        'dataset=fashion_mnist,algo=gd,num_iters=20,eval_every=10,'
        'train_subset=600,num_workers=10,fstar=none')
    with tempfile.TemporaryDirectory() as where:
      summary = train.train_and_evaluate(config, where)
    acc = summary['final_test_accuracy']
    # 20 gradient steps of the logistic model on 600 images: well above
    # chance (10%), and not MNIST-easy
    self.assertGreater(acc, 0.5)
    self.assertLess(acc, 0.9)


class LookupTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = pathlib.Path(self.enter_context(
        tempfile.TemporaryDirectory()))
    self.real = _installed()  # (before the places are moved)
    self.enter_context(mock.patch.dict(os.environ, {
        'XDG_CACHE_HOME': str(self.tmp / 'cache')}))
    os.environ.pop(fm.ENV_VAR, None)
    self.enter_context(mock.patch.object(fm, 'DEBIAN_DIR',
                                         self.tmp / 'debian'))
    fm._VERIFIED.clear()  # pylint: disable=protected-access

  def _fake(self, folder: pathlib.Path, n: int = 6) -> None:
    """Small IDX files of the right names (not the release: digests off)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix in ('train', 't10k'):
      images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
      labels = np.arange(n, dtype=np.uint8) % 10
      (folder / f'{prefix}-images-idx3-ubyte').write_bytes(
          b'\0\0\x08\x03' + np.array([n, 28, 28], '>u4').tobytes()
          + images.tobytes())
      (folder / f'{prefix}-labels-idx1-ubyte.gz').write_bytes(gzip.compress(
          b'\0\0\x08\x01' + np.array([n], '>u4').tobytes()
          + labels.tobytes()))

  def test_nothing_anywhere_says_what_to_do(self):
    with self.assertRaises(data.DataError) as caught:
      fm.find_dir()
    message = str(caught.exception)
    for part in ('Fashion-MNIST not found', 'apt-get install '
                 'dataset-fashion-mnist', fm.FETCH_COMMAND, fm.ENV_VAR,
                 'no such directory'):
      self.assertIn(part, message)

  def test_order_data_dir_env_cache_debian(self):
    places = {k: self.tmp / k for k in ('given', 'env', 'cache', 'debian')}
    places['cache'] = self.tmp / 'cache' / 'laq_jax' / 'fashion_mnist'
    self._fake(places['debian'])
    self.assertEqual(fm.find_dir(), places['debian'])
    self._fake(places['cache'])
    self.assertEqual(fm.find_dir(), places['cache'])
    self._fake(places['env'])
    with mock.patch.dict(os.environ, {fm.ENV_VAR: str(places['env'])}):
      self.assertEqual(fm.find_dir(), places['env'])
      self._fake(places['given'])
      self.assertEqual(fm.find_dir(places['given']), places['given'])
    # $LAQ_JAX_FASHION_MNIST naming a folder without them: refused, not
    # passed over for the cache's or Debian's copy in silence
    empty = self.tmp / 'empty'
    empty.mkdir()
    for named, why in ((empty, 'missing train-images'),
                       (self.tmp / 'nowhere', 'no such directory')):
      with mock.patch.dict(os.environ, {fm.ENV_VAR: str(named)}):
        with self.assertRaisesRegex(data.DataError,
                                    rf'^\${fm.ENV_VAR}=.* does not hold the '
                                    rf'Fashion-MNIST files: {why}.*unset it'):
          fm.find_dir()
    # a data_dir that lacks a file: refused, naming it, nothing else tried
    (places['given'] / 't10k-labels-idx1-ubyte.gz').unlink()
    with self.assertRaisesRegex(data.DataError,
                                'missing t10k-labels-idx1-ubyte'):
      fm.find_dir(places['given'])

  def test_a_file_that_is_not_the_release_is_refused(self):
    folder = self.tmp / 'copy'
    self._fake(folder)
    with self.assertRaises(data.DataError) as caught:
      fm.load_fashion_mnist(folder)
    message = str(caught.exception)
    self.assertIn('is not the canonical Fashion-MNIST '
                  'train-images-idx3-ubyte', message)
    self.assertIn(fm.FASHION_FILES['train-images-idx3-ubyte'], message)
    self.assertIn('fetch it again', message)
    # without the check the same reader loads them (bytes / 255)
    d = fm.load_fashion_mnist(folder, verify=False)
    self.assertEqual(d['x_train'].shape, (6, 784))
    np.testing.assert_array_equal(d['y_test'], np.arange(6))
    self.assertLessEqual(d['x_train'].max(), 1.0)

  def test_a_real_file_with_one_byte_changed(self):
    real = self.real
    if real is None:
      self.skipTest('Fashion-MNIST not installed')
    folder = self.tmp / 'changed'
    shutil.copytree(real, folder)
    path = folder / 'train-labels-idx1-ubyte.gz'
    raw = bytearray(gzip.decompress(path.read_bytes()))
    raw[100] = (raw[100] + 1) % 10
    path.write_bytes(gzip.compress(bytes(raw)))
    with self.assertRaisesRegex(data.DataError,
                                'train-labels-idx1-ubyte: SHA-256 of its '
                                'decompressed content is '
                                + hashlib.sha256(raw).hexdigest()):
      fm.load_fashion_mnist(folder)

  def test_a_truncated_file_names_itself(self):
    folder = self.tmp / 'short'
    self._fake(folder)
    path = folder / 'train-images-idx3-ubyte'
    path.write_bytes(path.read_bytes()[:-5])
    with self.assertRaisesRegex(data.DataError, 'truncated or corrupt'):
      fm.load_fashion_mnist(folder, verify=False)

  def test_the_config_refuses_a_missing_data_dir(self):
    from configs import default  # pylint: disable=g-import-not-at-top
    config = default.get_config(
        f'dataset=fashion_mnist,data_dir={self.tmp / "nowhere"}')
    with self.assertRaisesRegex(config_lib.ConfigError,
                                'the Fashion-MNIST files'):
      config_lib.validate_config(config)


if __name__ == '__main__':
  absltest.main()
