"""laq_jax.randomness: the minibatch draw (a keyed Feistel permutation)."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from laq_jax import randomness
from tests import common
from tests import reference


class SampleRowsTest(parameterized.TestCase):

  @parameterized.parameters((6000, 500), (600, 50), (60, 60), (7, 3),
                            (1, 1), (4096, 4096), (4097, 9), (70000, 5))
  def test_the_oracle_rows_distinct_and_in_range(self, n, k):
    for seed in range(6):
      key = randomness.batch_key(seed, seed * 7, seed % 3)
      got = randomness.sample_rows(key, n, k)
      self.assertEqual(got.dtype, jnp.int32)
      self.assertEqual(got.shape, (k,))
      np.testing.assert_array_equal(got, common.batch_rows(key, n, k))
      got = np.asarray(got)
      self.assertLen(set(got.tolist()), k)
      self.assertTrue(((got >= 0) & (got < n)).all())
    if k == n:  # all of the rows: a permutation of them
      np.testing.assert_array_equal(np.sort(got), np.arange(n))

  def test_half_bits_are_the_least_power_of_four(self):
    for n in range(1, 5000):
      h = randomness.feistel_half_bits(n)
      self.assertGreaterEqual(4 ** h, n)
      self.assertTrue(h == 1 or 4 ** (h - 1) < n, n)

  def test_same_under_vmap_and_jit(self):
    keys = jax.vmap(lambda w: randomness.batch_key(3, 11, w))(jnp.arange(4))
    want = [randomness.sample_rows(k, 900, 90) for k in keys]
    got = jax.jit(jax.vmap(lambda k: randomness.sample_rows(k, 900, 90)))(
        keys)
    np.testing.assert_array_equal(got, np.stack(want))

  def test_each_row_is_drawn_as_often_as_a_uniform_draw_would(self):
    # 3,000 draws of 50 of 600 rows: each row's count is Binomial(3000,
    # 1/12) under uniform sampling without replacement (mean 250, sd 15.1).
    n, k, draws = 600, 50, 3000
    keys = jax.vmap(lambda s: randomness.batch_key(1, s, 0))(
        jnp.arange(draws))
    rows = np.asarray(jax.jit(jax.vmap(
        lambda key: randomness.sample_rows(key, n, k)))(keys))
    counts = np.bincount(rows.ravel(), minlength=n)
    mean = draws * k / n
    chi2 = np.sum((counts - mean) ** 2 / (mean * (1 - k / n)))
    # chi-square with n - 1 = 599 degrees of freedom: mean 599, sd 34.6.
    self.assertLess(abs(chi2 - (n - 1)), 6 * np.sqrt(2 * (n - 1)))
    # The first row of a draw is uniform too, and two rows of one draw are
    # not correlated: the pairs (first, second) fall in a 10 x 10 grid of
    # cells evenly.
    cells = np.bincount((rows[:, 0] * 10 // n) * 10 + rows[:, 1] * 10 // n,
                        minlength=100)
    expect = draws / 100
    chi2 = np.sum((cells - expect) ** 2 / expect)  # 99 degrees of freedom
    self.assertLess(abs(chi2 - 99), 6 * np.sqrt(2 * 99))

  def test_more_rows_than_there_are_is_refused(self):
    key = randomness.batch_key(0, 0, 0)
    with self.assertRaisesRegex(ValueError, 'k=11 distinct rows of n=10'):
      randomness.sample_rows(key, 10, 11)
    with self.assertRaisesRegex(ValueError, 'k=0'):
      randomness.sample_rows(key, 10, 0)


class ReferenceDrawTest(absltest.TestCase):

  def test_the_oracle_is_a_permutation_for_any_keys(self):
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 16, 17, 1000):
      keys = rng.integers(0, 2**32, size=8, dtype=np.uint64).astype(np.uint32)
      np.testing.assert_array_equal(
          np.sort(reference.sample_rows(keys, n, n)), np.arange(n))


if __name__ == '__main__':
  absltest.main()
