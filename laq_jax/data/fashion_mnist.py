"""Fashion-MNIST (Xiao, Rasul, Vollgraf 2017): MNIST's format, other images.

    d = load_fashion_mnist()          # finds the files, checks, loads
    fetch_fashion_mnist()             # downloads them into the cache

Ten classes of 28x28 grey clothing images (T-shirt/top, trouser, pullover,
dress, coat, sandal, shirt, sneaker, bag, ankle boot), 60,000 to train and
10,000 to test, in the four IDX files MNIST uses (the same names, the same
reader: `laq_jax.data.mnist.read_idx`). Looked up in order: `data_dir`,
`$LAQ_JAX_FASHION_MNIST`, the cache (`default_cache_dir()/fashion_mnist`,
where `fetch_fashion_mnist` puts them), then the folder of Debian's
`dataset-fashion-mnist` package (/usr/share/datasets/fashion-mnist; MIT
licensed, `apt-get install dataset-fashion-mnist`). Each file, raw or
gzipped, is checked against the SHA-256 of its decompressed content
(`FASHION_FILES`, computed from the Debian package's files, which are the
upstream release of zalandoresearch/fashion-mnist).
"""

from __future__ import annotations

import os
import pathlib
import urllib.request
import zlib

import numpy as np

from laq_jax.data import mnist
from laq_jax.data.base import DataError, default_cache_dir

# SHA-256 of each decompressed file (the same content as upstream's
# data/fashion/*.gz; computed here from dataset-fashion-mnist
# 0.0~git20200523.55506a9-1).
FASHION_FILES = {
    'train-images-idx3-ubyte':
        'c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888',
    'train-labels-idx1-ubyte':
        'bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9',
    't10k-images-idx3-ubyte':
        '5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b',
    't10k-labels-idx1-ubyte':
        '0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34',
}
CLASSES = ('T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal',
           'Shirt', 'Sneaker', 'Bag', 'Ankle boot')
ENV_VAR = 'LAQ_JAX_FASHION_MNIST'
DEBIAN_DIR = pathlib.Path('/usr/share/datasets/fashion-mnist')
FETCH_COMMAND = 'python -m experiments.fetch_data --dataset=fashion_mnist'
# Where the dataset's authors publish the gzipped files (their README), and
# the same files in their repository.
MIRRORS = (
    'http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/',
    'https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/'
    'data/fashion/',
)
TRAIN_SIZE = 60_000
_VERIFIED: set[tuple[str, int, int]] = set()


def missing_files(directory: pathlib.Path) -> list[str]:
  return [n for n in FASHION_FILES if mnist.idx_file(directory, n) is None]


def find_dir(data_dir: str | os.PathLike | None = None) -> pathlib.Path:
  """The folder holding the four files (raw or .gz): `data_dir` when given
  (nothing else searched), else $LAQ_JAX_FASHION_MNIST when set (a folder
  lacking them is an error, not a reason to look elsewhere), else the first
  of the cache and Debian's package folder that holds them all.

  Raises:
    DataError: `data_dir` lacks a file, or no place holds them; the message
      lists what was searched and how to get the files.
  """
  expected = ', '.join(f'{n}[.gz]' for n in FASHION_FILES)
  if data_dir is not None:
    directory = pathlib.Path(data_dir).expanduser()
    missing = missing_files(directory)
    if missing:
      raise DataError(
          f'data_dir={str(data_dir)!r} does not hold the Fashion-MNIST '
          f'files: missing {", ".join(missing)}. Pass a folder holding '
          f'{expected}, or download them there with `{FETCH_COMMAND} '
          f'--dir {data_dir}`.')
    return directory
  places = []
  env_dir = os.environ.get(ENV_VAR)
  if env_dir:
    # Named by the user: used, or refused; never passed over for another
    # copy in silence.
    directory = pathlib.Path(env_dir).expanduser()
    missing = missing_files(directory)
    if missing:
      raise DataError(
          f'${ENV_VAR}={env_dir} does not hold the Fashion-MNIST files: '
          + (f'missing {", ".join(missing)}' if directory.is_dir()
             else 'no such directory')
          + f'. Point it at a folder holding {expected}, download them '
          f'there with `{FETCH_COMMAND} --dir {env_dir}`, or unset it.')
    return directory
  cache = default_cache_dir() / 'fashion_mnist'
  places.append((f'the cache {cache}', cache))
  places.append((f'Debian\'s dataset-fashion-mnist folder {DEBIAN_DIR}',
                 DEBIAN_DIR))
  searched = []
  for description, directory in places:
    directory = directory.expanduser()
    missing = missing_files(directory)
    if not missing:
      return directory
    searched.append(f'{description} (missing {", ".join(missing)})'
                    if directory.is_dir()
                    else f'{description} (no such directory)')
  raise DataError(
      f'Fashion-MNIST not found. Searched: {"; ".join(searched)}. Install '
      'it (`apt-get install dataset-fashion-mnist` on Debian/Ubuntu), or '
      f'download it with `{FETCH_COMMAND}` (into {cache}), or put '
      f'{expected} in a folder and set ${ENV_VAR} to it.')


def check_digest(name: str, source, content: bytes) -> None:
  actual = mnist.digest(content)
  if actual != FASHION_FILES[name]:
    raise DataError(
        f'{source} is not the canonical Fashion-MNIST {name}: SHA-256 of '
        f'its decompressed content is {actual}, expected '
        f'{FASHION_FILES[name]}. Delete it and fetch it again '
        f'(`{FETCH_COMMAND}`), or replace it with the original file.')


def _read(directory: pathlib.Path, name: str, verify: bool) -> np.ndarray:
  path = mnist.idx_file(directory, name)
  stat = path.stat()
  key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
  content = mnist.gunzip_if_gzip(path.read_bytes(), path)
  if verify and key not in _VERIFIED:
    check_digest(name, path, content)
    _VERIFIED.add(key)
  return mnist.parse_idx(content, str(path))


def load_fashion_mnist(data_dir: str | os.PathLike | None = None, *,
                       verify: bool = True, dtype=np.float32
                       ) -> dict[str, np.ndarray]:
  """Fashion-MNIST as flat pixels in [0, 1] (bytes / 255 in `dtype`) and
  int32 labels: 'x_train' [60000, 784], 'y_train', 'x_test' [10000, 784],
  'y_test', rows in file order (as `laq_jax.data.load_mnist`).

  Raises:
    DataError: the files cannot be found, fail their SHA-256 (`verify`),
      are not IDX, or do not pair up as images and labels.
  """
  directory = find_dir(data_dir)
  return mnist.images_and_labels(
      lambda name: _read(directory, name, verify), dtype,
      lambda split: f'Fashion-MNIST {split} files in {directory}')


def fetch_fashion_mnist(cache_dir: str | os.PathLike | None = None, *,
                        timeout: float = 20.0) -> pathlib.Path:
  """Downloads the four files (each mirror of MIRRORS in turn, NAME.gz),
  checks their SHA-256 and writes them atomically; files already there and
  verified are kept. Returns the folder (default: the cache, which
  `load_fashion_mnist` searches by itself).

  Raises:
    DataError: no mirror gave a verified copy of every file.
  """
  from laq_jax.data import fetch  # pylint: disable=g-import-not-at-top
  target = (pathlib.Path(cache_dir).expanduser() if cache_dir is not None
            else default_cache_dir() / 'fashion_mnist')
  target.mkdir(parents=True, exist_ok=True)
  tried = []
  for mirror in MIRRORS:
    for name in missing_files(target):
      url = f'{mirror}{name}.gz'
      try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
          content = response.read()
        check_digest(name, url, mnist.gunzip_if_gzip(content, url))
        fetch.atomic_write(target / f'{name}.gz', content)
      except (OSError, ValueError, EOFError, zlib.error) as e:
        tried.append(f'{url}: {type(e).__name__}: {e}')
  missing = missing_files(target)
  if missing:
    raise DataError(
        f'Could not fetch Fashion-MNIST file(s) {", ".join(missing)} into '
        f'{target}. Tried: {"; ".join(tried)}. Instead, '
        '`apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or copy '
        f'the four files into a folder and set ${ENV_VAR} to it.')
  for name in FASHION_FILES:
    path = mnist.idx_file(target, name)
    check_digest(name, path, mnist.gunzip_if_gzip(path.read_bytes(), path))
  return target
