"""laq_jax.sweep: a grid as one compiled program, equal to the runs it stands for.

Each grid point is checked against the same hyperparameters run alone through
`laq_jax.run`; the algorithm switches against the table of docs/algorithm.md.
"""


import textwrap

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import sweep
from laq_jax.hyper import DEFAULTS
from tests import common
from tests import reference

P_LOGREG = 784 * 10 + 10
HYPER_KEYS = ['algo', 'step_size', 'bits', 'xi', 'err_weight',
              'threshold_offset', 'max_staleness', 'l2', 'seed',
              'downlink_bits']
SPEC_TABLE = reference.PRESETS  # docs/algorithm.md's table


def small_data(num_workers=4, per_worker=40):
  x, y = common.mnist_shards(num_workers, per_worker, dtype=np.float64)
  return lj.Data(jnp.asarray(x), jnp.asarray(y))


def base_point(**overrides):
  values = dict(DEFAULTS, algo='laq', step_size=0.05, bits=3,
                max_staleness=20)
  values.update(overrides)
  return values


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
    self.assertLessEqual(set(SPEC_TABLE), set(lj.ALGORITHMS))

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


  def test_unknown_key_names_it_and_the_closest(self):
    with self.assertRaises(ValueError) as caught:
      sweep.expand_grid({'bits': [2], 'bitz': [2, 3]}, base_point())
    message = str(caught.exception)
    self.assertIn("'bitz'", message)
    self.assertIn("did you mean 'bits'", message)
    with self.assertRaises(ValueError) as caught:  # a part's own parameter
      sweep.expand_grid({'momentum.momentun': [0.5]}, base_point())
    self.assertIn("did you mean 'momentum.momentum'", str(caught.exception))

  def test_bad_values_are_named(self):
    cases = [({'bits': []}, r"sweep\['bits'\]=\[\] .*non-empty list"),
             ({'bits': 4}, r"sweep\['bits'\]=4 .*non-empty list"),
             ({'bits': [4, 0]}, r"sweep\['bits'\]=0 .*1\.\.32"),
             ({'bits': [2.5]}, r"sweep\['bits'\]=2\.5.*integer"),
             ({'xi': [0.2, -1.0]}, r"sweep\['xi'\]=-1\.0 .*>= 0"),
             ({'algo': ['laq', 'lax']}, r"'lax'.*gd, qgd"),
             ({'xi': [0.2, 0.2]}, 'repeats')]
    for grid, pattern in cases:
      with self.subTest(grid=grid):
        with self.assertRaisesRegex(ValueError, pattern):
          sweep.expand_grid(grid, base_point())

  def test_steps_and_checkpoint_cadence(self):
    spec = lj.RunSpec(lj.get_problem('logreg'), 4)
    with self.assertRaisesRegex(ValueError, 'num_steps=0'):
      sweep.run_sweep(spec, small_data(), [base_point()], 0)
    with self.assertRaisesRegex(ValueError, 'checkpoint_every=3.*2'):
      sweep.run_sweep(spec, small_data(), [base_point()], 4, chunk_size=2,
                      checkpoint_every=3)


class ProgramsTest(absltest.TestCase):
  """A sweep over both kinds of gradient: two programs, the points' order."""

  def test_programs_and_parts(self):
    points = sweep.expand_grid(
        {'algo': ['slaq', 'gd', 'topk_ef', 'two_laq', 'ssgd']}, base_point())
    self.assertEqual(sweep.programs(points),
                     [(True, [0, 2, 4]), (False, [1, 3])])
    self.assertEqual(sweep.parts_of([points[i] for i in (0, 2, 4)]),
                     dict(compressors=('uniform', 'rand_p', 'top_k'),
                          triggers=('eager', 'laq'), servers=('sgd',),
                          error_feedback=True, warm_start=False,
                          downlink=False, clients=('gradient',),
                          estimators=('direct', 'innovation'),
                          broadcasts=('full',), compressors_b=('identity',),
                          weighting=False, participation=False,
                          upload_memory=True, stragglers=False,
                          privacy=('off',)))
    self.assertEqual(sweep.parts_of([points[i] for i in (1, 3)]),
                     dict(compressors=('identity', 'uniform'),
                          triggers=('eager', 'laq'), servers=('sgd',),
                          error_feedback=False, warm_start=False,
                          downlink=True, clients=('gradient',),
                          estimators=('direct', 'innovation'),
                          broadcasts=('full', 'quantized'),
                          compressors_b=('identity',),
                          weighting=False, participation=False,
                          upload_memory=True, stragglers=False,
                          privacy=('off',)))
    self.assertEqual(sweep.parts_of([points[1]])['estimators'], ('direct',))
    # A point taking some clients compiles participation into its program.
    half = [{**points[0], 'participation': 0.5}, points[2]]
    self.assertTrue(sweep.parts_of(half)['participation'])

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_mixed_sweep_equals_its_runs(self):
    data = small_data()
    spec = lj.RunSpec(lj.get_problem('logreg'), 4, batch_size=10,
                      grid_axis='map')
    points = sweep.expand_grid({'algo': ['slaq', 'laq', 'ef_signsgd',
                                         'two_laq']}, base_point(step_size=0.03))
    result = sweep.run_sweep(spec, data, points, 12, batch_size=3)
    self.assertEqual([p['algo'] for p in result.points],
                     ['slaq', 'laq', 'ef_signsgd', 'two_laq'])
    for g, point in enumerate(points):
      a = lj.ALGORITHMS[point['algo']]
      alone = lj.RunSpec(lj.get_problem('logreg'), 4, batch_size=10,
                         stochastic=a.stochastic)
      hyper = lj.make_hyper(point['algo'], dtype=jnp.float64,
                            **{k: point[k] for k in sweep.HYPER_KEYS})
      _, trace = lj.run(alone, data, hyper, 12)
      np.testing.assert_array_equal(result.sent_GxTxM[g], trace.sent_M)
      np.testing.assert_array_equal(result.bits_down_GxTxM[g],
                                    trace.bits_down_M)
      # Points run one after another (grid_axis='map'): the same bits.
      np.testing.assert_array_equal(result.loss_GxT[g], trace.loss)


class HelpersTest(absltest.TestCase):

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
    from laq_jax.hyper import DEFAULTS
    base = dict(DEFAULTS, algo='laq', step_size=0.05, bits=3,
                max_staleness=20)
    points = sweep.expand_grid({'algo': ['gd', 'laq', 'ef21', 'two_laq'],
                                'bits': [2, 4]}, base)
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



@pytest.mark.slow
@pytest.mark.slow
class DevicesTest(absltest.TestCase):

  def test_workers_on_devices_matches_vmap(self):
    out = common.run_script(SHARDED_SCRIPT, JAX_PLATFORMS='cpu')
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn('OK', out.stdout)


if __name__ == '__main__':
  absltest.main()
