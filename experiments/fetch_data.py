"""Downloads MNIST (or Fashion-MNIST) where the experiments look for it,
and says where it is.

  python -m experiments.fetch_data [--dir DIR]
  python -m experiments.fetch_data --dataset=fashion_mnist [--dir DIR]

Without --dir the files go to the cache (`$XDG_CACHE_HOME/laq_jax/mnist` or
`~/.cache/laq_jax/mnist`), which `laq_jax.data.load_mnist` searches by
itself; with --dir, set `LAQ_JAX_DATA=DIR` (or pass data_dir) so it finds them.
Fashion-MNIST goes to `.../laq_jax/fashion_mnist` (`LAQ_JAX_FASHION_MNIST`
for another folder); where Debian's `dataset-fashion-mnist` is installed it
is found without fetching.
"""

import sys

from absl import app
from absl import flags

from experiments.run import cli
from laq_jax import data

_DIR = flags.DEFINE_string(
    'dir', None, 'Directory for the four IDX files; default: the cache '
    '($XDG_CACHE_HOME/laq_jax/mnist or .../fashion_mnist, else '
    '~/.cache/laq_jax/...).')
_DATASET = flags.DEFINE_enum(
    'dataset', 'mnist', ['mnist', 'fashion_mnist'], 'Which data set.')
_TIMEOUT = flags.DEFINE_float(
    'timeout', 20.0, 'Seconds per network request.', lower_bound=0.001)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  fashion = _DATASET.value == 'fashion_mnist'
  fetch = data.fetch_fashion_mnist if fashion else data.fetch_mnist
  name = 'Fashion-MNIST' if fashion else 'MNIST'
  env = data.fashion_mnist.ENV_VAR if fashion else data.DATA_ENV_VAR
  cache = data.default_cache_dir() / ('fashion_mnist' if fashion else 'mnist')
  try:
    directory = fetch(_DIR.value, timeout=_TIMEOUT.value)
  except data.DataError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  except OSError as e:  # the folder cannot be made or written
    print(f'error: --dir={_DIR.value}: {e.strerror or e}', file=sys.stderr)
    return 1
  print(f'{name} is in {directory} (verified).')
  if directory.resolve() != cache.resolve():
    print(f'To use it: export {env}={directory}')
  return 0


if __name__ == '__main__':
  cli.run(main)
