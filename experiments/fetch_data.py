"""Downloads MNIST where the experiments look for it, and says where it is.

  python -m experiments.fetch_data [--dir DIR]

Without --dir the files go to the cache (`$XDG_CACHE_HOME/laq_jax/mnist` or
`~/.cache/laq_jax/mnist`), which `laq_jax.data.load_mnist` searches by
itself; with --dir, set `LAQ_JAX_DATA=DIR` (or pass data_dir) so it finds them.
"""

import sys

from absl import app
from absl import flags

from experiments.run import cli
from laq_jax import data

_DIR = flags.DEFINE_string(
    'dir', None, 'Directory for the four MNIST files; default: the cache '
    '($XDG_CACHE_HOME/laq_jax/mnist or ~/.cache/laq_jax/mnist).')
_TIMEOUT = flags.DEFINE_float(
    'timeout', 20.0, 'Seconds per network request.', lower_bound=0.001)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    directory = data.fetch_mnist(_DIR.value, timeout=_TIMEOUT.value)
  except data.DataError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  except OSError as e:  # the folder cannot be made or written
    print(f'error: --dir={_DIR.value}: {e.strerror or e}', file=sys.stderr)
    return 1
  print(f'MNIST is in {directory} (verified).')
  if directory.resolve() != (data.default_cache_dir() / 'mnist').resolve():
    print(f'To use it: export {data.DATA_ENV_VAR}={directory}')
  return 0


if __name__ == '__main__':
  cli.run(main)
