"""Sweeps: one compiled program for a grid, equal to the runs it stands for.

The reference for a grid point is the same configuration run alone through
`experiments.train.train_and_evaluate` (what `experiments.main` calls); the
reference for results.csv is a recomputation from curves.npz with the
spec's bit costs (b * P + 32 per quantized upload, 32 * P otherwise).
"""

import functools
import itertools
import json
import os
import pathlib
import tempfile
import textwrap

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import build as build_lib
from laq_jax import sweep
from tests import common

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
    'paper_target_bits', 'last_grad_norm_sq', 'diverged', 'diverged_at']
HYPER_KEYS = ['algo', 'step_size', 'bits', 'xi', 'err_weight',
              'threshold_offset', 'max_staleness', 'l2', 'seed', 'levels',
              'keep_prob']
# The algorithm table of docs/algorithm.md: algorithm -> (stochastic,
# compressor, innovation, lazy).
SPEC_TABLE = {
    'gd': (False, 'identity', False, False),
    'qgd': (False, 'uniform', True, False),
    'lag': (False, 'identity', False, True),
    'laq': (False, 'uniform', True, True),
    'sgd': (True, 'identity', False, False),
    'sqgd': (True, 'uniform', True, False),
    'slag': (True, 'identity', False, True),
    'slaq': (True, 'uniform', True, True),
    'qsgd': (True, 'qsgd', False, False),
    'ssgd': (True, 'rand_p', False, False)}

_CACHE_DIR = tempfile.mkdtemp(prefix='laq_sweep_test_cache_')


def setUpModule():
  # f* is solved once into a private cache, not the user's.
  os.environ['LAQ_JAX_CACHE'] = _CACHE_DIR


def tiny_config(**overrides):
  from configs import sweep_bits_xi  # pylint: disable=g-import-not-at-top
  config = sweep_bits_xi.get_config('tiny')
  config.data_dir = common.mnist_dir()
  config.train_subset = SUBSET
  config.target_residual = TARGET
  config.sweep = GRID
  config.sweep_batch_size = 3  # 8 points: batches 3, 3, 2 + 1 padding
  for name, value in overrides.items():
    config[name] = value
  return config


@functools.cache
def tiny_sweep():
  """Runs the tiny sweep once per process: (config, rows, workdir)."""
  from experiments import sweep as sweep_main  # pylint: disable=g-import-not-at-top
  os.environ['LAQ_JAX_CACHE'] = _CACHE_DIR
  config = tiny_config()
  workdir = pathlib.Path(tempfile.mkdtemp(prefix='laq_sweep_test_'))
  rows = sweep_main.sweep_and_evaluate(config, workdir)
  return config, rows, workdir


def small_data(num_workers=4, per_worker=40):
  x, y = common.mnist_shards(num_workers, per_worker, dtype=np.float64)
  return lj.Data(jnp.asarray(x), jnp.asarray(y))


def base_point(**overrides):
  values = dict(algo='laq', step_size=0.05, bits=3, xi=0.8, err_weight=3.0,
                threshold_offset=0.0, max_staleness=20, l2=0.01, seed=0,
                levels=10_000, keep_prob=0.5)
  values.update(overrides)
  return values


class PointEqualsSingleRunTest(parameterized.TestCase):
  """A grid point equals experiments.train on the same config, step by step."""

  @parameterized.parameters(dict(algo='laq', bits=3, xi=1.6),
                            dict(algo='lag', bits=8, xi=0.2))
  def test_point_equals_train_and_evaluate(self, algo, bits, xi):
    from experiments import sweep as sweep_main  # pylint: disable=g-import-not-at-top
    from experiments import train  # pylint: disable=g-import-not-at-top
    config, rows, workdir = tiny_sweep()
    curves = np.load(workdir / 'curves.npz')
    g = next(r['point'] for r in rows
             if (r['algo'], r['bits'], r['xi']) == (algo, bits, xi))
    point = {k: rows[g][k] for k in HYPER_KEYS}
    single_dir = pathlib.Path(tempfile.mkdtemp(prefix='laq_single_test_'))
    summary = train.train_and_evaluate(sweep.point_config(config, point),
                                       single_dir)
    single = train.load_run(single_dir)

    np.testing.assert_array_equal(curves['uploads'][g], single.sent_TxM)
    sent = single.sent_TxM
    self.assertGreater(sent.sum(), 0)
    self.assertLess(sent.sum(), sent.size)  # the lazy rule really skipped
    np.testing.assert_allclose(curves['loss'][g], single.metrics['loss'],
                               rtol=1e-11)
    np.testing.assert_array_equal(curves['cum_bits'][g],
                                  single.metrics['cum_bits'])
    csv_row = sweep_main.read_results(workdir / 'results.csv')[g]
    for key in ('total_uploads', 'total_bits', 'target_iteration',
                'target_uploads', 'target_bits'):
      expected = summary[key]
      self.assertEqual(csv_row[key], '' if expected is None else
                       str(expected), key)
    for key in ('final_loss', 'final_residual', 'final_test_accuracy',
                'fstar'):
      np.testing.assert_allclose(float(csv_row[key]), summary[key],
                                 rtol=1e-10, err_msg=key)


class CompileOnceTest(absltest.TestCase):

  def test_batches_share_one_program_and_padding_is_dropped(self):
    data = small_data()
    spec = lj.RunSpec(lj.get_problem('logreg'), 4)
    points = sweep.expand_grid({'algo': ['gd', 'laq'], 'bits': [2, 3, 4]},
                               base_point())
    steps = 7  # a chunk length no other test compiles
    seen = []
    before = lj.run_chunk._cache_size()
    batched = sweep.run_sweep(spec, data, points, steps, batch_size=4,
                              callback=seen.append)
    self.assertEqual(lj.run_chunk._cache_size() - before, 1)
    # Two batches of 4, the second with 2 points and 2 rows of padding.
    self.assertEqual([p.point_indices for p in seen], [[0, 1, 2, 3], [4, 5]])
    self.assertEqual(seen[1].trace.loss.shape, (2, steps))
    self.assertEqual(seen[1].state.theta_P.shape[0], 4)
    self.assertEqual(batched.loss_GxT.shape, (6, steps))
    self.assertEqual(batched.sent_GxTxM.shape, (6, steps, 4))
    self.assertEqual(batched.theta_GxP.shape, (6, P_LOGREG))

    # Each point against its own scalar run.
    for g, point in enumerate(points):
      hyper = lj.make_hyper(point['algo'], dtype=jnp.float64,
                            **{k: point[k] for k in sweep.HYPER_KEYS})
      state, trace = lj.run(spec, data, hyper, steps)
      np.testing.assert_array_equal(batched.sent_GxTxM[g], trace.sent_M)
      np.testing.assert_array_equal(batched.bits_GxTxM[g], trace.bits_M)
      np.testing.assert_allclose(batched.loss_GxT[g], trace.loss, rtol=1e-12)
      np.testing.assert_allclose(batched.theta_GxP[g], state.theta_P,
                                 rtol=1e-10, atol=1e-13)
      final = lj.objective(spec.problem, state.theta_P, data,
                           jnp.float64(point['l2']))
      np.testing.assert_allclose(batched.final_loss_G[g], float(final),
                                 rtol=1e-12)

  def test_launcher_compiles_once(self):
    _, _, workdir = tiny_sweep()
    info = json.loads((workdir / 'sweep.json').read_text())
    self.assertEqual(info['num_batches'], 3)
    # Chunks of 10 of 30 iterations, 3 batches (the last padded): 1 program.
    self.assertEqual(info['programs_compiled'], 1)


class ResultsFilesTest(absltest.TestCase):
  """results.csv against an independent recomputation from curves.npz."""

  def test_columns_and_points(self):
    from experiments import sweep as sweep_main  # pylint: disable=g-import-not-at-top
    _, _, workdir = tiny_sweep()
    table = sweep_main.read_results(workdir / 'results.csv')
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
    np.testing.assert_array_equal(curves['bits'], [e[1] for e in expected])
    np.testing.assert_array_equal(curves['xi'], [e[2] for e in expected])
    for name in ('config.json', 'sweep.json'):
      json.loads((workdir / name).read_text())
    for name in ('heatmap_bits_to_target.png', 'pareto.png'):
      self.assertEqual((workdir / name).read_bytes()[:8], b'\x89PNG\r\n\x1a\n')
    self.assertEqual(
        [p.name for p in workdir.iterdir() if p.name.startswith('.')], [])

  def test_values_agree_with_curves(self):
    from experiments import sweep as sweep_main  # pylint: disable=g-import-not-at-top
    config, _, workdir = tiny_sweep()
    table = sweep_main.read_results(workdir / 'results.csv')
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
    self.assertTrue(0 < reached < len(table), reached)
    info = json.loads((workdir / 'sweep.json').read_text())
    self.assertEqual(info['points_reaching_target'], reached)
    self.assertEqual(info['heatmap_shows'], 'target_bits+final_residual')


class AlgorithmAxisTest(absltest.TestCase):

  def test_switches_follow_the_spec_table(self):
    for algos in (list(SPEC_TABLE)[:4], list(SPEC_TABLE)[4:]):
      points = sweep.expand_grid({'algo': algos}, base_point())
      hyper = sweep.stack_points(points, jnp.float64)
      for g, point in enumerate(points):
        _, compressor, innovation, lazy = SPEC_TABLE[point['algo']]
        self.assertEqual(int(hyper.compressor[g]),
                         lj.COMPRESSORS.index(compressor), point['algo'])
        self.assertEqual(bool(hyper.innovation[g]), innovation, point['algo'])
        self.assertEqual(bool(hyper.lazy[g]), lazy, point['algo'])
      self.assertEqual(hyper.quantize.tolist(),
                       [SPEC_TABLE[a][1] == 'uniform' for a in algos])
    self.assertEqual(sorted(SPEC_TABLE), sorted(lj.ALGORITHMS))

  def test_gd_uploads_always_and_lag_without_threshold_is_gd(self):
    data = small_data()
    spec = lj.RunSpec(lj.get_problem('logreg'), 4)
    base = base_point(xi=0.0, err_weight=0.0, threshold_offset=0.0, bits=4)
    points = sweep.expand_grid({'algo': ['gd', 'qgd', 'lag', 'laq']}, base)
    result = sweep.run_sweep(spec, data, points, 20)
    gd, qgd, lag, laq = range(4)
    self.assertTrue(result.sent_GxTxM[gd].all())
    np.testing.assert_array_equal(result.bits_GxTxM[gd], 32 * P_LOGREG)
    np.testing.assert_array_equal(result.bits_GxTxM[qgd], 4 * P_LOGREG + 32)
    np.testing.assert_array_equal(result.sent_GxTxM[lag],
                                  result.sent_GxTxM[gd])
    np.testing.assert_allclose(result.loss_GxT[lag], result.loss_GxT[gd],
                               rtol=1e-13)
    np.testing.assert_array_equal(result.sent_GxTxM[laq],
                                  result.sent_GxTxM[qgd])
    np.testing.assert_allclose(result.loss_GxT[laq], result.loss_GxT[qgd],
                               rtol=1e-13)
    # With the default threshold the lazy rule skips: the switch is live.
    points = sweep.expand_grid({'algo': ['gd', 'lag']}, base_point(xi=0.8))
    result = sweep.run_sweep(spec, data, points, 20)
    self.assertLess(result.sent_GxTxM[1].sum(), result.sent_GxTxM[0].sum())


class ErrorsTest(absltest.TestCase):

  def test_mixing_full_batch_and_stochastic_fails(self):
    with self.assertRaisesRegex(ValueError, r'full-batch \(gd, laq\).*'
                                r'stochastic \(slaq\)'):
      sweep.expand_grid({'algo': ['gd', 'laq', 'slaq']}, base_point())
    with self.assertRaisesRegex(build_lib.ConfigError, 'full-batch'):
      sweep.points_from_config(tiny_config(sweep={'algo': ['gd', 'sgd']}))

  def test_unknown_key_names_it_and_the_allowed_keys(self):
    with self.assertRaises(ValueError) as caught:
      sweep.expand_grid({'bits': [2], 'bitz': [2, 3]}, base_point())
    message = str(caught.exception)
    self.assertIn("'bitz'", message)
    for key in HYPER_KEYS:
      self.assertIn(key, message)
    with self.assertRaisesRegex(build_lib.ConfigError, 'bitz'):
      sweep.points_from_config(tiny_config(sweep={'bitz': [2]}))

  def test_bad_values_are_named(self):
    cases = [({'bits': []}, r"sweep\['bits'\]=\[\] .*non-empty list"),
             ({'bits': 4}, r"sweep\['bits'\]=4 .*non-empty list"),
             ({'bits': [4, 0]}, r"sweep\['bits'\].*bits=0.*1\.\.32"),
             ({'bits': [2.5]}, r"sweep\['bits'\] value 2\.5.*integer"),
             ({'xi': [0.2, -1.0]}, r"sweep\['xi'\].*xi=-1\.0.*>= 0"),
             ({'algo': ['laq', 'lax']}, r"'lax'.*gd, qgd"),
             ({'xi': [0.2, 0.2]}, 'repeats')]
    for grid, pattern in cases:
      with self.subTest(grid=grid):
        with self.assertRaisesRegex(ValueError, pattern):
          sweep.expand_grid(grid, base_point())

  def test_config_needs_the_sweep_fields(self):
    from configs import default  # pylint: disable=g-import-not-at-top
    config = default.get_config('tiny')
    with self.assertRaisesRegex(build_lib.ConfigError, "'sweep'"):
      sweep.points_from_config(config)
    with self.assertRaisesRegex(build_lib.ConfigError,
                                'sweep_batch_size=-1'):
      sweep.points_from_config(tiny_config(sweep_batch_size=-1))

  def test_spec_must_match_the_algorithms(self):
    spec = lj.RunSpec(lj.get_problem('logreg'), 4, stochastic=True)
    with self.assertRaisesRegex(ValueError, 'spec.stochastic=True'):
      sweep.run_sweep(spec, small_data(), [base_point()], 3)


class ConfigsTest(absltest.TestCase):

  def test_shipped_sweep_configs(self):
    from configs import sweep_algos  # pylint: disable=g-import-not-at-top
    from configs import sweep_bits_xi  # pylint: disable=g-import-not-at-top
    points = sweep.points_from_config(sweep_bits_xi.get_config())
    self.assertLen(points, 16)
    self.assertEqual(sweep.varying_keys(points), ['bits', 'xi'])
    quick = sweep_bits_xi.get_config('quick')
    self.assertLen(sweep.points_from_config(quick), 16)
    self.assertLess(quick.num_iters, 4000)
    stochastic = sweep.points_from_config(
        sweep_bits_xi.get_config('stochastic,quick'))
    self.assertLen(stochastic, 48)
    self.assertEqual({p['algo'] for p in stochastic}, {'slaq'})
    self.assertEqual(sweep.varying_keys(stochastic), ['bits', 'xi', 'seed'])
    algos = sweep.points_from_config(sweep_algos.get_config('quick'))
    self.assertEqual([p['algo'] for p in algos], ['gd', 'qgd', 'lag', 'laq'])
    # A point's run config is a valid experiments.main config.
    run_config = sweep.point_config(sweep_algos.get_config(), algos[1])
    build_lib.validate_config(run_config)
    self.assertEqual(run_config.algo, 'qgd')
    self.assertNotIn('sweep', run_config)


class HelpersTest(absltest.TestCase):

  def test_pareto_front_by_hand(self):
    cost = [1, 2, 2, 3, 4, np.nan, 5]
    accuracy = [0.5, 0.7, 0.6, 0.7, 0.9, 0.99, 0.9]
    np.testing.assert_array_equal(sweep.pareto_front(cost, accuracy), [0, 1, 4])
    residual = [1e-1, 1e-3, 1e-2, 1e-4, 1e-4, 0, 1e-5]
    np.testing.assert_array_equal(
        sweep.pareto_front(cost, residual, maximize=False), [0, 1, 3, 6])

  def test_heatmap_quantity(self):
    row = lambda bits, res: {'target_bits': bits, 'final_residual': res}
    self.assertEqual(sweep.heatmap_quantity([row(5, 1e-7), row(9, 1e-8)]),
                     'target_bits')
    self.assertEqual(sweep.heatmap_quantity([row(5, 1e-7), row(None, 0.1)]),
                     'target_bits+final_residual')
    self.assertEqual(sweep.heatmap_quantity([row(None, 1.0)]),
                     'final_residual')
    self.assertEqual(sweep.heatmap_quantity([row(None, None)]), 'final_loss')

  def test_batches_pad_with_the_last_point(self):
    self.assertEqual(sweep.batches(5, 2), [([0, 1], [0, 1]), ([2, 3], [2, 3]),
                                           ([4], [4, 4])])
    self.assertEqual(sweep.batches(3, None), [([0, 1, 2], [0, 1, 2])])
    self.assertEqual(sweep.batches(3, 8), [([0, 1, 2], [0, 1, 2])])


SHARDED_SCRIPT = textwrap.dedent("""
    import os
    os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'
    import numpy as np, jax, jax.numpy as jnp
    jax.config.update('jax_enable_x64', True)
    import laq_jax as lj
    from laq_jax import sharding, sweep
    from tests import common
    x, y = common.mnist_shards(4, 40, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), 4)
    base = dict(algo='laq', step_size=0.05, bits=3, xi=0.8, err_weight=3.0,
                threshold_offset=0.0, max_staleness=20, l2=0.01, seed=0,
                levels=10000, keep_prob=0.5)
    points = sweep.expand_grid({'algo': ['gd', 'laq'], 'bits': [2, 4]}, base)
    mesh = sharding.make_mesh(2)
    fn = sharding.make_run_chunk(mesh)
    ref = sweep.run_sweep(spec, data, points, 12)
    got = sweep.run_sweep(spec, sharding.shard_data(data, mesh), points, 12,
                          batch_size=3, run_chunk_fn=fn)
    assert fn.compiled._cache_size() == 1, fn.compiled._cache_size()
    np.testing.assert_array_equal(got.sent_GxTxM, ref.sent_GxTxM)
    np.testing.assert_allclose(got.loss_GxT, ref.loss_GxT, rtol=1e-11)
    np.testing.assert_allclose(got.final_loss_G, ref.final_loss_G, rtol=1e-11)
    print('OK')
""")


class DevicesTest(absltest.TestCase):

  def test_workers_on_devices_matches_vmap(self):
    out = common.run_script(SHARDED_SCRIPT, JAX_PLATFORMS='cpu')
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn('OK', out.stdout)


if __name__ == '__main__':
  absltest.main()
