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

  @parameterized.parameters((7850, 4), (159010, 3), (10, 32), (10, 1))
  def test_upload_bits(self, num_params, bits):
    self.assertEqual(int(quantize.upload_bits(num_params, bits, True)),
                     bits * num_params + 32)
    self.assertEqual(int(quantize.upload_bits(num_params, bits, False)),
                     32 * num_params)


if __name__ == '__main__':
  absltest.main()
