"""laq_jax.data.libsvm: LIBSVM text files and the built-in sets.

(tests/data_test.py holds the format's basics, parse errors by line, pairs
and heart_scale's first row.) Here, on small files written to a temporary
folder: NaN and infinite values refused naming their physical line (comments
and blank lines counted), float64 values read exactly, class ids of
multi-class and fractional labels, an error in a pair's test file located
there, a slow Python parser of the format agreeing with the loader on the
shipped heart_scale, and the located errors of a gzip file (its lines, not
the compressed bytes).
"""

import gzip
import pathlib
import re
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import data
from laq_jax.data import libsvm


class _TmpTest(parameterized.TestCase):

  def file(self, text, name='train'):
    folder = pathlib.Path(self.enter_context(tempfile.TemporaryDirectory()))
    path = folder / name
    if isinstance(text, bytes):
      path.write_bytes(text)
    else:
      path.write_text(text)
    return path


def parse_by_hand(path, num_features):
  """The LIBSVM format read line by line in Python (one-based indices):
  (x float64 [n, d], labels float64 [n])."""
  rows, labels = [], []
  for line in pathlib.Path(path).read_text().splitlines():
    line = line.split('#', 1)[0].strip()
    if not line:
      continue
    label, *pairs = line.split()
    row = np.zeros(num_features)
    for pair in pairs:
      index, value = pair.split(':')
      row[int(index) - 1] = float(value)
    rows.append(row)
    labels.append(float(label))
  return np.array(rows), np.array(labels)


class NonFiniteTest(_TmpTest):

  @parameterized.named_parameters(
      ('feature_nan', '# header\n\n+1 1:0.5\n-1 2:nan\n', 4, 'feature value',
       '-1 2:nan'),
      ('feature_inf', '+1 1:0.5\n# note\n+1 1:1 2:-inf 3:2\n', 3,
       'feature value', '+1 1:1 2:-inf 3:2'),
      ('label_inf', '+1 1:0.5\ninf 2:1\n', 2, 'label', 'inf 2:1'),
      ('label_nan', '\n\nnan 1:1\n+1 1:2\n', 3, 'label', 'nan 1:1'),
  )
  def test_refused_naming_the_physical_line(self, text, line, kind, shown):
    path = self.file(text)
    with self.assertRaisesRegex(
        data.DataError, rf'{path}, line {line}: a {kind} is NaN or infinite '
        rf"\(line '{re.escape(shown)}'\); labels and feature values must be "
        'finite'):
      data.load_libsvm(path)

  def test_the_first_bad_line_is_named(self):
    path = self.file('+1 1:1\n-1 1:nan\n+1 1:inf\n')
    with self.assertRaisesRegex(data.DataError, 'line 2: a feature value'):
      data.load_libsvm(path)


class ValuesTest(_TmpTest):

  def test_float64_values_are_exact(self):
    # 0.1 and 1e-300 are not float32 numbers: float64 keeps the decimal's
    # nearest double, float32 rounds it.
    path = self.file('1 1:0.1 2:1e-300 3:123456789.123\n')
    x64, _ = data.load_libsvm(path, dtype=np.float64)
    np.testing.assert_array_equal(x64, [[0.1, 1e-300, 123456789.123]])
    x32, _ = data.load_libsvm(path)
    self.assertEqual(x32.dtype, np.float32)
    self.assertEqual(x32[0, 1], 0.0)  # below float32's range

  def test_class_ids_follow_the_sorted_labels(self):
    path = self.file('2.5 1:1\n-3 1:2\n0.5 1:3\n2.5 1:4\n-3 1:5\n')
    np.testing.assert_array_equal(libsvm.libsvm_label_values(path),
                                  [-3.0, 0.5, 2.5])
    _, y = data.load_libsvm(path)
    np.testing.assert_array_equal(y, [2, 0, 1, 2, 0])

  def test_pair_with_explicit_one_based_indices(self):
    train = self.file('1 1:1 3:2\n0 2:5\n')
    test = self.file('1 3:7\n', name='train.t')
    x, y, x_test, y_test = data.load_libsvm_pair(train, test,
                                                 zero_based=False)
    np.testing.assert_array_equal(x, [[1, 0, 2], [0, 5, 0]])
    np.testing.assert_array_equal(x_test, [[0, 0, 7]])
    np.testing.assert_array_equal(y, [1, 0])
    np.testing.assert_array_equal(y_test, [1])

  def test_an_error_in_the_test_file_is_located_there(self):
    train = self.file('1 1:1\n0 2:5\n')
    test = self.file('1 1:3\n1 1:x\n', name='train.t')
    with self.assertRaisesRegex(data.DataError, rf"{test}, line 2: .*'1 1:x'"):
      data.load_libsvm_pair(train, test)

  def test_a_missing_test_file(self):
    train = self.file('1 1:1\n')
    with self.assertRaisesRegex(data.DataError, r"LIBSVM file '.*nowhere\.t' "
                                'does not exist'):
      data.load_libsvm_pair(train, train.parent / 'nowhere.t')


class BuiltinTest(absltest.TestCase):

  def test_heart_scale_against_a_python_parser(self):
    path = libsvm.DATASETS_DIR / 'heart_scale'
    want_x, labels = parse_by_hand(path, 13)
    x, y = data.load_builtin('heart_scale', dtype=np.float64)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, (labels > 0).astype(np.int32))
    x32, _ = data.load_builtin('heart_scale')
    np.testing.assert_array_equal(x32, want_x.astype(np.float32))

  def test_every_builtin_set_is_shipped(self):
    for name in libsvm.BUILTIN_DATASETS:
      self.assertTrue((libsvm.DATASETS_DIR / name).is_file(), name)


class GzipTest(_TmpTest):

  def test_a_gzip_file_loads(self):
    # scikit-learn decompresses a .gz file by its name.
    path = self.file(gzip.compress(b'+1 1:0.5\n-1 2:2\n'), name='train.gz')
    x, y = data.load_libsvm(path)
    np.testing.assert_array_equal(x, [[0.5, 0], [0, 2]])
    np.testing.assert_array_equal(y, [1, 0])

  def test_errors_in_a_gzip_file_name_the_line(self):
    path = self.file(gzip.compress(b'+1 1:0.5\n-1 2:x\n'), name='train.gz')
    with self.assertRaisesRegex(data.DataError, r"line 2: .*'-1 2:x'"):
      data.load_libsvm(path)
    path = self.file(gzip.compress(b'+1 1:0.5\n-1 2:nan\n'), name='bad.gz')
    with self.assertRaisesRegex(data.DataError, r"line 2: a feature value is "
                                r"NaN or infinite \(line '-1 2:nan'\)"):
      data.load_libsvm(path)


if __name__ == '__main__':
  absltest.main()
