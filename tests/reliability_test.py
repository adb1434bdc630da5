"""Reliability of runs: validation, checkpoint/resume, divergence, atomic files.

One test per validation rule of issue 8 and one per behaviour; each fails
without the behaviour. Runs are tiny (600 MNIST images, <= 120 iterations).
What a run writes is checked against a second computation: the library run
directly (`laq_jax.run`), a run that was never interrupted, the vmap path for
the devices path.
"""

import csv
import gzip
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import configs
from experiments import train
import laq_jax
from laq_jax import build
from laq_jax import checkpoint
from laq_jax import data as data_lib
from laq_jax import distributed
from tests import common

ROOT = pathlib.Path(__file__).resolve().parent.parent

_tmp = common.IsolatedEnv('laq_reliability_test_')


def setUpModule():
  _tmp.enter()


def tearDownModule():
  _tmp.exit()


def tiny_config(**overrides):
  """600 images, M = 10 (60 each), 30 iterations, chunks of 10, no f*."""
  config = configs.load('mnist_logreg', 'tiny')
  config.fstar = 'none'
  config.update(overrides)
  return config


def workdir(name):
  return pathlib.Path(_tmp.name, name)


def read_csv(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def subprocess_env(**extra):
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  env.update(extra)
  return env


def run_main(*args, timeout=300, **env):
  return subprocess.run([sys.executable, '-m', 'experiments.main', *args],
                        cwd=ROOT, env=subprocess_env(**env),
                        capture_output=True, text=True, timeout=timeout,
                        check=False)


def config_flags(config):
  """--config.FIELD=VALUE for every field: the command line of `config`."""
  return [f'--config.{k}={v}' for k, v in config.to_dict().items()]


def restore_final(directory, config, like):
  """The LoopState of the last checkpoint in `directory`."""
  with checkpoint.Checkpointer(directory, checkpoint.fingerprint(
      config.to_dict())) as ckpt:
    return ckpt.restore(like)


def assert_trees_equal(test, a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x), np.asarray(y)
    test.assertEqual(x.dtype, y.dtype)
    np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------------------
# Validation: every rule, before anything is loaded or compiled.

class ValidationTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('unknown_algorithm', dict(algo='adam'), "config.algo='adam'",
       "one of 'gd', 'qgd', 'lag', 'laq'"),
      ('unknown_split', dict(split='shuffled'), "config.split='shuffled'",
       "'contiguous'"),
      ('unknown_model', dict(model='resnet'), "config.model='resnet'",
       "'logreg', 'mlp'"),
      ('bits_below_1', dict(bits=0), 'config.bits=0', r'1\.\.32'),
      ('bits_above_32', dict(bits=33), 'config.bits=33', r'1\.\.32'),
      ('step_size_zero', dict(step_size=0.0), 'config.step_size=0.0', '> 0'),
      ('step_size_negative', dict(step_size=-0.5), 'config.step_size=-0.5',
       '> 0'),
      ('memory_below_1', dict(memory=0), 'config.memory=0', '>= 1'),
      ('max_staleness_negative', dict(max_staleness=-1),
       'config.max_staleness=-1', r'0\.\.'),
      ('batch_larger_than_shard', dict(algo='slaq', batch_size=61),
       'config.batch_size=61', 'shard size 60'),
      ('workers_do_not_divide_data', dict(num_workers=7, train_subset=0),
       'config.num_workers=7', 'divisor of the 60000'),
      ('subset_not_a_multiple_of_workers', dict(train_subset=605),
       'config.train_subset=605', 'multiple of num_workers=10'),
      ('checkpoint_not_a_multiple_of_chunk', dict(checkpoint_every=15),
       'config.checkpoint_every=15', 'multiple of eval_every=10.*10 or 20'),
      ('checkpoint_negative', dict(checkpoint_every=-10),
       'config.checkpoint_every=-10', '>= 0'),
  )
  def test_rule(self, overrides, field_and_value, allowed):
    config = tiny_config().to_dict()  # a dict: no ConfigDict type checks
    config.update(overrides)
    with self.assertRaisesRegex(build.ConfigError,
                                f'{field_and_value} is not allowed.*'
                                f'{allowed}'):
      build.validate_config(config)

  def test_workers_do_not_divide_devices(self):
    config = tiny_config(workers_on='devices').to_dict()
    with mock.patch.object(jax, 'device_count', return_value=4):
      with self.assertRaisesRegex(build.ConfigError,
                                  'num_workers=10 cannot be split over '
                                  'num_devices=4.*1, 2, 5, 10'):
        build.validate_config(config)
    with mock.patch.object(jax, 'device_count', return_value=5):
      build.validate_config(config)

  def test_the_tiny_config_is_valid(self):
    build.validate_config(tiny_config())
    build.validate_config(tiny_config(checkpoint_every=20))

  def test_nothing_runs_before_validation(self):
    out = workdir('never_created')
    with mock.patch.object(build, 'build') as built, \
        mock.patch.object(laq_jax, 'run_chunk') as run_chunk:
      with self.assertRaisesRegex(build.ConfigError, 'config.bits=40'):
        train.train_and_evaluate(tiny_config(bits=40), out)
    built.assert_not_called()
    run_chunk.assert_not_called()
    self.assertFalse(out.exists())


class DataFilesTest(absltest.TestCase):
  """Missing or corrupt MNIST files: a DataError before anything is written."""

  def test_missing_files(self):
    empty = workdir('empty_data')
    empty.mkdir()
    out = workdir('run_missing_data')
    with self.assertRaisesRegex(data_lib.DataError,
                                'does not hold the MNIST files: missing '
                                'train-images-idx3-ubyte'):
      train.train_and_evaluate(tiny_config(data_dir=str(empty)), out)
    self.assertEqual(list(out.glob('*')), [])

  def test_corrupt_file(self):
    source = pathlib.Path(common.mnist_dir())
    corrupt = workdir('corrupt_data')
    corrupt.mkdir()
    for name in data_lib.MNIST_FILES:
      if name != 'train-labels-idx1-ubyte':
        (corrupt / f'{name}.gz').symlink_to(source / f'{name}.gz')
    labels = bytearray(gzip.decompress(
        (source / 'train-labels-idx1-ubyte.gz').read_bytes()))
    labels[100] = (labels[100] + 1) % 10  # one wrong label, still valid IDX
    (corrupt / 'train-labels-idx1-ubyte').write_bytes(bytes(labels))
    out = workdir('run_corrupt_data')
    with self.assertRaisesRegex(data_lib.DataError,
                                'train-labels-idx1-ubyte is not the canonical'
                                '.*SHA-256'):
      train.train_and_evaluate(tiny_config(data_dir=str(corrupt)), out)
    self.assertEqual(list(out.glob('*')), [])


# ----------------------------------------------------------------------------
# Files: atomic writes, and a workdir holds one config's results.

_CRASH_MID_WRITE = r'''
import pathlib, resource, signal, sys
from experiments import train
path = pathlib.Path(sys.argv[1])
old = sys.argv[2]
train.atomic_write(path, old)
# The next write dies half-way: past 4 kB the kernel sends SIGXFSZ, which
# (Python ignores it by default) now kills the process on the spot.
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
if path.suffix == '.json':
  train.write_json(path, {'new': 'x' * 100_000})
else:
  train.atomic_write(path, 'step,loss\n' + '1,0.5\n' * 20_000)
'''


class AtomicWriteTest(parameterized.TestCase):

  @parameterized.parameters('metrics.csv', 'summary.json')
  def test_crash_mid_write_keeps_the_old_file(self, name):
    folder = workdir(f'atomic_{name}')
    folder.mkdir()
    old = ('{"old": true}\n' if name.endswith('json')
           else 'step,loss\n0,2.302585092994046\n')
    result = subprocess.run(
        [sys.executable, '-c', _CRASH_MID_WRITE, str(folder / name), old],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
        timeout=120, check=False)
    self.assertEqual(result.returncode, -signal.SIGXFSZ, result.stderr)
    self.assertEqual((folder / name).read_text(), old)
    # What the killed write left is a temporary beside it; a run cleans it.
    leftovers = list(folder.glob(f'.{name}.*.tmp'))
    self.assertLen(leftovers, 1)
    self.assertEqual(leftovers[0].stat().st_size, 4096)
    (folder / 'notes.txt').write_text('mine')
    train.prepare_workdir(folder, {}, overwrite=True)
    self.assertEqual(list(folder.glob('.*.tmp')), [])
    self.assertTrue((folder / 'notes.txt').exists())


class WorkdirTest(absltest.TestCase):

  def _foreign_run(self, name, **overrides):
    folder = workdir(name)
    folder.mkdir()
    train.write_json(folder / 'config.json', tiny_config(**overrides).to_dict())
    (folder / 'metrics.csv').write_text('step,loss\n0,1.0\n')
    (folder / 'checkpoints' / '10').mkdir(parents=True)
    (folder / 'notes.txt').write_text('not ours')
    return folder

  def test_another_config_is_refused(self):
    folder = self._foreign_run('foreign', bits=3, seed=5)
    with mock.patch.object(build, 'build') as built:
      with self.assertRaisesRegex(train.WorkdirError,
                                  "another config's results.*bits: 3 -> 4, "
                                  'seed: 5 -> 0.*--overwrite'):
        train.train_and_evaluate(tiny_config(), folder)
    built.assert_not_called()
    self.assertEqual((folder / 'metrics.csv').read_text(),
                     'step,loss\n0,1.0\n')

  def test_run_files_without_config_are_refused(self):
    folder = workdir('no_config')
    folder.mkdir()
    (folder / 'summary.json').write_text('{}')
    with self.assertRaisesRegex(train.WorkdirError,
                                'summary.json.*without a readable '
                                'config.json'):
      train.prepare_workdir(folder, tiny_config().to_dict())
    train.prepare_workdir(workdir('fresh'), tiny_config().to_dict())

  def test_overwrite_replaces_only_run_files(self):
    folder = self._foreign_run('overwritten', bits=3)
    config = tiny_config(num_iters=10, checkpoint_every=10)
    summary = train.train_and_evaluate(config, folder, overwrite=True)
    self.assertIsNone(summary['resumed_from'])  # not the foreign checkpoint
    self.assertEqual(json.loads((folder / 'config.json').read_text()),
                     config.to_dict())
    self.assertLen(read_csv(folder / 'metrics.csv'), 10)
    self.assertEqual((folder / 'notes.txt').read_text(), 'not ours')
    self.assertEqual(sorted(p.name for p in (folder / 'checkpoints').iterdir()
                            if not p.name.startswith('.')), ['10'])

  def test_launcher_refuses_then_overwrites(self):
    folder = self._foreign_run('cli_foreign', bits=3)
    args = ('--config=configs/mnist_logreg.py:tiny,fstar=none,num_iters=5',
            f'--workdir={folder}')
    refused = run_main(*args, timeout=120)
    self.assertEqual(refused.returncode, 1, refused.stderr[-2000:])
    self.assertIn("error: workdir '", refused.stderr)
    self.assertIn('--overwrite', refused.stderr)
    self.assertNotIn('Traceback', refused.stderr)
    done = run_main(*args, '--overwrite')
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    self.assertEqual(json.loads((folder / 'config.json').read_text())['bits'],
                     4)
    self.assertLen(read_csv(folder / 'metrics.csv'), 5)

  def test_launcher_passes_the_process_flags(self):
    result = run_main('--config=configs/mnist_logreg.py:tiny',
                      f'--workdir={workdir("never")}', '--num_processes=2',
                      '--process_id=5', '--coordinator_address=127.0.0.1:1',
                      timeout=120)
    self.assertEqual(result.returncode, 1, result.stderr[-2000:])
    self.assertIn('error: process_id=5 is not allowed', result.stderr)


# ----------------------------------------------------------------------------
# Checkpoints.

class CheckpointerTest(absltest.TestCase):

  def _state_after(self, steps):
    x, y = common.mnist_shards(4, 30, np.float64)
    spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), 4, memory=3)
    hyper = laq_jax.make_hyper('laq', dtype=jnp.float64)
    state, trace = laq_jax.run(spec, laq_jax.Data(jnp.asarray(x),
                                                  jnp.asarray(y)),
                               hyper, steps)
    return spec, hyper, state, trace

  def test_round_trip_keep_and_fingerprint(self):
    spec, hyper, state, trace = self._state_after(6)
    # Every field is non-trivial, so a field lost on the way would show.
    self.assertEqual(int(state.step), 6)
    self.assertTrue(np.all(np.asarray(state.rule.history_D) > 0))
    self.assertTrue(np.any(np.asarray(state.rule.clock_M) > 0))
    self.assertTrue(np.any(np.asarray(state.rule.last_error_M) > 0))
    folder = workdir('ckpt_unit')
    arrays = {'loss': trace.loss, 'sent': trace.sent_M, 'bits': trace.bits_M}
    like = laq_jax.init_state(spec, hyper, jnp.float64)
    with checkpoint.Checkpointer(folder, 'abc', keep=2) as ckpt:
      self.assertIsNone(ckpt.restore(like))
      for step in (2, 4, 6):
        ckpt.save(step, state, arrays, meta={'note': step, 'x': 0.1 + 0.2})
      self.assertEqual(ckpt.steps(), [4, 6])
      restored = ckpt.restore(like)
    self.assertEqual(restored.step, 6)
    assert_trees_equal(self, restored.state, state)
    self.assertIsInstance(restored.state, laq_jax.LoopState)
    for name, value in arrays.items():
      self.assertEqual(restored.arrays[name].dtype, value.dtype)
      np.testing.assert_array_equal(restored.arrays[name], value)
    self.assertEqual(restored.meta, {'note': 6, 'x': 0.1 + 0.2})
    with checkpoint.Checkpointer(folder, 'other') as ckpt:
      with self.assertRaisesRegex(checkpoint.CheckpointError,
                                  'saved by another config'):
        ckpt.restore(like)

  def test_fingerprint(self):
    a = tiny_config().to_dict()
    self.assertEqual(checkpoint.fingerprint(a),
                     checkpoint.fingerprint(dict(reversed(list(a.items())))))
    self.assertNotEqual(checkpoint.fingerprint(a), checkpoint.fingerprint(
        tiny_config(seed=1).to_dict()))


def _poll(predicate, process, timeout):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and process.poll() is None:
    if predicate():
      return True
    time.sleep(0.01)
  return predicate()


class ResumeTest(absltest.TestCase):

  def test_killed_run_resumes_bit_identically(self):
    # 24 chunks of 5 iterations, a checkpoint every 10: the process is
    # SIGKILLed as soon as its first checkpoint is complete.
    config = tiny_config(num_iters=120, eval_every=5, checkpoint_every=10)
    killed = workdir('killed')
    command = [sys.executable, '-m', 'experiments.main',
               '--config=configs/mnist_logreg.py:tiny', f'--workdir={killed}',
               *config_flags(config)]
    log = open(workdir('killed.log'), 'w+')
    self.addCleanup(log.close)
    process = subprocess.Popen(command, cwd=ROOT, env=subprocess_env(),
                               stdout=log, stderr=subprocess.STDOUT)
    try:
      first = _poll(lambda: (killed / 'checkpoints' / '10').is_dir(), process,
                    timeout=240)
      process.send_signal(signal.SIGKILL)
    finally:
      process.kill()
      process.wait()
    log.seek(0)
    self.assertTrue(first, log.read()[-3000:])
    self.assertEqual(process.returncode, -signal.SIGKILL)
    self.assertFalse((killed / 'summary.json').exists(),
                     'the run ended before it was killed')

    restarted = subprocess.run(command, cwd=ROOT, env=subprocess_env(),
                               capture_output=True, text=True, timeout=300,
                               check=False)
    self.assertEqual(restarted.returncode, 0, restarted.stderr[-3000:])
    summary = json.loads((killed / 'summary.json').read_text())
    self.assertIn('resuming from the checkpoint at step', restarted.stderr)
    self.assertTrue(10 <= summary['resumed_from'] < 120, summary)

    whole = workdir('never_killed')
    reference = train.train_and_evaluate(config, whole)
    self.assertIsNone(reference['resumed_from'])
    # The files: byte for byte (losses, accuracies, uploads, bits).
    self.assertEqual((killed / 'metrics.csv').read_text(),
                     (whole / 'metrics.csv').read_text())
    np.testing.assert_array_equal(np.load(killed / 'uploads.npy'),
                                  np.load(whole / 'uploads.npy'))
    self.assertLen(read_csv(killed / 'metrics.csv'), 120)
    for key in ('final_loss', 'final_test_accuracy', 'total_uploads',
                'total_bits', 'diverged'):
      self.assertEqual(summary[key], reference[key], key)
    # The final state: theta and every worker's memory, bit for bit.
    built = build.build(config)
    like = laq_jax.init_state(built.spec, built.hyper, built.dtype)
    got = restore_final(killed / 'checkpoints', config, like)
    want = restore_final(whole / 'checkpoints', config, like)
    self.assertEqual((got.step, want.step), (120, 120))
    assert_trees_equal(self, got.state, want.state)
    # Only the last few are kept.
    self.assertEqual(sorted(int(p.name) for p in
                            (killed / 'checkpoints').iterdir()
                            if p.name.isdigit()), [100, 110, 120])

  def test_same_config_resumes_a_finished_run(self):
    config = tiny_config(checkpoint_every=10)
    folder = workdir('finished')
    first = train.train_and_evaluate(config, folder)
    csv_text = (folder / 'metrics.csv').read_text()
    (folder / 'metrics.csv').unlink()
    with mock.patch.object(laq_jax, 'run_chunk') as run_chunk:
      again = train.train_and_evaluate(config, folder)
    run_chunk.assert_not_called()  # all 30 steps come from the checkpoint
    self.assertEqual(again['resumed_from'], 30)
    self.assertEqual((folder / 'metrics.csv').read_text(), csv_text)
    self.assertEqual(again['final_loss'], first['final_loss'])


_DEVICES_RUNS = r'''
import json, pathlib, sys
from unittest import mock
from absl import logging
logging.set_verbosity(logging.INFO)  # the progress lines
from laq_jax import distributed
distributed.maybe_initialize()  # from $LAQ_JAX_*: two processes, 1 CPU each
import jax
assert (jax.process_count(), jax.device_count()) == (2, 2), jax.devices()
import configs
from experiments import train
from laq_jax import checkpoint
out = pathlib.Path(sys.argv[1])
config = configs.load('mnist_logreg', 'tiny')
config.update(json.loads(sys.argv[2]))
train.train_and_evaluate(config, out / 'whole')
# Interrupted right after its first checkpoint (in both processes), then
# run again.
save = checkpoint.Checkpointer.save
def save_then_die(self, *args, **kwargs):
  save(self, *args, **kwargs)
  raise KeyboardInterrupt('killed after the first checkpoint')
with mock.patch.object(checkpoint.Checkpointer, 'save', save_then_die):
  try:
    train.train_and_evaluate(config, out / 'interrupted')
  except KeyboardInterrupt:
    pass
assert not (out / 'interrupted' / 'summary.json').exists()
summary = train.train_and_evaluate(config, out / 'interrupted')
assert summary['resumed_from'] == 10, summary
'''


def free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def run_two_processes(script, *args, timeout=300):
  """`python -c script *args` as processes 0 and 1 of one JAX run."""
  port = free_port()
  procs, logs = [], []
  try:
    for process_id in (0, 1):
      logs.append(tempfile.TemporaryFile('w+'))
      procs.append(subprocess.Popen(
          [sys.executable, '-c', script, *args], cwd=ROOT,
          env=subprocess_env(**{
              distributed.ENV_COORDINATOR: f'127.0.0.1:{port}',
              distributed.ENV_NUM_PROCESSES: '2',
              distributed.ENV_PROCESS_ID: str(process_id)}),
          stdout=logs[-1], stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    while (any(p.poll() is None for p in procs)
           and time.monotonic() < deadline):
      if any(p.poll() not in (None, 0) for p in procs):
        break  # its peer would wait on a collective until the timeout
      time.sleep(0.1)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
      p.wait()
  outputs = []
  for log in logs:
    log.seek(0)
    outputs.append(log.read())
    log.close()
  return [p.returncode for p in procs], outputs


class DeterminismTest(absltest.TestCase):
  """Same config and seed: identical uploads and bits, on any path."""

  # slaq draws minibatches (the PRNG matters); 64 images per worker keep
  # the quantizer off rounding ties (see laq_jax/sharding.py).
  OVERRIDES = dict(algo='slaq', batch_size=32, train_subset=640,
                   num_iters=20, eval_every=5, checkpoint_every=10,
                   fstar='none')

  def test_runs_and_paths_agree(self):
    config = tiny_config(**self.OVERRIDES)
    a = workdir('determinism_a')
    b = workdir('determinism_b')
    train.train_and_evaluate(config, a)
    train.train_and_evaluate(config, b)
    sent = np.load(a / 'uploads.npy')
    self.assertTrue(0 < sent.sum() < sent.size, 'the rule must skip some')
    rows_a, rows_b = read_csv(a / 'metrics.csv'), read_csv(b / 'metrics.csv')
    np.testing.assert_array_equal(np.load(b / 'uploads.npy'), sent)
    self.assertEqual(rows_a, rows_b)

    # The devices path over two processes (one CPU device each): the mesh,
    # collectives, checkpoints and files of a multi-host run.
    devices = workdir('determinism_devices')
    codes, logs = run_two_processes(
        _DEVICES_RUNS, str(devices),
        json.dumps({**self.OVERRIDES, 'workers_on': 'devices'}))
    self.assertEqual(codes, [0, 0], '\n'.join(log[-3000:] for log in logs))
    self.assertIn('step 20/20', logs[0])
    self.assertNotIn('step 20/20', logs[1])  # only process 0 reports
    for run in ('whole', 'interrupted'):
      np.testing.assert_array_equal(np.load(devices / run / 'uploads.npy'),
                                    sent, run)
      rows = read_csv(devices / run / 'metrics.csv')
      self.assertEqual([r['bits'] for r in rows],
                       [r['bits'] for r in rows_a], run)
      np.testing.assert_allclose([float(r['loss']) for r in rows],
                                 [float(r['loss']) for r in rows_a],
                                 rtol=1e-10)
    # Resumed on the devices path: bit-identical to its uninterrupted run.
    self.assertEqual((devices / 'interrupted' / 'metrics.csv').read_text(),
                     (devices / 'whole' / 'metrics.csv').read_text())
    built = build.build(config)
    like = laq_jax.init_state(built.spec, built.hyper, built.dtype)
    devices_config = tiny_config(**self.OVERRIDES, workers_on='devices')
    assert_trees_equal(
        self,
        restore_final(devices / 'interrupted' / 'checkpoints',
                      devices_config, like).state,
        restore_final(devices / 'whole' / 'checkpoints', devices_config,
                      like).state)


# ----------------------------------------------------------------------------
# Divergence.

# GD with alpha * M * lam = 1 * 10 * 10: theta grows ~99x per step, and the
# float32 loss overflows after about ten steps.
DIVERGING = dict(algo='gd', precision='float32', step_size=1.0, l2=10.0,
                 eval_every=5, checkpoint_every=5)


def library_losses(num_steps):
  """The same run through the library alone, on shards built here."""
  x, y = common.mnist_shards(10, 60, np.float32)
  hyper = laq_jax.make_hyper('gd', dtype=jnp.float32, step_size=1.0, l2=10.0)
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), 10)
  _, trace = laq_jax.run(spec, laq_jax.Data(jnp.asarray(x), jnp.asarray(y)),
                         hyper, num_steps)
  return trace.loss


class DivergenceTest(absltest.TestCase):

  def test_stops_keeps_metrics_and_exits_nonzero(self):
    loss = library_losses(30)
    bad = np.flatnonzero(~np.isfinite(loss))
    self.assertNotEmpty(bad)
    k = int(bad[0])
    self.assertTrue(5 < k < 25, k)  # in a later chunk, not the first
    folder = workdir('diverged')
    result = run_main('--config=configs/mnist_logreg.py:tiny',
                      f'--workdir={folder}',
                      *config_flags(tiny_config(**DIVERGING)))
    self.assertEqual(result.returncode, 3, result.stderr[-3000:])
    self.assertIn(f'error: diverged: the loss f(theta^k) is', result.stderr)
    self.assertIn(f'at iteration k={k}', result.stderr)
    self.assertNotIn('Traceback', result.stderr)
    summary = json.loads((folder / 'summary.json').read_text())
    self.assertIs(summary['diverged'], True)
    self.assertEqual(summary['diverged_at'], k)
    self.assertEqual(summary['iterations'], k + 1)
    rows = read_csv(folder / 'metrics.csv')
    self.assertEqual([int(r['step']) for r in rows], list(range(k + 1)))
    got = np.array([float(r['loss']) for r in rows])
    np.testing.assert_allclose(got[:k], loss[:k], rtol=1e-5)
    self.assertFalse(np.isfinite(got[k]))
    self.assertEqual(np.load(folder / 'uploads.npy').shape, (k + 1, 10))
    for name in train.FIGURES.values():
      self.assertTrue((folder / name).is_file(), name)
    # The run stopped in the chunk of step k: no checkpoint after it.
    steps = [int(p.name) for p in (folder / 'checkpoints').iterdir()
             if p.name.isdigit()]
    self.assertEqual(max(steps), k // 5 * 5)

  def test_final_parameters_diverge(self):
    k = int(np.flatnonzero(~np.isfinite(library_losses(30)))[0])
    # Stop right before: every f(theta^0..k-1) is finite, f(theta^k) is not.
    summary = train.train_and_evaluate(
        tiny_config(**{**DIVERGING, 'num_iters': k, 'checkpoint_every': 0}),
        workdir('diverged_at_end'))
    self.assertEqual((summary['diverged'], summary['diverged_at']), (True, k))
    self.assertIsNone(summary['final_loss'])
    self.assertLen(read_csv(workdir('diverged_at_end') / 'metrics.csv'), k)

  def test_finite_run_is_not_marked(self):
    summary = train.train_and_evaluate(tiny_config(num_iters=10),
                                       workdir('finite'))
    self.assertEqual((summary['diverged'], summary['diverged_at']),
                     (False, None))


# ----------------------------------------------------------------------------
# Sweeps: resume, and divergence marks only the diverging points.

def sweep_config():
  """4 points (gd/laq x a converging and a diverging step size), 2 batches."""
  from configs import sweep_bits_xi  # pylint: disable=g-import-not-at-top
  config = sweep_bits_xi.get_config('tiny')
  config.update(fstar='none', precision='float32', l2=10.0, eval_every=5,
                checkpoint_every=10, sweep_batch_size=3)
  config.sweep = {'algo': ['gd', 'laq'], 'step_size': [0.001, 1.0]}
  return config


class SweepTest(absltest.TestCase):

  def test_resume_and_divergence(self):
    from experiments import sweep as sweep_main  # pylint: disable=g-import-not-at-top
    config = sweep_config()
    whole = workdir('sweep_whole')
    rows = sweep_main.sweep_and_evaluate(config, whole)

    # Only the diverging points are marked; the others ran all 30 steps.
    k = int(np.flatnonzero(~np.isfinite(library_losses(30)))[0])
    by_point = {(r['algo'], r['step_size']): r for r in rows}
    gd = by_point['gd', 1.0]
    self.assertEqual((gd['diverged'], gd['diverged_at']), (True, k))
    self.assertEqual(gd['iterations'], k + 1)
    self.assertEqual(gd['total_uploads'], (k + 1) * 10)  # gd: all upload
    self.assertIsNone(gd['final_loss'])
    self.assertIsNone(gd['final_test_accuracy'])
    self.assertTrue(by_point['laq', 1.0]['diverged'])
    for algo in ('gd', 'laq'):
      row = by_point[algo, 0.001]
      self.assertEqual((row['diverged'], row['diverged_at']), (False, None))
      self.assertEqual(row['iterations'], 30)
      self.assertTrue(np.isfinite(row['final_loss']))
      self.assertGreater(row['final_test_accuracy'], 0.5)
    table = sweep_main.read_results(whole / 'results.csv')
    self.assertEqual([r['diverged_at'] for r in table],
                     ['', str(k), '', str(by_point['laq', 1.0][
                         'diverged_at'])])
    self.assertEqual(json.loads((whole / 'sweep.json').read_text())[
        'points_diverged'], [1, 3])

    # Interrupted after its 4th checkpoint (batch 2 of 2, iteration 10),
    # then run again: it resumes there and ends bit-identical.
    interrupted = workdir('sweep_interrupted')
    save, saved = checkpoint.Checkpointer.save, []

    def save_then_die(self, step, *args, **kwargs):
      save(self, step, *args, **kwargs)
      saved.append(step)
      if len(saved) == 4:
        raise KeyboardInterrupt('killed after a checkpoint')

    with mock.patch.object(checkpoint.Checkpointer, 'save', save_then_die):
      with self.assertRaises(KeyboardInterrupt):
        sweep_main.sweep_and_evaluate(config, interrupted)
    self.assertEqual(saved, [10, 20, 30, 40])  # batch b, step k: 30 b + k
    self.assertFalse((interrupted / 'results.csv').exists())
    with mock.patch.object(laq_jax.loop, 'run_chunk',
                           wraps=laq_jax.loop.run_chunk) as run_chunk:
      sweep_main.sweep_and_evaluate(config, interrupted)
    self.assertEqual(run_chunk.call_count, 4)  # batch 2's last 20 steps
    info = json.loads((interrupted / 'sweep.json').read_text())
    self.assertEqual(info['resumed_from_step'], 40)
    self.assertEqual((interrupted / 'results.csv').read_text(),
                     (whole / 'results.csv').read_text())
    got, want = (np.load(d / 'curves.npz') for d in (interrupted, whole))
    self.assertEqual(sorted(got.files), sorted(want.files))
    for name in want.files:
      np.testing.assert_array_equal(got[name], want[name], name)

    # Another config in the same workdir: refused before anything runs.
    other = sweep_config()
    other.seed = 1
    with self.assertRaisesRegex(train.WorkdirError, 'seed: 0 -> 1'):
      sweep_main.sweep_and_evaluate(other, whole)


if __name__ == '__main__':
  absltest.main()
