"""Tests of experiments/run/outputs.py: atomic files, the workdir, CSVs read
back.

A write killed half-way (a real process, killed by the kernel) leaves the old
file whole; a workdir holds one config's results; metrics.csv and
results.csv are checked against the arrays they were made from (NumPy sums
written out here) and read back exactly.
"""

import errno
import json
import os
import pathlib
import signal
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax.record import Record


def rec(loss, grad, sent, bits, bits_down, time_s=None):
  extra = {} if time_s is None else dict(
      time_s=time_s, slowest=np.arange(len(time_s)) % sent.shape[1],
      slowdown_M=np.ones(sent.shape))
  return Record.from_arrays(loss=loss, grad_norm_sq=grad, sent_M=sent,
                            bits_M=bits, bits_down_M=bits_down, **extra)

from experiments.run import outputs
from tests import common

METRICS_COLUMNS = ('step', 'loss', 'residual', 'paper_residual',
                   'grad_norm_sq', 'uploads', 'bits', 'bits_down',
                   'cum_uploads', 'cum_bits', 'cum_bits_down',
                   'test_accuracy', 'time_s', 'cum_time_s', 'slowest')
RUN_FILES = ('config.json', 'metrics.csv', 'uploads.npy', 'bits.npy',
             'slowdown.npy', 'participants.npy', 'participation_raster.png',
             'grads.npy', 'bits_down.npy', 'summary.json',
             'loss_vs_iterations.png', 'loss_vs_uploads.png',
             'loss_vs_bits.png', 'loss_vs_total_bits.png',
             'loss_vs_time.png',
             'grad_norm_vs_iterations.png',
             'grad_norm_vs_uploads.png', 'grad_norm_vs_bits.png',
             'upload_raster.png')

_tmp = None


def setUpModule():
  global _tmp
  _tmp = tempfile.TemporaryDirectory(prefix='laq_outputs_test_')


def tearDownModule():
  _tmp.cleanup()


def folder(name):
  path = pathlib.Path(_tmp.name, name)
  path.mkdir()
  return path


_CRASH_MID_WRITE = r'''
import pathlib, resource, signal
from experiments.run import outputs
path = pathlib.Path(PATH)
old = OLD
outputs.atomic_write(path, old)
# The next write dies half-way: past 4 kB the kernel sends SIGXFSZ, which
# (Python ignores it by default) now kills the process on the spot.
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
if path.suffix == '.json':
  outputs.write_json(path, {'new': 'x' * 100_000})
else:
  outputs.atomic_write(path, 'step,loss\n' + '1,0.5\n' * 20_000)
'''


class AtomicWriteTest(parameterized.TestCase):

  @parameterized.parameters('metrics.csv', 'summary.json')
  def test_crash_mid_write_keeps_the_old_file(self, name):
    where = folder(f'atomic_{name}')
    old = ('{"old": true}\n' if name.endswith('json')
           else 'step,loss\n0,2.302585092994046\n')
    script = _CRASH_MID_WRITE.replace('PATH', repr(str(where / name))
                                      ).replace('OLD', repr(old))
    result = common.run_script(script, JAX_PLATFORMS='cpu')
    self.assertEqual(result.returncode, -signal.SIGXFSZ, result.stderr)
    self.assertEqual((where / name).read_text(), old)
    # What the killed write left is a temporary beside it; a run cleans it.
    leftovers = list(where.glob(f'.{name}.*.tmp'))
    self.assertLen(leftovers, 1)
    self.assertEqual(leftovers[0].stat().st_size, 4096)
    (where / 'notes.txt').write_text('mine')
    outputs.prepare_workdir(where, {}, overwrite=True)
    self.assertEqual(list(where.glob('.*.tmp')), [])
    self.assertTrue((where / 'notes.txt').exists())

  def test_failed_write_leaves_no_temporary(self):
    where = folder('atomic_failed')
    outputs.atomic_write(where / 'a.txt', 'old')
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with mock.patch.object(os, 'replace', side_effect=full):
      with self.assertRaisesRegex(
          outputs.WorkdirError, r'could not write .*a\.txt: No space left on '
          'device; its previous content is intact. Free space'):
        outputs.atomic_write(where / 'a.txt', 'new')
      with self.assertRaisesRegex(outputs.WorkdirError, 'b.txt.*it was not '
                                  'written'):
        outputs.atomic_write(where / 'b.txt', 'new')
    self.assertEqual((where / 'a.txt').read_text(), 'old')
    self.assertEqual(sorted(p.name for p in where.iterdir()), ['a.txt'])

  def test_mode_is_that_of_open(self):
    where = folder('atomic_mode')
    with open(where / 'plain.txt', 'w') as f:
      f.write('x')
    outputs.atomic_write(where / 'sub' / 'atomic.txt', b'x')  # makes sub/
    self.assertEqual((where / 'sub' / 'atomic.txt').stat().st_mode & 0o777,
                     (where / 'plain.txt').stat().st_mode & 0o777)

  def test_writers_round_trip(self):
    where = folder('writers')
    outputs.write_json(where / 'a.json', {'x': 0.1 + 0.2, 'n': None})
    self.assertEqual(json.loads((where / 'a.json').read_text()),
                     {'x': 0.1 + 0.2, 'n': None})
    # Strict JSON: a value that is not a finite number is null (Python's
    # Infinity / NaN literals break strict parsers), NumPy scalars plain.
    outputs.write_json(where / 'b.json', {
        'inf': float('inf'), 'nested': [np.nan, 1.5, {'m': -np.inf}],
        'f32': np.float32(2.5), 'i64': np.int64(7), 'arr': np.array([1.0,
                                                                   np.nan])})
    text = (where / 'b.json').read_text()
    self.assertNotRegex(text, 'Infinity|NaN')
    self.assertEqual(json.loads(text), {
        'inf': None, 'nested': [None, 1.5, {'m': None}], 'f32': 2.5,
        'i64': 7, 'arr': [1.0, None]})
    sent = np.array([[True, False], [False, True]])
    outputs.write_npy(where / 'u.npy', sent)
    got = np.load(where / 'u.npy')
    self.assertEqual(got.dtype, bool)
    np.testing.assert_array_equal(got, sent)
    outputs.write_npz(where / 'c.npz', {'a': np.arange(3), 'b': sent})
    with np.load(where / 'c.npz') as z:
      np.testing.assert_array_equal(z['a'], np.arange(3))
      np.testing.assert_array_equal(z['b'], sent)


def a_config(**overrides):
  return {'algo': 'laq', 'bits': 4, 'seed': 0, 'step_size': 0.02,
          **overrides}


class WorkdirTest(absltest.TestCase):

  def _foreign_run(self, name, **overrides):
    where = folder(name)
    outputs.write_json(where / 'config.json', a_config(**overrides))
    (where / 'metrics.csv').write_text('step,loss\n0,1.0\n')
    (where / 'checkpoints' / '10').mkdir(parents=True)
    (where / 'notes.txt').write_text('not ours')
    return where

  def test_a_workdir_that_cannot_hold_results_is_refused(self):
    # One line each, before anything is written (were tracebacks, or 16
    # files in the current folder for --workdir=).
    base = folder('unusable')
    base.mkdir(parents=True, exist_ok=True)
    afile = base / 'afile'
    afile.write_text('x')
    for text, pattern in (
        ('', r"^--workdir='' is empty: give a folder"),
        ('  ', r"^--workdir='  ' is empty"),
        (None, r"^--workdir='' is empty"),
        (afile, r"^workdir '.*afile' is a file: give a folder"),
        (afile / 'sub' / 'run', r"^workdir '.*run' cannot be created: "
         r"'.*afile' is a file$")):
      with self.assertRaisesRegex(outputs.WorkdirError, pattern):
        outputs.usable_workdir(text)
      if text:
        with self.assertRaisesRegex(outputs.WorkdirError, pattern):
          outputs.prepare_workdir(pathlib.Path(text), a_config())
    with mock.patch.object(os, 'access', return_value=False):
      with self.assertRaisesRegex(outputs.WorkdirError,
                                  r"is not writable: .*permission denied"):
        outputs.usable_workdir(base / 'new')
    fresh = base / 'new'
    self.assertEqual(outputs.usable_workdir(str(fresh)), fresh)
    self.assertFalse(fresh.exists())  # checked, not created
    # A write into a folder that cannot exist: one line, nothing written.
    with self.assertRaisesRegex(outputs.WorkdirError,
                                r'^could not write .*x.json: .*not written'):
      outputs.write_json(afile / 'x.json', {})

  def test_another_config_is_refused(self):
    where = self._foreign_run('foreign', bits=3, seed=5)
    with self.assertRaisesRegex(outputs.WorkdirError,
                                "holds another config's results "
                                r'\(bits: 3 -> 4, seed: 5 -> 0\).*'
                                '--overwrite'):
      outputs.prepare_workdir(where, a_config())
    self.assertEqual((where / 'metrics.csv').read_text(),
                     'step,loss\n0,1.0\n')
    self.assertTrue((where / 'checkpoints' / '10').is_dir())

  def test_many_differences_are_summed_up(self):
    where = self._foreign_run('foreign_many', algo='gd', bits=3, seed=5,
                              step_size=1.0, extra=1)
    with self.assertRaisesRegex(outputs.WorkdirError,
                                r"algo: 'gd' -> 'laq', bits: 3 -> 4, "
                                r"extra: 1 -> '<absent>', seed: 5 -> 0, "
                                r'and 1 more\)'):
      outputs.prepare_workdir(where, a_config())

  def test_run_files_without_config_are_refused(self):
    where = folder('no_config')
    (where / 'summary.json').write_text('{}')
    with self.assertRaisesRegex(outputs.WorkdirError,
                                r'run files \(summary.json\) without a '
                                'readable config.json'):
      outputs.prepare_workdir(where, a_config())
    (where / 'config.json').write_text('{not json')
    with self.assertRaisesRegex(outputs.WorkdirError,
                                'without a readable config.json'):
      outputs.prepare_workdir(where, a_config())

  def test_fresh_or_same_config_is_accepted(self):
    fresh = pathlib.Path(_tmp.name, 'fresh', 'nested')
    outputs.prepare_workdir(fresh, a_config())
    self.assertTrue(fresh.is_dir())
    # Not run files: no refusal.
    (fresh / 'notes.txt').write_text('mine')
    outputs.prepare_workdir(fresh, a_config(bits=2))
    # The same config (compared as JSON: a tuple equals the list it was
    # saved as): its run is kept, to be resumed.
    same = self._foreign_run('same', bits=4, grid=[1, 2])
    outputs.prepare_workdir(same, a_config(grid=(1, 2)))
    self.assertEqual((same / 'metrics.csv').read_text(), 'step,loss\n0,1.0\n')
    self.assertTrue((same / 'checkpoints' / '10').is_dir())

  def test_overwrite_deletes_only_run_files(self):
    where = self._foreign_run('overwritten', bits=3)
    for name in RUN_FILES:
      if not (where / name).exists():
        (where / name).write_text('old')
    (where / 'results.csv').write_text('not a single run file')
    outputs.prepare_workdir(where, a_config(), overwrite=True)
    self.assertEqual(sorted(p.name for p in where.iterdir()),
                     ['notes.txt', 'results.csv'])
    # A sweep names its own files.
    outputs.prepare_workdir(where, a_config(), overwrite=True,
                            files=('results.csv',))
    self.assertEqual(sorted(p.name for p in where.iterdir()), ['notes.txt'])

  def test_barrier_is_a_no_op_in_one_process(self):
    with mock.patch('jax.experimental.multihost_utils.sync_global_devices'
                    ) as sync:
      outputs.barrier('x')
    sync.assert_not_called()


class CsvTest(absltest.TestCase):

  def test_cell(self):
    self.assertEqual(outputs.cell(None), '')
    self.assertEqual(outputs.cell(float('nan')), '')
    self.assertEqual(outputs.cell(0.1 + 0.2), '0.30000000000000004')
    self.assertEqual(outputs.cell(np.float32(0.5)), '0.5')
    self.assertEqual(outputs.cell(float('inf')), 'inf')
    self.assertEqual(outputs.cell(7), '7')
    self.assertEqual(outputs.cell(True), 'True')
    self.assertEqual(outputs.cell('laq'), 'laq')

  def test_metrics_csv_round_trip(self):
    rng = np.random.default_rng(0)
    steps, workers = 7, 3
    loss = np.array([6.9, 5.1, 4.2, 3.3, 3.0 + 1e-13, 2.9, np.inf])
    grad = rng.random(steps) * 1e3
    sent = rng.random((steps, workers)) < 0.5
    bits = np.where(sent, 4 * 10 + 32, 0).astype(np.int32)
    down = np.full((steps, workers), 320, np.int32)  # 32 p, p = 10
    accuracy_at = {0: 0.1, 5: 0.875}
    time_s = rng.random(steps) * 0.1 + 0.3
    text = outputs.metrics_csv(rec(loss, grad, sent, bits, down, time_s),
                               2.5, accuracy_at, paper_reference=0.9)
    # The fixed columns, then one per extra recorded field: the gradients
    # the workers computed (empty: this record has none).
    self.assertEqual(text.splitlines()[0], ','.join(METRICS_COLUMNS
                                                    + ('grads',)))
    self.assertEqual(outputs.metrics_columns(), METRICS_COLUMNS + ('grads',))
    self.assertEqual(text.splitlines()[-1].split(',')[1], 'inf')
    path = pathlib.Path(_tmp.name, 'metrics.csv')
    outputs.atomic_write(path, text)
    got = outputs.read_metrics(path)
    self.assertEqual(tuple(got), METRICS_COLUMNS + ('grads',))
    self.assertTrue(np.isnan(got['grads']).all())  # the record has none
    np.testing.assert_array_equal(got['step'], np.arange(steps))
    np.testing.assert_array_equal(got['loss'], loss)  # exact: repr
    np.testing.assert_array_equal(got['residual'], loss - 2.5)
    np.testing.assert_allclose(got['paper_residual'], loss / workers - 0.9,
                               rtol=0, atol=1e-15)
    np.testing.assert_array_equal(got['grad_norm_sq'], grad)
    uploads = sent.sum(1)
    np.testing.assert_array_equal(got['uploads'], uploads)
    np.testing.assert_array_equal(got['bits'], uploads * 72)
    np.testing.assert_array_equal(got['cum_uploads'], np.cumsum(uploads))
    np.testing.assert_array_equal(got['cum_bits'], np.cumsum(uploads) * 72)
    np.testing.assert_array_equal(got['bits_down'], np.full(steps, 960))
    np.testing.assert_array_equal(got['cum_bits_down'],
                                  960 * np.arange(1, steps + 1))
    for name in ('step', 'uploads', 'bits', 'bits_down', 'cum_uploads',
                 'cum_bits', 'cum_bits_down'):
      self.assertEqual(got[name].dtype, np.int64, name)
    accuracy = got['test_accuracy']
    self.assertEqual((accuracy[0], accuracy[5]), (0.1, 0.875))
    np.testing.assert_array_equal(got['time_s'], time_s)  # exact: repr
    np.testing.assert_array_equal(got['cum_time_s'], np.cumsum(time_s))
    np.testing.assert_array_equal(got['slowest'], np.arange(steps) % workers)
    self.assertEqual(got['slowest'].dtype, np.int64)
    # A record without times (older code): the columns are there, empty.
    text = outputs.metrics_csv(rec(loss, grad, sent, bits, down), 2.5,
                               accuracy_at, paper_reference=0.9)
    outputs.atomic_write(path, text)
    got = outputs.read_metrics(path)
    self.assertTrue(np.isnan(got['time_s']).all())
    self.assertTrue(np.all(np.isnan(np.delete(accuracy, [0, 5]))))
    # Without f*, the residual column is empty.
    text = outputs.metrics_csv(rec(loss, grad, sent, bits, down), None, {},
                               0.9)
    outputs.atomic_write(path, text)
    self.assertTrue(np.all(np.isnan(outputs.read_metrics(path)['residual'])))

  def test_results_csv_round_trip(self):
    rows = [
        {'point': 0, 'algo': 'gd', 'step_size': 0.1 + 0.2, 'final_loss': 1.5,
         'diverged': False, 'diverged_at': None},
        {'point': 1, 'algo': 'laq', 'step_size': 1.0,
         'final_loss': float('nan'), 'diverged': True, 'diverged_at': 12},
    ]
    path = pathlib.Path(_tmp.name, 'results.csv')
    outputs.atomic_write(path, outputs.results_csv(rows))
    got = outputs.read_results(path)
    self.assertEqual(got, [
        {'point': '0', 'algo': 'gd', 'step_size': '0.30000000000000004',
         'final_loss': '1.5', 'diverged': 'False', 'diverged_at': ''},
        {'point': '1', 'algo': 'laq', 'step_size': '1.0', 'final_loss': '',
         'diverged': 'True', 'diverged_at': '12'}])
    self.assertEqual(float(got[0]['step_size']), 0.1 + 0.2)


class DivergenceTest(absltest.TestCase):

  def test_rows_are_marked_by_the_one_rule_from_the_curves(self):
    # results.csv written before the 10x rule says diverged=False for a
    # point whose loss ran to 1e7: mark_divergence reads the curves.
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    d = pathlib.Path(tmp.name)
    nan = np.nan
    outputs.write_npz(d / 'curves.npz', {
        'loss': np.array([[5.0, 3.0, 2.0, 1.0], [5.0, 1e7, 1e7, 1e7],
                          [5.0, nan, 60.0, nan], [5.0, nan, 3.0, nan]]),
        'final_loss': np.array([0.5, 1e7, 1.0, nan]),
        'loss_every': np.array([1, 1, 2, 2])})
    rows = [{'diverged': False} for _ in range(4)]
    outputs.mark_divergence(rows, d)
    self.assertEqual([(r['diverged'], r['diverged_at']) for r in rows],
                     [(False, None), (True, 1), (True, 2), (True, 4)])


class LoadRunTest(absltest.TestCase):

  def write_run(self, name, final_loss=2.0, fstar=1.5):
    where = folder(name)
    loss = np.array([4.0, 3.0, 2.5])
    sent = np.array([[1, 1], [0, 1], [1, 0]], bool)
    bits = sent * 100
    outputs.write_json(where / 'config.json', a_config())
    outputs.write_json(where / 'summary.json', {
        'algo': 'laq', 'final_loss': final_loss, 'fstar': fstar})
    outputs.atomic_write(where / 'metrics.csv', outputs.metrics_csv(
        rec(loss, np.ones(3), sent, bits, np.zeros_like(bits)), fstar,
        {0: 0.5}, 1.0))
    outputs.write_npy(where / 'uploads.npy', sent)
    return where, loss, sent

  def test_load_run_and_curve(self):
    where, loss, sent = self.write_run('run')
    run = outputs.load_run(str(where))
    self.assertEqual(run.workdir, where)
    self.assertEqual(run.config, a_config())
    self.assertEqual(run.summary['algo'], 'laq')
    np.testing.assert_array_equal(run.metrics['loss'], loss)
    np.testing.assert_array_equal(run.sent_TxM, sent)
    curve = outputs.run_curve(run)
    # theta^0..theta^T: the T losses, then the final one; costs spent so far.
    np.testing.assert_array_equal(curve.value, [2.5, 1.5, 1.0, 0.5])
    np.testing.assert_array_equal(curve.iterations, [0, 1, 2, 3])
    np.testing.assert_array_equal(curve.uploads, [0, 2, 3, 4])
    np.testing.assert_array_equal(curve.bits, [0, 200, 300, 400])
    self.assertEqual((curve.label, curve.quantity), ('laq', 'residual'))
    loss_curve = outputs.run_curve(run, 'mine', residual=False)
    np.testing.assert_array_equal(loss_curve.value, [4.0, 3.0, 2.5, 2.0])
    self.assertEqual((loss_curve.label, loss_curve.quantity),
                     ('mine', 'loss'))

  def test_diverged_run_has_no_final_point(self):
    where, _, _ = self.write_run('diverged', final_loss=None, fstar=None)
    curve = outputs.run_curve(outputs.load_run(where))
    self.assertEqual(curve.quantity, 'loss')
    self.assertTrue(np.isnan(curve.value[-1]))

  def test_unfinished_run_is_named(self):
    where, _, _ = self.write_run('unfinished')
    (where / 'summary.json').unlink()
    (where / 'uploads.npy').unlink()
    with self.assertRaisesRegex(FileNotFoundError,
                                'is not a finished run: missing '
                                'summary.json, uploads.npy'):
      outputs.load_run(where)


class ConstantsTest(absltest.TestCase):

  def test_file_names(self):
    self.assertEqual(outputs.METRICS_COLUMNS, METRICS_COLUMNS)
    self.assertEqual(set(outputs.RUN_FILES), set(RUN_FILES))
    self.assertEqual(outputs.CHECKPOINT_DIR, 'checkpoints')


if __name__ == '__main__':
  absltest.main()
