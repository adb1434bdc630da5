"""The innovation quantizer and the bit count, against the spec's formulas."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import quantize
from tests import reference

quantize_jit = jax.jit(quantize.quantize_innovation)


class QuantizeTest(parameterized.TestCase):

  @parameterized.parameters(1, 2, 3, 4, 8, 16)
  def test_codes_range_and_error_bound(self, bits):
    rng = np.random.default_rng(bits)
    g = rng.normal(size=1000)
    ref = rng.normal(size=1000) * 0.5
    out = quantize_jit(jnp.asarray(g), jnp.asarray(ref), jnp.int32(bits))
    codes = np.asarray(out.codes_P)
    self.assertTrue(np.all(codes == np.round(codes)))
    self.assertGreaterEqual(codes.min(), 0)
    self.assertLessEqual(codes.max(), 2**bits - 1)
    radius = np.max(np.abs(g - ref))
    self.assertAlmostEqual(float(out.radius), radius, places=12)
    tau = 1.0 / (2**bits - 1)
    err = np.abs(np.asarray(out.value_P) - g)
    self.assertLessEqual(err.max(), tau * radius * (1 + 1e-9))
    self.assertAlmostEqual(float(out.error_sq), np.sum(err**2), places=10)
    # The innovation of largest magnitude (+R or -R) hits an end code exactly.
    extreme = np.argmax(np.abs(g - ref))
    expected = 2**bits - 1 if g[extreme] > ref[extreme] else 0
    self.assertEqual(codes[extreme], expected)

  @parameterized.parameters(1, 3, 4)
  def test_matches_numpy_formula(self, bits):
    rng = np.random.default_rng(7)
    g, ref = rng.normal(size=200), rng.normal(size=200)
    value, err = reference.quantize(g, ref, bits)
    out = quantize_jit(jnp.asarray(g), jnp.asarray(ref), jnp.int32(bits))
    np.testing.assert_allclose(np.asarray(out.value_P), value, atol=1e-12)
    self.assertAlmostEqual(float(out.error_sq), err, places=10)

  def test_hand_worked_two_bits(self):
    # R = 1, tau = 1/3: the grid is {-1, -1/3, 1/3, 1} around ref = 0.
    g = jnp.array([1.0, -1.0, 0.2, -0.5])
    out = quantize_jit(g, jnp.zeros(4), jnp.int32(2))
    np.testing.assert_array_equal(np.asarray(out.codes_P), [3, 0, 2, 1])
    np.testing.assert_allclose(np.asarray(out.value_P),
                               [1.0, -1.0, 1 / 3, -1 / 3], atol=1e-12)

  def test_zero_radius_keeps_reference(self):
    ref = jnp.array([0.5, -2.0, 3.0])
    out = quantize_jit(ref, ref, jnp.int32(4))
    np.testing.assert_array_equal(np.asarray(out.value_P), np.asarray(ref))
    self.assertEqual(float(out.error_sq), 0.0)
    self.assertTrue(np.all(np.isfinite(np.asarray(out.codes_P))))

  def test_float32_error_bound(self):
    rng = np.random.default_rng(3)
    g = rng.normal(size=7850).astype(np.float32)
    ref = (rng.normal(size=7850) * 0.1).astype(np.float32)
    out = quantize_jit(jnp.asarray(g), jnp.asarray(ref), jnp.int32(4))
    radius = np.max(np.abs(g.astype(np.float64) - ref))
    err = np.abs(np.asarray(out.value_P, np.float64) - g)
    self.assertLessEqual(err.max(), radius / 15 * (1 + 1e-5))

  @parameterized.parameters(np.float64, np.float32)
  def test_near_zero_innovations_round_up(self, dtype):
    # v = (R, -R, +-noise): zero in exact arithmetic up to summation noise
    # far below kappa R. Exact arithmetic puts 0 on a tie and rounds it up to
    # code 2^(b-1) (value +tau R); both signs of the noise must too.
    kappa = quantize.tie_tolerance(dtype)
    noise = kappa * 1e-3
    g = np.array([1.0, -1.0, noise, -noise, 0.0, 3 * kappa], dtype)
    out = quantize_jit(jnp.asarray(g), jnp.zeros(6, dtype), jnp.int32(3))
    codes = np.asarray(out.codes_P)
    np.testing.assert_array_equal(codes[2:5], [4, 4, 4])
    np.testing.assert_allclose(np.asarray(out.value_P)[2:5], 1 / 7, rtol=1e-6)
    # Beyond kappa R the plain formula rounds: 3 kappa is still below half a
    # grid step, and positive, so it rounds up as well; -3 kappa would not.
    self.assertEqual(codes[5], 4)
    neg = quantize_jit(jnp.asarray(-g), jnp.zeros(6, dtype), jnp.int32(3))
    self.assertEqual(np.asarray(neg.codes_P)[5], 3)
    np.testing.assert_array_equal(np.asarray(neg.codes_P)[2:5], [4, 4, 4])

  def test_tie_tolerance_below_half_a_step(self):
    # kappa R is below half a grid step (tau R, the grid spacing being
    # 2 tau R) for every b the dtype resolves.
    self.assertLess(quantize.tie_tolerance(np.float64), 1 / (2**29 - 1))
    self.assertLess(quantize.tie_tolerance(np.float32), 1 / (2**16 - 1))


if __name__ == '__main__':
  absltest.main()
