"""CIFAR-10 (Krizhevsky 2009) from its official files: the python version or
the binary version, never downloaded here.

    d = load_cifar10()       # x_train [50000, 3072] in [0, 1], channels last

Get `cifar-10-python.tar.gz` (or `cifar-10-binary.tar.gz`) from
https://www.cs.toronto.edu/~kriz/cifar.html, unpack it, and point
`data_dir` (or $LAQ_JAX_CIFAR10) at the folder that holds
`cifar-10-batches-py/` (or `cifar-10-batches-bin/`), or at that folder
itself; `~/.cache/laq_jax/cifar10` is searched too. Looked up in order:
data_dir, $LAQ_JAX_CIFAR10, the cache; in each place the python version
first, then the binary one.

  python version  data_batch_1 .. data_batch_5, test_batch: pickled dicts
                  with b'data' (uint8 [10000, 3072], each row 1024 red,
                  1024 green, 1024 blue values, rows of the image in order)
                  and b'labels' (10,000 ints in 0..9). Each file's MD5 is
                  checked against the one the dataset's page and
                  torchvision publish (`PY_MD5`). The pickles are read
                  with an unpickler that builds only what these files hold
                  (dicts, lists, bytes, numbers, NumPy arrays): a file that
                  asks for anything else is refused, not run.
  binary version  data_batch_1.bin .. data_batch_5.bin, test_batch.bin:
                  10,000 records of 3,073 bytes (a label byte, then the
                  3,072 pixel bytes in the same order). No per-file digest
                  is published (only the archive's MD5,
                  c32a1d4ab5d03f1284b67883e8d87530), so each file is
                  checked by its size and label range.

Pixels are returned channels last (32 x 32 x 3, flattened to 3,072, the
layout `laq_jax.models` reshapes) divided by 255.
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import pickle

import numpy as np

from laq_jax.data.base import DataError, default_cache_dir

ENV_VAR = 'LAQ_JAX_CIFAR10'
PY_DIR, BIN_DIR = 'cifar-10-batches-py', 'cifar-10-batches-bin'
TRAIN = tuple(f'data_batch_{i}' for i in range(1, 6))
TEST = 'test_batch'
# MD5 of each python-version file (https://www.cs.toronto.edu/~kriz/
# cifar.html's archive, c58f30108f718f92721af3b95e74349a; the per-file
# values as torchvision.datasets.CIFAR10 checks them).
PY_MD5 = {
    'data_batch_1': 'c99cafc152244af753f735de768cd75f',
    'data_batch_2': 'd4bba439e000b95fd0a9bffe97cbabec',
    'data_batch_3': '54ebc095f3ab1f0389bbae665268c751',
    'data_batch_4': '634d18415352ddfa80567beed471001a',
    'data_batch_5': '482c414d41f54cd18b22e5b47cb7c3cb',
    'test_batch': '40351d587109b95175f43aff81a1287e',
}
BINARY_ARCHIVE_MD5 = 'c32a1d4ab5d03f1284b67883e8d87530'
CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog',
           'horse', 'ship', 'truck')
PIXELS = 3072
RECORD = 1 + PIXELS
PER_FILE = 10_000
TRAIN_SIZE = 50_000
WHERE = ('unpack cifar-10-python.tar.gz (or cifar-10-binary.tar.gz) from '
         'https://www.cs.toronto.edu/~kriz/cifar.html and pass the folder '
         f'holding {PY_DIR}/ (or {BIN_DIR}/) as data_dir, or set ${ENV_VAR} '
         'to it')


def _version(folder: pathlib.Path) -> tuple[str, pathlib.Path] | None:
  """('py' | 'bin', the batches' folder) if `folder` holds a complete
  version (itself or its cifar-10-batches-* child), else None."""
  for kind, sub, suffix in (('py', PY_DIR, ''), ('bin', BIN_DIR, '.bin')):
    for place in (folder / sub, folder):
      if all((place / f'{n}{suffix}').is_file() for n in (*TRAIN, TEST)):
        return kind, place
  return None


def find(data_dir: str | os.PathLike | None = None
         ) -> tuple[str, pathlib.Path]:
  """(version, folder) of the first place holding CIFAR-10.

  Raises:
    DataError: `data_dir` (when given) or every place lacks it; the message
      says where to get the files and where to put them.
  """
  if data_dir is not None:
    folder = pathlib.Path(data_dir).expanduser()
    found = _version(folder)
    if found is None:
      raise DataError(
          f'data_dir={str(data_dir)!r} does not hold CIFAR-10 (neither '
          f'{PY_DIR}/ with {", ".join(TRAIN)}, {TEST}, nor {BIN_DIR}/ with '
          f'the same names + .bin): {WHERE}.')
    return found
  places = []
  if os.environ.get(ENV_VAR):
    places.append((f'${ENV_VAR}', pathlib.Path(os.environ[ENV_VAR])))
  cache = default_cache_dir() / 'cifar10'
  places.append(('the cache', cache))
  for _, folder in places:
    found = _version(folder.expanduser())
    if found is not None:
      return found
  raise DataError(
      'CIFAR-10 not found (searched '
      + '; '.join(f'{d} {f}' for d, f in places)
      + f'). It is not downloaded by this suite: {WHERE}, or unpack it '
      f'into {cache}.')


class _Unpickler(pickle.Unpickler):
  """Builds only dicts, lists, bytes, numbers and NumPy arrays."""
  _ALLOWED = {('numpy.core.multiarray', '_reconstruct'),
              ('numpy._core.multiarray', '_reconstruct'),
              ('numpy', 'ndarray'), ('numpy', 'dtype'),
              # bytes in protocol 2 written by Python 3 (the array's)
              ('_codecs', 'encode')}

  def find_class(self, module, name):
    if (module, name) in self._ALLOWED:
      return super().find_class(module, name)
    raise pickle.UnpicklingError(f'{module}.{name} is not allowed in a '
                                 'CIFAR-10 batch')


def _read_py(path: pathlib.Path, verify: bool
             ) -> tuple[np.ndarray, np.ndarray]:
  content = path.read_bytes()
  if verify:
    actual = hashlib.md5(content).hexdigest()
    if actual != PY_MD5[path.name]:
      raise DataError(
          f'{path} is not the official CIFAR-10 {path.name}: its MD5 is '
          f'{actual}, expected {PY_MD5[path.name]}. Unpack it again from '
          'cifar-10-python.tar.gz (MD5 c58f30108f718f92721af3b95e74349a).')
  try:
    entry = _Unpickler(io.BytesIO(content), encoding='bytes').load()
    data = np.asarray(entry[b'data'], np.uint8)
    labels = np.asarray(entry[b'labels'], np.int64)
  except (pickle.UnpicklingError, EOFError, KeyError, TypeError,
          ValueError, AttributeError, IndexError) as e:
    raise DataError(
        f'{path} is not a CIFAR-10 python batch (a pickled dict with '
        f"b'data' uint8 [n, {PIXELS}] and b'labels'): {type(e).__name__}: "
        f'{e}. Unpack it again from cifar-10-python.tar.gz.') from None
  if data.ndim != 2 or data.shape[1] != PIXELS or len(labels) != len(data):
    raise DataError(
        f"{path}: b'data' has shape {data.shape} and b'labels' "
        f'{len(labels)} entries; expected [n, {PIXELS}] and n.')
  return data, labels


def _read_bin(path: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
  content = path.read_bytes()
  if len(content) % RECORD or not content:
    raise DataError(
        f'{path} holds {len(content):,} bytes, not a whole number of '
        f'{RECORD}-byte CIFAR-10 records (label + {PIXELS} pixels; an '
        f'official batch is {PER_FILE * RECORD:,} bytes): truncated or not '
        'a CIFAR-10 binary batch. Unpack it again from '
        f'cifar-10-binary.tar.gz (MD5 {BINARY_ARCHIVE_MD5}).')
  records = np.frombuffer(content, np.uint8).reshape(-1, RECORD)
  return records[:, 1:], records[:, 0].astype(np.int64)


def load_cifar10(data_dir: str | os.PathLike | None = None, *,
                 verify: bool = True, dtype=np.float32
                 ) -> dict[str, np.ndarray]:
  """CIFAR-10 as 'x_train' [50000, 3072], 'y_train', 'x_test' [10000,
  3072], 'y_test' (int32): pixels channels last / 255 in `dtype`, rows in
  file order (data_batch_1 .. 5, then test_batch).

  Raises:
    DataError: not found, an MD5 that differs (python version, `verify`),
      a file that is not a batch, or labels outside 0..9.
  """
  version, folder = find(data_dir)
  dtype = np.dtype(dtype)
  out = {}
  for split, names in (('train', TRAIN), ('test', (TEST,))):
    parts = [_read_py(folder / n, verify) if version == 'py'
             else _read_bin(folder / f'{n}.bin') for n in names]
    counts = [len(p[1]) for p in parts]
    if split == 'train' and len(set(counts)) > 1:
      # (the official batches hold 10,000 records each: one cut at a record
      # boundary is whole records, but fewer than its siblings')
      short = min(range(len(names)), key=counts.__getitem__)
      raise DataError(
          f'CIFAR-10 {names[short]} in {folder} holds {counts[short]:,} '
          f'records, the other training batches {max(counts):,} (official: '
          f'{PER_FILE:,} each): truncated. Unpack it again from the '
          'archive.')
    pixels = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if labels.size and (labels.min() < 0 or labels.max() > 9):
      raise DataError(
          f'CIFAR-10 {split} labels in {folder} run from {labels.min()} to '
          f'{labels.max()}; the classes are 0..9: not CIFAR-10 batches.')
    # [n, 3 (channel), 32 * 32] -> [n, 32, 32, 3] flattened
    hwc = pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    x = hwc.reshape(len(pixels), PIXELS).astype(dtype)
    x /= dtype.type(255)
    out[f'x_{split}'] = x
    out[f'y_{split}'] = labels.astype(np.int32)
  return out
