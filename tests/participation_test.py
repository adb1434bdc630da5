"""Partial participation (laq_jax.participation, docs/algorithm.md): who
takes part, what an absent client does, and what the server does without
it, against direct computations."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import participation
from tests import network_test

M, N, D, C = 6, 20, 5, 3


def data():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(M, N, D))
  y = rng.integers(0, C, size=(M, N))
  return lj.Data(jnp.asarray(x), jnp.asarray(y))


def grads_at_zero():
  """[M, P] each worker's logistic-regression gradient at theta = 0, by
  hand (flat: the bias, then the weights)."""
  d = data()
  x, y = np.asarray(d.x_MxNxD), np.asarray(d.y_MxN)
  grads = []
  for m in range(M):
    p = np.full((N, C), 1 / C)
    onehot = np.eye(C)[y[m]]
    gw = x[m].T @ (p - onehot) / N
    gb = (p - onehot).mean(0)
    grads.append(np.concatenate([gb, gw.ravel()]))
  return np.asarray(grads)


def run(algo='laq', steps=15, participation_on=True, **kw):
  spec = lj.RunSpec(lj.get_problem('logreg', D, C), M,
                    stochastic=lj.ALGORITHMS[algo].stochastic, batch_size=5,
                    participation=participation_on)
  hyper = lj.make_hyper(algo, dtype=jnp.float64, **kw)
  return lj.run(spec, data(), hyper, steps)


class WhoTakesPartTest(parameterized.TestCase):

  def test_bernoulli_rate_within_standard_errors(self):
    hyper = lj.make_hyper('laq', participation=0.3, seed=7)
    draw = jax.jit(jax.vmap(lambda k: participation.participants(hyper, k,
                                                                 50)))
    present = np.asarray(draw(jnp.arange(2000)))
    se = np.sqrt(0.3 * 0.7 / present.size)
    self.assertLess(abs(present.mean() - 0.3), 4 * se)
    # every client alike (no client favoured by its index)
    per_client = present.mean(axis=0)
    self.assertLess(np.max(np.abs(per_client - 0.3)),
                    5 * np.sqrt(0.3 * 0.7 / 2000))
    # rounds are independent draws: neighbouring rounds agree as chance
    same = (present[1:] == present[:-1]).mean()
    self.assertAlmostEqual(same, 0.3**2 + 0.7**2, delta=0.01)

  def test_clients_per_round_is_exact_and_uniform(self):
    hyper = lj.make_hyper('laq', clients_per_round=7, seed=1)
    draw = jax.jit(jax.vmap(lambda k: participation.participants(hyper, k,
                                                                 20)))
    present = np.asarray(draw(jnp.arange(3000)))
    np.testing.assert_array_equal(present.sum(axis=1), 7)
    # without replacement, each client in S/M of the rounds
    self.assertLess(np.max(np.abs(present.mean(axis=0) - 0.35)),
                    5 * np.sqrt(0.35 * 0.65 / 3000))
    # the S smallest uniforms of (seed, step, client)
    u = np.asarray(participation.uniforms(1, 11, 20))
    np.testing.assert_array_equal(np.flatnonzero(present[11]),
                                  np.sort(np.argsort(u, kind='stable')[:7]))

  def test_a_bounded_draw_takes_the_same_clients(self):
    # participants(bound=) (lax.top_k over `bound`) against the stable sort
    # of every uniform, for S below, at and (Bernoulli) without the bound
    for per_round, q in ((3, 1.0), (8, 1.0), (0, 0.4)):
      hyper = lj.make_hyper('laq', clients_per_round=per_round,
                            participation=q, seed=5)
      steps = jnp.arange(400)
      full = jax.vmap(lambda k: participation.participants(hyper, k, 30))
      bounded = jax.vmap(
          lambda k: participation.participants(hyper, k, 30, bound=8))
      np.testing.assert_array_equal(np.asarray(jax.jit(bounded)(steps)),
                                    np.asarray(jax.jit(full)(steps)))

  def test_smallest_is_a_stable_sorts_first_k(self):
    # participation.smallest (passes of argmin for float64 and small k,
    # lax.top_k otherwise) against NumPy's stable argsort, with ties
    rng = np.random.default_rng(7)
    for dtype in (np.float64, np.float32):
      for n, k in ((1, 1), (30, 8), (1000, 10), (1000, 32), (300, 40)):
        with self.subTest(dtype=dtype.__name__, n=n, k=k):
          u = rng.random(n).astype(dtype)
          u[rng.integers(0, n, n // 3)] = u[0]  # ties with the first entry
          got = np.asarray(jax.jit(participation.smallest,
                                   static_argnums=1)(jnp.asarray(u), k))
          np.testing.assert_array_equal(got,
                                        np.argsort(u, kind='stable')[:k])

  def test_round_rows_are_the_participants_then_the_absent_in_order(self):
    rng = np.random.default_rng(4)
    for n, size in ((1, 1), (9, 4), (50, 10), (50, 50)):
      present = rng.random(n) < 0.3
      rows = np.asarray(participation.round_rows(jnp.asarray(present), size))
      # NumPy: a stable sort of the flags, participants first
      np.testing.assert_array_equal(
          rows, np.argsort(~present, kind='stable')[:size])

  def test_full_participation_is_the_run_bit_for_bit(self):
    _, base = run(participation_on=False)
    for kw in (dict(), dict(absent='drop'), dict(clients_per_round=M)):
      with self.subTest(**kw):
        state, got = run(**kw)
        for name in ('loss', 'sent_M', 'bits_M', 'time_s', 'innovation_M'):
          np.testing.assert_array_equal(getattr(got, name),
                                        getattr(base, name), name)
        self.assertTrue(got.participants_M.all())


class AbsentClientsTest(parameterized.TestCase):

  @parameterized.parameters('stale', 'drop')
  def test_absent_clients_send_nothing_and_their_clocks_count(self, absent):
    state, trace = run(participation=0.5, absent=absent, max_staleness=0,
                       network='mobile', seed=3)
    present = np.asarray(trace.participants_M)
    self.assertTrue(0 < present.mean() < 1)
    # tbar = 0: a client uploads exactly when it takes part
    np.testing.assert_array_equal(trace.sent_M, present)
    self.assertTrue(np.all(trace.bits_M[~present] == 0))
    self.assertTrue(np.all(trace.bits_down_M[~present] == 0))
    self.assertTrue(np.all(trace.bits_down_M[present] > 0))
    # each client's clock: rounds since its last participation
    last = np.where(present, np.arange(15)[:, None], -1)
    last = np.maximum.accumulate(last, axis=0)[-1]
    clock = np.asarray(state.rule.clock_M)
    for m in range(M):
      want = 14 - last[m] if last[m] >= 0 else lj.rules.NEVER_UPLOADED
      self.assertEqual(clock[m], want, m)
    # the round over its participants only
    flops = [4 * D * C * N] * M
    net = lj.make_network('mobile', num_workers=M)
    for k in range(15):
      if not present[k].any():
        continue
      want = network_test.reference_round(
          net, flops, trace.bits_M[k], trace.bits_down_M[k],
          trace.slowdown_M[k], inn=present[k])
      self.assertAlmostEqual(float(trace.time_s[k]) / want, 1, delta=1e-12)

  def test_a_client_first_uploads_at_its_first_participation(self):
    _, trace = run(participation=0.3, seed=5, steps=30)
    present = np.asarray(trace.participants_M)
    sent = np.asarray(trace.sent_M)
    for m in range(M):
      first = np.flatnonzero(present[:, m])
      self.assertTrue(first.size)
      self.assertTrue(sent[first[0], m])
      self.assertFalse(sent[:first[0], m].any())

  def test_drop_steps_with_the_participants_scaled_sum(self):
    # gd: every participant uploads its gradient, so theta^1 = theta^0 -
    # alpha (M / S) sum over the participants of g_m(theta^0).
    spec = lj.RunSpec(lj.get_problem('logreg', D, C), M, participation=True)
    hyper = lj.make_hyper('gd', dtype=jnp.float64, clients_per_round=2,
                          absent='drop', step_size=0.1, seed=4)
    state, trace = lj.run(spec, data(), hyper, 1)
    present = np.asarray(trace.participants_M[0])
    self.assertEqual(present.sum(), 2)
    grads = grads_at_zero()
    want = -0.1 * (M / 2) * grads[present].sum(0)
    np.testing.assert_allclose(np.asarray(state.theta_P), want, atol=1e-12)
    # stale: the absent clients' last uploads are still in the sum (none
    # yet at k = 0, so the same participants' sum without the scale)
    state, _ = lj.run(spec, data(), hyper._replace(absent=jnp.int32(0)), 1)
    np.testing.assert_allclose(np.asarray(state.theta_P),
                               -0.1 * grads[present].sum(0), atol=1e-12)


  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)


  def test_drop_is_unbiased_over_the_subsets(self):
    # Under S-of-M sampling every subset is equally likely, so the drop
    # aggregate is unbiased exactly when its mean over all C(M, S) subsets
    # is the full sum. One gd step from theta^0 for 300 seeds (one
    # program): every one of the 15 subsets of 2 of 6 clients turns up, and
    # the mean step over the distinct subsets is -alpha * sum_m g_m.
    spec = lj.RunSpec(lj.get_problem('logreg', D, C), M, participation=True)
    hyper = lj.stack_hypers([
        lj.make_hyper('gd', dtype=jnp.float64, clients_per_round=2,
                      absent='drop', step_size=0.1, seed=seed)
        for seed in range(300)])
    state, trace = lj.run(spec, data(), hyper, 1)
    theta = np.asarray(state.theta_P)
    by_subset = {}
    for g, present in enumerate(np.asarray(trace.participants_M)[:, 0]):
      by_subset.setdefault(tuple(np.flatnonzero(present)), theta[g])
    self.assertLen(by_subset, 15)
    mean = np.mean(list(by_subset.values()), axis=0)
    np.testing.assert_allclose(mean, -0.1 * grads_at_zero().sum(0),
                               atol=1e-12)


class DeadlineTest(absltest.TestCase):

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)

  def test_a_late_client_is_cut_and_the_round_ends_at_the_deadline(self):
    # gd on a network where worker m's compute takes (m + 1) * 10 ms and
    # uploads take 1 ms (latency) + 32 p / 1e9 s: with a 35 ms deadline
    # workers 0..2 make it (ends 11, 21, 31 ms plus the bits), 3..5 do not.
    p = D * C + C
    flops = 4 * D * C * N
    rates = [flops / (0.01 * (m + 1)) for m in range(M)]
    net = lj.make_network('cross_silo', num_workers=M, flops_per_s=rates,
                          up_latency_s=1e-3, down_latency_s=2e-3,
                          up_bps=1e9, down_bps=1e9, server_in_bps=1e12,
                          server_out_bps=1e12)
    spec = lj.RunSpec(lj.get_problem('logreg', D, C), M, participation=True)
    hyper = lj.make_hyper('gd', dtype=jnp.float64, network=net,
                          deadline_s=0.035, step_size=0.1)
    state, trace = lj.run(spec, data(), hyper, 3)
    cut = np.array([False] * 3 + [True] * 3)
    np.testing.assert_array_equal(trace.dropped_M, np.tile(cut, (3, 1)))
    np.testing.assert_array_equal(trace.sent_M, np.tile(~cut, (3, 1)))
    self.assertTrue(np.all(trace.bits_M[:, cut] == 0))
    self.assertTrue(np.all(trace.bits_down_M[:, cut] == 0))
    # the cut workers never uploaded: their clocks still say so
    clock = np.asarray(state.rule.clock_M)
    self.assertTrue(np.all(clock[cut] == lj.rules.NEVER_UPLOADED))
    self.assertTrue(np.all(clock[~cut] == 0))
    # T = the deadline (someone was cut) + the broadcast to the others
    down = 2e-3 + 32 * p / 1e9
    np.testing.assert_allclose(trace.time_s, 0.035 + down, rtol=1e-12)
    # the first step used the three on-time gradients only (stale: the
    # late ones have no upload yet)
    first, _ = lj.run(spec, data(), hyper, 1)
    np.testing.assert_allclose(np.asarray(first.theta_P),
                               -0.1 * grads_at_zero()[~cut].sum(0),
                               atol=1e-12)
    # no deadline: everyone in, the run without participation bit for bit
    _, free = lj.run(spec, data(), hyper._replace(
        deadline_s=jnp.float64(0.0)), 3)
    _, base = lj.run(lj.RunSpec(lj.get_problem('logreg', D, C), M), data(),
                     hyper._replace(deadline_s=jnp.float64(0.0)), 3)
    np.testing.assert_array_equal(free.loss, base.loss)
    np.testing.assert_array_equal(free.time_s, base.time_s)


class RefusedTest(absltest.TestCase):

  def test_refusals_name_the_fields(self):
    with self.assertRaisesRegex(ValueError, 'not allowed together'):
      lj.make_hyper('laq', participation=0.5, clients_per_round=3)
    with self.assertRaisesRegex(ValueError, "absent='gone' is not allowed"
                                '.*stale, drop'):
      lj.make_hyper('laq', absent='gone')
    with self.assertRaisesRegex(ValueError, r'participation=0\.0 is not '
                                r'allowed.*\(0, 1\]'):
      lj.make_hyper('laq', participation=0.0)
    with self.assertRaisesRegex(ValueError, "'two_laq' is not allowed with "
                                'partial participation'):
      lj.make_hyper('two_laq', participation=0.5)
    spec = lj.RunSpec(lj.get_problem('logreg', D, C), M)
    with self.assertRaisesRegex(ValueError, 'RunSpec.participation=False'):
      spec.check_hyper(lj.make_hyper('laq', participation=0.5))
    spec = lj.RunSpec(lj.get_problem('logreg', D, C), M, participation=True)
    with self.assertRaisesRegex(ValueError, 'at most num_workers=6'):
      spec.check_hyper(lj.make_hyper('laq', clients_per_round=7))
    # The ring's rules live in one place (network.check_ring): make_hyper,
    # the config and RunSpec (a Network put in by hand) all refuse alike.
    with self.assertRaisesRegex(ValueError, r"deadline_s=1\.0 is not allowed: "
                                "it must be 0 with network.topology='ring'"):
      lj.make_hyper('gd', deadline_s=1.0, **{'network.topology': 'ring'})
    ring = lj.make_network('cross_silo', topology='ring')
    with self.assertRaisesRegex(ValueError, r"hyper\.deadline_s=1\.0 is not "
                                'allowed'):
      spec.check_hyper(lj.make_hyper('gd', deadline_s=1.0)._replace(
          network=ring))


if __name__ == '__main__':
  absltest.main()
