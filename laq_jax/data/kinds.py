"""Dataset kinds: a loader in a registry, returning arrays and a description.

    config.dataset = 'mnist' | 'fashion_mnist' | 'cifar10' | 'shakespeare'
                   | 'builtin:heart_scale'
                   | 'libsvm:/path/file'

A kind is registered once (`REGISTRY.register(name, DatasetKind(...))`, from
any code) and the launchers read everything about it from its entry: how to
load it, what argument it takes, how to check that argument before anything
is loaded, what else f*'s cache key must hold, and whether its features are
integers times a scale (MNIST's bytes / 255: the fast float32 layout).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Callable, NamedTuple

import numpy as np

from laq_jax import registry
from laq_jax.data import cifar10
from laq_jax.data import fashion_mnist
from laq_jax.data import libsvm
from laq_jax.data import mnist
from laq_jax.data import shakespeare


class Loaded(NamedTuple):
  """A dataset in memory (NumPy, features in the requested dtype).

  Attributes:
    x_train, y_train, x_test, y_test: features [N, D] and int labels [N].
    test_set: what the test arrays are, in words (for summaries).
    integer_scale: s when every feature is an integer n (`|n| <= 256`) times
      s, else None (`laq_jax.fast_layout`).
    owner_train: each training sample's natural client (int [N], clients
      0..K-1), for `split='natural'`; None for a set without clients.
    num_classes: the classes when the labels may not show them all (a
      vocabulary); None: one more than the largest label.
  """
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  test_set: str
  integer_scale: float | None = None
  owner_train: np.ndarray | None = None
  num_classes: int | None = None


@dataclasses.dataclass(frozen=True)
class DatasetKind:
  """How to load one kind of dataset.

  Attributes:
    load: `(argument, *, dtype, data_dir) -> Loaded`; `argument` is the text
      after 'kind:' ('' for a kind without one).
    takes_argument: whether the config names it 'kind:ARGUMENT'.
    usage: how a config names it, for error messages.
    check: (argument, data_dir) -> None, or what is wrong in words; run by
      config validation before anything is loaded.
    key: argument -> extra entries of f*'s cache key (e.g. a file's size).
    integer_scale: the features' integer scale when known before loading
      (the roofline's bytes per feature).
    num_train: the training samples when known before loading.
    optional_argument: the config may name it 'kind' or 'kind:ARGUMENT'.
  """
  load: Callable[..., Loaded]
  takes_argument: bool = False
  usage: str = ''
  check: Callable[[str, str], str | None] | None = None
  key: Callable[[str], dict] | None = None
  integer_scale: float | None = None
  num_train: int | None = None
  optional_argument: bool = False


MNIST_TRAIN_SIZE = 60_000


def _images(module, function: str, test_set: str) -> Callable[..., Loaded]:
  """The loader of an image set (MNIST, Fashion-MNIST, CIFAR-10): its
  module's `function(data_dir, dtype=)` (looked up at each call), pixels as
  bytes / 255, the test set named `test_set`."""
  def load(argument: str, *, dtype=np.float32, data_dir=None) -> Loaded:
    del argument
    d = getattr(module, function)(data_dir or None, dtype=dtype)
    return Loaded(d['x_train'], d['y_train'], d['x_test'], d['y_test'],
                  f'{test_set} ({len(d["y_test"])} images)', 1 / 255)
  return load


_load_mnist = _images(mnist, 'load_mnist', 'MNIST test set')
_load_fashion_mnist = _images(fashion_mnist, 'load_fashion_mnist',
                              'Fashion-MNIST test set')
_load_cifar10 = _images(cifar10, 'load_cifar10', 'CIFAR-10 test batch')


def _load_shakespeare(argument: str, *, dtype=np.float32, data_dir=None
                      ) -> Loaded:
  del data_dir
  d = shakespeare.load_shakespeare(argument, dtype=dtype)
  info = shakespeare.describe(d)
  return Loaded(d['x_train'], d['y_train'], d['x_test'], d['y_test'],
                f'Shakespeare: the {info["test"]:,} test windows of its '
                f'{info["clients"]:,} clients', None, d['owner_train'],
                len(shakespeare.VOCAB))


def _check_shakespeare(argument: str, data_dir: str) -> str | None:
  del data_dir
  try:
    shakespeare.parse_options(argument)
  except ValueError as e:
    return str(e)
  return None


def _load_builtin(argument: str, *, dtype=np.float32, data_dir=None
                  ) -> Loaded:
  del data_dir
  x, y = libsvm.load_builtin(argument, dtype=dtype)
  return Loaded(x, y, x, y,
                'the training data (built-in sets have no test split)')


def _check_builtin(argument: str, data_dir: str) -> str | None:
  del data_dir
  if argument not in libsvm.BUILTIN_DATASETS:
    return ('builtin:NAME with NAME one of '
            f'{", ".join(libsvm.BUILTIN_DATASETS)}')
  return None


def _load_libsvm(argument: str, *, dtype=np.float32, data_dir=None
                 ) -> Loaded:
  """Train from the file; test from `file.t` (LIBSVM's convention) if any."""
  del data_dir
  path = os.path.expanduser(argument)
  test_path = pathlib.Path(f'{path}.t')
  if not test_path.is_file():
    x, y = libsvm.load_libsvm(path, dtype=dtype)
    return Loaded(x, y, x, y,
                  f'the training data (no {test_path.name} beside it)')
  x, y, x_test, y_test = libsvm.load_libsvm_pair(path, test_path,
                                                 dtype=dtype)
  return Loaded(x, y, x_test, y_test,
                f'{test_path.name} ({len(y_test)} samples)')


def _check_libsvm(argument: str, data_dir: str) -> str | None:
  del data_dir
  if not pathlib.Path(argument).expanduser().is_file():
    return 'libsvm:PATH with PATH an existing LIBSVM file'
  return None


def _libsvm_key(argument: str) -> dict:
  path = pathlib.Path(argument).expanduser()
  stat = path.stat()
  return {'file': {'path': str(path.resolve()), 'size': stat.st_size,
                   'mtime_ns': stat.st_mtime_ns}}


REGISTRY: registry.Registry[DatasetKind] = registry.Registry('dataset', [
    ('mnist', DatasetKind(_load_mnist, usage="'mnist'",
                          integer_scale=1 / 255,
                          num_train=MNIST_TRAIN_SIZE)),
    ('fashion_mnist', DatasetKind(_load_fashion_mnist,
                                  usage="'fashion_mnist'",
                                  integer_scale=1 / 255,
                                  num_train=fashion_mnist.TRAIN_SIZE)),
    ('cifar10', DatasetKind(_load_cifar10, usage="'cifar10'",
                            integer_scale=1 / 255,
                            num_train=cifar10.TRAIN_SIZE)),
    ('shakespeare', DatasetKind(
        _load_shakespeare, optional_argument=True,
        usage=("'shakespeare' or 'shakespeare:OPTIONS' (min_lines=N, "
               'stride=N, max_clients=N, test_fraction=F, joined by + or ,)'),
        check=_check_shakespeare)),
    ('builtin', DatasetKind(
        _load_builtin, takes_argument=True,
        usage=(f"'builtin:NAME' (NAME in "
               f"{', '.join(libsvm.BUILTIN_DATASETS)})"),
        check=_check_builtin)),
    ('libsvm', DatasetKind(_load_libsvm, takes_argument=True,
                           usage="'libsvm:/path/file'", check=_check_libsvm,
                           key=_libsvm_key)),
])


def parse(dataset) -> tuple[str, str]:
  """'mnist' -> ('mnist', ''); 'builtin:NAME' -> ('builtin', 'NAME').

  Raises:
    ValueError: not a registered kind, or its argument missing or extra
      (the message lists every kind's usage).
  """
  text = str(dataset)
  kind, sep, rest = text.partition(':')
  entry = REGISTRY.get(kind) if kind in REGISTRY else None
  if isinstance(dataset, str) and entry is not None and (
      (entry.takes_argument and sep and rest)
      or (not entry.takes_argument and not sep)
      or (entry.optional_argument and sep and rest)):
    return kind, rest
  usages = ', '.join(REGISTRY.get(n).usage or repr(n) for n in REGISTRY)
  raise ValueError(f'dataset={dataset!r} is not allowed: it must be one of '
                   f'{usages}')


def load(dataset: str, *, dtype=np.float32, data_dir: str | None = None
         ) -> Loaded:
  """Loads `dataset` (as a config names it) through its kind's loader."""
  kind, argument = parse(dataset)
  return REGISTRY.get(kind).load(argument, dtype=dtype, data_dir=data_dir)
