"""Differential privacy's mechanism (laq_jax/parts/privatizers.py).

DP-FedAvg in central, distributed and local modes round by round against
the NumPy oracle (tests/reference.run_local with `dp`, written from
async-dp.md B.2), every mode and a plain FedAvg point in ONE compiled
program; central mode with no noise and no clip is FedAvg bit for bit; the
clip's properties; the noise's variance within a chi-square band; the
refusals, each naming the sound option. Real MNIST, 4 workers x 40 images,
logistic regression, float64. The oracle and the equality run in the slow
tier; the mechanism's properties and the refusals (~5 s) in the fast.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import points
from laq_jax import privatizers
from laq_jax import randomness
from tests import common
from tests import local_test  # (its documented minibatch draws)
from tests import reference

M, N, B = 4, 40, 8
ROUNDS, STEPS, LR, SEED = 8, 3, 0.2, 5
CLIP = 0.05  # below most clients' ||Delta_m|| here: the clip bites
P = 7850

# (name, algo, Hyper settings, part parameters, the oracle's dp arguments)
POINTS = (
    ('fedavg', 'fedavg', dict(participation=0.6), {}, {}),
    ('central_poisson', 'fedavg+privacy=dp_central',
     dict(participation=0.6, weighting='uniform'),
     {'dp_central.clip': CLIP, 'dp_central.noise_multiplier': 0.7},
     dict(dp='central', clip=CLIP, z=0.7, rate=0.6, weighting='uniform')),
    ('central_fixed', 'fedavg+privacy=dp_central',
     dict(clients_per_round=2, weighting='uniform'),
     {'dp_central.clip': CLIP, 'dp_central.noise_multiplier': 1.3},
     dict(dp='central', clip=CLIP, z=1.3, sampled=2, weighting='uniform')),
    ('distributed', 'fedavg+privacy=dp_distributed',
     dict(clients_per_round=3, weighting='uniform'),
     {'dp_distributed.clip': CLIP, 'dp_distributed.noise_multiplier': 0.9},
     dict(dp='distributed', clip=CLIP, z=0.9, sampled=3,
          weighting='uniform')),
    ('local', 'fedavg+privacy=dp_local', dict(participation=0.6),
     {'dp_local.clip': CLIP, 'dp_local.noise_multiplier': 0.2},
     dict(dp='local', clip=CLIP, z=0.2)),
    ('local_qsgd', 'fedpaq+privacy=dp_local', dict(participation=0.6),
     {'dp_local.clip': CLIP, 'dp_local.noise_multiplier': 0.2,
      'qsgd.levels': 4},
     dict(dp='local', clip=CLIP, z=0.2, compressor='qsgd', levels=4)),
)


def _hyper(algo, settings, params, **kw):
  client = lj.get_algorithm(algo).client
  return lj.make_hyper(algo, dtype=jnp.float64, seed=SEED, l2=0.01,
                       server_lr=0.7, **{f'{client}.steps': STEPS,
                                         f'{client}.lr': LR},
                       **settings, **params, **kw)


def _spec(algos):
  base = dict(lj.hyper.DEFAULTS, algo=algos[0])
  pts = [dict(p, algo=a) for a in algos for p in points.expand_grid({}, base)]
  parts = dict(points.parts_of(pts), participation=True, weighting=True)
  return lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                    batch_size=B, loss_every=1, **parts)


def _noise():
  """N(0, I_P) from the documented keys: client m's at (SEED, k, m), the
  server's at (SEED, k, M)."""
  return [[np.asarray(jax.random.normal(randomness.dp_noise_key(SEED, k, m),
                                        (P,), jnp.float64))
           for m in range(M + 1)] for k in range(ROUNDS)]


@pytest.mark.slow  # (a grid of six local-work points: ~40 s)
class OracleTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    cls.x, cls.y = x, y
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    grid = lj.stack_hypers([_hyper(a, s, p) for _, a, s, p, _ in POINTS])
    cls.spec = _spec([a for _, a, _, _, _ in POINTS])
    cls.state, cls.trace = lj.run(cls.spec, data, grid, ROUNDS)
    cls.theta0 = np.asarray(lj.init_state(
        cls.spec, _hyper('fedavg', {}, {}), jnp.float64).theta_P)

  def test_every_mode_matches_the_oracle_round_by_round(self):
    noise = _noise()
    uniforms = [[np.asarray(jax.random.uniform(
        randomness.compress_key(SEED, k, m), (P,), jnp.float64))
                 for m in range(M)] for k in range(ROUNDS)]
    for g, (name, algo, _, _, dp) in enumerate(POINTS):
      with self.subTest(name):
        t = jax.tree.map(lambda a: np.asarray(a)[g], self.trace)
        present = t.participants_M
        self.assertTrue(0 < present.sum() < present.size)
        ref = reference.run_local(
            self.x, self.y, rounds=ROUNDS, theta0=self.theta0,
            batches=local_test._batches(SEED, ROUNDS, STEPS),
            present=present, local_steps=STEPS,
            client_lr=LR, server_lr=0.7, lam=0.01, uniforms=uniforms,
            noise=noise, **dp)
        np.testing.assert_array_equal(t.bits_M, np.asarray(ref['bits']))
        np.testing.assert_array_equal(t.sent_M, present)
        np.testing.assert_allclose(t.loss, ref['loss'], rtol=1e-10)
        np.testing.assert_allclose(np.asarray(self.state.theta_P)[g],
                                   ref['theta'], rtol=1e-9, atol=1e-12)
        if dp:  # the clip bit on some uploads
          self.assertGreater(ref['clipped'], 0)

  def test_the_noise_moved_theta(self):
    # Central at 0.7 against the same point without noise: theta differs by
    # about the noise's size (the comparison above is not vacuous).
    x, y = self.x, self.y
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    _, algo, s, p, _ = POINTS[1]
    quiet = dict(p, **{'dp_central.noise_multiplier': 0.0})
    state, _ = lj.run(self.spec, data, _hyper(algo, s, quiet), ROUNDS)
    moved = np.linalg.norm(np.asarray(state.theta_P)
                           - np.asarray(self.state.theta_P)[1])
    self.assertGreater(moved, 0.1 * 0.7 * CLIP / (0.6 * M))


@pytest.mark.slow  # (~15 s)
class EqualityTest(absltest.TestCase):

  def test_central_without_noise_or_clip_is_fedavg_bit_for_bit(self):
    # async-dp.md B.7: z = 0, C = infinity (here 1e30), fixed S = FedAvg
    # with clients_per_round S, uniform, drop.
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    settings = dict(clients_per_round=2, weighting='uniform')
    grid = lj.stack_hypers([
        _hyper('fedavg', settings, {}),
        _hyper('fedavg+privacy=dp_central', settings,
               {'dp_central.clip': 1e30, 'dp_central.noise_multiplier': 0.0}),
        _hyper('fedavg+privacy=dp_local', settings,
               {'dp_local.clip': 1e30, 'dp_local.noise_multiplier': 0.0})])
    spec = _spec(['fedavg', 'fedavg+privacy=dp_central',
                  'fedavg+privacy=dp_local'])
    state, trace = lj.run(spec, data, grid, ROUNDS)
    theta = np.asarray(state.theta_P)
    np.testing.assert_array_equal(theta[1], theta[0])
    np.testing.assert_array_equal(theta[2], theta[0])
    np.testing.assert_array_equal(np.asarray(trace.loss)[1],
                                  np.asarray(trace.loss)[0])


class MechanismTest(parameterized.TestCase):

  def test_clip(self):
    rng = np.random.default_rng(0)
    v = jnp.asarray(rng.normal(size=500) * 3.0)
    for c in (0.1, 1.0, 10.0):
      out = privatizers.clip(v, jnp.asarray(c, v.dtype))
      self.assertLessEqual(float(jnp.linalg.norm(out)), c * (1 + 1e-6))
      np.testing.assert_allclose(out / jnp.linalg.norm(out),
                                 v / jnp.linalg.norm(v), rtol=1e-12)
    # Below C: unchanged, bit for bit; a zero vector stays zero.
    big = jnp.asarray(1e6, v.dtype)
    np.testing.assert_array_equal(privatizers.clip(v, big), v)
    np.testing.assert_array_equal(
        privatizers.clip(jnp.zeros(7), jnp.asarray(1.0)), jnp.zeros(7))
    # NaN and +-inf become 0 before the norm.
    bad = jnp.asarray([3.0, np.nan, 4.0, np.inf, -np.inf])
    np.testing.assert_allclose(privatizers.clip(bad, jnp.asarray(1.0)),
                               [0.6, 0.0, 0.8, 0.0, 0.0], rtol=1e-6)

  @parameterized.parameters((0.7, 0.3, 0.0), (2.0, 1.0, 0.6))
  def test_central_noise_variance(self, z, c, q):
    # All uploads zero: the step is xi / D, each coordinate N(0, (z C /
    # D)^2); its sample variance over P coordinates within the chi-square
    # 99.9% band (normal approximation: P +- 3.29 sqrt(2 P)).
    h = lj.make_hyper('fedavg+privacy=dp_central', dtype=jnp.float64,
                      weighting='uniform',
                      **({'participation': q} if q else
                         {'clients_per_round': 2}),
                      **{'dp_central.clip': c,
                         'dp_central.noise_multiplier': z})
    parts = privatizers.REGISTRY.parts(['dp_central'])
    taken = jnp.asarray([True, False, True, False])
    on, step = privatizers.central_step(jnp.zeros((M, P), jnp.float64),
                                        taken, h, 3, M, parts)
    self.assertTrue(bool(on))
    d = 2 if not q else q * M
    sigma2 = (z * c / d) ** 2
    stat = float(jnp.sum(step ** 2)) / sigma2
    self.assertLess(abs(stat - P), 3.29 * np.sqrt(2 * P))
    # The draw is the documented one.
    want = z * c * np.asarray(jax.random.normal(
        randomness.dp_noise_key(h.seed, 3, M), (P,), jnp.float64)) / d
    np.testing.assert_allclose(step, want, rtol=1e-12)

  def test_local_noise_variance_and_clip(self):
    h = lj.make_hyper('fedavg+privacy=dp_local', dtype=jnp.float64,
                      **{'dp_local.clip': 2.0,
                         'dp_local.noise_multiplier': 0.5})
    parts = privatizers.REGISTRY.parts(['dp_local'])
    v = jnp.full((P,), 1.0, jnp.float64)  # ||v|| = sqrt(P) > 2
    out = privatizers.privatize(v, randomness.dp_noise_key(0, 1, 2), h, 0,
                                parts)
    noise = out - v * (2.0 / np.sqrt(P))
    stat = float(jnp.sum(noise ** 2)) / (0.5 * 2.0) ** 2
    self.assertLess(abs(stat - P), 3.29 * np.sqrt(2 * P))
    self.assertLess(abs(float(jnp.mean(noise))), 4 * 1.0 / np.sqrt(P))


class AccountingTest(absltest.TestCase):
  """What a run reports it spent (`privatizers.accounting`, read by the
  launchers' summary.json), against the contract's numbers."""

  def test_central_poisson_is_the_contracts_pld_row(self):
    # async-dp.md B.7: q = 0.1, z = 1.546, T = 500, M = 1,000 -> 8.000.
    params = {'clip': 1.0, 'noise_multiplier': 1.546, 'delta': 1e-5}
    out = privatizers.accounting('dp_central', params, rounds=500,
                                 num_clients=1000, participation=0.1)
    self.assertAlmostEqual(out['epsilon'], 8.0, delta=0.01)
    self.assertEqual((out['mode'], out['accountant'], out['adjacency']),
                     ('central', 'pld', 'add/remove one client'))
    self.assertIn('PoissonSampledDpEvent', out['event'])
    # Fixed S: sampling without replacement, RDP, replace one (the
    # contract's loose 52.8 at S = 100, z = 1.636).
    out = privatizers.accounting(
        'dp_central', dict(params, noise_multiplier=1.636), rounds=500,
        num_clients=1000, clients_per_round=100)
    self.assertAlmostEqual(out['epsilon'], 52.8, delta=0.1)
    self.assertEqual(out['adjacency'], 'replace one client')

  def test_local_counts_the_most_participations(self):
    params = {'clip': 1.0, 'noise_multiplier': 4.0, 'delta': 1e-5}
    few = privatizers.accounting('dp_local', params, rounds=20,
                                 num_clients=10, participation=0.5,
                                 participations=14)
    more = privatizers.accounting('dp_local', params, rounds=20,
                                  num_clients=10, participation=0.5,
                                  participations=20)
    self.assertLess(few['epsilon'], more['epsilon'])
    self.assertEqual(few['event'], 'GaussianDpEvent(noise_multiplier=2.0)')
    self.assertEqual(privatizers.accounting(
        'dp_local', dict(params, noise_multiplier=0.0), rounds=20,
        num_clients=10)['epsilon'], np.inf)
    with self.assertRaisesRegex(ValueError, 'dp.delta=0.2 is not allowed: '
                                'it must be below 1/M'):
      privatizers.accounting('dp_local', dict(params, delta=0.2), rounds=0,
                             num_clients=10)


  def test_a_sweeps_results_gain_epsilon_and_delta(self):
    # experiments/run/grid.py: every row gets the columns where any point
    # privatizes; local mode counts the most participations of its clients.
    from experiments.run import grid  # pylint: disable=g-import-not-at-top
    rows = [{'algo': a, 'iterations': 20} for a in
            ('fedavg', 'fedavg+privacy=dp_central', 'fedavg+privacy=dp_local')]
    points = [dict(participation=0.5, clients_per_round=0,
                   **{'dp_central.noise_multiplier': 1.0,
                      'dp_local.noise_multiplier': 4.0,
                      'dp_local.delta': 1e-3}) for _ in rows]
    present = np.zeros((3, 20, 10), bool)
    present[2, :, 3] = True  # client 3 in every round of the local point
    present[2, :5, 4] = True
    grid.privacy_columns(rows, points, present, 10)
    self.assertEqual((rows[0]['epsilon'], rows[0]['delta']), (None, None))
    want = privatizers.accounting(
        'dp_central', {'clip': 1.0, 'noise_multiplier': 1.0, 'delta': 1e-5},
        rounds=20, num_clients=10, participation=0.5)['epsilon']
    self.assertEqual(rows[1]['epsilon'], want)
    want = privatizers.accounting(
        'dp_local', {'clip': 1.0, 'noise_multiplier': 4.0, 'delta': 1e-3},
        rounds=20, num_clients=10, participations=20)['epsilon']
    self.assertEqual((rows[2]['epsilon'], rows[2]['delta']), (want, 1e-3))
    plain = [{'algo': 'fedavg', 'iterations': 20}]
    grid.privacy_columns(plain, points[:1], None, 10)
    self.assertNotIn('epsilon', plain[0])


class RefusalTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('lazy_central', 'laq+privacy=dp_central',
       dict(participation=0.5, weighting='uniform', absent='drop'),
       'trigger laq reads raw updates.*use privacy=dp_local'),
      ('qsgd_central', 'fedpaq+privacy=dp_central',
       dict(participation=0.5, weighting='uniform'),
       "compressor qsgd's size or reconstruction depends on the data; use "
       'privacy=dp_local'),
      ('samples_central', 'fedavg+privacy=dp_central',
       dict(participation=0.5),
       'weighting=samples is not allowed.*use weighting=uniform'),
      ('stale_central', 'fedavg+privacy=dp_central',
       dict(participation=0.5, weighting='uniform', absent='stale'),
       'absent=stale.*use absent=drop'),
      ('poisson_distributed', 'fedavg+privacy=dp_distributed',
       dict(participation=0.5, weighting='uniform'),
       'needs clients_per_round.*set clients_per_round=S'),
      ('scaffold', 'scaffold+privacy=dp_local', {},
       'client scaffold uploads its control variate'),
      ('lasg', 'lasg_wk2+privacy=dp_local', {},
       'lasg_wk2 takes a second gradient on the raw sample'),
  )
  def test_refused_naming_the_sound_option(self, algo, settings, message):
    with self.assertRaisesRegex(ValueError, message):
      lj.make_hyper(algo, **settings)

  def test_bad_parameters(self):
    with self.assertRaisesRegex(ValueError, r'dp_local\.clip=0\.0 is not '
                                r'allowed.*> 0'):
      lj.make_hyper('fedavg+privacy=dp_local', **{'dp_local.clip': 0.0})
    with self.assertRaisesRegex(ValueError, "privacy='dp_secret'.*a privacy "
                                'is one of off, dp_central'):
      lj.get_algorithm('fedavg+privacy=dp_secret')

  def test_a_part_not_compiled_in_is_refused(self):
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    with self.assertRaisesRegex(ValueError, r'hyper uses privacy part\(s\) '
                                'dp_local but RunSpec.privacy'):
      lj.run(_spec(['fedavg']), data,
             _hyper('fedavg+privacy=dp_local', {}, {}), 2)


if __name__ == '__main__':
  absltest.main()
