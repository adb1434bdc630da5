"""Integration tests of experiments/run/train.py and the experiments.main
launcher.

Tiny runs (600 MNIST images, M = 10 shards of 60, 30 iterations, chunks of
10) through `train_and_evaluate` and `python -m experiments.main`. Every
number a run writes is checked against a second computation: the library
run directly (`laq_jax.run`) on shards built here, hand formulas for bits,
NumPy for the test accuracy, the paper's residual and the gradient norm.
Also: what is refused before anything runs (bad config, missing or corrupt
data, another config's workdir), the launcher's exit statuses (1 with one
line, 3 on divergence), the devices path on forced CPU devices, and compare.
"""

import gzip
import json
import os
import pathlib
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.run import build
from experiments.run import comparison
from experiments.run import config as config_lib
from experiments.run import outputs
from experiments.run import train
import laq_jax
from laq_jax import data as data_lib
from laq_jax import metrics
from laq_jax.data import mnist as mnist_lib
from tests import common
from tests import events_test
from tests import reference

pytestmark = pytest.mark.slow
# A launcher's run against runs in this process, exactly: compiled as the
# launchers compile (tests/conftest.py).
XLA_DEFAULTS = True

ROOT = pathlib.Path(common.ROOT)
WORKERS, PER_WORKER, STEPS, EVAL_EVERY = 10, 60, 30, 10
P = 784 * 10 + 10
COLUMNS = ('step', 'loss', 'residual', 'paper_residual', 'grad_norm_sq',
           'uploads', 'bits', 'bits_down', 'cum_uploads', 'cum_bits',
           'cum_bits_down', 'test_accuracy', 'time_s', 'cum_time_s',
           'slowest', 'grads')  # grads: the recorded extra, summed over M
PNGS = ('loss_vs_iterations.png', 'loss_vs_uploads.png', 'loss_vs_bits.png',
        'loss_vs_total_bits.png', 'loss_vs_time.png',
        'grad_norm_vs_iterations.png', 'grad_norm_vs_uploads.png',
        'grad_norm_vs_bits.png', 'upload_raster.png')
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'

_env = common.IsolatedEnv('laq_train_test_')


def setUpModule():
  _env.enter()


def tearDownModule():
  _env.exit()


def workdir(name):
  return pathlib.Path(_env.name, name)


def run_main(*args, timeout=300, **env):
  """`python -m experiments.main ARGS` in a fresh process on the CPU."""
  environ = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS='cpu')
  environ.pop('XLA_FLAGS', None)
  environ.update(env)
  return subprocess.run([sys.executable, '-m', 'experiments.main', *args],
                        cwd=ROOT, env=environ, capture_output=True, text=True,
                        timeout=timeout, check=False)


def config_flags(config):
  """--config.FIELD=VALUE for every field: the command line of `config`."""
  return [f'--config.{k}={v}' for k, v in config.to_dict().items()
          if v is not None]  # (None: a network field at its profile's)


def shards(dtype=np.float64):
  x, y = common.mnist_shards(WORKERS, PER_WORKER, dtype)
  return laq_jax.Data(jnp.asarray(x), jnp.asarray(y))


def direct_run(algo, num_steps=STEPS):
  """The same run through the library alone, on shards built here."""
  data = shards()
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), WORKERS)
  hyper = laq_jax.make_hyper(algo, dtype=jnp.float64)  # the paper defaults
  state, trace = laq_jax.run(spec, data, hyper, num_steps)
  return spec, data, hyper, state, trace


class _Runs:
  """Two tiny runs (laq and gd) with f* solved, made once and shared."""
  cache = {}

  @classmethod
  def get(cls, algo):
    if algo not in cls.cache:
      where = workdir(f'runs_{algo}')
      summary = train.train_and_evaluate(common.tiny_config(algo=algo), where)
      cls.cache[algo] = (where, summary)
    return cls.cache[algo]


class RunFilesTest(parameterized.TestCase):

  @parameterized.parameters('laq', 'gd')
  def test_files_and_columns(self, algo):
    where, _ = _Runs.get(algo)
    for name in ('config.json', 'metrics.csv', 'uploads.npy', 'bits.npy',
                 'summary.json') + PNGS:
      self.assertTrue((where / name).is_file(), name)
    for name in PNGS:
      content = (where / name).read_bytes()
      self.assertEqual(content[:8], PNG_MAGIC, name)
      self.assertGreater(len(content), 5000, name)
    rows = common.read_csv(where / 'metrics.csv')
    self.assertLen(rows, STEPS)
    self.assertEqual(tuple(rows[0]), COLUMNS)
    self.assertEqual([int(r['step']) for r in rows], list(range(STEPS)))
    self.assertEqual(json.loads((where / 'config.json').read_text()),
                     common.tiny_config(algo=algo).to_dict())
    self.assertEqual(list(where.glob('.*.tmp')), [])
    self.assertFalse((where / 'checkpoints').exists())  # checkpoint_every=0

  @parameterized.parameters('laq', 'gd')
  def test_numbers_agree_with_the_library(self, algo):
    where, summary = _Runs.get(algo)
    spec, data, hyper, state, trace = direct_run(algo)
    rows = common.read_csv(where / 'metrics.csv')
    col = lambda name, kind=float: np.array([kind(r[name]) for r in rows])
    sent = np.load(where / 'uploads.npy')
    self.assertEqual(sent.dtype, bool)
    self.assertEqual(sent.shape, (STEPS, WORKERS))
    np.testing.assert_array_equal(sent, trace.sent_M)
    bits = np.load(where / 'bits.npy')  # per worker, for network replays
    self.assertEqual(bits.dtype, np.int64)
    np.testing.assert_array_equal(bits, trace.bits_M)
    np.testing.assert_array_equal(col('bits', int), bits.sum(1))
    # Every worker computes one gradient a step in laq and gd.
    np.testing.assert_array_equal(col('grads', int), np.full(STEPS, WORKERS))
    np.testing.assert_allclose(col('loss'), trace.loss, rtol=1e-12)
    # Step 0 is theta^0 = 0: every logit is 0, f = M log 10 exactly.
    self.assertAlmostEqual(col('loss')[0], WORKERS * np.log(10), places=12)
    uploads = sent.sum(1)
    np.testing.assert_array_equal(col('uploads', int), uploads)
    np.testing.assert_array_equal(col('cum_uploads', int), np.cumsum(uploads))
    per_upload = 4 * P + 32 if algo == 'laq' else 32 * P
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
    x, y = common.mnist_shards(WORKERS, PER_WORKER, np.float64)
    theta_T = np.asarray(state.theta_P)
    final, _ = reference.objective(theta_T, x, y, 0.01)
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
    # ||sum_m grad f_m(theta^k)||^2 at theta^0 and theta^(T-1), by NumPy.
    for k in (0, STEPS - 1):
      theta_k = (np.zeros(P) if k == 0 else
                 np.asarray(direct_run(algo, k)[3].theta_P))
      _, grad = reference.objective(theta_k, x, y, 0.01)
      self.assertAlmostEqual(col('grad_norm_sq')[k] / (grad @ grad), 1.0,
                             delta=1e-9)
    self.assertEqual(summary['last_grad_norm_sq'], col('grad_norm_sq')[-1])

  def test_test_accuracy_at_eval_steps(self):
    where, summary = _Runs.get('laq')
    *_, state, _ = direct_run('laq')
    rows = common.read_csv(where / 'metrics.csv')
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
    where, summary = _Runs.get('laq')
    self.assertEqual(json.loads((where / 'summary.json').read_text()),
                     summary)
    for key in ('algo', 'model', 'iterations', 'total_uploads', 'total_bits',
                'final_loss', 'final_test_accuracy', 'fstar', 'fstar_method',
                'target_residual', 'target_iteration', 'target_uploads',
                'target_bits', 'paper_reference', 'paper_final_residual',
                'paper_target_iteration', 'paper_target_uploads',
                'paper_target_bits', 'last_grad_norm_sq', 'diverged',
                'resumed_from', 'wall_time_s'):
      self.assertIn(key, summary)
    self.assertEqual((summary['algo'], summary['model'],
                      summary['num_workers'], summary['num_params']),
                     ('laq', 'logreg', WORKERS, P))
    self.assertIn('L-BFGS', summary['fstar_method'])
    self.assertEqual(summary['target_residual'], 1e-6)
    self.assertEqual((summary['diverged'], summary['diverged_at'],
                      summary['resumed_from']), (False, None, None))
    # Compiling is part of the run's time (its first chunk), not all of it.
    self.assertBetween(summary['compile_time_s'], 0.0,
                       summary['run_time_s'])

  def test_fstar_is_cached(self):
    _, summary = _Runs.get('laq')
    _Runs.get('gd')
    cached = list(pathlib.Path(os.environ['LAQ_JAX_CACHE'], 'fstar').glob(
        '*.json'))
    self.assertLen(cached, 1)  # both runs share the objective
    self.assertEqual(json.loads(cached[0].read_text())['fstar'],
                     summary['fstar'])
    first, second = sorted(s['fstar_source'] for _, s in
                           _Runs.cache.values())
    self.assertEqual(first, f'cache:{cached[0]}')
    self.assertEqual(second, f'computed (cached at {cached[0]})')

  def test_compare_two_runs(self):
    (laq_dir, laq), (gd_dir, gd) = _Runs.get('laq'), _Runs.get('gd')
    out = workdir('compare')
    table_rows = comparison.compare([str(gd_dir), str(laq_dir)], str(out))
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


class RunRecordTest(absltest.TestCase):
  """The record of a run as its chunks arrive: what it reports equals the
  whole record's, which is joined once, when it is read."""

  def test_chunks_join_when_read(self):
    from experiments.run import run_results  # pylint: disable=g-import-not-at-top
    from laq_jax.record import Record  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    t, m = 7, 5

    def chunk(logged):
      loss = np.full(t, np.nan)
      loss[:logged] = rng.random(logged)
      return Record.from_arrays(
          loss=loss, grad_norm_sq=rng.random(t),
          sent_M=rng.random((t, m)) < 0.3, bits_M=rng.integers(0, 99, (t, m)),
          bits_down_M=rng.integers(0, 9, (t, m)))

    chunks = [chunk(3), chunk(0), chunk(t), chunk(0)]  # (2, 4: none logged)
    record = run_results.RunRecord(m)
    self.assertTrue(np.isnan(record.last_loss))
    for i, c in enumerate(chunks):
      record.append(c)
      whole = Record.join([Record.empty(m)] + chunks[:i + 1])
      self.assertEqual(record.uploads, int(whole.uploads.sum()))
      self.assertEqual(record.bits, int(whole.bits.sum()))
      logged = whole.loss[~np.isnan(whole.loss)]
      self.assertEqual(record.last_loss, logged[-1])
    got, want = record.record.arrays(), whole.arrays()
    self.assertEqual(sorted(got), sorted(want))
    for k in want:
      np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    self.assertEqual(record.num_workers, m)
    record.append(chunk(1))  # after a read, the next chunks join again
    self.assertEqual(record.record.num_steps, 5 * t)


class DegenerateSettingsTest(absltest.TestCase):
  """Legal settings that leave a run meaningless: one warning line each,
  kept in summary.json (issue 52: they exited 0 without a word)."""

  def test_each_is_named(self):
    from experiments.run import run_results  # pylint: disable=g-import-not-at-top
    config = common.tiny_config(algo='topk_ef', batch_size=10)
    config.params.top_k.k = 1e9
    built = build.build(config)
    got = run_results.degenerate_settings(config, built,
                                          {'total_uploads': 30})
    self.assertEqual(got, [f'top_k.k=1e+09 keeps every one of the P='
                           f'{built.num_params:,} coordinates (k is clipped '
                           'to P): top_k is the identity here, at the bits of '
                           'values and indices'])
    config.params.top_k.k = 0.5  # a fraction of P: nothing to say
    self.assertEqual(run_results.degenerate_settings(
        config, build.build(config), {'total_uploads': 30}), [])
    config = common.tiny_config(deadline_s=1e-9)
    built = build.build(config)
    self.assertEqual(run_results.degenerate_settings(
        config, built, {'total_uploads': 0, 'total_time_s': float('inf')}), [
            'deadline_s=1e-09: no client met the deadline in any round, so '
            'nothing was uploaded and the model never moved',
            'total_time_s is infinite (a round that never ends: check the '
            'network profile\'s rates and straggler settings); summary.json '
            'holds null for it'])
    self.assertEqual(run_results.degenerate_settings(
        config, built, {'total_uploads': 3, 'total_time_s': 1.0}), [])


class RefusedTest(absltest.TestCase):
  """What is refused before anything is loaded, compiled or written."""

  def test_nothing_runs_before_validation(self):
    out = workdir('never_created')
    with mock.patch.object(build, 'build') as built, \
        mock.patch.object(laq_jax.loop, 'run_chunk') as run_chunk:
      with self.assertRaisesRegex(config_lib.ConfigError, 'config.bits'):
        train.train_and_evaluate(common.tiny_config(bits=40), out)
    built.assert_not_called()
    run_chunk.assert_not_called()
    self.assertFalse(out.exists())

  def test_missing_files(self):
    empty = workdir('empty_data')
    empty.mkdir()
    out = workdir('run_missing_data')
    with self.assertRaisesRegex(data_lib.DataError,
                                'does not hold the MNIST files: missing '
                                'train-images-idx3-ubyte'):
      train.train_and_evaluate(common.tiny_config(data_dir=str(empty)), out)
    self.assertEqual(list(out.glob('*')), [])

  def test_corrupt_file(self):
    source = pathlib.Path(common.mnist_dir())
    corrupt = workdir('corrupt_data')
    corrupt.mkdir()
    # The files as they are there: NAME.gz (a copy of the download) or raw
    # NAME (the user cache that experiments.fetch_data fills).
    for name in data_lib.MNIST_FILES:
      if name != 'train-labels-idx1-ubyte':
        found = mnist_lib.idx_file(source, name)
        (corrupt / found.name).symlink_to(found)
    found = mnist_lib.idx_file(source, 'train-labels-idx1-ubyte')
    labels = bytearray(gzip.decompress(found.read_bytes())
                       if found.suffix == '.gz' else found.read_bytes())
    labels[100] = (labels[100] + 1) % 10  # one wrong label, still valid IDX
    (corrupt / 'train-labels-idx1-ubyte').write_bytes(bytes(labels))
    out = workdir('run_corrupt_data')
    with self.assertRaisesRegex(data_lib.DataError,
                                'train-labels-idx1-ubyte is not the canonical'
                                '.*SHA-256'):
      train.train_and_evaluate(common.tiny_config(data_dir=str(corrupt)), out)
    self.assertEqual(list(out.glob('*')), [])


def foreign_run(name, **overrides):
  """A workdir holding another config's run, and a file of the user's."""
  where = workdir(name)
  where.mkdir()
  outputs.write_json(where / 'config.json', common.tiny_config(**overrides).to_dict())
  (where / 'metrics.csv').write_text('step,loss\n0,1.0\n')
  (where / 'checkpoints' / '10').mkdir(parents=True)
  (where / 'notes.txt').write_text('not ours')
  return where


class WorkdirTest(absltest.TestCase):

  def test_another_config_is_refused(self):
    where = foreign_run('foreign', bits=3, seed=5)
    with mock.patch.object(build, 'build') as built:
      with self.assertRaisesRegex(outputs.WorkdirError,
                                  "another config's results.*bits: 3 -> 4, "
                                  'seed: 5 -> 0.*--overwrite'):
        train.train_and_evaluate(common.tiny_config(), where)
    built.assert_not_called()
    self.assertEqual((where / 'metrics.csv').read_text(),
                     'step,loss\n0,1.0\n')

  def test_overwrite_replaces_only_run_files(self):
    where = foreign_run('overwritten', bits=3)
    config = common.tiny_config(num_iters=10, checkpoint_every=10, fstar='none')
    summary = train.train_and_evaluate(config, where, overwrite=True)
    self.assertIsNone(summary['resumed_from'])  # not the foreign checkpoint
    self.assertEqual(json.loads((where / 'config.json').read_text()),
                     config.to_dict())
    self.assertLen(common.read_csv(where / 'metrics.csv'), 10)
    self.assertEqual((where / 'notes.txt').read_text(), 'not ours')
    self.assertEqual(sorted(p.name for p in (where / 'checkpoints').iterdir()
                            if not p.name.startswith('.')), ['10'])


class MainTest(absltest.TestCase):
  """The command line, in fresh processes."""

  def test_main_writes_a_run(self):
    where = workdir('main_lag')
    result = run_main('--config=configs/mnist_logreg.py:tiny,algo=lag',
                      f'--workdir={where}', '--config.num_iters=12',
                      '--config.eval_every=5', '--config.fstar=none')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    summary = json.loads((where / 'summary.json').read_text())
    self.assertEqual((summary['algo'], summary['iterations']), ('lag', 12))
    rows = common.read_csv(where / 'metrics.csv')
    self.assertLen(rows, 12)
    self.assertEqual([int(r['step']) for r in rows if r['test_accuracy']],
                     [0, 5, 10])
    # The library run directly: the same uploads (lag: 32 bits a value).
    spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), WORKERS)
    _, trace = laq_jax.run(spec, shards(), laq_jax.make_hyper(
        'lag', dtype=jnp.float64), 12)
    np.testing.assert_array_equal(np.load(where / 'uploads.npy'),
                                  trace.sent_M)
    self.assertEqual(summary['total_bits'], int(trace.sent_M.sum()) * 32 * P)
    # The progress lines (stderr is no terminal): step, rate, time left.
    self.assertIn('step 12/12', result.stderr)
    self.assertIn('it/s', result.stderr)
    self.assertIn('ETA', result.stderr)
    # A quiet start: no probing of absent backends.
    self.assertNotIn('Unable to initialize backend', result.stderr)
    # TensorBoard's reader sees metrics.csv's figures, step by step.
    tb = events_test.read(where / 'tensorboard')
    self.assertEqual(
        [tb['objective/loss'][int(r['step'])] for r in rows],
        [np.float32(float(r['loss'])) for r in rows])
    self.assertEqual(
        [tb['communication/uploads'][int(r['step'])] for r in rows],
        [int(r['cum_uploads']) for r in rows])
    self.assertEqual(
        [tb['communication/bits_up'][int(r['step'])] for r in rows],
        [np.float32(int(r['cum_bits'])) for r in rows])
    self.assertEqual(tb['eval/test_accuracy'],
                     {int(r['step']): np.float32(float(r['test_accuracy']))
                      for r in rows if r['test_accuracy']}
                     | {12: np.float32(summary['final_test_accuracy'])})
    self.assertEqual(tb['objective/loss'][12],
                     np.float32(summary['final_loss']))

  def test_bad_values_fail_with_one_line(self):
    empty = workdir('cli_empty_data')
    empty.mkdir()
    for flag, expected in (
        ('--config.bits=0', 'error: config.bits'),
        ('--config.algo=foo', "error: config.algo='foo' is not allowed"),
        (f'--config.data_dir={empty}', 'does not hold the MNIST files')):
      result = run_main('--config=configs/mnist_logreg.py:tiny',
                        f'--workdir={workdir("cli_bad")}', flag, timeout=120)
      self.assertEqual(result.returncode, 1, result.stderr[-2000:])
      lines = result.stderr.strip().splitlines()
      self.assertLen(lines, 1, result.stderr[-2000:])
      self.assertTrue(lines[0].startswith('error: '), lines[0])
      self.assertIn(expected, lines[0])
    self.assertFalse((workdir('cli_bad') / 'metrics.csv').exists())

  def test_launcher_refuses_then_overwrites(self):
    where = foreign_run('cli_foreign', bits=3)
    args = ('--config=configs/mnist_logreg.py:tiny,fstar=none,num_iters=5',
            f'--workdir={where}')
    refused = run_main(*args, timeout=120)
    self.assertEqual(refused.returncode, 1, refused.stderr[-2000:])
    self.assertIn("error: workdir '", refused.stderr)
    self.assertIn('--overwrite', refused.stderr)
    self.assertNotIn('Traceback', refused.stderr)
    done = run_main(*args, '--overwrite')
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    self.assertEqual(json.loads((where / 'config.json').read_text())['bits'],
                     4)
    self.assertLen(common.read_csv(where / 'metrics.csv'), 5)
    self.assertEqual((where / 'notes.txt').read_text(), 'not ours')

  def test_launcher_checks_the_process_flags(self):
    result = run_main('--config=configs/mnist_logreg.py:tiny',
                      f'--workdir={workdir("never")}', '--num_processes=2',
                      '--process_id=5', '--coordinator_address=127.0.0.1:1',
                      timeout=120)
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertIn('error: process_id=5 is not allowed: it must be in 0..1',
                  result.stderr)
    self.assertNotIn('Traceback', result.stderr)
    self.assertFalse(workdir('never').exists())

  def test_devices_path_matches_vmap(self):
    # 64 images per worker, not a multiple of the 10 classes: with 60, some
    # gradient coordinates are zero up to rounding and sit on a tie of the
    # quantizer, which the two layouts may break differently (see
    # tests/_sharded_checks.py).
    devices = workdir('devices')
    result = run_main(
        '--config=configs/mnist_logreg.py:tiny', f'--workdir={devices}',
        '--config.workers_on=devices', '--config.train_subset=640',
        '--config.fstar=none',
        XLA_FLAGS='--xla_force_host_platform_device_count=2')
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    built = build.build(common.tiny_config(train_subset=640))
    self.assertIsNone(built.mesh)  # this process: the vmap path
    _, trace = laq_jax.run(built.spec, built.data, built.hyper, STEPS)
    sent = np.load(devices / 'uploads.npy')
    self.assertTrue(0 < sent.sum() < sent.size, 'the rule must skip some')
    np.testing.assert_array_equal(sent, trace.sent_M)
    losses = [float(r['loss']) for r in common.read_csv(devices / 'metrics.csv')]
    np.testing.assert_allclose(losses, trace.loss, rtol=1e-10)


# ----------------------------------------------------------------------------
# Divergence.

# GD with alpha * M * lam = 1 * 10 * 10: theta grows ~99x per step, and the
# float32 loss overflows after about ten steps.
DIVERGING = dict(algo='gd', precision='float32', step_size=1.0, l2=10.0,
                 eval_every=5, checkpoint_every=5, fstar='none')


def library_losses(num_steps):
  """The diverging run through the library alone, on shards built here."""
  x, y = common.mnist_shards(WORKERS, PER_WORKER, np.float32)
  hyper = laq_jax.make_hyper('gd', dtype=jnp.float32, step_size=1.0, l2=10.0)
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), WORKERS)
  _, trace = laq_jax.run(spec, laq_jax.Data(jnp.asarray(x), jnp.asarray(y)),
                         hyper, num_steps)
  return trace.loss


class DivergenceTest(absltest.TestCase):
  """The one rule (metrics.diverged_at) in a run: the loss first goes above
  10x f(theta^0) at `at`, then becomes NaN at `k`, which stops the run."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.loss = library_losses(30)
    bad = np.flatnonzero(~np.isfinite(cls.loss))
    cls.k = int(bad[0]) if bad.size else None
    cls.at = metrics.diverged_at(cls.loss, np.nan)

  def test_the_library_run_diverges_in_a_later_chunk(self):
    self.assertIsNotNone(self.k)
    self.assertTrue(5 < self.k < 25, self.k)
    self.assertIsNotNone(self.at)
    self.assertLess(self.at, self.k)  # it ran away before it became NaN
    self.assertTrue(np.all(np.isfinite(self.loss[:self.k])))

  def test_stops_keeps_metrics_and_exits_3(self):
    k, at = self.k, self.at
    where = workdir('diverged')
    result = run_main('--config=configs/mnist_logreg.py:tiny',
                      f'--workdir={where}',
                      *config_flags(common.tiny_config(**DIVERGING)))
    self.assertEqual(result.returncode, 3, result.stderr[-3000:])
    last = result.stderr.strip().splitlines()[-1]
    self.assertTrue(last.startswith('error: diverged: the loss f(theta^k) '
                                    'is'), last)
    self.assertIn(f'at iteration k={at}, more than 10x f(theta^0)', last)
    self.assertIn(f'it became NaN/inf at k={k} and the run stopped there',
                  last)
    self.assertNotIn('Traceback', result.stderr)
    summary = json.loads((where / 'summary.json').read_text())
    self.assertIs(summary['diverged'], True)
    self.assertEqual(summary['diverged_at'], at)
    self.assertEqual(summary['iterations'], k + 1)
    self.assertEqual(summary['total_uploads'], (k + 1) * WORKERS)
    self.assertIsNone(summary['final_loss'])
    self.assertIsNone(summary['final_test_accuracy'])
    rows = common.read_csv(where / 'metrics.csv')
    self.assertEqual([int(r['step']) for r in rows], list(range(k + 1)))
    got = np.array([float(r['loss']) for r in rows])
    np.testing.assert_allclose(got[:k], self.loss[:k], rtol=1e-5)
    self.assertFalse(np.isfinite(got[k]))
    self.assertEqual(np.load(where / 'uploads.npy').shape, (k + 1, WORKERS))
    for name in PNGS:
      self.assertEqual((where / name).read_bytes()[:8], PNG_MAGIC, name)
    # The run stopped in the chunk of step k: no checkpoint after it.
    steps = [int(p.name) for p in (where / 'checkpoints').iterdir()
             if p.name.isdigit()]
    self.assertEqual(max(steps), k // 5 * 5)

  def test_a_finite_runaway_is_diverged_and_runs_to_its_end(self):
    # Stop right before the NaN: every f(theta^0..k-1) is finite, f(theta^k)
    # is not; the run is diverged at `at` (above 10x) all the same, and it
    # was not stopped: metrics.csv keeps every iteration.
    k, at = self.k, self.at
    where = workdir('diverged_at_end')
    summary = train.train_and_evaluate(
        common.tiny_config(**{**DIVERGING, 'num_iters': k,
                              'checkpoint_every': 0}), where)
    self.assertEqual((summary['diverged'], summary['diverged_at']), (True, at))
    self.assertIsNone(summary['final_loss'])
    self.assertIsNone(summary['final_test_accuracy'])
    self.assertIn(f'at iteration k={at}', summary['diverged_message'])
    self.assertIn('the run went on to its end', summary['diverged_message'])
    self.assertLen(common.read_csv(where / 'metrics.csv'), k)

  def test_a_run_within_10x_is_not_marked(self):
    # The same run at a step size that converges (resume_test's sweep's).
    summary = train.train_and_evaluate(
        common.tiny_config(**{**DIVERGING, 'step_size': 0.001,
                              'num_iters': 10, 'checkpoint_every': 0}),
        workdir('finite'))
    self.assertEqual((summary['diverged'], summary['diverged_at'],
                      summary['diverged_message']), (False, None, None))
    self.assertTrue(np.isfinite(summary['final_loss']))


if __name__ == '__main__':
  absltest.main()
