"""laq_jax.privacy's accounting against the published numbers (the contract's
B.7: TF Privacy's MNIST table, dp-accounting's own RDP and PLD values, the
sampling without replacement and the private trigger's rows) and local
mode's participation counts against a direct count of the draws."""

import math

from absl.testing import absltest, parameterized
import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp
import numpy as np
import pytest

from laq_jax import privacy
from laq_jax.privacy import accounting
from laq_jax.privacy import participations
from laq_jax.round import participation

DELTA = 1e-5
MNIST = 60_000
Q_MNIST = 256 / MNIST
# tensorflow/privacy tutorials/README.md: (z, epochs) -> the published
# epsilon, the classic conversion's, dp-accounting's RDP and PLD ones.
TABLE = ((1.12, 60, 2.92, 2.922, 2.519, 2.310),
         (0.6, 30, 9.74, 9.760, 8.777, 7.690),
         (1.2, 10, 1.20, 1.198, 0.932, 0.792))


def steps(epochs):
  return int(epochs * MNIST / 256)  # T = floor(epochs 60,000 / 256)


def central(z, **kwargs):
  return privacy.Privacy('central', noise_multiplier=z, delta=DELTA, **kwargs)


class PublishedTableTest(parameterized.TestCase):

  @parameterized.parameters(*TABLE)
  def test_classic_conversion_reproduces_the_tutorial(self, z, epochs,
                                                      published, classic,
                                                      ours_rdp, ours_pld):
    del ours_rdp, ours_pld
    event = privacy.composed(central(z), steps(epochs), num_clients=MNIST,
                             participation=Q_MNIST)
    eps = accounting.classic_epsilon(event, DELTA)
    self.assertEqual(len(accounting.CLASSIC_ORDERS), 99 + 52)
    self.assertAlmostEqual(eps, classic, delta=0.01)
    self.assertAlmostEqual(eps, published, delta=0.03)

  @parameterized.parameters(*TABLE[2:])  # (PLD at 14,062 steps: slow tier)
  def test_rdp_and_pld_tighter_than_the_tutorial(self, z, epochs, published,
                                                 classic, ours_rdp, ours_pld):
    self.check_rdp_and_pld(z, epochs, published, classic, ours_rdp, ours_pld)

  @parameterized.parameters(*TABLE[:2])
  @pytest.mark.slow
  def test_rdp_and_pld_tighter_than_the_tutorial_long(self, *row):
    self.check_rdp_and_pld(*row)

  def check_rdp_and_pld(self, z, epochs, published, classic, ours_rdp,
                        ours_pld):
    del classic
    at = dict(num_clients=MNIST, participation=Q_MNIST)
    eps_rdp = privacy.epsilon(central(z, accountant='rdp'), steps(epochs),
                              **at)
    eps_pld = privacy.epsilon(central(z), steps(epochs), **at)
    self.assertAlmostEqual(eps_rdp, ours_rdp, delta=1e-3)
    self.assertAlmostEqual(eps_pld, ours_pld, delta=1e-2)
    self.assertLessEqual(eps_pld, eps_rdp)
    self.assertLessEqual(eps_rdp, published)


class RowsTest(absltest.TestCase):

  def test_poisson_row(self):
    # q = 0.1, z = 1.546, T = 500: PLD 8.000, RDP 8.697 (the contract)
    at = dict(num_clients=1000, participation=0.1)
    self.assertAlmostEqual(privacy.epsilon(central(1.546), 500, **at), 8.000,
                           delta=0.01)
    self.assertAlmostEqual(
        privacy.epsilon(central(1.546, accountant='rdp'), 500, **at), 8.697,
        delta=1e-3)
    self.assertEqual(privacy.adjacency(central(1.546)),
                     'add/remove one client')
    self.assertEqual(privacy.epsilon(central(1.546), 0, **at), 0.0)
    self.assertEqual(privacy.epsilon(privacy.Privacy(), 10, **at), math.inf)

  def test_fixed_size_rounds_are_replace_one_rdp_and_loose(self):
    # M = 1,000, S = 100, z = 1.636, T = 500: WOR 52.8 (RDP, replace one,
    # Gaussian(z / 2)) against Poisson q = 0.1's 8.0
    p = central(1.636)
    at = dict(num_clients=1000, clients_per_round=100)
    self.assertAlmostEqual(privacy.epsilon(p, 500, **at), 52.8, delta=0.05)
    self.assertEqual(privacy.accountant_name(p, clients_per_round=100), 'rdp')
    self.assertEqual(privacy.adjacency(p, clients_per_round=100),
                     'replace one client')
    # the same from dp-accounting directly: the halved multiplier
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(
            1000, 100, dp_accounting.GaussianDpEvent(1.636 / 2)), 500)
    want = rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    ).compose(event).get_epsilon(DELTA)
    self.assertEqual(privacy.epsilon(p, 500, **at), want)

  def test_local_mode_halves_the_multiplier_itself(self):
    # z = 5, 60 participations: PLD REPLACE_ONE on Gaussian(z) (the
    # accountant doubling the sensitivity) = PLD ADD_OR_REMOVE on
    # Gaussian(z / 2) = 17.39, which local mode reports
    local = privacy.Privacy('local', noise_multiplier=5.0, delta=DELTA)
    eps = privacy.epsilon(local, 1000, num_clients=1000, participation=0.1,
                          participations=60)
    self.assertAlmostEqual(eps, 17.39, delta=0.01)
    replace = pld.PLDAccountant(
        dp_accounting.NeighboringRelation.REPLACE_ONE).compose(
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.GaussianDpEvent(5.0), 60)).get_epsilon(DELTA)
    self.assertAlmostEqual(eps, replace, delta=0.01)
    self.assertEqual(privacy.adjacency(local), "replace the client's data")
    # no participation, nothing released
    self.assertEqual(privacy.epsilon(local, 10, num_clients=10,
                                     participations=0), 0.0)

  def test_private_trigger_is_one_gaussian_of_the_combined_multiplier(self):
    # q = 0.1, z = 1.546, z_t = 3 z, T = 500: the sum share and the test
    # composed inside the Poisson event (RDP) = 9.416
    p = central(1.546, accountant='rdp', private_trigger=True)
    at = dict(num_clients=1000, participation=0.1)
    eps = privacy.epsilon(p, 500, **at)
    self.assertAlmostEqual(eps, 9.416, delta=1e-3)
    both = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(1.546),
             dp_accounting.GaussianDpEvent(3 * 1.546)])), 500)
    self.assertAlmostEqual(
        eps, rdp.RdpAccountant().compose(both).get_epsilon(DELTA), delta=1e-6)
    self.assertEqual(privacy.adjacency(p), 'zero-out one client')
    # its default accountant: PLD under zero-out (REPLACE_SPECIAL) gives
    # PLD add/remove's number at z_eff = (z^-2 + z_t^-2)^(-1/2)
    z_eff = (1.546 ** -2 + (3 * 1.546) ** -2) ** -0.5
    pld_eps = privacy.epsilon(p.replace(accountant='pld'), 500, **at)
    self.assertEqual(privacy.relation(p),
                     dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    self.assertAlmostEqual(
        pld_eps, privacy.epsilon(central(z_eff), 500, **at), delta=1e-6)
    self.assertLess(pld_eps, eps)

  def test_calibration_round_trip(self):
    # RDP (fast): the multiplier for RDP's 8.697 is 1.546, rounded up to
    # 1e-4, its epsilon recomputed at most the target
    p = central(1.0, accountant='rdp')
    at = dict(num_clients=1000, participation=0.1)
    z, eps = privacy.calibrate(p, 8.697, 500, **at)
    self.assertAlmostEqual(z, 1.546, delta=2e-4)
    self.assertEqual(z, round(z, 4))
    self.assertLessEqual(eps, 8.697)
    self.assertEqual(eps, privacy.epsilon(p.replace(noise_multiplier=z), 500,
                                          **at))
    # within two steps of the smallest: 2e-4 less noise is over the target
    self.assertGreater(privacy.epsilon(p.replace(noise_multiplier=z - 2e-4),
                                       500, **at), 8.697)

  @pytest.mark.slow
  def test_calibration_round_trip_pld(self):
    z, eps = privacy.calibrate(central(1.0), 8.0, 500, num_clients=1000,
                               participation=0.1)
    self.assertAlmostEqual(z, 1.546, delta=1e-3)
    self.assertLessEqual(eps, 8.0)


class RefusalsTest(parameterized.TestCase):

  @parameterized.parameters(
      (dict(mode='centrall'), r"dp.mode='centrall' is not allowed: it must "
       r"be one of 'off', 'central', 'distributed', 'local'"),
      (dict(mode='central', accountant='moments'),
       r"dp.accountant='moments' is not allowed: it must be one of 'pld', "
       "'rdp'"),
      (dict(mode='central', noise_multiplier=0.0),
       r'dp.noise_multiplier=0.0 is not allowed: it must be a finite number '
       '> 0'),
      (dict(mode='central', noise_multiplier=1.0, delta=1.5),
       r'dp.delta=1.5 is not allowed: it must be a number in \(0, 1\)'),
      (dict(mode='local', noise_multiplier=1.0, private_trigger=True),
       r"dp.private_trigger=True is not allowed with dp.mode='local'"),
      (dict(mode='central', noise_multiplier=1.0, private_trigger=1),
       r'dp.private_trigger=1 is not allowed: it must be True or False'),
      (dict(mode='central', noise_multiplier=1.0, trigger_noise_ratio=0),
       r'dp.trigger_noise_ratio=0 is not allowed: it must be a finite number '
       '> 0'),
      (dict(noise_multiplier=float('nan')),
       r'dp.noise_multiplier=nan is not allowed: it must be a finite number '
       '>= 0'),
  )
  def test_settings(self, kwargs, pattern):
    with self.assertRaisesRegex(ValueError, pattern):
      privacy.Privacy(**kwargs)

  def test_with_the_runs_clients(self):
    p = central(1.0)
    with self.assertRaisesRegex(ValueError, r'dp.delta=1e-05 is not allowed: '
                                r'it must be below 1/M = 1e-05'):
      privacy.epsilon(p, 10, num_clients=100_000, participation=0.1)
    with self.assertRaisesRegex(ValueError, 'dp.mode=distributed needs '
                                'clients_per_round S > 0'):
      privacy.epsilon(p.replace(mode='distributed'), 10, num_clients=100,
                      participation=0.1)
    with self.assertRaisesRegex(ValueError, 'dp.private_trigger=True needs '
                                'Poisson sampling'):
      privacy.epsilon(p.replace(private_trigger=True), 10, num_clients=100,
                      clients_per_round=10)
    with self.assertRaisesRegex(ValueError, 'participation=0 is not allowed'):
      privacy.epsilon(p, 10, num_clients=100, participation=0)
    with self.assertRaisesRegex(ValueError, 'clients_per_round=200 is not '
                                r'allowed: it must be in 1..100'):
      privacy.epsilon(p, 10, num_clients=100, clients_per_round=200)
    with self.assertRaisesRegex(ValueError, 'num_clients=True is not '
                                'allowed: it must be an integer >= 1'):
      privacy.epsilon(p, 10, num_clients=True, participation=0.1)
    with self.assertRaisesRegex(ValueError, 'clients_per_round=2.5 is not '
                                'allowed'):
      privacy.epsilon(p, 10, num_clients=100, clients_per_round=2.5)
    with self.assertRaisesRegex(ValueError, 'rounds=-1 is not allowed'):
      privacy.epsilon(p, -1, num_clients=100, participation=0.1)
    local = p.replace(mode='local')
    with self.assertRaisesRegex(ValueError, 'participations=11 is not '
                                r'allowed: it must be an integer in 0..10'):
      privacy.epsilon(local, 10, num_clients=100, participations=11)
    # participations are local mode's: central ignores them (0 is not "no
    # release" under sampling)
    self.assertGreater(privacy.epsilon(p, 10, num_clients=100,
                                       participation=0.1, participations=0),
                       0)
    with self.assertRaisesRegex(ValueError, "dp.target_epsilon is set with "
                                "dp.mode='off'"):
      privacy.calibrate(privacy.Privacy(), 4.0, 10, num_clients=100)
    with self.assertRaisesRegex(ValueError, 'dp.target_epsilon=-1 is not '
                                'allowed'):
      privacy.calibrate(p, -1, 10, num_clients=100)


class MostParticipationsTest(parameterized.TestCase):

  @parameterized.parameters((0.3, 0), (1.0, 0), (0.5, 4))
  def test_a_direct_count_of_the_runs_draws(self, q, s):
    seed, m, rounds = 7, 12, 40
    counts = np.zeros(m, np.int64)
    want = []
    for k in range(rounds):  # the uniforms themselves, u < q or the S least
      u = np.asarray(participation.uniforms(np.int32(seed), np.int32(k), m))
      present = (np.argsort(np.argsort(u, kind='stable'), kind='stable') < s
                 if s else u < np.float32(q))
      counts += present
      want.append(counts.max())
    got = participations.most_participations(
        seed, rounds, num_clients=m, participation=q, clients_per_round=s,
        chunk=16)
    np.testing.assert_array_equal(got, want)
    self.assertTrue(np.all(np.diff(got) >= 0) and np.all(got <= np.arange(
        1, rounds + 1)))
    if q == 1.0 and not s:
      np.testing.assert_array_equal(got, np.arange(1, rounds + 1))


if __name__ == '__main__':
  absltest.main()
