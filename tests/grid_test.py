"""experiments.run.grid and the sweep configs: a sweep into a workdir.

The reference for a grid point is the same configuration run alone through
`experiments.run.train.train_and_evaluate` (what `experiments.main` calls); the
reference for results.csv is a recomputation from curves.npz with the bit
costs of docs/algorithm.md (b * P + 32 per quantized upload, 32 * P
otherwise). The tiny sweep runs once per module (slow tier).
"""

import functools
import itertools
import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import pytest

from experiments.run import config as config_lib
from experiments.run import events
from experiments.run import outputs
from experiments.run import train
from tests import common
from tests import events_test
from tests import reference

P_LOGREG = 784 * 10 + 10
# 60 images per worker: some shards hold exactly 6 of a digit, so a bias
# gradient at theta = 0 is zero up to rounding, a quantizer tie that the two
# reduction orders (grid vs single run) must settle alike.
SUBSET = 600
GRID = {'algo': ['lag', 'laq'], 'bits': [3, 8], 'xi': [0.2, 1.6]}
TARGET = 3.0  # reached by some points of the tiny sweep, not by all
SUMMARY_COLUMNS = [
    'iterations', 'total_uploads', 'total_bits', 'final_loss',
    'final_residual', 'final_test_accuracy', 'fstar', 'target_residual',
    'target_iteration', 'target_uploads', 'target_bits', 'paper_reference',
    'paper_final_residual', 'paper_target_iteration', 'paper_target_uploads',
    'paper_target_bits', 'last_grad_norm_sq', 'total_bits_down',
    'target_bits_down', 'paper_target_bits_down', 'total_time_s',
    'target_time_s', 'paper_target_time_s', 'participation_rate',
    'dropped_by_deadline', 'loss_every', 'diverged',
    'diverged_at', 'flops_per_worker_step']
HYPER_KEYS = ['algo', 'step_size', 'bits', 'xi', 'err_weight',
              'threshold_offset', 'max_staleness', 'l2', 'seed',
              'downlink_bits', 'xi_schedule',
              'participation', 'clients_per_round', 'absent', 'weighting',
              'deadline_s', 'server_lr',
              'network.profile', 'network.up_bps', 'network.down_bps',
              'network.up_latency_s', 'network.down_latency_s',
              'network.flops_per_s', 'network.straggler',
              'network.straggler_scale', 'network.server_in_bps',
              'network.server_out_bps', 'network.topology']
SPEC_TABLE = reference.PRESETS  # docs/algorithm.md's table


_env = common.IsolatedEnv('laq_grid_test_')


def setUpModule():
  # f* is solved once into a private cache, not the user's.
  _env.enter()


def tearDownModule():
  _env.exit()


def tiny_config(**overrides):
  from configs import sweep_bits_xi  # pylint: disable=g-import-not-at-top
  config = sweep_bits_xi.get_config('tiny')
  config.data_dir = common.mnist_dir()
  config.train_subset = SUBSET
  config.target_residual = TARGET
  config.sweep = GRID
  config.sweep_batch_size = 3  # 8 points: batches 3, 3, 2 + 1 padding
  # points one after another: each equals its run alone bit for bit
  # ('auto' would vmap full-batch logistic regression on a CPU)
  config.sweep_grid_axis = 'map'
  for name, value in overrides.items():
    config[name] = value
  return config


@functools.cache
def tiny_sweep():
  """Runs the tiny sweep once per process: (config, rows, workdir)."""
  from experiments.run import grid  # pylint: disable=g-import-not-at-top
  config = tiny_config()
  workdir = pathlib.Path(_env.name, 'sweep')
  rows = grid.sweep_and_evaluate(config, workdir)
  return config, rows, workdir


@pytest.mark.slow
class PointEqualsSingleRunTest(parameterized.TestCase):
  """A grid point equals experiments.run.train on the same config, step by
  step."""

  @parameterized.parameters(dict(algo='laq', bits=3, xi=1.6),
                            dict(algo='lag', bits=8, xi=0.2))
  def test_point_equals_train_and_evaluate(self, algo, bits, xi):
    config, rows, workdir = tiny_sweep()
    curves = np.load(workdir / 'curves.npz')
    g = next(r['point'] for r in rows
             if (r['algo'], r['bits'], r['xi']) == (algo, bits, xi))
    point = {k: rows[g][k] for k in HYPER_KEYS}
    single_dir = pathlib.Path(_env.name, f'single_{algo}_{bits}_{xi}')
    summary = train.train_and_evaluate(config_lib.point_config(config, point),
                                       single_dir)
    single = outputs.load_run(single_dir)

    np.testing.assert_array_equal(curves['uploads'][g], single.sent_TxM)
    sent = single.sent_TxM
    self.assertGreater(sent.sum(), 0)
    self.assertLess(sent.sum(), sent.size)  # the lazy rule really skipped
    np.testing.assert_allclose(curves['loss'][g], single.metrics['loss'],
                               rtol=1e-11)
    np.testing.assert_array_equal(curves['cum_bits'][g],
                                  single.metrics['cum_bits'])
    # TensorBoard: the point's folder shows the single run's curves.
    folder = events.point_folder(g, rows[g], ['algo', 'bits', 'xi'])
    got = events_test.read(workdir / 'tensorboard' / folder)
    want = events_test.read(single_dir / 'tensorboard')
    for tag in events.TAGS:
      if tag == 'eval/test_accuracy':  # a sweep evaluates theta^T alone
        self.assertEqual(got[tag], {config.num_iters: want[tag][
            config.num_iters]})
        # curves.npz: after every chunk, as the single run evaluates
        steps = curves['test_accuracy_steps'].tolist()
        self.assertEqual(steps, sorted(k for k in want[tag] if k > 0))
        np.testing.assert_allclose(curves['test_accuracy'][g],
                                   [want[tag][k] for k in steps], rtol=1e-6)
        continue
      self.assertEqual(sorted(got[tag]), sorted(want[tag]), tag)
      np.testing.assert_allclose([got[tag][k] for k in sorted(got[tag])],
                                 [want[tag][k] for k in sorted(want[tag])],
                                 rtol=1e-6, err_msg=tag)
    csv_row = outputs.read_results(workdir / 'results.csv')[g]
    for key in ('total_uploads', 'total_bits', 'target_iteration',
                'target_uploads', 'target_bits'):
      expected = summary[key]
      self.assertEqual(csv_row[key], '' if expected is None else
                       str(expected), key)
    for key in ('final_loss', 'final_residual', 'final_test_accuracy',
                'fstar'):
      np.testing.assert_allclose(float(csv_row[key]), summary[key],
                                 rtol=1e-10, err_msg=key)


@pytest.mark.slow
class LauncherTest(absltest.TestCase):

  def test_launcher_compiles_once(self):
    _, _, workdir = tiny_sweep()
    info = json.loads((workdir / 'sweep.json').read_text())
    self.assertEqual(info['num_batches'], 3)
    # Chunks of 10 of 30 iterations, 3 batches (the last padded): 1 program.
    self.assertEqual(info['programs_compiled'], 1)
    # ... whose compiling the run's time holds, beside its chunks
    self.assertBetween(info['compile_time_s'], 0.0, info['run_time_s'])
    self.assertGreater(info['compile_time_s'], 0.0)  # (it compiled one)


@pytest.mark.slow
class ResultsFilesTest(absltest.TestCase):
  """results.csv against an independent recomputation from curves.npz."""

  def test_columns_and_points(self):
    _, _, workdir = tiny_sweep()
    table = outputs.read_results(workdir / 'results.csv')
    self.assertEqual(list(table[0]), ['point'] + HYPER_KEYS + SUMMARY_COLUMNS)
    expected = list(itertools.product(GRID['algo'], GRID['bits'], GRID['xi']))
    got = [(r['algo'], int(r['bits']), float(r['xi'])) for r in table]
    self.assertEqual(got, expected)
    for row in table:  # the fixed keys keep the config's values
      self.assertEqual(float(row['step_size']), 0.02)
      self.assertEqual(float(row['err_weight']), 3.0)
      self.assertEqual(int(row['max_staleness']), 100)
      self.assertEqual(row['diverged'], 'False')
    curves = np.load(workdir / 'curves.npz')
    np.testing.assert_array_equal(curves['algo'], [e[0] for e in expected])
    # b as grid_bits: `bits` is the per-worker bits [G, T, M] (uploads x
    # each upload's size, b p + 32 or 32 p)
    np.testing.assert_array_equal(curves['grid_bits'],
                                  [e[1] for e in expected])
    np.testing.assert_array_equal(curves['xi'], [e[2] for e in expected])
    p = 784 * 10 + 10
    for g, (algo, b, _) in enumerate(expected):
      size = b * p + 32 if algo == 'laq' else 32 * p
      np.testing.assert_array_equal(curves['bits'][g],
                                    curves['uploads'][g] * size)
    self.assertEqual(curves['time_s'].shape, curves['loss'].shape)
    for name in ('config.json', 'sweep.json'):
      json.loads((workdir / name).read_text())
    for name in ('heatmap_bits_to_target.png', 'pareto.png'):
      self.assertEqual((workdir / name).read_bytes()[:8], b'\x89PNG\r\n\x1a\n')
    self.assertEqual(
        [p.name for p in workdir.iterdir() if p.name.startswith('.')], [])

  def test_values_agree_with_curves(self):
    config, _, workdir = tiny_sweep()
    table = outputs.read_results(workdir / 'results.csv')
    curves = np.load(workdir / 'curves.npz')
    num_steps = config.num_iters
    reached = 0
    for g, row in enumerate(table):
      sent_TxM = curves['uploads'][g]
      self.assertEqual(sent_TxM.shape, (num_steps, config.num_workers))
      quantized = SPEC_TABLE[row['algo']][1] == 'uniform'
      per_upload = (int(row['bits']) * P_LOGREG + 32 if quantized
                    else 32 * P_LOGREG)
      uploads_T = [int(sum(step)) for step in sent_TxM.tolist()]
      self.assertEqual(int(row['total_uploads']), sum(uploads_T))
      self.assertEqual(int(row['total_bits']), sum(uploads_T) * per_upload)
      self.assertEqual(int(curves['cum_bits'][g, -1]),
                       sum(uploads_T) * per_upload)
      self.assertEqual(int(row['iterations']), num_steps)
      final = float(curves['final_loss'][g])
      fstar = float(row['fstar'])
      self.assertEqual(float(row['final_loss']), final)
      self.assertAlmostEqual(float(row['final_residual']), final - fstar,
                             places=12)
      # The first k with f(theta^k) - f* <= target, k = 0..T (k = T: final).
      losses = list(curves['loss'][g]) + [final]
      hit = next((k for k, loss in enumerate(losses)
                  if loss - fstar <= TARGET), None)
      if hit is None:
        self.assertEqual(row['target_iteration'], '')
        self.assertEqual(row['target_bits'], '')
      else:
        reached += 1
        self.assertEqual(int(row['target_iteration']), hit)
        self.assertEqual(int(row['target_uploads']), sum(uploads_T[:hit]))
        self.assertEqual(int(row['target_bits']),
                         sum(uploads_T[:hit]) * per_upload)
      accuracy = float(row['final_test_accuracy'])
      self.assertTrue(0.5 < accuracy < 1.0, accuracy)
      self.assertEqual(curves['test_accuracy'][g, -1], accuracy)
    self.assertTrue(0 < reached < len(table), reached)
    info = json.loads((workdir / 'sweep.json').read_text())
    self.assertEqual(info['points_reaching_target'], reached)
    self.assertEqual(info['heatmap_shows'], 'target_bits+final_residual')


if __name__ == '__main__':
  absltest.main()
