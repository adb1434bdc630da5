"""LIBSVM / SVMlight text files, and the small sets shipped in the package."""

from __future__ import annotations

import os
import pathlib

import numpy as np

from laq_jax.data.base import DataError

# The sets shipped in the package (laq_jax/datasets).
DATASETS_DIR = pathlib.Path(__file__).parent.parent / 'datasets'
BUILTIN_DATASETS = ('heart_scale',)


def _parse_libsvm(
    path: str | os.PathLike
) -> tuple[list[float], list[tuple[int, np.ndarray, np.ndarray]]]:
  """Returns the raw labels and (line number, indices, values) of each row."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise DataError(f'LIBSVM file {str(path)!r} does not exist.')
  labels, rows = [], []
  with path.open() as f:
    for line_number, line in enumerate(f, start=1):
      tokens = line.split('#', 1)[0].split()
      if not tokens:
        continue
      where = f'{path}, line {line_number}'
      try:
        labels.append(float(tokens[0]))
      except ValueError:
        raise DataError(
            f'{where}: label {tokens[0]!r} is not a number; expected '
            f'"label index:value index:value ...".') from None
      indices, values = [], []
      for token in tokens[1:]:
        index, sep, value = token.partition(':')
        if index == 'qid' and sep:
          continue  # SVMlight query ids carry no feature.
        try:
          if not sep:
            raise ValueError
          indices.append(int(index))
          values.append(float(value))
        except ValueError:
          raise DataError(
              f'{where}: cannot parse {token!r}; expected index:value with '
              f'an integer index and a numeric value.') from None
        if indices[-1] < 0:
          raise DataError(f'{where}: feature index {index} is negative.')
      rows.append((line_number, np.array(indices, np.int64),
                   np.array(values, np.float64)))
  if not rows:
    raise DataError(f'LIBSVM file {path} holds no data rows.')
  return labels, rows


def libsvm_label_values(path: str | os.PathLike) -> np.ndarray:
  """Returns the sorted distinct labels of a LIBSVM file (float64).

  `load_libsvm` maps the label `libsvm_label_values(path)[k]` to class k.
  """
  labels, _ = _parse_libsvm(path)
  return np.unique(np.array(labels, np.float64))


def load_libsvm(
    path: str | os.PathLike, *, num_features: int | None = None,
    zero_based: bool | None = None,
    dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
  """Reads a LIBSVM / SVMlight text file into dense arrays.

  Each line is `label index:value index:value ...`; absent features are 0,
  text after '#' is a comment, blank lines are skipped, and SVMlight
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
  labels, rows = _parse_libsvm(path)
  min_index = min((int(r[1].min()) for r in rows if r[1].size), default=1)
  if zero_based is None:
    zero_based = min_index == 0
  offset = 0 if zero_based else 1
  max_index = max((int(r[1].max()) for r in rows if r[1].size), default=-1)
  columns = max(max_index - offset + 1, 0)
  if num_features is not None:
    columns = num_features
  x = np.zeros((len(rows), columns), dtype)
  for i, (line_number, indices, values) in enumerate(rows):
    cols = indices - offset
    bad = (cols < 0) | (cols >= columns)
    if bad.any():
      index = int(indices[bad][0])
      raise DataError(
          f'{path}, line {line_number}: feature index {index} does not fit '
          f'zero_based={zero_based}, num_features={columns} (allowed indices '
          f'{offset}..{columns - 1 + offset}). Pass zero_based or a larger '
          f'num_features.')
    x[i, cols] = values
  _, y = np.unique(np.array(labels, np.float64), return_inverse=True)
  return x, y.astype(np.int32)


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
