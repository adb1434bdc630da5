"""laq_jax.randomness: the faster minibatch draw is jax.random.choice's."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import randomness


class ChoiceTest(parameterized.TestCase):

  @parameterized.parameters((6000, 500), (600, 50), (60, 60), (7, 3),
                            (1, 1), (70000, 5))
  def test_same_indices_as_jax_random_choice(self, n, k):
    for seed in range(8):
      key = randomness.batch_key(seed, seed * 7, seed % 3)
      want = jax.random.choice(key, n, (k,), replace=False)
      got = randomness.choice_without_replacement(key, n, k)
      self.assertEqual(got.dtype, jnp.int32)
      np.testing.assert_array_equal(got, want)

  def test_same_under_vmap_and_jit(self):
    keys = jax.vmap(lambda w: randomness.batch_key(3, 11, w))(jnp.arange(4))
    want = jax.vmap(lambda k: jax.random.choice(k, 900, (90,),
                                                replace=False))(keys)
    got = jax.jit(jax.vmap(
        lambda k: randomness.choice_without_replacement(k, 900, 90)))(keys)
    np.testing.assert_array_equal(got, want)

  def test_stable_argsort_breaks_ties_by_position(self):
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 5, size=(3, 400)).astype(np.uint32)  # many ties
    np.testing.assert_array_equal(
        randomness.stable_argsort(jnp.asarray(keys)),
        np.argsort(keys, axis=-1, kind='stable'))
    floats = np.where(np.arange(300) < 200, rng.random(300), 2.0)
    floats = floats.astype(np.float32)
    np.testing.assert_array_equal(
        randomness.stable_argsort(jnp.asarray(floats)),
        np.argsort(floats, kind='stable'))
    with self.assertRaisesRegex(TypeError, 'uint32 or float32.*int64'):
      randomness.stable_argsort(jnp.arange(3, dtype=jnp.int64))


if __name__ == '__main__':
  absltest.main()
