"""Tests of laq_jax.metrics (hand-worked arrays) and laq_jax.plotting."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax.record import Record

from laq_jax import metrics
from laq_jax import sweep
from laq_jax import sweep_metrics


class CountsTest(absltest.TestCase):

  def test_per_step_cumulative_spent(self):
    sent = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 1], [0, 1, 0]], bool)
    bits = np.where(sent, 7, 0).astype(np.int32)
    uploads, step_bits = metrics.per_step(sent, bits)
    np.testing.assert_array_equal(uploads, [2, 0, 2, 1])
    np.testing.assert_array_equal(step_bits, [14, 0, 14, 7])
    np.testing.assert_array_equal(metrics.cumulative(uploads), [2, 2, 4, 5])
    np.testing.assert_array_equal(metrics.spent(uploads), [0, 2, 2, 4, 5])
    for a in (uploads, step_bits, metrics.cumulative(uploads),
              metrics.spent(step_bits)):
      self.assertEqual(a.dtype, np.int64)

  def test_int64_no_overflow(self):
    # Two workers uploading 2e9 bits each per step: past int32 at once.
    bits = np.full((3, 2), 2_000_000_000, np.int32)
    _, step_bits = metrics.per_step(np.ones((3, 2), bool), bits)
    self.assertEqual(int(metrics.cumulative(step_bits)[-1]), 12_000_000_000)
    self.assertEqual(int(metrics.spent(step_bits)[-1]), 12_000_000_000)


class TargetTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('middle', [5.0, 2.0, 1e-7, 1e-9], 1e-6, 2),
      ('equal_counts', [5.0, 1e-6, 0.0], 1e-6, 1),
      ('first', [1e-8, 5.0], 1e-6, 0),
      ('never', [5.0, 2.0, 1.0], 1e-6, None),
      ('nan_is_not_a_hit', [np.nan, 3.0, 1e-7], 1e-6, 2),
      ('negative_counts', [1.0, -1e-15], 1e-6, 1),
  )
  def test_first_at_or_below(self, values, target, expected):
    self.assertEqual(metrics.first_at_or_below(values, target), expected)

  def test_at_target_counts_steps_before_the_hit(self):
    # theta^0..theta^3 (K = T + 1 = 4); the hit is theta^2, produced by the
    # uploads of steps 0 and 1.
    residual = [4.0, 0.5, 1e-7, 1e-9]
    uploads = [3, 2, 5]
    bits = [300, 200, 500]
    self.assertEqual(metrics.at_target(residual, uploads, bits, 1e-6),
                     {'iteration': 2, 'uploads': 5, 'bits': 500})
    self.assertEqual(metrics.at_target(residual, uploads, bits, 1e-12),
                     {'iteration': None, 'uploads': None, 'bits': None})
    # The final iterate (k = T) counts too, and then every step was spent.
    self.assertEqual(metrics.at_target([4.0, 1.0, 0.5, 1e-7], uploads, bits,
                                       1e-6),
                     {'iteration': 3, 'uploads': 10, 'bits': 1000})

  def test_make_curve(self):
    curve = metrics.make_curve('x', [10.0, 6.0, 4.0], 3.5, [2, 0, 1],
                               [20, 0, 10], fstar=3.0)
    np.testing.assert_allclose(curve.value, [7.0, 3.0, 1.0, 0.5])
    np.testing.assert_array_equal(curve.iterations, [0, 1, 2, 3])
    np.testing.assert_array_equal(curve.uploads, [0, 2, 2, 3])
    np.testing.assert_array_equal(curve.bits, [0, 20, 20, 30])
    self.assertTrue(curve.is_residual)
    loss_curve = metrics.make_curve('x', [10.0, 6.0, 4.0], 3.5, [2, 0, 1],
                                    [20, 0, 10])
    np.testing.assert_allclose(loss_curve.value, [10.0, 6.0, 4.0, 3.5])
    self.assertFalse(loss_curve.is_residual)

  def test_summarize(self):
    sent = np.array([[1, 1], [0, 1], [0, 0]], bool)
    bits = np.where(sent, 100, 0)
    s = metrics.summarize(
        Record.from_arrays(loss=[3.0, 2.0, 1.0 + 1e-7], sent_M=sent,
                           bits_M=bits),
        final_loss=1.0, fstar=1.0, target=1e-6, final_test_accuracy=0.5,
        algo='laq')
    self.assertEqual(s['algo'], 'laq')
    self.assertEqual(s['iterations'], 3)
    self.assertEqual(s['total_uploads'], 3)
    self.assertEqual(s['total_bits'], 300)
    self.assertEqual(s['target_iteration'], 2)
    self.assertEqual(s['target_uploads'], 3)
    self.assertEqual(s['target_bits'], 300)
    self.assertEqual(s['final_residual'], 0.0)
    self.assertFalse(s['diverged'])
    no_fstar = metrics.summarize(
        Record.from_arrays(loss=[3.0, 2.0, 1.0], sent_M=sent, bits_M=bits),
        final_loss=1.0, fstar=None, target=1e-6)
    self.assertIsNone(no_fstar['target_iteration'])
    self.assertIsNone(no_fstar['final_residual'])
    self.assertIsNone(no_fstar['fstar'])
    diverged = metrics.summarize(
        Record.from_arrays(loss=[3.0, np.inf, np.nan], sent_M=sent,
                           bits_M=bits),
        final_loss=np.nan, fstar=None, target=1e-6)
    self.assertTrue(diverged['diverged'])
    self.assertIsNone(diverged['final_loss'])


class DivergenceTest(absltest.TestCase):
  """The one rule every summary and report uses (metrics.diverged_at)."""

  def test_nan_inf_or_ten_times_the_initial_loss(self):
    ok = [5.0, 40.0, 49.9, 2.0]  # below 10x f(theta^0) = 50 throughout
    self.assertIsNone(metrics.diverged_at(ok, 1.0))
    self.assertEqual(metrics.diverged_at([5.0, 40.0, 50.1, 2.0], 1.0), 2)
    # also after the run reached its target (k=2 at 0.1): k=3 ran away
    self.assertEqual(metrics.diverged_at([5.0, 1.0, 0.1, 1e7], 0.1), 3)
    self.assertEqual(metrics.diverged_at(ok, 51.0), 4)  # f(theta^T)
    self.assertEqual(metrics.diverged_at(ok, np.inf), 4)
    self.assertEqual(metrics.diverged_at([5.0, np.nan], 1.0), 1)
    # an unlogged iterate (loss_every=2: k=1, 3 are NaN) is no evidence
    self.assertEqual(metrics.diverged_at([5.0, 60.0, 4.0, np.nan], 1.0, 2),
                     None)
    self.assertEqual(metrics.diverged_at([5.0, np.nan, 60.0, np.nan], 1.0,
                                         2), 2)
    # a loss that starts at 0 (or below) is checked for NaN/inf only
    self.assertIsNone(metrics.diverged_at([0.0, 1e9], 1e9))
    self.assertIsNone(metrics.diverged_at([5.0, 1e9], 1.0,
                                          factor=float('inf')))
    self.assertEqual(metrics.divergence_note(None), '')
    self.assertIn('diverged at k=3', metrics.divergence_note(3))

  def test_a_runaway_sweep_point_is_summarized_up_to_it(self):
    # summarize: a finite runaway is diverged as a NaN is
    sent, bits = np.ones((3, 2), bool), np.full((3, 2), 4)
    row = metrics.summarize(
        Record.from_arrays(loss=[3.0, 2.0, 31.0], sent_M=sent, bits_M=bits),
        final_loss=1.0, fstar=None, target=1e-6)
    self.assertTrue(row['diverged'])
    # ...and every report reads the row by the same rule, naming where
    # the row says (sweep rows carry diverged_at).
    self.assertTrue(metrics.row_diverged(row))
    self.assertEqual(metrics.row_divergence(dict(row, diverged_at=2)),
                     metrics.divergence_note(2))

  def test_rows_without_the_mark_by_the_same_rule(self):
    # Rows by hand or from old results: the rule at the row's two ends.
    self.assertFalse(metrics.row_diverged({'total_uploads': 3}))
    self.assertFalse(metrics.row_diverged({'final_loss': 22.9,
                                           'initial_loss': 2.3}))
    self.assertTrue(metrics.row_diverged({'final_loss': 23.1,
                                          'initial_loss': 2.3}))
    self.assertTrue(metrics.row_diverged({'final_loss': None}))
    self.assertTrue(metrics.row_diverged({'final_loss': float('inf')}))
    self.assertTrue(metrics.row_diverged({'diverged_at': '7'}))
    self.assertEqual(metrics.row_diverged_at({'diverged_at': '7.0'}), 7)
    self.assertIsNone(metrics.row_diverged_at({'diverged_at': ''}))
    self.assertEqual(metrics.row_divergence({'final_loss': 1.0}), '')
    self.assertEqual(metrics.row_divergence({'final_loss': None}),
                     'diverged (loss NaN/inf or above 10x f(theta^0))')


class PaperResidualTest(absltest.TestCase):

  def test_average_minus_the_smallest(self):
    # M = 2 workers: the average loss is f / 2; the run's own minimum.
    residual, reference = metrics.paper_residual([8.0, 6.0, 5.0, 5.5], 2)
    self.assertEqual(reference, 2.5)
    np.testing.assert_allclose(residual, [1.5, 0.5, 0.0, 0.25])
    # An experiment's reference (another algorithm went lower).
    residual, reference = metrics.paper_residual([8.0, 6.0], 2, 2.0)
    np.testing.assert_allclose(residual, [2.0, 1.0])
    # A diverged value does not become the minimum.
    _, reference = metrics.paper_residual([8.0, np.nan, -np.inf, 6.0], 2)
    self.assertEqual(reference, 3.0)

  def test_summary_reports_both_definitions(self):
    sent = np.ones((4, 2), bool)
    bits = np.where(sent, 10, 0)
    # f = 8, 6, 5.00001, 5 (final 5): paper residual (f/2 - 2.5) reaches
    # 1e-5 at k = 2 (5e-6); the exact one (f* = 4.9) never reaches it.
    s = metrics.summarize(
        Record.from_arrays(loss=[8.0, 6.0, 5.00001], sent_M=sent[:3],
                           bits_M=bits[:3], grad_norm_sq=[4.0, 2.0, 1.0]),
        final_loss=5.0, fstar=4.9, target=1e-5)
    self.assertIsNone(s['target_iteration'])
    self.assertEqual(s['paper_reference'], 2.5)
    self.assertEqual(s['paper_target_iteration'], 2)
    self.assertEqual(s['paper_target_uploads'], 4)
    self.assertEqual(s['paper_target_bits'], 40)
    self.assertEqual(s['paper_final_residual'], 0.0)
    self.assertEqual(s['last_grad_norm_sq'], 1.0)


class SweepSummaryTest(absltest.TestCase):

  def result(self):
    loss = np.array([[4.0, 3.0, 2.5], [4.0, 2.0, 1.5], [4.0, np.nan, np.nan]])
    return sweep.SweepResult(
        points=[dict(algo='gd', l2=0.01), dict(algo='laq', l2=0.01),
                dict(algo='lag', l2=0.1)],
        loss_GxT=loss, grad_norm_sq_GxT=np.ones((3, 3)),
        sent_GxTxM=np.ones((3, 3, 2), bool),
        bits_GxTxM=np.full((3, 3, 2), 7, np.int32),
        bits_down_GxTxM=np.full((3, 3, 2), 64, np.int32),
        final_loss_G=np.array([2.2, 1.0, np.nan]),
        theta_GxP=np.zeros((3, 5)))

  def test_paper_reference_per_objective(self):
    # Points 0 and 1 share l2 (one objective): min of their averages (M = 2)
    # is 1.0 / 2; point 2 is alone with its l2 and diverged after k = 0.
    np.testing.assert_allclose(sweep_metrics.paper_references(self.result()),
                               [0.5, 0.5, 2.0])

  def test_rows(self):
    rows = sweep_metrics.summarize_sweep(self.result(), fstar=None, target=0.2)
    self.assertEqual([r['point'] for r in rows], [0, 1, 2])
    # Point 0's averages 2, 1.5, 1.25, 1.1 stay 0.6 above 0.5; point 1's
    # 2, 1, 0.75, 0.5 reach it with the final iterate, k = T = 3.
    self.assertIsNone(rows[0]['paper_target_iteration'])
    self.assertEqual(rows[1]['paper_target_iteration'], 3)
    self.assertEqual(rows[1]['paper_target_uploads'], 6)
    self.assertEqual(rows[2]['diverged_at'], 1)
    self.assertTrue(rows[2]['diverged'])
    self.assertEqual(rows[2]['iterations'], 2)  # steps 0..1 count
    self.assertEqual(rows[0]['total_bits'], 3 * 2 * 7)
    self.assertEqual(rows[0]['total_bits_down'], 3 * 2 * 64)
    self.assertEqual(rows[1]['paper_target_bits_down'], 3 * 2 * 64)

  def test_pareto_front_by_hand(self):
    cost = [1, 2, 2, 3, 4, np.nan, 5]
    accuracy = [0.5, 0.7, 0.6, 0.7, 0.9, 0.99, 0.9]
    np.testing.assert_array_equal(sweep_metrics.pareto_front(cost, accuracy),
                                  [0, 1, 4])
    residual = [1e-1, 1e-3, 1e-2, 1e-4, 1e-4, 0, 1e-5]
    np.testing.assert_array_equal(
        sweep_metrics.pareto_front(cost, residual, maximize=False),
        [0, 1, 3, 6])


if __name__ == '__main__':
  absltest.main()
