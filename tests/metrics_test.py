"""Tests of laq_jax.metrics (hand-worked arrays) and laq_jax.plotting."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import metrics
from laq_jax import plotting


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
    s = metrics.summarize(loss_T=[3.0, 2.0, 1.0 + 1e-7], final_loss=1.0,
                          sent_TxM=sent, bits_TxM=bits, fstar=1.0,
                          target=1e-6, final_test_accuracy=0.5, algo='laq')
    self.assertEqual(s['algo'], 'laq')
    self.assertEqual(s['iterations'], 3)
    self.assertEqual(s['total_uploads'], 3)
    self.assertEqual(s['total_bits'], 300)
    self.assertEqual(s['target_iteration'], 2)
    self.assertEqual(s['target_uploads'], 3)
    self.assertEqual(s['target_bits'], 300)
    self.assertEqual(s['final_residual'], 0.0)
    self.assertFalse(s['diverged'])
    no_fstar = metrics.summarize(loss_T=[3.0, 2.0, 1.0], final_loss=1.0,
                                 sent_TxM=sent, bits_TxM=bits, fstar=None,
                                 target=1e-6)
    self.assertIsNone(no_fstar['target_iteration'])
    self.assertIsNone(no_fstar['final_residual'])
    self.assertIsNone(no_fstar['fstar'])
    diverged = metrics.summarize(loss_T=[3.0, np.inf, np.nan],
                                 final_loss=np.nan, sent_TxM=sent,
                                 bits_TxM=bits, fstar=None, target=1e-6)
    self.assertTrue(diverged['diverged'])
    self.assertIsNone(diverged['final_loss'])


class PlottingTest(absltest.TestCase):

  def curves(self, fstar):
    return [metrics.make_curve(name, [10.0, 6.0, 4.0], 3.5, [2, 0, 1],
                               [20, 0, 10], fstar=fstar)
            for name in ('gd', 'laq')]

  def test_loss_figures(self):
    figures = plotting.loss_figures(self.curves(3.0))
    self.assertEqual(set(figures), {'iterations', 'uploads', 'bits'})
    for x, fig in figures.items():
      ax = fig.axes[0]
      self.assertEqual(ax.get_yscale(), 'log')
      self.assertLen(ax.get_lines(), 2)
      self.assertIn('residual', ax.get_ylabel())
      np.testing.assert_array_equal(
          ax.get_lines()[0].get_xdata(),
          {'iterations': [0, 1, 2, 3], 'uploads': [0, 2, 2, 3],
           'bits': [np.nan, 20, 20, 30]}[x])  # log x: no 0
      self.assertEqual(ax.get_xscale(), 'log' if x == 'bits' else 'linear')

  def test_loss_label_without_fstar(self):
    fig = plotting.loss_figure(self.curves(None), 'bits')
    self.assertIn('f* unknown', fig.axes[0].get_ylabel())

  def test_mixed_curves_and_bad_axis_raise(self):
    with self.assertRaisesRegex(ValueError, 'mix'):
      plotting.loss_figure(self.curves(3.0)[:1] + self.curves(None)[:1])
    with self.assertRaisesRegex(ValueError, "x='time'"):
      plotting.loss_figure(self.curves(3.0), 'time')

  def test_upload_raster(self):
    sent = np.zeros((50, 4), bool)
    sent[[0, 7, 49], [0, 3, 2]] = True
    fig = plotting.upload_raster(sent, title='laq')
    ax = fig.axes[0]
    self.assertIn('3 uploads of 200', ax.get_title())
    events = [c.get_positions() for c in ax.collections]
    np.testing.assert_array_equal(events[0], [0])
    np.testing.assert_array_equal(events[2], [49])
    np.testing.assert_array_equal(events[3], [7])
    self.assertEmpty(events[1])


if __name__ == '__main__':
  absltest.main()
