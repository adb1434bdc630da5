"""laq_jax.data.cifar10: CIFAR-10 from its official files, tested on small
files written here in both official formats (the data is not reachable
from these machines): the python version's pickled dicts (bytes keys, as
Python 2's cPickle wrote them) and the binary version's 3,073-byte records.
The pixels come back channels last, the same in both versions; a wrong
MD5, a truncated file, a pickle that asks for code, labels out of range
and a missing folder are each refused in one line saying what to do.
"""

import hashlib
import os
import pathlib
import pickle
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from experiments.run import config as config_lib
from laq_jax import data
from laq_jax.data import cifar10
from laq_jax.data import kinds

N = 4  # images per batch file here (10,000 in the official files)


def _batches(seed=0):
  """{name: (pixels uint8 [N, 3072] channel-major, labels [N])}."""
  rng = np.random.default_rng(seed)
  return {name: (rng.integers(0, 256, (N, 3072), dtype=np.uint8),
                 rng.integers(0, 10, N))
          for name in (*cifar10.TRAIN, cifar10.TEST)}


def _write_py(folder: pathlib.Path, batches) -> dict[str, str]:
  """The python version; returns each file's MD5."""
  where = folder / cifar10.PY_DIR
  where.mkdir(parents=True)
  md5 = {}
  for name, (pixels, labels) in batches.items():
    entry = {b'batch_label': f'{name} (test)'.encode(),
             b'labels': [int(v) for v in labels], b'data': pixels,
             b'filenames': [f'img_{i}.png'.encode() for i in range(N)]}
    content = pickle.dumps(entry, protocol=2)
    (where / name).write_bytes(content)
    md5[name] = hashlib.md5(content).hexdigest()
  return md5


def _write_bin(folder: pathlib.Path, batches) -> None:
  where = folder / cifar10.BIN_DIR
  where.mkdir(parents=True)
  for name, (pixels, labels) in batches.items():
    records = np.concatenate([labels.astype(np.uint8)[:, None], pixels], 1)
    (where / f'{name}.bin').write_bytes(records.tobytes())


def _hwc(pixels):
  """Channels last, written out by index: out[n, (r * 32 + c) * 3 + ch] =
  in[n, ch * 1024 + r * 32 + c]."""
  out = np.empty_like(pixels)
  for ch in range(3):
    for r in range(32):
      for c in range(32):
        out[:, (r * 32 + c) * 3 + ch] = pixels[:, ch * 1024 + r * 32 + c]
  return out


class Cifar10Test(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.tmp = pathlib.Path(self.enter_context(
        tempfile.TemporaryDirectory()))
    self.enter_context(mock.patch.dict(os.environ, {
        'XDG_CACHE_HOME': str(self.tmp / 'cache')}))
    os.environ.pop(cifar10.ENV_VAR, None)
    self.batches = _batches()

  def _want(self):
    train = [self.batches[n] for n in cifar10.TRAIN]
    test = self.batches[cifar10.TEST]
    return (_hwc(np.concatenate([p for p, _ in train])) / 255,
            np.concatenate([l for _, l in train]), _hwc(test[0]) / 255,
            test[1])

  def test_python_version(self):
    md5 = _write_py(self.tmp / 'py', self.batches)
    with mock.patch.dict(cifar10.PY_MD5, md5):
      d = cifar10.load_cifar10(self.tmp / 'py', dtype=np.float64)
    x, y, x_test, y_test = self._want()
    np.testing.assert_array_equal(d['x_train'], x)
    np.testing.assert_array_equal(d['y_train'], y)
    np.testing.assert_array_equal(d['x_test'], x_test)
    np.testing.assert_array_equal(d['y_test'], y_test)
    self.assertEqual(d['x_train'].shape, (5 * N, 3072))
    self.assertEqual(d['y_train'].dtype, np.int32)

  def test_binary_version_is_the_same_data(self):
    _write_bin(self.tmp / 'bin', self.batches)
    d = cifar10.load_cifar10(self.tmp / 'bin' / cifar10.BIN_DIR)
    x, y, x_test, y_test = self._want()
    np.testing.assert_allclose(d['x_train'], x, rtol=1e-7)
    np.testing.assert_array_equal(d['y_train'], y)
    np.testing.assert_allclose(d['x_test'], x_test, rtol=1e-7)
    np.testing.assert_array_equal(d['y_test'], y_test)

  def test_the_official_md5s_are_checked(self):
    _write_py(self.tmp / 'py', self.batches)  # not the official content
    with self.assertRaisesRegex(
        data.DataError, 'is not the official CIFAR-10 data_batch_1: its MD5 '
        'is [0-9a-f]{32}, expected c99cafc152244af753f735de768cd75f'):
      cifar10.load_cifar10(self.tmp / 'py')
    self.assertLen(cifar10.load_cifar10(self.tmp / 'py',
                                        verify=False)['y_test'], N)

  def test_a_pickle_that_asks_for_code_is_refused(self):
    md5 = _write_py(self.tmp / 'py', self.batches)

    class Evil:
      def __reduce__(self):
        return (os.system, ('echo pwned',))
    path = self.tmp / 'py' / cifar10.PY_DIR / 'data_batch_3'
    path.write_bytes(pickle.dumps({b'data': Evil()}, protocol=2))
    md5['data_batch_3'] = hashlib.md5(path.read_bytes()).hexdigest()
    with mock.patch.dict(cifar10.PY_MD5, md5):
      with self.assertRaisesRegex(data.DataError,
                                  'data_batch_3 is not a CIFAR-10 python '
                                  'batch .*system is not allowed'):
        cifar10.load_cifar10(self.tmp / 'py')

  def test_truncated_binary_and_bad_labels(self):
    _write_bin(self.tmp / 'bin', self.batches)
    path = self.tmp / 'bin' / cifar10.BIN_DIR / 'test_batch.bin'
    content = path.read_bytes()
    path.write_bytes(content[:-7])
    with self.assertRaisesRegex(data.DataError,
                                'test_batch.bin holds 12,285 bytes, not a '
                                'whole number of 3073-byte'):
      cifar10.load_cifar10(self.tmp / 'bin')
    # Cut at a record boundary: whole records, fewer than its siblings'.
    train = self.tmp / 'bin' / cifar10.BIN_DIR / 'data_batch_3.bin'
    whole = train.read_bytes()
    train.write_bytes(whole[:-cifar10.RECORD])
    with self.assertRaisesRegex(data.DataError,
                                rf'^CIFAR-10 data_batch_3 in .* holds '
                                rf'{N - 1:,} records, the other training '
                                rf'batches {N:,} \(official: 10,000 each\): '
                                'truncated'):
      cifar10.load_cifar10(self.tmp / 'bin')
    train.write_bytes(whole)
    path.write_bytes(bytes([12]) + content[1:])  # label 12
    with self.assertRaisesRegex(data.DataError,
                                'test labels .* to 12; the classes are 0..9'):
      cifar10.load_cifar10(self.tmp / 'bin')

  def test_lookup_and_the_missing_message(self):
    with self.assertRaises(data.DataError) as caught:
      cifar10.find()
    message = str(caught.exception)
    for part in ('CIFAR-10 not found', 'not downloaded by this suite',
                 'https://www.cs.toronto.edu/~kriz/cifar.html',
                 cifar10.ENV_VAR):
      self.assertIn(part, message)
    with self.assertRaisesRegex(data.DataError, 'does not hold CIFAR-10'):
      cifar10.find(self.tmp)
    _write_bin(self.tmp / 'cache' / 'laq_jax' / 'cifar10', self.batches)
    self.assertEqual(cifar10.find()[0], 'bin')
    md5 = _write_py(self.tmp / 'env', self.batches)
    with mock.patch.dict(os.environ, {cifar10.ENV_VAR: str(self.tmp /
                                                            'env')}):
      self.assertEqual(cifar10.find(),
                       ('py', self.tmp / 'env' / cifar10.PY_DIR))
      with mock.patch.dict(cifar10.PY_MD5, md5):
        loaded = kinds.load('cifar10')
    self.assertEqual(loaded.integer_scale, 1 / 255)
    self.assertIn('CIFAR-10 test batch (4 images)', loaded.test_set)

  def test_the_config_names_cifar10_and_refuses_a_missing_folder(self):
    from configs import default  # pylint: disable=g-import-not-at-top
    config = default.get_config(
        f'dataset=cifar10,data_dir={self.tmp / "nowhere"}')
    with self.assertRaisesRegex(config_lib.ConfigError,
                                'the CIFAR-10 files'):
      config_lib.validate_config(config)

  def test_a_cnn_runs_on_cifar10_files(self):
    # The LASG CNN on 32x32x3 images through the one gradient interface:
    # 20 images, 2 workers, 3 iterations; finite, and the flops are the
    # 32x32x3 model's.
    from configs import default  # pylint: disable=g-import-not-at-top
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    from laq_jax import problems  # pylint: disable=g-import-not-at-top
    _write_bin(self.tmp / 'bin', self.batches)
    config = default.get_config(
        f'dataset=cifar10,data_dir={self.tmp / "bin"},model=lasg_cnn,'
        'algo=sgd,num_workers=2,batch_size=5,num_iters=3,eval_every=3,'
        'fstar=none,precision=float32')
    with tempfile.TemporaryDirectory() as where:
      summary = train.train_and_evaluate(config, where)
    self.assertTrue(np.isfinite(summary['final_loss']))
    self.assertEqual(
        float(np.mean(summary['flops_per_worker_step'])),
        5 * problems.get_problem('lasg_cnn', 3072).grad_flops_per_sample)


if __name__ == '__main__':
  absltest.main()
