"""laq_jax.trigger: the LAG/LAQ upload rule, against hand-worked numbers."""

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from laq_jax import trigger


class HistoryThresholdTest(absltest.TestCase):

  def test_hand_worked(self):
    # (xi / D) sum_d h_d / (alpha^2 M^2) = (0.6 / 3) * 6 / (0.25 * 4) = 1.2
    hist = jnp.array([1.0, 2.0, 3.0])
    got = trigger.history_threshold(hist, 0.5, 0.6, 2)
    self.assertAlmostEqual(float(got), 1.2, places=12)

  def test_authors_weights_while_the_history_fills(self):
    # The authors weight the k steps that exist by xi / k while k <= D, then
    # xi / D: at k = 2 two steps exist (h_1, h_2; the rest are 0).
    hist = jnp.array([1.0, 3.0, 0.0, 0.0])
    scale = 0.8 / (0.1**2 * 10**2)
    for step, divisor in ((0, 1), (1, 1), (2, 2), (4, 4), (9, 4)):
      got = trigger.history_threshold(hist, 0.1, 0.8, 10, step, True)
      self.assertAlmostEqual(float(got), scale * 4.0 / divisor, places=9,
                             msg=f'k={step}')
      plain = trigger.history_threshold(hist, 0.1, 0.8, 10, step, False)
      self.assertAlmostEqual(float(plain), scale * 4.0 / 4, places=9)

  def test_threshold_adds_the_error_terms(self):
    got = trigger.threshold(1.0, 0.25, 0.5, 3.0, 0.2)
    self.assertAlmostEqual(float(got), 1.0 + 3.0 * 0.75 + 0.2)


class ShouldUploadTest(absltest.TestCase):

  def test_truth_table(self):
    # (innovation, rhs, clock, tbar, lazy) -> upload
    cases = [((1.0, 2.0, 0, 100, True), False),   # below the threshold
             ((2.0, 2.0, 0, 100, True), True),    # at it (>=)
             ((3.0, 2.0, 0, 100, True), True),    # above it
             ((1.0, 2.0, 99, 100, True), False),  # not yet stale
             ((1.0, 2.0, 100, 100, True), True),  # the clock forces it
             ((0.0, 2.0, 0, 100, False), True)]   # not lazy: always
    for args, expected in cases:
      self.assertEqual(bool(trigger.should_upload(*args)), expected, args)

  def test_vectorized_over_workers(self):
    got = trigger.should_upload(jnp.array([1.0, 5.0, 1.0]), 2.0,
                                jnp.array([0, 0, 7]), 7, True)
    np.testing.assert_array_equal(got, [False, True, True])


if __name__ == '__main__':
  absltest.main()
