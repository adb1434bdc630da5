"""Integration tests of resuming: a killed run or sweep ends bit-identical.

A launcher process SIGKILLed right after its first checkpoint, run again,
writes the same files (byte for byte) and reaches the same final state (bit
for bit) as a run that never stopped; a finished run is resumed without
running a step; a sweep interrupted after a checkpoint resumes there, marks
only its diverging points and refuses another config. The same config and
seed give the same uploads on every path: twice in one process, and on the
devices path over two processes (one CPU device each), also when resumed.
"""

import errno
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from unittest import mock

from absl.testing import absltest
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs import sweep_bits_xi
from experiments.run import build
from experiments.run import grid
from experiments.run import outputs
from experiments.run import train
import laq_jax
from laq_jax import checkpoint
from laq_jax import distributed
from laq_jax import metrics
from tests import common
from tests import events_test

pytestmark = pytest.mark.slow
# Killed runs (launcher processes) against runs in this process, bit for
# bit: compiled as the launchers compile (tests/conftest.py).
XLA_DEFAULTS = True

ROOT = pathlib.Path(common.ROOT)

_env = common.IsolatedEnv('laq_resume_test_')


def setUpModule():
  _env.enter()


def tearDownModule():
  _env.exit()


def workdir(name):
  return pathlib.Path(_env.name, name)


def subprocess_env(**extra):
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  for name in (distributed.ENV_COORDINATOR, distributed.ENV_NUM_PROCESSES,
               distributed.ENV_PROCESS_ID):
    env.pop(name, None)
  env.update(extra)
  return env


def config_flags(config):
  """--config.FIELD=VALUE for every field: the command line of `config`."""
  return [f'--config.{k}={v}' for k, v in config.to_dict().items()
          if v is not None]  # (None: a network field at its profile's)


def restore_final(directory, config, like):
  """The last checkpoint in `directory` of the run of `config`."""
  with checkpoint.Checkpointer(directory, checkpoint.fingerprint(
      config.to_dict())) as ckpt:
    return ckpt.restore(like)


def checkpoint_steps(directory):
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _poll(predicate, process, timeout):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and process.poll() is None:
    if predicate():
      return True
    time.sleep(0.01)
  return predicate()


# Two kills: the second resumes a run that was itself resumed (a third
# proves nothing the second does not; each costs a process, ~8 s).
KILLS = 2


def kill_randomly(test, command, checkpoints, log_path, done, kills=KILLS,
                  seed=0):
  """Runs `command` and SIGKILLs it `kills` times at random moments: each
  time once it has saved a checkpoint past the last one seen, after a random
  delay of up to 0.5 s (seeded): in a chunk, a checkpoint write or a file
  write. Returns the delays."""
  rng = np.random.default_rng(seed)
  steps = lambda: (checkpoint_steps(checkpoints)  # noqa: E731
                   if checkpoints.is_dir() else [])
  delays, seen = [], -1
  log = open(log_path, 'w+')
  test.addCleanup(log.close)
  for _ in range(kills):
    process = subprocess.Popen(command, cwd=ROOT, env=subprocess_env(),
                               stdout=log, stderr=subprocess.STDOUT)
    try:
      progressed = _poll(lambda: bool(steps()) and steps()[-1] > seen,
                         process, timeout=240)
      delays.append(float(rng.uniform(0, 0.5)))
      time.sleep(delays[-1])
      process.send_signal(signal.SIGKILL)
    finally:
      process.kill()
      process.wait()
    log.seek(0)
    test.assertTrue(progressed, log.read()[-3000:])
    test.assertEqual(process.returncode, -signal.SIGKILL)
    test.assertFalse(done(), 'the run ended before it was killed')
    seen = max(steps() or [seen])
  return delays


class ResumeTest(absltest.TestCase):

  def test_killed_run_resumes_bit_identically(self):
    # 60 chunks of 5 iterations, a checkpoint every 10: the process is
    # SIGKILLed KILLS times at random moments (each after one more
    # checkpoint, then a random delay: mid-chunk, mid-checkpoint-write or
    # mid-file), run again each time, and then run to the end.
    config = common.tiny_config(num_iters=300, eval_every=5,
                                checkpoint_every=10)
    killed = workdir('killed')
    command = [sys.executable, '-m', 'experiments.main',
               '--config=configs/mnist_logreg.py:tiny', f'--workdir={killed}',
               *config_flags(config)]
    kill_randomly(self, command, killed / 'checkpoints', workdir('killed.log'),
                  done=lambda: (killed / 'summary.json').exists())

    restarted = subprocess.run(command, cwd=ROOT, env=subprocess_env(),
                               capture_output=True, text=True, timeout=300,
                               check=False)
    self.assertEqual(restarted.returncode, 0, restarted.stderr[-3000:])
    summary = json.loads((killed / 'summary.json').read_text())
    self.assertIn('resuming from the checkpoint at step', restarted.stderr)
    self.assertTrue(10 <= summary['resumed_from'] < 300, summary)

    whole = workdir('never_killed')
    reference = train.train_and_evaluate(config, whole)
    self.assertIsNone(reference['resumed_from'])
    # The files: byte for byte (losses, accuracies, uploads, bits).
    self.assertEqual((killed / 'metrics.csv').read_text(),
                     (whole / 'metrics.csv').read_text())
    np.testing.assert_array_equal(np.load(killed / 'uploads.npy'),
                                  np.load(whole / 'uploads.npy'))
    np.testing.assert_array_equal(np.load(killed / 'bits.npy'),
                                  np.load(whole / 'bits.npy'))
    self.assertLen(common.read_csv(killed / 'metrics.csv'), 300)
    for key in ('final_loss', 'final_test_accuracy', 'total_uploads',
                'total_bits', 'diverged', 'paper_reference',
                'last_grad_norm_sq'):
      self.assertEqual(summary[key], reference[key], key)
    # The final state: theta and every worker's memory, bit for bit.
    built = build.build(config)
    like = laq_jax.init_state(built.spec, built.hyper, built.dtype)
    got = restore_final(killed / 'checkpoints', config, like)
    want = restore_final(whole / 'checkpoints', config, like)
    self.assertEqual((got.step, want.step), (300, 300))
    common.assert_trees_equal(self, got.state, want.state)
    # Only the last few are kept.
    self.assertEqual(checkpoint_steps(killed / 'checkpoints'), [280, 290, 300])
    # TensorBoard shows the same curves: the steps the killed process wrote
    # after its checkpoint are replaced by the resumed run's.
    self.assertEqual(events_test.read(killed / 'tensorboard'),
                     events_test.read(whole / 'tensorboard'))

  def test_same_config_resumes_a_finished_run(self):
    config = common.tiny_config(checkpoint_every=10)
    where = workdir('finished')
    first = train.train_and_evaluate(config, where)
    csv_text = (where / 'metrics.csv').read_text()
    curves = events_test.read(where / 'tensorboard')
    (where / 'metrics.csv').unlink()
    with mock.patch.object(laq_jax.loop, 'run_chunk') as run_chunk:
      again = train.train_and_evaluate(config, where)
    run_chunk.assert_not_called()  # all 30 steps come from the checkpoint
    self.assertEqual(again['resumed_from'], 30)
    self.assertEqual((where / 'metrics.csv').read_text(), csv_text)
    for key in ('final_loss', 'final_test_accuracy', 'total_uploads',
                'total_bits'):
      self.assertEqual(again[key], first[key], key)
    # TensorBoard: the same curves (theta^T's figures written again).
    self.assertEqual(events_test.read(where / 'tensorboard'), curves)

  def test_overwrite_starts_over(self):
    config = common.tiny_config(num_iters=10, checkpoint_every=10)
    where = workdir('started_over')
    train.train_and_evaluate(config, where)
    with mock.patch.object(laq_jax.loop, 'run_chunk',
                           wraps=laq_jax.loop.run_chunk) as run_chunk:
      summary = train.train_and_evaluate(config, where, overwrite=True)
    self.assertEqual(run_chunk.call_count, 1)
    self.assertIsNone(summary['resumed_from'])


# ----------------------------------------------------------------------------
# Determinism, on every path.

_DEVICES_RUNS = r'''
import json, pathlib, sys
from unittest import mock
from absl import logging
logging.set_verbosity(logging.INFO)  # the progress lines
from laq_jax import distributed
distributed.maybe_initialize()  # from $LAQ_JAX_*: two processes, 1 CPU each
import jax
jax.config.update('jax_enable_x64', True)  # as the launchers do
assert (jax.process_count(), jax.device_count()) == (2, 2), jax.devices()
import configs
from experiments.run import train
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


def run_two_processes(script, *args, timeout=300):
  """`python -c script *args` as processes 0 and 1 of one JAX run."""
  port = common.free_port()
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
  outputs_ = []
  for log in logs:
    log.seek(0)
    outputs_.append(log.read())
    log.close()
  return [p.returncode for p in procs], outputs_


class DeterminismTest(absltest.TestCase):
  """Same config and seed: identical uploads and bits, on any path."""

  # slaq draws minibatches (the PRNG matters); 64 images per worker keep
  # the quantizer off rounding ties (see laq_jax/devices/sharding.py).
  OVERRIDES = dict(algo='slaq', batch_size=32, train_subset=640,
                   num_iters=20, eval_every=5, checkpoint_every=10,
                   fstar='none')

  def test_runs_and_paths_agree(self):
    config = common.tiny_config(**self.OVERRIDES)
    a = workdir('determinism_a')
    b = workdir('determinism_b')
    train.train_and_evaluate(config, a)
    train.train_and_evaluate(config, b)
    sent = np.load(a / 'uploads.npy')
    self.assertTrue(0 < sent.sum() < sent.size, 'the rule must skip some')
    rows_a, rows_b = common.read_csv(a / 'metrics.csv'), common.read_csv(b / 'metrics.csv')
    np.testing.assert_array_equal(np.load(b / 'uploads.npy'), sent)
    self.assertEqual(rows_a, rows_b)
    # Another seed draws other minibatches: the check above can fail.
    other = workdir('determinism_seed1')
    train.train_and_evaluate(common.tiny_config(**self.OVERRIDES, seed=1), other)
    self.assertNotEqual(common.read_csv(other / 'metrics.csv'), rows_a)

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
      rows = common.read_csv(devices / run / 'metrics.csv')
      self.assertEqual([r['bits'] for r in rows],
                       [r['bits'] for r in rows_a], run)
      # (empty cells: iterations that do not log the loss, loss_every)
      self.assertEqual([r['loss'] == '' for r in rows],
                       [r['loss'] == '' for r in rows_a], run)
      np.testing.assert_allclose(
          [float(r['loss']) for r in rows if r['loss']],
          [float(r['loss']) for r in rows_a if r['loss']], rtol=1e-10)
    # Resumed on the devices path: bit-identical to its uninterrupted run.
    self.assertEqual((devices / 'interrupted' / 'metrics.csv').read_text(),
                     (devices / 'whole' / 'metrics.csv').read_text())
    built = build.build(config)
    like = laq_jax.init_state(built.spec, built.hyper, built.dtype)
    devices_config = common.tiny_config(**self.OVERRIDES, workers_on='devices')
    common.assert_trees_equal(
        self,
        restore_final(devices / 'interrupted' / 'checkpoints',
                      devices_config, like).state,
        restore_final(devices / 'whole' / 'checkpoints', devices_config,
                      like).state)


# ----------------------------------------------------------------------------
# Sweeps: resume, and divergence marks only the diverging points.

def library_losses(num_steps):
  """GD at alpha = 1, lam = 10 in float32 through the library alone."""
  x, y = common.mnist_shards(10, 60, np.float32)
  hyper = laq_jax.make_hyper('gd', dtype=jnp.float32, step_size=1.0, l2=10.0)
  spec = laq_jax.RunSpec(laq_jax.get_problem('logreg'), 10)
  _, trace = laq_jax.run(spec, laq_jax.Data(jnp.asarray(x), jnp.asarray(y)),
                         hyper, num_steps)
  return trace.loss


def sweep_config():
  """4 points (gd/laq x a converging and a diverging step size), 2 batches."""
  config = sweep_bits_xi.get_config('tiny')
  config.update(fstar='none', precision='float32', l2=10.0, eval_every=5,
                checkpoint_every=10, sweep_batch_size=3)
  config.sweep = ml_collections.ConfigDict(
      {'algo': ['gd', 'laq'], 'step_size': [0.001, 1.0]})
  return config


class SweepTest(absltest.TestCase):

  def test_resume_and_divergence(self):
    config = sweep_config()
    whole = workdir('sweep_whole')
    rows = grid.sweep_and_evaluate(config, whole)

    # Only the diverging points are marked; the others ran all 30 steps.
    # (the one rule: the first logged loss NaN/inf or above 10x f(theta^0))
    k = metrics.diverged_at(library_losses(30), np.nan)
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
    table = outputs.read_results(whole / 'results.csv')
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
        grid.sweep_and_evaluate(config, interrupted)
    self.assertEqual(saved, [10, 20, 30, 40])  # batch b, step k: 30 b + k
    self.assertFalse((interrupted / 'results.csv').exists())
    with mock.patch.object(laq_jax.loop, 'run_chunk',
                           wraps=laq_jax.loop.run_chunk) as run_chunk:
      grid.sweep_and_evaluate(config, interrupted)
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
    with self.assertRaisesRegex(outputs.WorkdirError, 'seed: 0 -> 1'):
      grid.sweep_and_evaluate(other, whole)

  def test_killed_sweep_resumes_bit_identically(self):
    # Two batches of 200 iterations, a checkpoint every 10, SIGKILLed KILLS
    # times at random moments, run again each time, then to the end.
    config = sweep_config()
    config.update(num_iters=200)
    killed = workdir('sweep_killed')
    command = [sys.executable, '-m', 'experiments.sweep',
               '--config=configs/sweep_bits_xi.py:tiny',
               f'--workdir={killed}', *config_flags(config)]
    kill_randomly(self, command, killed / 'checkpoints',
                  workdir('sweep_killed.log'), seed=1,
                  done=lambda: (killed / 'results.csv').exists())
    restarted = subprocess.run(command, cwd=ROOT, env=subprocess_env(),
                               capture_output=True, text=True, timeout=300,
                               check=False)
    self.assertEqual(restarted.returncode, 0, restarted.stderr[-3000:])
    self.assertIn('resuming from the checkpoint at step', restarted.stderr)
    # Its progress counts the checkpoint's work as done: the 4 points run
    # in batches of 3 and 1, so batch b (from 1) at iteration i has done
    # the batches before it and i iterations of its own points.
    resumed = re.search(r'at step (\d+) \(batch (\d+), iteration (\d+)',
                        restarted.stderr)
    sizes = (3, 1)
    batch = int(resumed[2]) - 1
    before = sum(sizes[:batch]) * 200 + sizes[batch] * int(resumed[3])
    counts = [int(n) for n in re.findall(r'point-steps (\d+)/',
                                         restarted.stderr)]
    self.assertTrue(counts and counts[0] > before, (before, counts))
    self.assertEqual(counts[-1], 4 * 200)
    whole = workdir('sweep_never_killed')
    grid.sweep_and_evaluate(config, whole)
    self.assertEqual((killed / 'results.csv').read_text(),
                     (whole / 'results.csv').read_text())
    got, want = (np.load(d / 'curves.npz') for d in (killed, whole))
    self.assertEqual(sorted(got.files), sorted(want.files))
    for name in want.files:
      np.testing.assert_array_equal(got[name], want[name], name)


# ----------------------------------------------------------------------------
# A full disk, or a failing write: the previous checkpoint and files stay
# whole, the launcher says so in one line, and the same command resumes.

def _without_orbax_records(stderr: str) -> str:
  """stderr without the log records orbax's own threads and tasks write
  when the disk fills (laq_jax.checkpoint drops their tracebacks; which
  one meets the full disk first is timing: checkpoint_test checks the
  filter): a record starts at an absl header and runs to the next."""
  kept, skip = [], False
  for line in stderr.splitlines():
    if re.match(r'^[IWEF]\d{4} ', line):
      skip = ('future.py' in line.split(']')[0] or 'orbax' in line
              or 'Task exception was never retrieved' in line)
    if not skip:
      kept.append(line)
  return '\n'.join(kept)


def _mount_tmpfs(path, size):
  """Mounts a tmpfs of `size` at `path`; False where this user cannot."""
  path.mkdir(parents=True, exist_ok=True)
  done = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}',
                         'tmpfs', str(path)], capture_output=True, check=False)
  return done.returncode == 0


class FullDiskTest(absltest.TestCase):

  def test_full_disk_keeps_the_checkpoint_and_resumes(self):
    disk = workdir('disk')
    if not _mount_tmpfs(disk, '520k'):
      self.skipTest('cannot mount a tmpfs here (needs root); the failing '
                    'write test below covers the same path')
    self.addCleanup(subprocess.run, ['umount', '-l', str(disk)], check=False)
    config = common.tiny_config(checkpoint_every=10)
    where = disk / 'run'
    command = [sys.executable, '-m', 'experiments.main',
               '--config=configs/mnist_logreg.py:tiny', f'--workdir={where}',
               '--config.checkpoint_every=10']
    full = subprocess.run(command, cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300,
                          check=False)
    # One line, after the progress lines: what failed, that the previous
    # checkpoint is intact, what to do.
    self.assertEqual(full.returncode, 1, full.stderr[-3000:])
    self.assertNotIn('Traceback', _without_orbax_records(full.stderr))
    # (orbax's own threads may still log after it: the line is ours alone)
    errors = [line for line in full.stderr.splitlines()
              if line.startswith('error: ')]
    self.assertLen(errors, 1, full.stderr[-3000:])
    self.assertEqual(full.stderr.count('error: '), 1, full.stderr[-3000:])
    self.assertRegex(errors[0], r'^error: could not (save the checkpoint|'
                     r'write).*No space left on device.*intact.*same command')
    steps = checkpoint_steps(where / 'checkpoints')
    self.assertTrue(steps, full.stderr[-3000:])
    self.assertFalse(list((where / 'checkpoints').glob('*tmp*')))
    self.assertFalse((where / 'summary.json').exists())
    built = build.build(config)
    like = laq_jax.init_state(built.spec, built.hyper, built.dtype)
    self.assertEqual(restore_final(where / 'checkpoints', config, like).step,
                     steps[-1])
    # Space freed: the same command resumes and ends as a run that had it.
    subprocess.run(['mount', '-o', 'remount,size=16m', str(disk)], check=True)
    again = subprocess.run(command, cwd=ROOT, env=subprocess_env(),
                           capture_output=True, text=True, timeout=300,
                           check=False)
    self.assertEqual(again.returncode, 0, again.stderr[-3000:])
    self.assertIn(f'resuming from the checkpoint at step {steps[-1]}',
                  again.stderr)
    whole = workdir('disk_whole')
    train.train_and_evaluate(config, whole)
    for name in ('metrics.csv', 'uploads.npy', 'bits.npy'):
      self.assertEqual((where / name).read_bytes(),
                       (whole / name).read_bytes(), name)
    self.assertEqual(events_test.read(where / 'tensorboard'),
                     events_test.read(whole / 'tensorboard'))

  def test_failing_checkpoint_write_in_a_sweep(self):
    config = sweep_config()
    failing = workdir('sweep_failing_write')
    save, calls = checkpoint.ocp.CheckpointManager.save, []

    def third_fails(manager, step, *args, **kwargs):
      calls.append(step)
      if len(calls) == 3:  # half written, then the disk is full
        partial = pathlib.Path(manager.directory) / (
            f'{step}.orbax-checkpoint-tmp-1')
        partial.mkdir(parents=True)
        (partial / 'junk').write_bytes(b'\0' * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
      return save(manager, step, *args, **kwargs)

    with mock.patch.object(checkpoint.ocp.CheckpointManager, 'save',
                           third_fails):
      with self.assertRaisesRegex(
          checkpoint.CheckpointError,
          r'could not save the checkpoint of step 30 .*No space left on '
          r'device; the previous checkpoint \(step 20\) is intact'):
        grid.sweep_and_evaluate(config, failing)
    self.assertEqual(checkpoint_steps(failing / 'checkpoints'), [10, 20])
    self.assertFalse(list((failing / 'checkpoints').glob('*tmp*')))
    self.assertFalse((failing / 'results.csv').exists())
    grid.sweep_and_evaluate(config, failing)  # resumes at step 20
    self.assertEqual(json.loads((failing / 'sweep.json').read_text())[
        'resumed_from_step'], 20)
    whole = workdir('sweep_failing_whole')
    grid.sweep_and_evaluate(config, whole)
    self.assertEqual((failing / 'results.csv').read_text(),
                     (whole / 'results.csv').read_text())
    got, want = (np.load(d / 'curves.npz') for d in (failing, whole))
    for name in want.files:
      np.testing.assert_array_equal(got[name], want[name], name)


if __name__ == '__main__':
  absltest.main()
