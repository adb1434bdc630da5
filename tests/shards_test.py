"""laq_jax.data.shards: splits among workers, equal and unequal.

(tests/data_test.py holds make_shards' every-sample-once, file order, seeds
and alpha's skew; tests/clients_test.py split_clients' padding and counts.)
Here: a hand-worked label_sorted split, trailing sample axes kept, the
Dirichlet mixtures centred on the overall label distribution (not a
symmetric one) when labels are unbalanced, unequal clients whose sizes do
not depend on the label skew, their label skew against alpha with fixed
seeds, and the argument checks.
"""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from laq_jax import data
from laq_jax.data import shards as shards_lib


def rows_of(x_shards):
  """Each shard row's source index (row i of x holds i everywhere)."""
  return x_shards.reshape(*x_shards.shape[:2], -1)[..., 0].astype(int)


def label_skew(y_shards, y, counts=None):
  """Mean total-variation distance of the shards' label mixtures from the
  overall one (over each client's own rows when counted)."""
  labels = np.unique(y)
  overall = np.array([np.mean(y == c) for c in labels])
  distances = []
  for m, shard in enumerate(y_shards):
    own = shard if counts is None else shard[:counts[m]]
    mix = np.array([np.mean(own == c) for c in labels])
    distances.append(0.5 * np.abs(mix - overall).sum())
  return float(np.mean(distances))


class MakeShardsTest(parameterized.TestCase):

  def test_label_sorted_by_hand(self):
    x = np.arange(6.0)[:, None]
    y = np.array([2, 0, 1, 0, 2, 1])
    x_shards, y_shards = data.make_shards(x, y, 3, 'label_sorted')
    np.testing.assert_array_equal(y_shards, [[0, 0], [1, 1], [2, 2]])
    # Stable: equal labels keep file order.
    np.testing.assert_array_equal(rows_of(x_shards), [[1, 3], [2, 5], [0, 4]])

  def test_mcmahan_shards(self):
    # 100 clients, 2 shards each of the label-sorted MNIST-like labels:
    # every sample once, each client two sorted runs of 300 (two labels at
    # most, as shard boundaries fall inside a label's 6,000).
    y = np.repeat(np.arange(10), 6000)
    x = np.arange(60000.0)[:, None]
    x_shards, y_shards = data.make_shards(x, y, 100, 'shards', seed=3)
    np.testing.assert_array_equal(np.sort(x_shards.reshape(-1)), x[:, 0])
    labels = [len(set(row)) for row in y_shards.tolist()]
    self.assertLessEqual(max(labels), 2)
    self.assertGreater(np.mean(np.array(labels) == 2), 0.5)
    for row in x_shards[:, :, 0]:
      self.assertTrue(np.all(np.diff(row[:300]) == 1))
      self.assertTrue(np.all(np.diff(row[300:]) == 1))
    with self.assertRaisesRegex(data.DataError, '2 M to divide'):
      data.make_shards(x[:100], y[:100], 100, 'shards')

  @parameterized.parameters(*data.EQUAL_SPLITS)
  def test_trailing_axes_of_a_sample_are_kept(self, split):
    # Images [n, 2, 3]: each shard holds whole images, labels alongside.
    n = 24
    x = np.repeat(np.arange(n, dtype=np.float32), 6).reshape(n, 2, 3)
    y = np.arange(n) % 4
    x_shards, y_shards = data.make_shards(x, y, 4, split, seed=1)
    self.assertEqual(x_shards.shape, (4, 6, 2, 3))
    for m in range(4):
      for i in range(6):
        source = int(x_shards[m, i, 0, 0])
        np.testing.assert_array_equal(x_shards[m, i], x[source])
        self.assertEqual(y_shards[m, i], y[source])

  def test_dirichlet_mixtures_centre_on_the_overall_labels(self):
    # 90% of the samples are label 0. With a large alpha each shard draws
    # about 90% label 0 (Dirichlet(alpha C q), q the overall mix); a
    # symmetric Dirichlet would ask for half and half and leave the last
    # shards all label 0.
    n = 2000
    y = np.where(np.arange(n) % 10 == 0, 1, 0)
    x = np.arange(n, dtype=np.float64)[:, None]
    _, y_shards = data.make_shards(x, y, 4, 'dirichlet', seed=3,
                                   dirichlet_alpha=1e4)
    fractions = (y_shards == 0).mean(axis=1)
    np.testing.assert_allclose(fractions, 0.9, atol=0.03)

  def test_dirichlet_with_one_label_is_the_data_once(self):
    x = np.arange(12.0)[:, None]
    x_shards, y_shards = data.make_shards(x, np.full(12, 7), 3, 'dirichlet',
                                          seed=0, dirichlet_alpha=0.1)
    np.testing.assert_array_equal(y_shards, 7)
    np.testing.assert_array_equal(np.sort(rows_of(x_shards).ravel()),
                                  np.arange(12))

  def test_argument_checks(self):
    x, y = np.zeros((6, 1)), np.zeros(6, int)
    with self.assertRaisesRegex(data.DataError,
                                'num_workers=True must be an integer >= 1'):
      data.make_shards(x, y, True)
    with self.assertRaisesRegex(data.DataError,
                                'num_workers=2.0 must be an integer >= 1'):
      data.make_shards(x, y, 2.0)
    with self.assertRaisesRegex(data.DataError, r'x has 6 rows but y has shape '
                                r'\(6, 1\); expected y of shape \[6\]'):
      data.make_shards(x, y[:, None], 2)
    # A divisor hint beyond the first 100 is not listed.
    with self.assertRaisesRegex(data.DataError, r'among num_workers=4\. Worker '
                                r'counts that divide 6 \(up to 100\): 1, 2, 3, '
                                r'6;'):
      data.make_shards(x, y, 4)


class SplitClientsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    self.n = 3000
    self.x = np.arange(self.n, dtype=np.float64)[:, None]
    self.y = rng.integers(0, 10, self.n)

  def split(self, **kwargs):
    return data.split_clients(self.x, self.y, 12, 'dirichlet_unequal',
                              **kwargs)

  def test_sizes_do_not_depend_on_the_label_skew(self):
    # The sizes are drawn first from the seed: the label alpha changes
    # who holds which label, not how many samples each client holds.
    skewed, even = self.split(seed=5, dirichlet_alpha=0.05), self.split(
        seed=5, dirichlet_alpha=100.0)
    np.testing.assert_array_equal(skewed.count_M, even.count_M)
    self.assertEqual(int(skewed.count_M.sum()), self.n)
    self.assertEqual(skewed.count_M.dtype, np.int32)
    self.assertEqual(skewed.x_MxNxD.shape, (12, skewed.count_M.max(), 1))

  def test_label_skew_follows_alpha_with_fixed_seeds(self):
    skews = {alpha: label_skew(s.y_MxN, self.y, s.count_M) for alpha, s in (
        (a, self.split(seed=2, dirichlet_alpha=a)) for a in (0.05, 1.0, 100.0))}
    self.assertGreater(skews[0.05], 0.6)
    self.assertLess(skews[100.0], 0.15)
    self.assertGreater(skews[0.05], skews[1.0])
    self.assertGreater(skews[1.0], skews[100.0])

  def test_client_sizes(self):
    rng = np.random.default_rng(9)
    sizes = shards_lib.client_sizes(50, 7, 1.0, rng)
    self.assertEqual(int(sizes.sum()), 50)
    self.assertGreaterEqual(int(sizes.min()), 1)
    self.assertLen(sizes, 7)
    # Every client exactly one sample when there is no more.
    np.testing.assert_array_equal(
        shards_lib.client_sizes(7, 7, 1.0, np.random.default_rng(0)), 1)

  def test_equal_splits_pass_alpha_through(self):
    n = 600
    x = np.arange(n, dtype=np.float64)[:, None]
    y = np.arange(n) % 10
    got = data.split_clients(x, y, 6, 'dirichlet', seed=4,
                             dirichlet_alpha=0.2)
    want = data.make_shards(x, y, 6, 'dirichlet', seed=4,
                            dirichlet_alpha=0.2)
    self.assertIsNone(got.count_M)
    np.testing.assert_array_equal(got.x_MxNxD, want[0])
    np.testing.assert_array_equal(got.y_MxN, want[1])

  def test_argument_checks(self):
    with self.assertRaisesRegex(data.DataError, 'dirichlet_alpha=nan must be '
                                '> 0'):
      self.split(dirichlet_alpha=float('nan'))
    with self.assertRaisesRegex(data.DataError, 'num_workers=0 must be an '
                                'integer >= 1'):
      data.split_clients(self.x, self.y, 0, 'dirichlet_unequal')
    with self.assertRaisesRegex(data.DataError, r"split='dirichlet_equal' is "
                                r'unknown; choose one of'):
      data.split_clients(self.x, self.y, 3, 'dirichlet_equal')


if __name__ == '__main__':
  absltest.main()
