"""LIBSVM / SVMlight text files (read by scikit-learn), and the small sets
shipped in the package."""

from __future__ import annotations

import io
import os
import pathlib
from typing import Sequence

import numpy as np

from laq_jax.data.base import DataError

# The sets shipped in the package (laq_jax/datasets).
DATASETS_DIR = pathlib.Path(__file__).parent.parent / 'datasets'
BUILTIN_DATASETS = ('heart_scale',)

_FORMAT = ('expected lines "label index:value index:value ..." with a '
           'numeric label and integer feature indices in increasing order')


def _read(paths: Sequence[pathlib.Path], num_features, zero_based):
  """scikit-learn's load_svmlight_files, with DataErrors naming file and line.

  Returns [(x float64 CSR, y float64)] per path.
  """
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  for path in paths:
    if not path.is_file():
      raise DataError(f'LIBSVM file {str(path)!r} does not exist.')
  kwargs = dict(n_features=num_features, dtype=np.float64,
                zero_based='auto' if zero_based is None else zero_based)
  try:
    loaded = datasets.load_svmlight_files([str(p) for p in paths], **kwargs)
  except ValueError as e:
    raise _located_error(paths, kwargs, e) from None
  pairs = list(zip(loaded[0::2], loaded[1::2]))
  for path, (x, y) in zip(paths, pairs):
    if not len(y):
      raise DataError(f'LIBSVM file {path} holds no data rows; {_FORMAT}.')
    _check_finite(path, x, y)
  return pairs


def _text_bytes(path: pathlib.Path) -> bytes:
  """The file's text as bytes, decompressed as scikit-learn reads it (by
  the name: .gz, .bz2), so an error names the line the user sees."""
  path = pathlib.Path(path)
  if path.suffix == '.gz':
    import gzip  # pylint: disable=g-import-not-at-top
    return gzip.decompress(path.read_bytes())
  if path.suffix == '.bz2':
    import bz2  # pylint: disable=g-import-not-at-top
    return bz2.decompress(path.read_bytes())
  return path.read_bytes()


def _check_finite(path: pathlib.Path, x, y: np.ndarray) -> None:
  """A NaN or infinite label or feature value: the DataError naming its
  line (a class needs a finite label; the features must be finite)."""
  kind, rows = 'label', np.flatnonzero(~np.isfinite(y))
  if not rows.size:
    row_of_value = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
    kind, rows = 'feature value', row_of_value[~np.isfinite(x.data)]
  if not rows.size:
    return
  row, number = int(rows.min()), 0
  for number, line in enumerate(_text_bytes(path).splitlines(), 1):
    if line.split(b'#', 1)[0].strip():
      if row == 0:
        break
      row -= 1
  text = line.decode(errors='replace').strip()
  raise DataError(f'{path}, line {number}: a {kind} is NaN or infinite '
                  f'(line {text[:80]!r}); labels and feature values must be '
                  'finite numbers.')


def _located_error(paths, kwargs, error: ValueError) -> DataError:
  """The error of `error`'s file at its first line that scikit-learn refuses.

  A prefix of a file fails to load once it includes the bad line, so the
  line is found by bisection over prefixes (only on this error path).
  """
  from sklearn import datasets  # pylint: disable=g-import-not-at-top

  def fails(lines) -> bool:
    try:
      datasets.load_svmlight_file(io.BytesIO(b''.join(lines)), **kwargs)
    except ValueError:
      return True
    return False

  for path in paths:
    lines = _text_bytes(path).splitlines(keepends=True)
    if not fails(lines):
      continue
    lo, hi = 0, len(lines)  # lines[:lo] loads, lines[:hi] fails
    while hi - lo > 1:
      mid = (lo + hi) // 2
      lo, hi = (lo, mid) if fails(lines[:mid]) else (mid, hi)
    text = lines[hi - 1].decode(errors='replace').rstrip()
    return DataError(
        f'{path}, line {hi}: {error} (line {text[:80]!r}); {_FORMAT}'
        + (f', at most num_features={kwargs["n_features"]} of them'
           if kwargs['n_features'] else '')
        + f', counted from {_base(kwargs["zero_based"])}.')
  return DataError(f'{", ".join(map(str, paths))}: {error}; {_FORMAT}.')


def _base(zero_based) -> str:
  return {True: '0 (zero_based=True)', False: '1 (zero_based=False)'}.get(
      zero_based, '0 if any index is 0, else 1')


def _classes(y_N: np.ndarray, label_values: np.ndarray) -> np.ndarray:
  return np.searchsorted(label_values, y_N).astype(np.int32)


def libsvm_label_values(path: str | os.PathLike) -> np.ndarray:
  """Returns the sorted distinct labels of a LIBSVM file (float64).

  `load_libsvm` maps the label `libsvm_label_values(path)[k]` to class k.
  """
  (_, y), = _read([pathlib.Path(path)], None, None)
  return np.unique(y)


def load_libsvm(
    path: str | os.PathLike, *, num_features: int | None = None,
    zero_based: bool | None = None,
    dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
  """Reads a LIBSVM / SVMlight text file into dense arrays.

  Read by scikit-learn's `load_svmlight_file`: each line is `label
  index:value index:value ...` with increasing indices; absent features are
  0, text after '#' is a comment, blank lines are skipped, and SVMlight
  `qid:` tokens are ignored.

  Args:
    path: the file.
    num_features: number of columns; default one past the largest index.
    zero_based: whether indices start at 0. None decides from the file:
      zero-based if any index is 0, else one-based (the LIBSVM default).
    dtype: the float type of x (values are parsed in float64 first).

  Returns:
    x [n, d] of `dtype` and y int32 [n], where y holds class ids 0..C-1 given
    to the sorted distinct labels (e.g. -1 -> 0, +1 -> 1); see
    `libsvm_label_values`.

  Raises:
    DataError: the file is missing or empty, a line does not parse, or an
      index does not fit `zero_based` or `num_features`; the message names
      the file and line.
  """
  (x, y), = _read([pathlib.Path(path)], num_features, zero_based)
  return x.toarray().astype(dtype), _classes(y, np.unique(y))


def load_libsvm_pair(
    train_path: str | os.PathLike, test_path: str | os.PathLike, *,
    zero_based: bool | None = None, dtype=np.float32
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """A training file and its test file (LIBSVM's `name` and `name.t`).

  Read together (`load_svmlight_files`): the same columns and the same
  index base for both, and the test labels given the training set's class
  ids.

  Returns:
    x_train, y_train, x_test, y_test as `load_libsvm` returns them.

  Raises:
    DataError: as `load_libsvm`, or the test file has a label the training
      file lacks.
  """
  paths = [pathlib.Path(train_path), pathlib.Path(test_path)]
  (x, y), (x_test, y_test) = _read(paths, None, zero_based)
  label_values = np.unique(y)
  unknown = np.setdiff1d(np.unique(y_test), label_values)
  if unknown.size:
    raise DataError(f'{test_path} has labels {unknown.tolist()} that '
                    f'{train_path} lacks (its labels: '
                    f'{label_values.tolist()})')
  return (x.toarray().astype(dtype), _classes(y, label_values),
          x_test.toarray().astype(dtype), _classes(y_test, label_values))


def load_builtin(name: str, dtype=np.float32
                 ) -> tuple[np.ndarray, np.ndarray]:
  """Loads a small data set shipped in `laq_jax/datasets` (LIBSVM format).

  Args:
    name: one of BUILTIN_DATASETS; 'heart_scale' is LIBSVM's copy of the
      Statlog heart data (270 rows, 13 features scaled to [-1, 1], labels
      -1/+1 mapped to 0/1).

  Returns:
    (x, y) as `load_libsvm` returns them.

  Raises:
    DataError: an unknown name.
  """
  if name not in BUILTIN_DATASETS:
    raise DataError(
        f'Unknown built-in data set {name!r}; choose one of '
        f'{BUILTIN_DATASETS}.')
  return load_libsvm(DATASETS_DIR / name, dtype=dtype)
