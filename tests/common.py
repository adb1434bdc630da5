"""Test helpers: where the MNIST files are, and small real subsets of them."""

import functools
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mnist_dir():
  """$LAQ_JAX_DATA, else ../shared/data/mnist beside the checkout, else None."""
  for candidate in (os.environ.get('LAQ_JAX_DATA'),
                    os.path.join(ROOT, '..', 'shared', 'data', 'mnist')):
    if candidate and os.path.isdir(candidate):
      return os.path.abspath(candidate)
  return None


@functools.cache
def mnist():
  from laq_jax import data  # pylint: disable=g-import-not-at-top
  return data.load_mnist(mnist_dir())


def mnist_shards(num_workers, per_worker, dtype=np.float64, offset=0):
  """The first num_workers * per_worker training images, contiguous shards."""
  d = mnist()
  n = num_workers * per_worker
  x = d['x_train'][offset:offset + n].astype(dtype)
  y = d['y_train'][offset:offset + n]
  return (x.reshape(num_workers, per_worker, -1),
          y.reshape(num_workers, per_worker))
