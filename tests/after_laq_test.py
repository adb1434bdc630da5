"""After LAQ: the 3PC paper's EF21, LAG and CLAG (tpc_ef21, tpc_lag,
tpc_clag), its v1-v5 and MARINA (estimators with the worker's last
gradient as memory), Rand-K and the warm start, against the NumPy oracle.

Each preset runs on real MNIST shards (float64 logistic regression) and is
compared round by round with `tests.reference.run` written from
/work/shared/after-laq.md (section 0 and 1): uploads, bits, the trigger's
two sides, the loss and theta. The contract's equivalences hold: tpc_clag
at zeta = 0 is tpc_ef21, at k = p it is tpc_lag (theta; its bits are top-k's
count), MARINA at p = 1 and v4 with C2 = identity are GD. Rand-K's mask is
the k smallest of the key's p uniforms, drawn by NumPy from those
uniforms; its value is unbiased.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import compressors
from laq_jax import randomness
from tests import common
from tests import reference

M, N, STEPS, ALPHA = common.SMALL_M, common.SMALL_N, 25, 0.03
B_MVR = 16  # DASHA-MVR's minibatch


def _pinned_jax() -> bool:
  """Whether this is the JAX requirements.txt pins (the oracle is matched
  to rounding there; another XLA may sum in another order and flip a
  top-k near-tie in EF21-P's broadcast, moving the loss by ~1e-5)."""
  import pathlib  # pylint: disable=g-import-not-at-top
  pins = (pathlib.Path(__file__).parent.parent / 'requirements.txt'
          ).read_text().split()
  return f'jax=={jax.__version__}' in pins
# Each preset's oracle arguments (the after-LAQ contract's table, section 1).
ORACLE = {
    'tpc_ef21': dict(compressor='top_k', innovation=True, trigger='eager'),
    'tpc_lag': dict(compressor='identity', innovation=True,
                    trigger='tpc_lazy'),
    'tpc_clag': dict(compressor='top_k', innovation=True,
                     trigger='tpc_lazy'),
}


def run(algo, steps=STEPS, participation=False, **hyper):
  """`algo` on the small shards, in a program that compiles in the 3PC
  parts: (state, trace, (x, y))."""
  x, y = common.mnist_shards(M, N, dtype=np.float64)
  a = lj.ALGORITHMS[algo]
  spec = lj.RunSpec(lj.get_problem('logreg'), M,
                    compressors=('identity', 'top_k', 'randk'),
                    compressors_b=('identity', a.compressor_b),
                    estimators=('direct', 'innovation', a.estimator),
                    triggers=('eager', 'tpc_lazy'), warm_start=True,
                    error_feedback=False, downlink=a.downlink,
                    broadcasts=('full', a.broadcast),
                    servers=('sgd', a.server), participation=participation)
  h = lj.make_hyper(algo, dtype=jnp.float64, step_size=ALPHA, **hyper)
  with jax.enable_x64(True):
    state, trace = lj.run(spec, lj.Data(jnp.asarray(x), jnp.asarray(y)), h,
                          steps)
  return state, trace, (x, y)


class ThreePCTest(parameterized.TestCase):

  @parameterized.parameters(('tpc_ef21', 1.0), ('tpc_lag', 1.0),
                            ('tpc_clag', 1.0), ('tpc_clag', 4.0))
  def test_preset_matches_numpy(self, algo, zeta):
    k = 0.02
    state, trace, (x, y) = run(algo, **{'top_k.k': k, 'tpc_lazy.zeta': zeta})
    ref = reference.run(x, y, steps=STEPS, alpha=ALPHA, bits=4, top_k=k,
                        zeta=zeta, warm_start=True, **ORACLE[algo])
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               rtol=1e-12, atol=1e-15)
    if ORACLE[algo]['trigger'] == 'tpc_lazy':
      np.testing.assert_allclose(trace.innovation_M, ref['innovation'],
                                 rtol=1e-12)
      np.testing.assert_allclose(trace.threshold_M, ref['threshold'],
                                 rtol=1e-12, atol=1e-300)
      self.assertLess(trace.sent_M.sum(), trace.sent_M.size)  # it skipped
    # The warm start: every worker's first upload is g itself, 32 p bits.
    np.testing.assert_array_equal(trace.bits_M[0], 32 * 7850)

  def test_equivalences(self):
    # tpc_clag at zeta = 0 uploads whenever g moved: tpc_ef21.
    _, ef21, _ = run('tpc_ef21', **{'top_k.k': 0.02})
    _, clag0, _ = run('tpc_clag', **{'top_k.k': 0.02, 'tpc_lazy.zeta': 0.0})
    np.testing.assert_array_equal(clag0.sent_M, ef21.sent_M)
    np.testing.assert_array_equal(clag0.loss, ef21.loss)
    # tpc_clag with k = p sends the whole innovation: tpc_lag's theta, at
    # top-k's count (p values with their indices) where LAG sends 32 p.
    lag_state, lag, _ = run('tpc_lag', **{'tpc_lazy.zeta': 0.5})
    full_state, full, _ = run('tpc_clag', **{'top_k.k': 7850.0,
                                             'tpc_lazy.zeta': 0.5})
    np.testing.assert_array_equal(full.sent_M, lag.sent_M)
    np.testing.assert_allclose(np.asarray(full_state.theta_P),
                               np.asarray(lag_state.theta_P), rtol=1e-13,
                               atol=1e-16)
    later = full.sent_M[1:]
    np.testing.assert_array_equal(full.bits_M[1:][later],
                                  7850 * (32 + 13))  # ceil(log2 7850) = 13

  def test_a_program_without_the_warm_start_refuses_it(self):
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    spec = lj.RunSpec(lj.get_problem('logreg'), M, compressors=('top_k',),
                      triggers=('eager',))
    h = lj.make_hyper('tpc_ef21', dtype=jnp.float64)
    with jax.enable_x64(True), self.assertRaisesRegex(
        ValueError, 'hyper uses warm_start but RunSpec.warm_start=False; '
        'set it True'):
      lj.run(spec, lj.Data(jnp.asarray(x), jnp.asarray(y)), h, 2)


# The 3PC estimators and MARINA (/work/shared/after-laq.md, sections 1-2).
ESTIMATOR_PRESETS = ('tpc_v1', 'tpc_v2', 'tpc_v3', 'tpc_v4', 'tpc_v5',
                     'marina')
P = 7850


def draws(seed, steps, fold=None):
  """uniforms[k][m]: the [P] draws of worker m's compressor key at step k
  (folded with `fold`: the second slot's)."""
  out = []
  for k in range(steps):
    row = []
    for m in range(M):
      key = randomness.compress_key(seed, k, m)
      if fold is not None:
        key = jax.random.fold_in(key, fold)
      row.append(np.asarray(jax.random.uniform(key, (P,), jnp.float64)))
    out.append(row)
  return out


class EstimatorsTest(parameterized.TestCase):

  @parameterized.parameters(*ESTIMATOR_PRESETS)
  def test_preset_matches_numpy(self, algo):
    a = lj.ALGORITHMS[algo]
    seed, k, k_b = 3, 0.02, 0.01
    # MARINA at p = 0.3 (its default k / P would give few full rounds here)
    params = {'top_k.k': k, 'randk.k': k, 'top_k_b.k': k_b,
              'randk_b.k': k_b, 'marina.p': 0.3, 'tpc_v3.zeta': 1.0}
    state, trace, (x, y) = run(algo, seed=seed, **params)
    coins = [float(randomness.round_coin(seed, s, jnp.float64))
             for s in range(STEPS)]
    with jax.enable_x64(True):
      uniforms = draws(seed, STEPS)
      uniforms_b = draws(seed, STEPS, fold=1)
    ref = reference.run(
        x, y, steps=STEPS, alpha=ALPHA, bits=4, compressor=a.compressor,
        innovation=False, trigger='eager', top_k=k, randk_k=k,
        warm_start=True, estimator=a.estimator,
        compressor_b=a.compressor_b, k_b=k_b, uniforms=uniforms,
        uniforms_b=uniforms_b, coins=coins, marina_p=0.3, zeta_v3=1.0)
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               rtol=1e-11, atol=1e-14)
    # the estimator's memory: every worker's last gradient
    y_state = np.asarray(state.rule.parts_M[a.estimator]['y'])
    self.assertEqual(y_state.shape, (M, P))
    self.assertGreater(np.abs(y_state).max(), 0)
    # bits: the warm start, then the estimator's own count
    np.testing.assert_array_equal(trace.bits_M[0], 32 * P)
    if a.estimator == 'marina':
      full = np.array(coins[1:]) < 0.3
      self.assertTrue(full.any() and not full.all())
      np.testing.assert_array_equal(trace.bits_M[1:][full], 32 * P)

  @parameterized.parameters('dasha', 'ef21_p_diana', 'ef21_p_dcgd')
  def test_shifted_and_bidirectional_match_numpy(self, algo):
    # DASHA (section 3), EF21-P with DIANA and with DCGD (section 4): the
    # workers compute at the broadcast thetahat + top-k(theta - thetahat).
    a = lj.ALGORITHMS[algo]
    seed, k, k_down = 5, 0.02, 0.05
    state, trace, (x, y) = run(algo, seed=seed, **{
        'randk.k': k, 'top_k_down.k': k_down})
    with jax.enable_x64(True):
      uniforms = draws(seed, STEPS)
    ref = reference.run(
        x, y, steps=STEPS, alpha=ALPHA, bits=4, compressor='randk',
        innovation=False, trigger='eager', randk_k=k, warm_start=True,
        estimator=None if a.estimator == 'direct' else a.estimator,
        uniforms=uniforms,
        broadcast_top_k=k_down if a.downlink else None)
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_array_equal(trace.bits_down_M.astype(np.int64),
                                  ref['bits_down'])
    rtol = 1e-11 if _pinned_jax() or not a.downlink else 1e-3
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=rtol)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               rtol=rtol, atol=1e-14 if rtol < 1e-6 else 1e-3)
    if a.downlink:
      np.testing.assert_allclose(np.asarray(state.rule.broadcast_P),
                                 ref['theta_hat'], rtol=rtol,
                                 atol=1e-14 if rtol < 1e-6 else 1e-3)
      self.assertLess(int(trace.bits_down_M[0, 0]), 32 * P)

  @parameterized.parameters(0.02, 0.05)
  def test_ef21_bc_matches_numpy(self, k_down):
    # EF21-BC (section 4): EF21 up, the server's G + top-k(agg - G) down;
    # the workers step with G themselves, so they hold theta. (agg moves in
    # at most M k p coordinates a round: k_M below M k = 0.1 compresses.)
    k = 0.02
    state, trace, (x, y) = run('ef21_bc', **{'top_k.k': k,
                                             'top_k_down.k': k_down})
    ref = reference.run(x, y, steps=STEPS, alpha=ALPHA, bits=4,
                        compressor='top_k', innovation=True, trigger='eager',
                        top_k=k, warm_start=True, server_top_k=k_down)
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_array_equal(trace.bits_down_M.astype(np.int64),
                                  ref['bits_down'])
    rtol = 1e-11 if _pinned_jax() else 1e-3
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=rtol)
    theta = np.asarray(state.theta_P)
    np.testing.assert_allclose(theta, ref['theta'], rtol=rtol,
                               atol=1e-14 if rtol < 1e-6 else 1e-3)
    np.testing.assert_array_equal(np.asarray(state.rule.broadcast_P), theta)
    # the server's G: theta moved by alpha G in the last step
    g_state = state.rule.server['ef21bc_server']
    self.assertEqual(g_state.g_P.shape, (P,))
    # down: 32 p at the warm start, then k_M (32 + 13) per worker
    np.testing.assert_array_equal(trace.bits_down_M[0], 32 * P)
    k_m = max(1, int(np.floor(k_down * P + 0.5)))
    np.testing.assert_array_equal(trace.bits_down_M[1:], k_m * (32 + 13))

  def test_ef21_bc_with_the_whole_aggregate_is_ef21(self):
    # k_M = p: G = agg every round, the run of tpc_ef21 (the contract's
    # (g)), at top-k's count for the p values down.
    _, ef21, _ = run('tpc_ef21', **{'top_k.k': 0.02})
    _, bc, _ = run('ef21_bc', **{'top_k.k': 0.02, 'top_k_down.k': 1.0 * P})
    np.testing.assert_array_equal(bc.sent_M, ef21.sent_M)
    np.testing.assert_allclose(bc.loss, ef21.loss, rtol=1e-13)
    np.testing.assert_array_equal(bc.bits_down_M[1:], P * (32 + 13))

  def test_ef21_bc_refuses_partial_participation(self):
    with self.assertRaisesRegex(ValueError, "'ef21_bc' .*partial "
                                'participation'):
      lj.make_hyper('ef21_bc', clients_per_round=2)

  def _mvr(self, algo, seed, **params):
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=B_MVR, loss_every=1, compressors=('randk',),
                      estimators=('dasha', 'dasha_mvr'), triggers=('eager',),
                      warm_start=True, error_feedback=False)
    h = lj.make_hyper(algo, dtype=jnp.float64, step_size=ALPHA, seed=seed,
                      **params)
    with jax.enable_x64(True):
      return (*lj.run(spec, lj.Data(jnp.asarray(x), jnp.asarray(y)), h,
                      STEPS), (x, y))

  def test_dasha_mvr_matches_numpy(self):
    # DASHA-MVR (section 3): h' = g + (1 - b)(h - g_prev) on the SAME
    # minibatch, g_prev at the worker's previous parameters.
    seed, k, b = 9, 0.02, 0.3
    state, trace, (x, y) = self._mvr('dasha_mvr', seed, **{
        'randk.k': k, 'dasha_mvr.b': b})
    with jax.enable_x64(True):
      uniforms = draws(seed, STEPS)
    batches = [[common.batch_rows(randomness.batch_key(seed, s, m), N, B_MVR)
                for m in range(M)] for s in range(STEPS)]
    ref = reference.run(
        x, y, steps=STEPS, alpha=ALPHA, bits=4, compressor='randk',
        innovation=False, trigger='eager', randk_k=k, warm_start=True,
        estimator='dasha_mvr', uniforms=uniforms, batches=batches, mvr_b=b)
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-11)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               rtol=1e-11, atol=1e-14)
    np.testing.assert_array_equal(trace.grads_M, 2)  # the pair
    np.testing.assert_array_equal(trace.bits_M[0], 32 * P)

  def test_dasha_mvr_at_b_one_is_dasha(self):
    # b = 1: h' = g, DASHA on the minibatch gradients (the contract's (g))
    _, mvr, _ = self._mvr('dasha_mvr', 2, **{'dasha_mvr.b': 1.0})
    _, dasha, _ = self._mvr('dasha', 2)
    np.testing.assert_array_equal(mvr.sent_M, dasha.sent_M)
    np.testing.assert_allclose(mvr.loss, dasha.loss, rtol=1e-13)

  def test_equivalences(self):
    # MARINA at p = 1 sends g every round: GD, as tpc_v4 with k2 = p does
    # (C2 = identity: b = g, C(0) = 0).
    _, gd, _ = run('tpc_ef21', **{'top_k.k': 1.0 * P})
    _, marina_1, _ = run('marina', **{'marina.p': 1.0})
    np.testing.assert_allclose(marina_1.loss, gd.loss, rtol=1e-13)
    _, v4_full, _ = run('tpc_v4', **{'top_k_b.k': 1.0 * P})
    np.testing.assert_allclose(v4_full.loss, gd.loss, rtol=1e-13)

  def test_marina_refuses_partial_participation(self):
    with self.assertRaisesRegex(ValueError, "'marina' .*is not allowed with "
                                'partial participation'):
      run('marina', steps=2, participation=True, clients_per_round=2)
    # and a launcher's config, in one line before anything runs
    from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
    config = common.tiny_config(algo='marina', participation=0.5)
    with self.assertRaisesRegex(config_lib.ConfigError, "config.algo='marina' "
                                'is not allowed with partial participation'):
      config_lib.validate_config(config)


class RandKTest(absltest.TestCase):

  def test_the_k_smallest_uniforms_scaled(self):
    # The mask from the key's uniforms by NumPy (a stable sort: ties to
    # the lowest index), the kept values scaled by p / k, 32 k + 32 bits.
    p, k = 200, 7
    rng = np.random.default_rng(0)
    v, ref = rng.normal(size=p), rng.normal(size=p)
    h = lj.make_hyper('gd', dtype=jnp.float64)
    with jax.enable_x64(True):
      for seed in range(5):
        key = randomness.compress_key(seed, 3, 1)
        out = compressors.randk(jnp.asarray(v), jnp.asarray(ref), key, h,
                                params={'k': jnp.asarray(float(k))})
        u = np.asarray(jax.random.uniform(key, (p,), jnp.float64))
        keep = np.sort(np.argsort(u, kind='stable')[:k])
        want = ref.copy()
        want[keep] += (p / k) * (v - ref)[keep]
        np.testing.assert_allclose(np.asarray(out.value_P), want, rtol=1e-15)
        self.assertEqual(int(out.bits), 32 * k + 32)

  def test_unbiased(self):
    # E[C(v)] = v: the mean over 4,000 keys within 5 standard errors.
    p, k, draws = 40, 4, 4000
    v = np.random.default_rng(1).normal(size=p)
    h = lj.make_hyper('gd', dtype=jnp.float64)
    keys = jax.random.split(jax.random.key(2), draws)
    with jax.enable_x64(True):
      values = jax.vmap(lambda key: compressors.randk(
          jnp.asarray(v), jnp.zeros(p), key, h,
          params={'k': jnp.asarray(float(k))}).value_P)(keys)
    values = np.asarray(values)
    se = values.std(axis=0) / np.sqrt(draws)
    self.assertLess(np.max(np.abs(values.mean(axis=0) - v) / se), 5.0)
    # each draw keeps exactly k coordinates
    np.testing.assert_array_equal((values != 0).sum(axis=1), k)

  def test_its_copies_own_their_k(self):
    h = lj.make_hyper('gd', **{'randk_b.k': 0.05, 'top_k_b.k': 3.0})
    self.assertAlmostEqual(float(h.params['randk_b']['k']), 0.05)
    self.assertEqual(float(h.params['top_k_b']['k']), 3.0)
    self.assertAlmostEqual(float(h.params['randk']['k']), 0.09)
    for name in ('randk', 'top_k_b', 'randk_b'):
      self.assertTrue(compressors.REGISTRY.get(name).opt_in)
    # called directly (not through the slot), a copy reads its own k
    h = lj.make_hyper('gd', **{'randk_b.k': 2.0, 'top_k_b.k': 3.0,
                               'randk.k': 5.0, 'top_k.k': 7.0})
    v = jnp.arange(1.0, 41.0)
    for name, kept in (('randk_b', 2), ('top_k_b', 3), ('randk', 5),
                       ('top_k', 7)):
      out = compressors.REGISTRY.get(name)(v, jnp.zeros(40),
                                           jax.random.key(0), h)
      self.assertEqual(int((np.asarray(out.value_P) != 0).sum()), kept, name)


if __name__ == '__main__':
  absltest.main()
