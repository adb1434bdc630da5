"""laq_jax.sweep_metrics: a sweep's rows, columns, curves and front, against
values worked out by hand on a tiny synthetic SweepResult (3 points, 4
steps, 2 workers). (tests/metrics_test.py holds the first checks of the
paper's reference, the rows' totals and the front.)

The three points, worked out in the comments below:
  0: l2 0.1, f = 10, 6, 4, 3 then 2.5; f* 2; every iteration logged.
  1: l2 0.2, f = 9, -, 5, - then 4; f* 3.5; the loss logged every 2nd
     iteration (NaN between: not a divergence).
  2: l2 0.1, f = 8, inf, NaN, NaN then NaN: diverged at k = 1.
"""

import subprocess
import sys

from absl.testing import absltest
import numpy as np

from laq_jax import sweep_metrics
from laq_jax.sweep import SweepResult
from tests import common

NAN, INF = np.nan, np.inf


def result(extra=None, participants_all=True):
  sent = np.array([
      [[1, 1], [1, 0], [0, 1], [1, 1]],
      [[1, 1], [1, 1], [1, 1], [1, 1]],
      [[1, 0], [0, 1], [1, 1], [0, 0]]], bool)
  extra = dict(extra or {})
  if extra.get('participants_M') is None and not participants_all:
    participants = np.ones((3, 4, 2), bool)
    participants[1, 2, 0] = False
    extra['participants_M'] = participants
    extra['dropped_M'] = np.zeros((3, 4, 2), bool)
  return SweepResult(
      points=[dict(algo='laq', bits=3, l2=0.1, xi=0.5),
              dict(algo='gd', bits=4, l2=0.2, xi=None),
              dict(algo='lag', bits=3, l2=0.1, xi=0.25)],
      loss_GxT=np.array([[10.0, 6.0, 4.0, 3.0],
                         [9.0, NAN, 5.0, NAN],
                         [8.0, INF, NAN, NAN]]),
      grad_norm_sq_GxT=np.ones((3, 4)),
      sent_GxTxM=sent,
      bits_GxTxM=np.where(sent, 5, 0).astype(np.int32),
      bits_down_GxTxM=np.full((3, 4, 2), 7, np.int32),
      final_loss_G=np.array([2.5, 4.0, NAN]),
      theta_GxP=np.zeros((3, 6)),
      loss_every_G=np.array([1, 2, 1]),
      extra=extra or None)


class ImportTest(absltest.TestCase):

  def test_the_module_imports_on_its_own(self):
    out = subprocess.run(
        [sys.executable, '-c', 'from laq_jax import sweep_metrics; '
         'print(sweep_metrics.summarize_sweep.__name__)'],
        cwd=common.ROOT, capture_output=True, text=True, timeout=120,
        check=False)
    self.assertEqual(out.returncode, 0, out.stderr[-2000:])
    self.assertIn('summarize_sweep', out.stdout)


class PaperReferencesTest(absltest.TestCase):

  def test_per_objective_ignoring_divergence(self):
    # l2 0.1 (points 0 and 2): the averages f / 2 of point 0 end at 1.25,
    # point 2's inf and NaNs are ignored; l2 0.2: point 1's lowest logged
    # average is its final 4 / 2.
    np.testing.assert_array_equal(sweep_metrics.paper_references(result()),
                                  [1.25, 2.0, 1.25])

  def test_a_group_that_only_diverged_has_none(self):
    r = result()._replace(loss_GxT=np.full((3, 4), NAN),
                          final_loss_G=np.array([NAN, 1.0, INF]))
    np.testing.assert_array_equal(sweep_metrics.paper_references(r),
                                  [NAN, 0.5, NAN])


class SummarizeSweepTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.rows = sweep_metrics.summarize_sweep(
        result(), fstar=[2.0, 3.5, 2.0], target=1.0,
        test_accuracy=np.array([0.9, 0.8, 0.7]))

  def test_the_points_keys_first(self):
    self.assertEqual([r['point'] for r in self.rows], [0, 1, 2])
    self.assertEqual([r['algo'] for r in self.rows], ['laq', 'gd', 'lag'])
    self.assertEqual(list(self.rows[0])[:5], ['point', 'algo', 'bits', 'l2',
                                              'xi'])

  def test_exact_residual_with_each_points_fstar(self):
    # Point 0: f - f* = 8, 4, 2, 1, 0.5 reaches 1 at k = 3, after the
    # uploads of steps 0..2: 2 + 1 + 1 = 4, at 5 bits each.
    r = self.rows[0]
    self.assertEqual((r['target_iteration'], r['target_uploads'],
                      r['target_bits']), (3, 4, 20))
    self.assertEqual(r['final_residual'], 0.5)
    self.assertEqual(r['final_test_accuracy'], 0.9)
    self.assertEqual(r['target_bits_down'], 3 * 2 * 7)
    # Point 1 (f* 3.5): logged residuals 5.5 (k = 0), 1.5 (k = 2), then the
    # final 0.5 (k = T = 4): every step's uploads, 8.
    r = self.rows[1]
    self.assertEqual((r['target_iteration'], r['target_uploads']), (4, 8))
    self.assertEqual((r['fstar'], r['final_residual']), (3.5, 0.5))

  def test_paper_residual_from_the_objectives_lowest(self):
    # Point 0: f / 2 - 1.25 = 3.75, 1.75, 0.75: reaches 1 at k = 2, after
    # 3 uploads (15 bits). Point 1: f / 2 - 2 = 2.5, -, 0.5: k = 2 too.
    r0, r1 = self.rows[0], self.rows[1]
    self.assertEqual((r0['paper_reference'], r0['paper_target_iteration'],
                      r0['paper_target_uploads'], r0['paper_target_bits']),
                     (1.25, 2, 3, 15))
    self.assertEqual((r1['paper_reference'], r1['paper_target_iteration'],
                      r1['paper_target_uploads']), (2.0, 2, 4))
    self.assertEqual(r0['paper_final_residual'], 0.0)

  def test_logged_gaps_are_not_divergence(self):
    r1, r2 = self.rows[1], self.rows[2]
    self.assertEqual((r1['diverged'], r1['diverged_at']), (False, None))
    self.assertEqual(r1['loss_every'], 2)
    self.assertEqual(r1['final_loss'], 4.0)
    # Point 2: diverged at k = 1; steps 0..1 count, nothing final.
    self.assertEqual((r2['diverged'], r2['diverged_at']), (True, 1))
    self.assertEqual(r2['iterations'], 2)
    self.assertEqual(r2['total_uploads'], 2)
    self.assertIsNone(r2['final_loss'])
    self.assertIsNone(r2['final_test_accuracy'])
    self.assertIsNone(r2['target_iteration'])

  def test_one_fstar_or_none_for_all(self):
    rows = sweep_metrics.summarize_sweep(result(), fstar=None, target=1.0)
    self.assertEqual([r['target_iteration'] for r in rows], [None] * 3)
    self.assertEqual([r['final_test_accuracy'] for r in rows], [None] * 3)
    rows = sweep_metrics.summarize_sweep(result(), fstar=2.0, target=1.0)
    self.assertEqual(rows[1]['final_residual'], 2.0)  # 4 - 2


class ColumnsTest(absltest.TestCase):

  def test_types_by_column(self):
    cols = sweep_metrics.columns([
        dict(algo='laq', bits=3, ok=True, loss=1.5, hit=4, xi=None),
        dict(algo='gd', bits=4, ok=False, loss=None, hit=None, xi=None)])
    np.testing.assert_array_equal(cols['algo'], ['laq', 'gd'])
    self.assertEqual(cols['bits'].dtype, np.int64)
    self.assertEqual(cols['ok'].dtype, bool)
    np.testing.assert_array_equal(cols['loss'], [1.5, NAN])
    # An integer column with a None is a float column with a NaN.
    self.assertEqual(cols['hit'].dtype, np.float64)
    np.testing.assert_array_equal(cols['hit'], [4.0, NAN])
    np.testing.assert_array_equal(cols['xi'], [NAN, NAN])


class CurveArraysTest(absltest.TestCase):

  def test_running_sums_and_grid_columns(self):
    out = sweep_metrics.curve_arrays(result())
    # Uploads per step of point 0: 2, 1, 1, 2.
    np.testing.assert_array_equal(out['cum_uploads'][0], [2, 3, 4, 6])
    np.testing.assert_array_equal(out['cum_bits'][0], [10, 15, 20, 30])
    np.testing.assert_array_equal(out['cum_bits_down'][2], [14, 28, 42, 56])
    self.assertEqual(out['cum_bits'].dtype, np.int64)
    np.testing.assert_array_equal(out['loss_every'], [1, 2, 1])
    np.testing.assert_array_equal(out['paper_reference'], [1.25, 2.0, 1.25])
    np.testing.assert_array_equal(out['final_loss'], [2.5, 4.0, NAN])
    # A grid key named like a curve ('bits') is kept as grid_bits.
    np.testing.assert_array_equal(out['grid_bits'], [3, 4, 3])
    self.assertEqual(out['bits'].shape, (3, 4, 2))  # the per-worker bits
    np.testing.assert_array_equal(out['algo'], ['laq', 'gd', 'lag'])
    np.testing.assert_array_equal(out['xi'], [0.5, NAN, 0.25])
    for absent in ('time_s', 'slowest', 'slowdown', 'participants',
                   'dropped'):
      self.assertNotIn(absent, out)

  def test_per_worker_arrays_only_under_the_limit(self):
    out = sweep_metrics.curve_arrays(result(), max_upload_elements=23)
    self.assertNotIn('uploads', out)
    self.assertIn('cum_bits', out)
    # No per-worker curve called bits then: the grid's b keeps its own name
    # (readers tell the two apart by their rank, as
    # experiments/studies/family/timed_sweep.py does).
    self.assertNotIn('grid_bits', out)
    np.testing.assert_array_equal(out['bits'], [3, 4, 3])
    out = sweep_metrics.curve_arrays(result(), max_upload_elements=24)
    np.testing.assert_array_equal(out['uploads'], result().sent_GxTxM)

  def test_times_and_participation_when_recorded(self):
    times = dict(time_s=np.full((3, 4), 0.5), slowest=np.zeros((3, 4), int),
                 slowdown_M=np.ones((3, 4, 2)))
    out = sweep_metrics.curve_arrays(result(times))
    np.testing.assert_array_equal(out['time_s'], np.full((3, 4), 0.5))
    self.assertEqual(out['slowdown'].shape, (3, 4, 2))
    # Everyone took part every round: no participation arrays.
    everyone = dict(times, participants_M=np.ones((3, 4, 2), bool),
                    dropped_M=np.zeros((3, 4, 2), bool))
    self.assertNotIn('participants', sweep_metrics.curve_arrays(
        result(everyone)))
    out = sweep_metrics.curve_arrays(result(participants_all=False))
    self.assertFalse(out['participants'][1, 2, 0])
    self.assertEqual(int(out['participants'].sum()), 23)
    self.assertIn('dropped', out)


class ParetoFrontTest(absltest.TestCase):

  def test_ties_are_both_on_the_front(self):
    # Two equal points: neither beats the other.
    np.testing.assert_array_equal(
        sweep_metrics.pareto_front([1, 1, 2], [0.5, 0.5, 0.4]), [0, 1])

  def test_sorted_by_cost(self):
    np.testing.assert_array_equal(
        sweep_metrics.pareto_front([5, 1, 3], [0.9, 0.1, 0.5]), [1, 2, 0])

  def test_no_finite_point_no_front(self):
    self.assertEqual(sweep_metrics.pareto_front([NAN, 1], [1, NAN]).size, 0)


if __name__ == '__main__':
  absltest.main()
