"""The compressors against NumPy transcriptions, their bit costs, unbiasedness."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import compressors
from laq_jax.parts import sparsify
from tests import reference


# Each compressor's own parameter, by its dotted name.
DOTTED = {'levels': 'qsgd.levels', 'keep_prob': 'rand_p.keep_prob',
          'top_k': 'top_k.k'}


def hyper(**kw):
  return lj.make_hyper('laq', dtype=jnp.float64,
                       **{DOTTED[k]: v for k, v in kw.items()})


def draws(key, size):
  return np.asarray(jax.random.uniform(key, (size,), jnp.float64))


class CompressorTest(parameterized.TestCase):

  @parameterized.parameters(1, 4, 50, 10_000)
  def test_qsgd_matches_numpy(self, levels):
    rng = np.random.default_rng(levels)
    g, ref = rng.normal(size=300), rng.normal(size=300)
    key = jax.random.key(3)
    for r in (np.zeros(300), ref):  # the gradient itself, and an innovation
      out = jax.jit(compressors.qsgd)(jnp.asarray(g), jnp.asarray(r), key,
                                      hyper(levels=levels))
      c, bits = reference.qsgd(g - r, levels, draws(key, 300))
      np.testing.assert_allclose(np.asarray(out.value_P), r + c, atol=1e-12)
      self.assertEqual(int(out.bits), bits)

  @parameterized.parameters(0.1, 0.5, 1.0)
  def test_rand_p_matches_numpy(self, keep_prob):
    rng = np.random.default_rng(1)
    g = rng.normal(size=500)
    key = jax.random.key(8)
    out = jax.jit(compressors.rand_p)(jnp.asarray(g), jnp.zeros(500), key,
                                      hyper(keep_prob=keep_prob))
    c, bits = reference.rand_p(g, keep_prob, draws(key, 500))
    np.testing.assert_allclose(np.asarray(out.value_P), c, atol=1e-13)
    self.assertEqual(int(out.bits), bits)
    if keep_prob == 1.0:
      np.testing.assert_allclose(np.asarray(out.value_P), g, atol=1e-15)
      self.assertEqual(int(out.bits), 32 * 500 + 32)

  @parameterized.parameters((0.01, np.float64), (0.3, np.float32), (5, np.float64),
                            (1, np.float32))
  def test_top_k_matches_numpy(self, top_k, dtype):
    rng = np.random.default_rng(3)
    g = rng.normal(size=1025).astype(dtype)
    g[100:110] = g[5]  # ties at some magnitudes: the lowest indices win
    g[200:205] = -g[5]
    out = jax.jit(compressors.top_k)(jnp.asarray(g), jnp.zeros(1025, dtype),
                                     None, hyper(top_k=top_k))
    k = reference.top_k_count(top_k, 1025)
    c, bits = reference.top_k(g, k)
    np.testing.assert_array_equal(np.asarray(out.value_P), c)
    self.assertEqual(int(out.bits), bits)
    self.assertEqual(np.count_nonzero(np.asarray(out.value_P)), k)

  @parameterized.parameters(0.001, 0.01, 0.1, 0.5)
  def test_top_k_contracts(self, top_k):
    # ||C(v) - v||^2 <= (1 - k/p) ||v||^2 for every v.
    for seed in range(5):
      v = np.random.default_rng(seed).standard_t(2, size=4000)
      out = compressors.top_k(jnp.asarray(v), jnp.zeros(4000), None,
                              hyper(top_k=top_k))
      k = int(compressors.top_k_count(top_k, 4000))
      lost = np.sum((np.asarray(out.value_P) - v) ** 2)
      self.assertLessEqual(lost, (1 - k / 4000) * np.sum(v**2) * (1 + 1e-12))

  @parameterized.parameters(np.float64, np.float32)
  def test_sign_matches_numpy(self, dtype):
    g = np.random.default_rng(4).normal(size=300).astype(dtype)
    g[:3] = [0.0, 1e-20, -1e-20]  # zero up to noise: sign 0
    out = jax.jit(compressors.sign)(jnp.asarray(g), jnp.zeros(300, dtype),
                                    None, hyper())
    c, bits = reference.sign(g)
    np.testing.assert_allclose(np.asarray(out.value_P), c, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(out.value_P)[:3], 0)
    self.assertEqual(int(out.bits), bits)
    # The scale is the mean magnitude: ||C(v)||_1 <= ||v||_1.
    self.assertLessEqual(np.abs(np.asarray(out.value_P)).sum(),
                         np.abs(g).sum() * (1 + 1e-6))

  def test_terngrad_matches_numpy(self):
    g = np.random.default_rng(5).normal(size=500)
    key = jax.random.key(11)
    out = jax.jit(compressors.terngrad)(jnp.asarray(g), jnp.zeros(500), key,
                                        hyper())
    c, bits = reference.terngrad(g, draws(key, 500))
    np.testing.assert_allclose(np.asarray(out.value_P), c, atol=1e-15)
    self.assertEqual(int(out.bits), bits)
    self.assertLen(np.unique(np.abs(np.asarray(out.value_P))), 2)  # 0, max

  @parameterized.parameters(('qsgd', dict(levels=3)),
                            ('rand_p', dict(keep_prob=0.25)),
                            ('terngrad', dict()))
  def test_unbiased(self, name, kw):
    # The mean of C(v) over n independent keys is v within 6 standard errors
    # of the sample mean, coordinate by coordinate. A biased rounding (e.g.
    # floor without the random +1) misses by far more.
    v = jnp.asarray(np.random.default_rng(0).normal(size=64))
    n = 20_000
    keys = jax.random.split(jax.random.key(1), n)
    fn = jax.jit(jax.vmap(lambda k: compressors.REGISTRY.get(name)(
        v, jnp.zeros_like(v), k, hyper(**kw)).value_P))
    samples = np.asarray(fn(keys))
    mean, sd = samples.mean(axis=0), samples.std(axis=0)
    np.testing.assert_array_less(np.abs(mean - np.asarray(v)),
                                 6 * sd / np.sqrt(n) + 1e-12)
    self.assertGreater(sd.max(), 0.01)  # really random

  @parameterized.parameters((1, 1), (2, 3), (3, 3), (4, 5), (7, 5), (8, 7),
                            (1000, 19), (2**24, 49))
  def test_elias_gamma_length(self, level, length):
    self.assertEqual(int(compressors.elias_gamma_bits(jnp.float64(level))),
                     length)
    self.assertEqual(reference.gamma_length(level), length)

  def test_qsgd_of_zero(self):
    out = compressors.qsgd(jnp.zeros(10), jnp.zeros(10), jax.random.key(0),
                           hyper())
    np.testing.assert_array_equal(np.asarray(out.value_P), np.zeros(10))
    self.assertEqual(int(out.bits), 32)

  def test_qsgd_hand_worked(self):
    # v = (3, -4): ||v|| = 5; s = 5 gives s|v|/||v|| = (3, 4), whole
    # numbers, so no randomness: levels 3 and 4, C(v) = v exactly. Bits: 32,
    # then per entry gamma(gap) + 1 + gamma(level): gaps 1 and 1 (1 bit
    # each), gamma(3) = 3 and gamma(4) = 5 bits: 5 and 7.
    out = compressors.qsgd(jnp.array([3.0, -4.0]), jnp.zeros(2),
                           jax.random.key(0), hyper(levels=5))
    np.testing.assert_allclose(np.asarray(out.value_P), [3.0, -4.0])
    self.assertEqual(int(out.bits), 32 + 5 + 7)

  @parameterized.parameters(False, True)
  def test_bits_of_uniform_and_identity(self, authors_code):
    h = lj.make_hyper('laq', dtype=jnp.float64, bits=5,
                      authors_code=authors_code)
    g = jnp.linspace(-1, 1, 7850)
    out = compressors.uniform(g, jnp.zeros_like(g), None, h)
    self.assertEqual(int(out.bits), 5 * 7850 + (0 if authors_code else 32))
    out = compressors.identity(g, jnp.zeros_like(g), None, h)
    self.assertEqual(int(out.bits), 32 * 7850)
    np.testing.assert_array_equal(np.asarray(out.value_P), np.asarray(g))

  def test_compress_dispatches_on_data(self):
    rng = np.random.default_rng(2)
    g, ref = jnp.asarray(rng.normal(size=40)), jnp.asarray(rng.normal(size=40))
    key = jax.random.key(4)
    every = compressors.REGISTRY.parts(compressors.COMPRESSORS)  # opt-in too
    fn = jax.jit(lambda g, ref, key, h: compressors.compress(g, ref, key, h,
                                                             every)[0])
    for name in compressors.COMPRESSORS:
      h = hyper()._replace(compressor=jnp.int32(compressors.index(name)))
      want = jax.jit(compressors.REGISTRY.get(name))(g, ref, key, h)
      got = fn(g, ref, key, h)
      np.testing.assert_allclose(np.asarray(got.value_P),
                                 np.asarray(want.value_P), rtol=1e-14)
      self.assertEqual(int(got.bits), int(want.bits))
    # One program for every choice: the choice is data.
    self.assertEqual(fn._cache_size(), 1)

  def test_unknown_compressor(self):
    with self.assertRaisesRegex(ValueError, "unknown compressor 'top_j'.*"
                                'identity, uniform, qsgd, rand_p, top_k'):
      compressors.index('top_j')
    spec = lj.RunSpec(lj.get_problem('logreg'), 2, compressors=('uniform',))
    with self.assertRaisesRegex(ValueError, 'rand_p.*RunSpec.compressors'):
      spec.check_hyper(lj.make_hyper('ssgd'))


class SparsifyTest(parameterized.TestCase):
  """The masks of laq_jax/parts/sparsify.py against NumPy's stable sorts."""

  @parameterized.parameters(jnp.float32, jnp.float64)
  def test_top_k_mask_is_the_stable_order_of_magnitudes(self, dtype):
    rng = np.random.default_rng(3)
    for k in (1, 4, 9, 16):
      # many ties (a few levels, both signs): ties go to the lowest index
      v = rng.integers(-3, 4, size=16).astype(np.float64) * 0.5
      want = np.zeros(16, bool)
      want[np.argsort(-np.abs(v), kind='stable')[:k]] = True
      got = np.asarray(sparsify.top_k_mask(jnp.asarray(v, dtype), k))
      np.testing.assert_array_equal(got, want, f'k={k}, v={v}')

  def test_randk_mask_keeps_the_k_smallest_uniforms_of_its_key(self):
    key = jax.random.key(11)
    u = np.asarray(jax.random.uniform(key, (50,), jnp.float32))
    for k in (1, 7, 50):
      want = np.zeros(50, bool)
      want[np.argsort(u, kind='stable')[:k]] = True
      got = np.asarray(sparsify.randk_mask(key, 50, k, jnp.float32))
      np.testing.assert_array_equal(got, want)
      self.assertEqual(got.sum(), k)

  def test_top_k_count_reads_a_fraction_or_a_count(self):
    self.assertEqual(int(sparsify.top_k_count(0.01, 1000)), 10)
    self.assertEqual(int(sparsify.top_k_count(0.0001, 1000)), 1)  # >= 1
    self.assertEqual(int(sparsify.top_k_count(7, 1000)), 7)
    self.assertEqual(int(sparsify.top_k_count(5000, 1000)), 1000)  # <= p


class ChainTest(absltest.TestCase):
  """chain(top_k,qsgd): QSGD's levels on the k values top_k kept."""

  def test_each_link_compresses_what_the_one_before_sent(self):
    from laq_jax import registry, wire  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(3)
    g = jnp.asarray(rng.normal(size=50), jnp.float32)
    ref = jnp.asarray(rng.normal(size=50) * 0.1, jnp.float32)
    key = jax.random.key(7)
    zero = jnp.zeros(50, jnp.float32)
    with registry.scoped():
      algo = lj.get_algorithm('laq+compressor=chain(top_k,qsgd)')
      self.assertEqual(algo.compressor, 'chain(top_k,qsgd)')
      # opt-in: a program compiles it in only where a point names it
      self.assertNotIn(algo.compressor, compressors.REGISTRY.default_names)
      h = lj.make_hyper(algo, **{'top_k.k': 5, 'qsgd.levels': 8})
      part = compressors.REGISTRY.get(algo.compressor)
      out, _ = compressors.compress(g, ref, key, h, (part,))
      # by hand: top_k on v = g - ref (its key fold_in(key, 0)), then
      # qsgd on what it kept (fold_in(key, 1)), around ref
      kept = compressors.top_k(g - ref, zero,
                               jax.random.fold_in(key, 0), h).value_P
      q = compressors.qsgd(kept, zero, jax.random.fold_in(key, 1),
                           h)
      np.testing.assert_array_equal(np.asarray(out.value_P),
                                    np.asarray(ref + q.value_P))
      # nonzero only where top_k kept, and the bits QSGD's code of those
      # levels takes (gaps and levels, not p), counted independently
      moved = np.flatnonzero(np.asarray(out.value_P - ref))
      self.assertTrue(set(moved) <= set(np.flatnonzero(np.asarray(kept))))
      norm = float(np.linalg.norm(np.asarray(kept)))
      levels = np.rint(np.asarray(q.value_P, np.float64) * 8 / norm)
      self.assertEqual(int(out.bits),
                       wire.qsgd_bits({'signed_levels_P': levels}))
      dense = compressors.qsgd(g - ref, zero,
                               jax.random.fold_in(key, 1), h)
      self.assertLess(int(out.bits), int(dense.bits))
      # no wire format: not deployable, said by name
      with self.assertRaisesRegex(ValueError, "'chain\\(top_k,qsgd\\)' has "
                                  'no wire format'):
        wire.Format.of(algo.compressor, 50, h)
    self.assertNotIn('chain(top_k,qsgd)', compressors.COMPRESSORS)

  def test_a_chain_runs_beside_its_links_in_one_program(self):
    from laq_jax import registry, sweep  # pylint: disable=g-import-not-at-top
    from tests import common  # pylint: disable=g-import-not-at-top
    x, y = common.mnist_shards(common.SMALL_M, common.SMALL_N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), common.SMALL_M)
    base = dict(lj.hyper.DEFAULTS, algo='gd', step_size=0.01,
                **{'top_k.k': 0.05, 'qsgd.levels': 16})
    with registry.scoped():
      points = sweep.expand_grid({'compressor': ['chain(top_k,qsgd)',
                                                 'qsgd']}, base)
      self.assertEqual([p['algo'] for p in points],
                       ['gd+compressor=chain(top_k,qsgd)',
                        'gd+compressor=qsgd'])
      got = sweep.run_sweep(spec, data, points, 10)
    loss = np.asarray(got.loss_GxT)
    self.assertTrue(np.all(np.isfinite(loss)))
    self.assertTrue(np.all(loss[:, -1] < loss[:, 0]))
    bits = np.asarray(got.bits_GxTxM, np.float64)
    # 5% of 7,850 coordinates: at most k entries, each a gap and a level
    self.assertLess(bits[0].max(), 0.05 * 7850 * (2 * 13 + 1 + 2 * 4 + 1)
                    + 32)
    self.assertLess(bits[0].mean(), 0.5 * bits[1].mean())

  def test_refusals(self):
    from laq_jax import registry  # pylint: disable=g-import-not-at-top
    with registry.scoped():
      for name, message in (
          ('chain(top_k)', 'a chain takes two or more compressors'),
          ('chain(top_k,nope)', "'nope' is not allowed; a link is one of "
                                'identity'),
          ('ef(chain(top_k,sign))', None)):
        if message is None:  # error feedback around a chain: allowed
          a = lj.get_algorithm(f'gd+compressor={name}')
          self.assertEqual((a.compressor, a.error_feedback),
                           ('chain(top_k,sign)', True))
          continue
        with self.assertRaisesRegex(ValueError, message):
          lj.get_algorithm(f'gd+compressor={name}')


if __name__ == '__main__':
  absltest.main()
