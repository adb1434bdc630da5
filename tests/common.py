"""Test helpers: where the MNIST files are, and small real subsets of them."""

import functools
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_cache_dir():
  """The suite's persistent compilation cache: .cache/jax/<Python>-<JAX>-
  <backend> in the checkout (ignored by git; another JAX version compiles
  other programs), or $LAQ_JAX_TEST_COMPILE_CACHE; None when that is 'off'.
  tests/conftest.py gives it to every process the suite starts;
  scripts/docs.sh to the documentation's examples."""
  import sys  # pylint: disable=g-import-not-at-top
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  value = os.environ.get('LAQ_JAX_TEST_COMPILE_CACHE', '').strip()
  if value.lower() in startup.OFF:
    return None
  if value:
    return value
  import jax  # pylint: disable=g-import-not-at-top
  return os.path.join(ROOT, '.cache', 'jax', 'py{}.{}-jax{}-{}'.format(
      *sys.version_info[:2], jax.__version__, jax.default_backend()))


def mnist_dir():
  """Where MNIST is: $LAQ_JAX_DATA, else the cache (laq_jax.data's lookup);
  None when neither holds it."""
  from laq_jax import data  # pylint: disable=g-import-not-at-top
  try:
    return str(data.find_mnist_dir())
  except data.DataError:
    return None


@functools.cache
def mnist(dtype=np.float32):
  """MNIST with pixels scaled in `dtype` (laq_jax.data.load_mnist)."""
  from laq_jax import data  # pylint: disable=g-import-not-at-top
  return data.load_mnist(mnist_dir(), dtype=dtype)


def mnist_shards(num_workers, per_worker, dtype=np.float64, offset=0):
  """The first num_workers * per_worker training images, contiguous shards."""
  d = mnist(dtype)
  n = num_workers * per_worker
  x = d['x_train'][offset:offset + n]
  y = d['y_train'][offset:offset + n]
  return (x.reshape(num_workers, per_worker, -1),
          y.reshape(num_workers, per_worker))


class IsolatedEnv:
  """A module's temporary folder, with $LAQ_JAX_CACHE inside it (so tests never
  touch the user's f* cache) and $LAQ_JAX_DATA pointing at MNIST; subprocesses
  inherit both. Call `enter()` in setUpModule and `exit()` in tearDownModule.
  """

  def __init__(self, prefix):
    self.prefix = prefix
    self.tmp = None
    self.saved = {}

  @property
  def name(self):
    return self.tmp.name

  def enter(self):
    import tempfile  # pylint: disable=g-import-not-at-top
    self.tmp = tempfile.TemporaryDirectory(prefix=self.prefix)
    for key, value in (('LAQ_JAX_CACHE', os.path.join(self.tmp.name, 'cache')),
                       ('LAQ_JAX_DATA', mnist_dir())):
      self.saved[key] = os.environ.get(key)
      if value:
        os.environ[key] = value

  def exit(self):
    for key, value in self.saved.items():
      if value is None:
        os.environ.pop(key, None)
      else:
        os.environ[key] = value
    self.tmp.cleanup()


def free_port() -> int:
  """A TCP port free on localhost right now (for a coordinator)."""
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def run_script(code, **env_extra):
  """Runs `python -c code` from the repo root in a fresh process.

  The child sees the repo on PYTHONPATH and MNIST in $LAQ_JAX_DATA (when
  found), plus `env_extra` (a None value removes that variable). Returns the CompletedProcess (text output).
  """
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
             os.environ.get('PYTHONPATH', ''), **env_extra)
  for key, value in env_extra.items():
    if value is None:  # None: not in the child's environment
      del env[key]
  if mnist_dir():
    env['LAQ_JAX_DATA'] = mnist_dir()
  return subprocess.run([sys.executable, '-c', code], env=env,
                        capture_output=True, text=True, timeout=600, cwd=ROOT)


def tiny_config(**overrides):
  """configs/mnist_logreg.py:tiny (600 images, M = 10, 30 iterations in
  chunks of 10) with `overrides`."""
  import configs  # pylint: disable=g-import-not-at-top
  config = configs.load('mnist_logreg', 'tiny')
  config.update(overrides)
  return config


def read_csv(path):
  """A CSV file as a list of {column: text}."""
  import csv  # pylint: disable=g-import-not-at-top
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def assert_trees_equal(test, a, b):
  """Same structure, dtypes and values, leaf by leaf (bit for bit)."""
  import jax  # pylint: disable=g-import-not-at-top
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x), np.asarray(y)
    test.assertEqual(x.dtype, y.dtype)
    np.testing.assert_array_equal(x, y)


# 4 workers x 40 real MNIST images: fast, still real. Worker 0 holds exactly
# 4 images of digits 0, 2, 4 and 9, so at theta = 0 those bias gradients are
# 0.1 - 4/40: zero in exact arithmetic, +-1e-17 after XLA's or NumPy's
# summation, a quantizer rounding tie that the tie rule must settle the same
# way everywhere.
SMALL_M, SMALL_N = 4, 40


def small_run(algo, steps=60, dtype=None, problem='logreg', layout=False,
              loss_every=1, **hyper):
  """`algo` on the small shards (float64 data): (state, trace, (x, y)).

  layout: give the data `laq_jax.fast_layout`'s layouts (the fast
  full-batch logistic-regression gradient). loss_every: RunSpec's (1: the
  loss at every step, as the oracle logs it)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import laq_jax as lj  # pylint: disable=g-import-not-at-top
  dtype = dtype or jnp.float64
  x, y = mnist_shards(SMALL_M, SMALL_N, dtype=np.float64)
  data = lj.Data(jnp.asarray(x, dtype), jnp.asarray(y))
  if layout:
    data = lj.fast_layout(data)
  spec = lj.RunSpec(lj.get_problem(problem, hidden=16), SMALL_M,
                    stochastic=lj.ALGORITHMS[algo].stochastic, batch_size=10,
                    loss_every=loss_every)
  h = lj.make_hyper(algo, dtype=dtype, **hyper)
  state, trace = lj.run(spec, data, h, steps)
  return state, trace, (x, y)


def batch_rows(key, n, k):
  """The rows laq_jax draws for a minibatch under `key`
  (`randomness.sample_rows`), computed by the NumPy oracle from the round
  keys JAX's PRNG gives that key."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from laq_jax import randomness  # pylint: disable=g-import-not-at-top
  from tests import reference  # pylint: disable=g-import-not-at-top
  round_keys = jax.random.bits(key, (randomness.FEISTEL_ROUNDS,), jnp.uint32)
  return reference.sample_rows(np.asarray(round_keys), n, k)


def rule_steps(grads_TxMxP, parts_, h, theta0, state=None, per_step=None):
  """`rules.step` over the given gradients [T, M, P] (one jitted scan from
  `rules.init` at theta0 with D = 4, or from `state`): ((theta, state),
  the stats per step), or ((theta, state), (stats, per_step(state))) per
  step where `per_step` is given (e.g. the broadcast the workers hold)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from laq_jax import hyper as hyper_lib  # pylint: disable=g-import-not-at-top
  from laq_jax import rules  # pylint: disable=g-import-not-at-top
  h = hyper_lib.cast(h, grads_TxMxP.dtype)
  if state is None:
    state = rules.init(theta0, grads_TxMxP.shape[1], 4, False, parts_, h)

  @jax.jit
  def run(theta, state):
    def body(carry, inputs):
      theta, state = carry
      k, grads = inputs
      theta, state, stats = rules.step(grads, state, theta, h, step_count=k,
                                       parts=parts_)
      out = stats if per_step is None else (stats, per_step(state))
      return (theta, state), out
    steps = jnp.arange(grads_TxMxP.shape[0], dtype=jnp.int32)
    return jax.lax.scan(body, (theta, state), (steps, grads_TxMxP))

  return run(jnp.asarray(theta0, grads_TxMxP.dtype), state)
