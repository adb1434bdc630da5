"""laq_jax.data.mnist: IDX files, their checksums, and loading MNIST.

(tests/data_test.py holds the real MNIST files' facts, find_mnist_dir's
search and the first IDX parses.) Here every file is a tiny IDX file
written to a temporary folder, hand-built byte by byte, and the checksums
the module checks against are those of these files (`MNIST_FILES` patched
for the test), so nothing depends on the real data: the remaining IDX type
codes, loading (bytes / 255 in the requested dtype, raw and gzip files
mixed), images and labels that do not pair up, a corrupted file refused by
its checksum, and a verified file hashed again once it changes.
"""

import gzip
import hashlib
import os
import pathlib
import struct
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import data
from laq_jax.data import mnist as mnist_lib


def idx(type_code, dims, payload):
  """IDX bytes: two zero bytes, the type code, the rank, big-endian dims."""
  return bytes([0, 0, type_code, len(dims)]) + struct.pack(
      f'>{len(dims)}I', *dims) + payload


# Three 2x2 training images and two test images, pixel bytes chosen to make
# bytes / 255 inexact in float32 (7 / 255, 200 / 255, ...).
TRAIN_PIXELS = np.array([[[0, 7], [200, 255]], [[1, 2], [3, 4]],
                         [[128, 129], [254, 17]]], np.uint8)
TEST_PIXELS = np.array([[[9, 8], [7, 6]], [[255, 0], [0, 255]]], np.uint8)
TRAIN_LABELS = np.array([5, 0, 9], np.uint8)
TEST_LABELS = np.array([7, 2], np.uint8)


def fake_files():
  """{MNIST name: raw IDX bytes} of the tiny set."""
  return {
      'train-images-idx3-ubyte': idx(0x08, (3, 2, 2), TRAIN_PIXELS.tobytes()),
      'train-labels-idx1-ubyte': idx(0x08, (3,), TRAIN_LABELS.tobytes()),
      't10k-images-idx3-ubyte': idx(0x08, (2, 2, 2), TEST_PIXELS.tobytes()),
      't10k-labels-idx1-ubyte': idx(0x08, (2,), TEST_LABELS.tobytes()),
  }


def fake_digests():
  return {name: hashlib.sha256(raw).hexdigest()
          for name, raw in fake_files().items()}


class _FakeMnistTest(parameterized.TestCase):
  """A temporary folder; the tiny files' checksums are the canonical ones."""

  def setUp(self):
    super().setUp()
    self.folder = pathlib.Path(self.enter_context(
        tempfile.TemporaryDirectory()))
    self.enter_context(mock.patch.dict(mnist_lib.MNIST_FILES,
                                       fake_digests()))

  def write(self, gz_names=(), replace=None):
    for name, raw in {**fake_files(), **(replace or {})}.items():
      if name in gz_names:
        (self.folder / f'{name}.gz').write_bytes(gzip.compress(raw))
      else:
        (self.folder / name).write_bytes(raw)
    return self.folder


class ReadIdxTest(_FakeMnistTest):

  @parameterized.named_parameters(
      ('int8', 0x09, struct.pack('>4b', -128, -1, 0, 127), np.int8,
       [-128, -1, 0, 127]),
      ('int16', 0x0B, struct.pack('>4h', -32768, -2, 258, 32767), np.int16,
       [-32768, -2, 258, 32767]),
      ('float64', 0x0E, struct.pack('>4d', 0.1, -2.5, 1e300, 0.0),
       np.float64, [0.1, -2.5, 1e300, 0.0]),
  )
  def test_type_codes(self, code, payload, dtype, values):
    path = self.folder / 'f'
    path.write_bytes(idx(code, (2, 1, 2), payload))
    array = data.read_idx(path)
    self.assertEqual(array.dtype, np.dtype(dtype))
    self.assertTrue(array.dtype.isnative)
    np.testing.assert_array_equal(array, np.reshape(values, (2, 1, 2)))

  def test_rank_zero_is_refused(self):
    path = self.folder / 'f'
    path.write_bytes(b'\x00\x00\x08\x00\x07')
    with self.assertRaisesRegex(data.DataError, 'truncated IDX header: rank 0 '
                                'needs 4 header bytes'):
      data.read_idx(path)


class LoadTest(_FakeMnistTest):

  def test_bytes_over_255_in_the_requested_dtype(self):
    self.write(gz_names=['train-images-idx3-ubyte', 't10k-labels-idx1-ubyte'])
    for dtype in (np.float32, np.float64):
      d = data.load_mnist(self.folder, dtype=dtype)
      self.assertEqual(d['x_train'].shape, (3, 4))
      self.assertEqual(d['x_train'].dtype, dtype)
      # The quotient computed in `dtype` (not rounded through float32).
      np.testing.assert_array_equal(
          d['x_train'], TRAIN_PIXELS.reshape(3, 4).astype(dtype) / dtype(255))
      np.testing.assert_array_equal(
          d['x_test'], TEST_PIXELS.reshape(2, 4).astype(dtype) / dtype(255))
    np.testing.assert_array_equal(d['y_train'], [5, 0, 9])
    np.testing.assert_array_equal(d['y_test'], [7, 2])
    self.assertEqual(d['y_train'].dtype, np.int32)
    self.assertEqual(float(d['x_train'][0, 1]), 7 / 255)

  @parameterized.named_parameters(
      ('one_label_short', {'train-labels-idx1-ubyte': idx(0x08, (2,),
                                                          b'\x05\x00')},
       r'MNIST train files in .* do not pair up: images have shape '
       r'\(3, 2, 2\), labels \(2,\)'),
      ('flat_images', {'t10k-images-idx3-ubyte': idx(0x08, (2, 4),
                                                     TEST_PIXELS.tobytes())},
       r'MNIST test files .* images have shape \(2, 4\), labels \(2,\); '
       r'expected \[n, 28, 28\] and \[n\]'),
  )
  def test_images_and_labels_must_pair_up(self, replace, pattern):
    self.write(replace=replace)
    # verify=False: these files are not the patched canonical ones.
    with self.assertRaisesRegex(data.DataError, pattern):
      data.load_mnist(self.folder, verify=False)

  def test_a_corrupted_file_is_refused_by_its_checksum(self):
    name = 't10k-labels-idx1-ubyte'
    corrupt = idx(0x08, (2,), bytes([7, 3]))  # one label changed
    self.write(replace={name: corrupt})
    actual = hashlib.sha256(corrupt).hexdigest()
    with self.assertRaisesRegex(
        data.DataError, rf'{name} is not the canonical {name}: SHA-256 of its '
        rf'decompressed content is {actual}, expected '
        rf'{mnist_lib.MNIST_FILES[name]}\. Delete it and fetch again'):
      data.load_mnist(self.folder)
    with self.assertRaisesRegex(data.DataError, actual):
      data.verify_mnist(self.folder)
    # Without verification it loads, and holds the changed label.
    self.assertEqual(data.load_mnist(self.folder, verify=False)['y_test'][1],
                     3)

  def test_a_verified_file_that_changes_is_hashed_again(self):
    self.write()
    data.load_mnist(self.folder)  # verified, remembered by path/size/mtime
    name = 'train-labels-idx1-ubyte'
    path = self.folder / name
    stat = path.stat()
    path.write_bytes(idx(0x08, (3,), bytes([5, 0, 8])))  # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with self.assertRaisesRegex(data.DataError, f'not the canonical {name}'):
      data.load_mnist(self.folder)

  def test_verify_names_missing_files(self):
    self.write()
    (self.folder / 'train-images-idx3-ubyte').unlink()
    self.assertEqual(mnist_lib.missing_mnist_files(self.folder),
                     ['train-images-idx3-ubyte'])
    with self.assertRaisesRegex(data.DataError, r'lacks MNIST files '
                                r'train-images-idx3-ubyte \(raw or \.gz\)\. '
                                r'Download them with `python -m '
                                r'experiments.fetch_data --dir'):
      data.verify_mnist(self.folder)


class HelpersTest(absltest.TestCase):

  def test_digest_is_sha256(self):
    # FIPS 180-2's example: SHA-256("abc").
    self.assertEqual(
        mnist_lib.digest(b'abc'),
        'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')

  def test_gunzip_only_what_starts_like_gzip(self):
    self.assertEqual(mnist_lib.gunzip_if_gzip(b'\x00\x00\x08', 'f'),
                     b'\x00\x00\x08')
    self.assertEqual(mnist_lib.gunzip_if_gzip(gzip.compress(b'abc'), 'f'),
                     b'abc')
    with self.assertRaisesRegex(data.DataError, r'where.gz starts like a gzip '
                                'file but does not decompress'):
      mnist_lib.gunzip_if_gzip(b'\x1f\x8b' + b'\x00' * 8, 'where.gz')


if __name__ == '__main__':
  absltest.main()
