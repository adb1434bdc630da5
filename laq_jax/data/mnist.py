"""MNIST: finding the four IDX files, checking their SHA-256, loading them.

MNIST is never downloaded implicitly: `find_mnist_dir` looks in a few places
and, when the files are nowhere, says how to get them
(`python -m experiments.fetch_data`, which calls `laq_jax.data.fetch_mnist`).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import zlib

import numpy as np

from laq_jax.data.base import DataError, default_cache_dir

# SHA-256 of the decompressed canonical files (see shared/data/mnist/README.md).
MNIST_FILES = {
    'train-images-idx3-ubyte':
        'ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db',
    'train-labels-idx1-ubyte':
        '65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5',
    't10k-images-idx3-ubyte':
        '0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7',
    't10k-labels-idx1-ubyte':
        'ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2',
}
DATA_ENV_VAR = 'LAQ_JAX_DATA'
FETCH_COMMAND = 'python -m experiments.fetch_data'

_IDX_DTYPES = {
    0x08: np.dtype('u1'),
    0x09: np.dtype('i1'),
    0x0B: np.dtype('>i2'),
    0x0C: np.dtype('>i4'),
    0x0D: np.dtype('>f4'),
    0x0E: np.dtype('>f8'),
}
# (resolved path, mtime_ns, size) of files whose hash already matched.
_VERIFIED: set[tuple[str, int, int]] = set()
# (resolved path, mtime_ns, size) of files whose hash already matched.
_VERIFIED: set[tuple[str, int, int]] = set()


def idx_file(directory: pathlib.Path, name: str) -> pathlib.Path | None:
  """Returns `directory/name` or `directory/name.gz`, whichever exists."""
  for candidate in (directory / name, directory / f'{name}.gz'):
    if candidate.is_file():
      return candidate
  return None


def missing_mnist_files(directory: pathlib.Path) -> list[str]:
  return [n for n in MNIST_FILES if idx_file(directory, n) is None]


def find_mnist_dir(data_dir: str | os.PathLike | None = None) -> pathlib.Path:
  """Finds the directory holding the four MNIST files.

  A directory qualifies if it holds each name in `MNIST_FILES`, raw or as
  `NAME.gz`. Looked up in order: `data_dir`, `$LAQ_JAX_DATA`, then
  `default_cache_dir() / 'mnist'` (where `fetch_mnist` puts them).

  Args:
    data_dir: a directory that must hold the files; when given, nothing else
      is searched.

  Returns:
    The first qualifying directory.

  Raises:
    DataError: `data_dir` was given and lacks files, or no place qualifies.
  """
  expected = ', '.join(f'{n}[.gz]' for n in MNIST_FILES)
  if data_dir is not None:
    directory = pathlib.Path(data_dir).expanduser()
    missing = missing_mnist_files(directory)
    if missing:
      raise DataError(
          f'data_dir={str(data_dir)!r} does not hold the MNIST files: missing '
          f'{", ".join(missing)} (each may be raw or gzip, NAME or NAME.gz). '
          f'Pass a directory holding {expected}, or download them there with '
          f'`{FETCH_COMMAND} --dir {data_dir}`.')
    return directory
  places = []
  env_dir = os.environ.get(DATA_ENV_VAR)
  if env_dir:
    places.append((f'${DATA_ENV_VAR}={env_dir}', pathlib.Path(env_dir)))
  cache = default_cache_dir() / 'mnist'
  places.append((f'the cache {cache}', cache))
  searched = []
  for description, directory in places:
    missing = missing_mnist_files(directory.expanduser())
    if not missing:
      return directory.expanduser()
    if directory.is_dir():
      searched.append(f'{description} (missing {", ".join(missing)})')
    else:
      searched.append(f'{description} (no such directory)')
  raise DataError(
      f'MNIST not found. Searched: {"; ".join(searched)}. Download it with '
      f'`{FETCH_COMMAND}` (into {cache}), or put {expected} in a directory '
      f'and set ${DATA_ENV_VAR} to it or pass data_dir.')


def gunzip_if_gzip(content: bytes, source: str | os.PathLike) -> bytes:
  """Returns `content`, decompressed if it starts with the gzip magic 1f 8b."""
  if content[:2] != b'\x1f\x8b':
    return content
  try:
    return gzip.decompress(content)
  except (OSError, EOFError, zlib.error) as e:
    raise DataError(
        f'{source} starts like a gzip file but does not decompress ({e}). '
        f'Delete it and fetch it again (`{FETCH_COMMAND}`).') from e


def _read_decompressed(path: str | os.PathLike) -> bytes:
  return gunzip_if_gzip(pathlib.Path(path).read_bytes(), path)


def parse_idx(content: bytes, source: str) -> np.ndarray:
  """Parses IDX bytes: magic (0, 0, dtype code, ndim), big-endian dims, data."""
  if len(content) < 4 or content[:2] != b'\0\0':
    raise DataError(
        f'{source} is not an IDX file: it starts with {content[:4]!r}, while '
        f'IDX files start with two zero bytes, a type code and a rank.')
  code, ndim = content[2], content[3]
  if code not in _IDX_DTYPES:
    raise DataError(
        f'{source} has IDX type code {code:#04x}; known codes are '
        f'{", ".join(f"{c:#04x}" for c in _IDX_DTYPES)}.')
  header_len = 4 + 4 * ndim
  if ndim == 0 or len(content) < header_len:
    raise DataError(
        f'{source} has a truncated IDX header: rank {ndim} needs '
        f'{header_len} header bytes, the file has {len(content)} bytes.')
  dims = tuple(int(d) for d in np.frombuffer(content, '>u4', ndim, offset=4))
  dtype = _IDX_DTYPES[code]
  expected = header_len + int(np.prod(dims)) * dtype.itemsize
  if len(content) != expected:
    raise DataError(
        f'{source} holds {len(content)} bytes, but its IDX header (dims '
        f'{dims}, {dtype.itemsize}-byte items) implies {expected}; the file is '
        f'truncated or corrupt. Fetch it again (`{FETCH_COMMAND}`).')
  array = np.frombuffer(content, dtype, offset=header_len).reshape(dims)
  return array.astype(dtype.newbyteorder('='))


def read_idx(path: str | os.PathLike) -> np.ndarray:
  """Reads an IDX file (the MNIST format), raw or gzip-compressed.

  Compression is detected from the gzip magic bytes, not the file name.

  Args:
    path: the file.

  Returns:
    The array, with the dims and element type its header declares, in native
    byte order.

  Raises:
    DataError: the content is not valid IDX (bad magic, unknown type code,
      or a length that disagrees with the header).
  """
  return parse_idx(_read_decompressed(path), str(path))


def digest(content: bytes) -> str:
  return hashlib.sha256(content).hexdigest()


def _stat_key(path: pathlib.Path) -> tuple[str, int, int]:
  stat = path.stat()
  return (str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def check_digest(name: str, source: str | os.PathLike,
                  content: bytes) -> None:
  actual = digest(content)
  if actual != MNIST_FILES[name]:
    raise DataError(
        f'{source} is not the canonical {name}: SHA-256 of its decompressed '
        f'content is {actual}, expected {MNIST_FILES[name]}. Delete it and '
        f'fetch again (`{FETCH_COMMAND}`), or replace it with the original '
        f'file.')


def verify_mnist(directory: str | os.PathLike) -> None:
  """Checks the four MNIST files in `directory` against `MNIST_FILES`.

  Args:
    directory: holds each file raw or as `NAME.gz`.

  Raises:
    DataError: a file is missing, does not decompress, or its decompressed
      SHA-256 differs (the message names the file and both hashes).
  """
  directory = pathlib.Path(directory)
  missing = missing_mnist_files(directory)
  if missing:
    raise DataError(
        f'{directory} lacks MNIST files {", ".join(missing)} (raw or .gz). '
        f'Download them with `{FETCH_COMMAND} --dir {directory}`.')
  for name in MNIST_FILES:
    path = idx_file(directory, name)
    key = _stat_key(path)
    check_digest(name, path, _read_decompressed(path))
    _VERIFIED.add(key)


def _load_mnist_array(
    directory: pathlib.Path, name: str, verify: bool) -> np.ndarray:
  path = idx_file(directory, name)
  key = _stat_key(path)
  content = _read_decompressed(path)
  if verify and key not in _VERIFIED:
    check_digest(name, path, content)
    _VERIFIED.add(key)
  return parse_idx(content, str(path))


def load_mnist(
    data_dir: str | os.PathLike | None = None, *, verify: bool = True,
    dtype=np.float32) -> dict[str, np.ndarray]:
  """Loads MNIST as flat pixels in [0, 1] and int32 labels.

  Args:
    data_dir: where the files are; None looks them up as `find_mnist_dir`
      does.
    verify: check each file's SHA-256 against `MNIST_FILES`. A file that
      passed once is not hashed again in this process while its path, size
      and modification time stay the same.
    dtype: the float type of the pixels. The bytes are divided by 255 in
      this type, so float64 pixels are the exact quotients (not float32
      ones widened).

  Returns:
    A dict with 'x_train' [60000, 784], 'y_train' int32 [60000],
    'x_test' [10000, 784] and 'y_test' int32 [10000]; pixels are divided by
    255, rows are in file order.

  Raises:
    DataError: the files cannot be found, fail verification, or their
      shapes do not pair up as images and labels.
  """
  directory = find_mnist_dir(data_dir)
  return images_and_labels(
      lambda name: _load_mnist_array(directory, name, verify), dtype,
      lambda split: f'MNIST {split} files in {directory}')


def images_and_labels(read, dtype, where) -> dict[str, np.ndarray]:
  """'x_train', 'y_train', 'x_test', 'y_test' from the four IDX arrays
  `read(name)` returns: flat pixels / 255 in `dtype` (divided in that
  type), int32 labels. `where(split)` names a split's files in the
  error.

  Raises:
    DataError: a split's images and labels do not pair up.
  """
  out = {}
  for split, prefix in (('train', 'train'), ('test', 't10k')):
    images = read(f'{prefix}-images-idx3-ubyte')
    labels = read(f'{prefix}-labels-idx1-ubyte')
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
      raise DataError(
          f'{where(split)} do not pair up: images have '
          f'shape {images.shape}, labels {labels.shape}; expected [n, 28, 28] '
          f'and [n].')
    dtype = np.dtype(dtype)
    pixels = images.reshape(len(images), -1).astype(dtype)
    pixels /= dtype.type(255)
    out[f'x_{split}'] = pixels
    out[f'y_{split}'] = labels.astype(np.int32)
  return out
