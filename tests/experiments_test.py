"""Tests of the launcher: configs, validation, f*, the workdir files, compare.

The runs are tiny (600 MNIST images, 30 iterations) and every number written
is checked against a second computation: the library run directly on shards
built here, hand formulas for bits, and, for f*, scipy's L-BFGS-B on a NumPy
objective.
"""

import csv
import importlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import configs
from configs import default as default_config
from experiments import compare
from experiments import train
import laq_jax
from laq_jax import build
from laq_jax import optimum
from tests import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKERS, PER_WORKER, STEPS, EVAL_EVERY = 10, 60, 30, 10
COLUMNS = ('step', 'loss', 'residual', 'paper_residual', 'grad_norm_sq',
           'uploads', 'bits', 'cum_uploads', 'cum_bits', 'test_accuracy')
PNGS = ('loss_vs_iterations.png', 'loss_vs_uploads.png', 'loss_vs_bits.png',
        'grad_norm_vs_iterations.png', 'grad_norm_vs_uploads.png',
        'grad_norm_vs_bits.png', 'upload_raster.png')

_tmp = common.IsolatedEnv('laq_experiments_test_')


def setUpModule():
  _tmp.enter()


def tearDownModule():
  _tmp.exit()


def tiny_config(**overrides):
  config = configs.load('mnist_logreg', 'tiny')
  config.update(overrides)
  return config


def read_csv(path):
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  return rows


def run_main(*args, env_extra=None, timeout=300):
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS='cpu',
             **(env_extra or {}))
  return subprocess.run([sys.executable, '-m', 'experiments.main', *args],
                        cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout, check=False)


class _Runs:
  """Two tiny runs (laq and gd), made once and shared by the tests."""
  cache = {}

  @classmethod
  def get(cls, algo):
    if algo not in cls.cache:
      workdir = pathlib.Path(_tmp.name, 'runs', algo)
      summary = train.train_and_evaluate(tiny_config(algo=algo), workdir)
      cls.cache[algo] = (workdir, summary)
    return cls.cache[algo]


def direct_run(algo):
  """The same run through the library alone, on shards built here."""
  x, y = common.mnist_shards(WORKERS, PER_WORKER, np.float64)
  data = laq_jax.Data(jnp.asarray(x), jnp.asarray(y))
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), WORKERS)
  hyper = laq_jax.make_hyper(algo, dtype=jnp.float64)  # the paper defaults
  state, trace = laq_jax.run(spec, data, hyper, STEPS)
  return spec, data, hyper, state, trace


def trace_theta(algo, k):
  """theta^k of the direct run (k steps from theta^0)."""
  x, y = common.mnist_shards(WORKERS, PER_WORKER, np.float64)
  data = laq_jax.Data(jnp.asarray(x), jnp.asarray(y))
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), WORKERS)
  hyper = laq_jax.make_hyper(algo, dtype=jnp.float64)
  if k == 0:
    return laq_jax.init_state(spec, hyper, jnp.float64).theta_P
  return laq_jax.run(spec, data, hyper, k)[0].theta_P


class WorkdirTest(parameterized.TestCase):

  @parameterized.parameters('laq', 'gd')
  def test_files_and_columns(self, algo):
    workdir, _ = _Runs.get(algo)
    for name in ('config.json', 'metrics.csv', 'uploads.npy',
                 'summary.json') + PNGS:
      self.assertTrue((workdir / name).is_file(), name)
    for name in PNGS:
      content = (workdir / name).read_bytes()
      self.assertEqual(content[:8], b'\x89PNG\r\n\x1a\n', name)
      self.assertGreater(len(content), 5000, name)
    rows = read_csv(workdir / 'metrics.csv')
    self.assertLen(rows, STEPS)
    self.assertEqual(tuple(rows[0]), COLUMNS)
    self.assertEqual([int(r['step']) for r in rows], list(range(STEPS)))
    self.assertEqual(json.loads((workdir / 'config.json').read_text()),
                     tiny_config(algo=algo).to_dict())
    self.assertEqual(list(workdir.glob('.*.tmp')), [])

  @parameterized.parameters('laq', 'gd')
  def test_numbers_agree_with_the_library(self, algo):
    workdir, summary = _Runs.get(algo)
    spec, data, hyper, state, trace = direct_run(algo)
    rows = read_csv(workdir / 'metrics.csv')
    col = lambda name, kind=float: np.array([kind(r[name]) for r in rows])
    sent = np.load(workdir / 'uploads.npy')
    self.assertEqual(sent.dtype, bool)
    self.assertEqual(sent.shape, (STEPS, WORKERS))
    np.testing.assert_array_equal(sent, trace.sent_M)
    np.testing.assert_allclose(col('loss'), trace.loss, rtol=1e-12)
    # Step 0 is theta^0 = 0: every logit is 0, f = M log 10 exactly.
    self.assertAlmostEqual(col('loss')[0], WORKERS * np.log(10), places=12)
    uploads = sent.sum(1)
    np.testing.assert_array_equal(col('uploads', int), uploads)
    np.testing.assert_array_equal(col('cum_uploads', int), np.cumsum(uploads))
    p = 784 * 10 + 10
    per_upload = 4 * p + 32 if algo == 'laq' else 32 * p
    np.testing.assert_array_equal(col('bits', int), uploads * per_upload)
    np.testing.assert_array_equal(col('cum_bits', int),
                                  np.cumsum(uploads) * per_upload)
    self.assertEqual(summary['iterations'], STEPS)
    self.assertEqual(summary['total_uploads'], int(sent.sum()))
    self.assertEqual(summary['total_bits'], int(sent.sum()) * per_upload)
    if algo == 'gd':
      self.assertEqual(summary['total_uploads'], STEPS * WORKERS)
    else:
      self.assertLess(summary['total_uploads'], STEPS * WORKERS)
    final = float(laq_jax.objective(spec.problem, state.theta_P, data,
                                    hyper.l2))
    self.assertAlmostEqual(summary['final_loss'], final, delta=1e-10)
    fstar = summary['fstar']
    np.testing.assert_allclose(col('residual'), trace.loss - fstar,
                               rtol=1e-12)
    self.assertAlmostEqual(summary['final_residual'], final - fstar,
                           delta=1e-10)
    self.assertIsNone(summary['target_iteration'])  # 30 steps: far from 1e-6
    # The paper's residual: the average worker loss minus the smallest one
    # the run reached (theta^T's, the loss falling all the way).
    lowest = min(trace.loss.min(), final) / WORKERS
    self.assertAlmostEqual(summary['paper_reference'], lowest, delta=1e-12)
    np.testing.assert_allclose(col('paper_residual'),
                               trace.loss / WORKERS - lowest, atol=1e-12)
    self.assertAlmostEqual(summary['paper_final_residual'],
                           final / WORKERS - lowest, delta=1e-12)
    # ||sum_m grad f_m(theta^k)||^2, from the library's objective.
    for k in (0, STEPS - 1):
      theta_k = np.asarray(trace_theta(algo, k))
      grad = jax.grad(lambda th: laq_jax.objective(
          spec.problem, th, data, hyper.l2))(jnp.asarray(theta_k))
      self.assertAlmostEqual(col('grad_norm_sq')[k] / float(grad @ grad), 1.0,
                             delta=1e-9)

  def test_test_accuracy_at_eval_steps(self):
    workdir, summary = _Runs.get('laq')
    spec, _, _, state, _ = direct_run('laq')
    rows = read_csv(workdir / 'metrics.csv')
    evaluated = [int(r['step']) for r in rows if r['test_accuracy']]
    self.assertEqual(evaluated, list(range(0, STEPS, EVAL_EVERY)))
    test = common.mnist(np.float64)
    # theta^0 = 0 predicts class 0 everywhere: accuracy = share of zeros.
    self.assertAlmostEqual(float(rows[0]['test_accuracy']),
                           np.mean(test['y_test'] == 0), places=12)
    theta = np.asarray(state.theta_P)  # ravel_pytree order: b, then w
    logits = test['x_test'].astype(np.float64) @ theta[10:].reshape(
        784, 10) + theta[:10]
    self.assertAlmostEqual(summary['final_test_accuracy'],
                           np.mean(logits.argmax(1) == test['y_test']),
                           places=12)

  def test_summary_fields(self):
    _, summary = _Runs.get('laq')
    for key in ('algo', 'model', 'iterations', 'total_uploads', 'total_bits',
                'final_loss', 'final_test_accuracy', 'fstar', 'fstar_method',
                'target_residual', 'target_iteration', 'target_uploads',
                'target_bits', 'wall_time_s'):
      self.assertIn(key, summary)
    self.assertEqual(summary['algo'], 'laq')
    self.assertIn('L-BFGS', summary['fstar_method'])
    self.assertEqual(summary['target_residual'], 1e-6)

  def test_fstar_is_cached(self):
    workdir, summary = _Runs.get('laq')
    _Runs.get('gd')
    del workdir
    cached = list(pathlib.Path(os.environ['LAQ_JAX_CACHE'], 'fstar').glob(
        '*.json'))
    self.assertLen(cached, 1)
    self.assertEqual(json.loads(cached[0].read_text())['fstar'],
                     summary['fstar'])
    sources = {s['fstar_source'].split(':')[0] for _, s in
               _Runs.cache.values()}
    self.assertIn('cache', sources)


class CompareTest(absltest.TestCase):

  def test_compare_two_runs(self):
    (laq_dir, laq), (gd_dir, gd) = _Runs.get('laq'), _Runs.get('gd')
    out = pathlib.Path(_tmp.name, 'compare')
    table_rows = compare.compare([str(gd_dir), str(laq_dir)], str(out))
    for name in ('table.md', 'comparison.json', 'loss_vs_iterations.png',
                 'loss_vs_uploads.png', 'loss_vs_bits.png',
                 'upload_raster_gd.png', 'upload_raster_laq.png'):
      self.assertTrue((out / name).is_file(), name)
    self.assertEqual([r['label'] for r in table_rows], ['gd', 'laq'])
    self.assertEqual(table_rows[1]['uploads'], laq['total_uploads'])
    self.assertEqual(table_rows[0]['bits'], gd['total_bits'])
    table = (out / 'table.md').read_text().splitlines()
    self.assertIn('| algorithm | iterations | uploads | bits |', table[0])
    self.assertTrue(table[2].startswith(f'| gd | 30 | 300 | '
                                        f'{gd["total_bits"]:.3e} |'))
    self.assertTrue(table[3].startswith(f'| laq | 30 | '
                                        f'{laq["total_uploads"]:,} |'))


class MainTest(absltest.TestCase):
  """The command line, in fresh processes."""

  def test_main_writes_a_run(self):
    workdir = pathlib.Path(_tmp.name, 'main_lag')
    result = run_main('--config=configs/mnist_logreg.py:tiny,algo=lag',
                      f'--workdir={workdir}', '--config.num_iters=12',
                      '--config.eval_every=5')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    summary = json.loads((workdir / 'summary.json').read_text())
    self.assertEqual((summary['algo'], summary['iterations']), ('lag', 12))
    rows = read_csv(workdir / 'metrics.csv')
    self.assertLen(rows, 12)
    self.assertEqual([int(r['step']) for r in rows if r['test_accuracy']],
                     [0, 5, 10])
    self.assertIn('it/s', result.stderr)  # the progress line
    self.assertIn('ETA', result.stderr)

  def test_bad_values_fail_clearly(self):
    for flag, expected in (('--config.bits=0', 'config.bits=0'),
                           ('--config.algo=foo', "config.algo='foo'")):
      result = run_main('--config=configs/mnist_logreg.py:tiny',
                        f'--workdir={_tmp.name}/bad', flag, timeout=120)
      self.assertNotEqual(result.returncode, 0)
      self.assertIn(expected, result.stderr)
      self.assertNotIn('Traceback', result.stderr)
    self.assertFalse(pathlib.Path(_tmp.name, 'bad', 'metrics.csv').exists())

  def test_devices_path_matches_vmap(self):
    # 64 images per worker, not a multiple of the 10 classes: with 60, some
    # gradient coordinates are zero up to rounding and sit on a tie of the
    # quantizer, which the two layouts may break differently (see
    # tests/_sharded_checks.py).
    devices = pathlib.Path(_tmp.name, 'devices')
    result = run_main(
        '--config=configs/mnist_logreg.py:tiny', f'--workdir={devices}',
        '--config.workers_on=devices', '--config.train_subset=640',
        '--config.fstar=none',
        env_extra={'XLA_FLAGS': '--xla_force_host_platform_device_count=2'})
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    built = build.build(tiny_config(train_subset=640))
    _, trace = laq_jax.run(built.spec, built.data, built.hyper, STEPS)
    np.testing.assert_array_equal(np.load(devices / 'uploads.npy'),
                                  trace.sent_M)
    losses = [float(r['loss']) for r in read_csv(devices / 'metrics.csv')]
    np.testing.assert_allclose(losses, trace.loss, rtol=1e-10)


class ConfigTest(parameterized.TestCase):

  def test_every_config_validates(self):
    for name in configs.NAMES:
      for arg in (None, 'quick', 'tiny'):
        build.validate_config(configs.load(name, arg))

  def test_stochastic_configs_hold_the_authors_settings(self):
    for name in ('mnist_logreg_stochastic', 'mnist_mlp_stochastic'):
      c = configs.load(name)
      self.assertEqual(
          (c.algo, c.bits, c.step_size, c.err_weight, c.threshold_offset,
           c.num_iters, c.batch_size), ('slaq', 3, 0.008, 1.5, 0.2, 1500, 500))

  def test_argument(self):
    c = configs.load('mnist_logreg', 'algo=lag,quick,bits=3,step_size=0.01')
    self.assertEqual((c.algo, c.bits, c.step_size, c.num_iters),
                     ('lag', 3, 0.01, 300))
    self.assertIsInstance(c.step_size, float)
    # Items apply left to right.
    self.assertEqual(configs.load('mnist_logreg', 'tiny,num_iters=7').num_iters,
                     7)
    with self.assertRaisesRegex(ValueError, "no field 'bitz'"):
      configs.load('mnist_logreg', 'bitz=3')
    with self.assertRaisesRegex(ValueError, "'fast': unknown variant"):
      configs.load('mnist_logreg', 'fast')
    with self.assertRaisesRegex(ValueError, "bits='three'.*integer"):
      default_config.apply_arg(default_config.get_config(), 'bits=three')

  def test_docstrings_hold_the_command(self):
    for name in configs.NAMES:
      doc = importlib.import_module(f'configs.{name}').__doc__
      self.assertIn(f'--config=configs/{name}.py', doc)

  @parameterized.named_parameters(
      ('algo', dict(algo='foo'), "config.algo='foo'.*'laq'"),
      ('bits', dict(bits=0), r'config.bits=0.*1\.\.32'),
      ('bits_float', dict(bits=2.5), 'config.bits=2.5'),
      ('step_size', dict(step_size=0.0), 'config.step_size=0.0'),
      ('memory', dict(memory=0), 'config.memory=0'),
      ('max_staleness', dict(max_staleness=-1), 'config.max_staleness=-1'),
      ('xi', dict(xi=-0.1), 'config.xi=-0.1'),
      ('split', dict(split='random'), "config.split='random'"),
      ('model', dict(model='cnn'), "config.model='cnn'"),
      ('precision', dict(precision='float16'), "config.precision='float16'"),
      ('workers_on', dict(workers_on='tpu'), "config.workers_on='tpu'"),
      ('num_workers', dict(num_workers=0), 'config.num_workers=0'),
      ('num_workers_divides', dict(num_workers=7, train_subset=0),
       'config.num_workers=7.*divisor'),
      ('train_subset', dict(train_subset=605), 'config.train_subset=605'),
      ('train_subset_large', dict(train_subset=70000),
       'config.train_subset=70000.*at most 60000'),
      ('batch_size', dict(algo='slaq', batch_size=61),
       'config.batch_size=61.*shard size 60'),
      ('eval_every', dict(eval_every=0), 'config.eval_every=0'),
      ('dataset', dict(dataset='cifar'), "config.dataset='cifar'"),
      ('builtin', dict(dataset='builtin:iris'), "config.dataset='builtin:iris'"),
      ('libsvm', dict(dataset='libsvm:/no/such/file'), 'existing LIBSVM'),
      ('data_dir', dict(data_dir='/no/such/dir'), "config.data_dir='/no/such"),
      ('fstar', dict(fstar='abc'), "config.fstar='abc'"),
      ('target', dict(target_residual=0.0), 'config.target_residual=0.0'),
      ('dirichlet', dict(dirichlet_alpha=0.0), 'config.dirichlet_alpha=0.0'),
      ('checkpoint', dict(checkpoint_every=-5), 'config.checkpoint_every=-5'),
  )
  def test_bad_field(self, overrides, message):
    # A plain dict: ConfigDict's own type check would catch some of these
    # first, and the point here is validate_config's.
    config = tiny_config().to_dict()
    config.update(overrides)
    with self.assertRaisesRegex(build.ConfigError, message):
      build.validate_config(config)

  def test_unknown_and_missing_fields(self):
    config = tiny_config()
    config.bitz = 3
    with self.assertRaisesRegex(build.ConfigError, 'unknown field.*bitz'):
      build.validate_config(config)
    build.validate_config(config, allow_extra=('bitz',))
    del config['bitz']
    del config['fstar']
    with self.assertRaisesRegex(build.ConfigError, 'lacks field.*fstar'):
      build.validate_config(config)

  def test_builtin_dataset_builds(self):
    built = build.build(tiny_config(dataset='builtin:heart_scale',
                                    train_subset=0, num_workers=10))
    self.assertEqual(built.data.x_MxNxD.shape, (10, 27, 13))
    self.assertEqual(built.num_params, 13 * 2 + 2)
    self.assertEqual(built.data.x_MxNxD.dtype, jnp.float64)


class OptimumTest(absltest.TestCase):

  def test_fstar_against_scipy_and_gd(self):
    import scipy.optimize  # pylint: disable=g-import-not-at-top
    x, y = common.mnist_shards(WORKERS, PER_WORKER, np.float64)
    data = laq_jax.Data(jnp.asarray(x), jnp.asarray(y))
    problem = laq_jax.get_problem('logreg')
    opt = optimum.solve(problem, data, 0.01)
    # The gradient, by jax.grad of the loop's objective: tiny.
    grad = jax.grad(lambda th: laq_jax.objective(problem, th, data, 0.01))(
        jnp.asarray(opt.theta_P))
    self.assertLess(float(jnp.linalg.norm(grad)), 1e-9)
    self.assertLess(opt.grad_norm, 1e-9)

    # An independent NumPy objective minimized by scipy's L-BFGS-B.
    def f_and_grad(theta):
      w, b = theta[:7840].reshape(784, 10), theta[7840:]
      value, g = 0.0, np.zeros_like(theta)
      for xm, ym in zip(x, y):
        z = xm @ w + b
        z = z - z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        value += -logp[np.arange(len(ym)), ym].mean()
        p = np.exp(logp)
        p[np.arange(len(ym)), ym] -= 1
        g[:7840] += (xm.T @ p / len(ym)).ravel()
        g[7840:] += p.mean(0)
      value += WORKERS * 0.005 * theta @ theta
      return value, g + WORKERS * 0.01 * theta

    ref = scipy.optimize.minimize(f_and_grad, np.zeros(7850), jac=True,
                                  method='L-BFGS-B',
                                  options=dict(maxiter=5000, gtol=1e-11,
                                               ftol=1e-16))
    self.assertLessEqual(opt.value, ref.fun + 1e-12)
    self.assertAlmostEqual(opt.value, ref.fun, delta=1e-9)
    # A long GD run never goes below f*, and gets close to it.
    spec = laq_jax.RunSpec(problem, WORKERS)
    _, trace = laq_jax.run(spec, data, laq_jax.make_hyper('gd',
                                                          dtype=jnp.float64),
                           2000)
    self.assertGreaterEqual(trace.loss.min(), opt.value - 1e-12)
    self.assertLess(trace.loss[-1] - opt.value, 1e-4)

  def test_needs_float64(self):
    code = ('import numpy as np, laq_jax; from laq_jax import optimum; '
            'd = laq_jax.Data(np.zeros((2, 3, 4), np.float32), '
            'np.zeros((2, 3), np.int32)); '
            "optimum.solve(laq_jax.get_problem('logreg', 4, 2), d, 0.1)")
    result = subprocess.run([sys.executable, '-c', code], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            capture_output=True, text=True, timeout=120,
                            check=False)
    self.assertNotEqual(result.returncode, 0)
    self.assertIn("set_precision('float64')", result.stderr)


if __name__ == '__main__':
  absltest.main()
