"""experiments/studies/family/ (timed_sweep, network_replay, crossovers,
family_time): the family's presets on modeled networks.

Per-worker bits rebuilt only where exact; the target rule; the stacked
replay against the NumPy transcription of the round time
(`network_test.reference_round`) and `network.replay`; crossover bandwidths
worked out by hand; the winner-bold table. All on small curves built here;
(slow) the reconstruction against a real sweep's per-worker bits.
"""

import pathlib
import tempfile
import unittest.mock

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.run import outputs
from experiments.studies.family import crossovers as cr
from experiments.studies.family import family_time as ft
from experiments.studies.family import network_replay as nr
from experiments.studies.family import timed_sweep as ts
from experiments.studies.family.family_report import Study
import laq_jax as lj
from laq_jax import hyper
from laq_jax import network as net_lib
from laq_jax import sweep as sweep_lib
from laq_jax import sweep_metrics
from tests import common
from tests import network_test

M, T = 3, 6  # the shapes most tests share: one compiled program for them


def make_sweep(algos, bits_up, *, bits_down=None, loss=None,
               final_loss=None, loss_every=1, diverged=None, flops=1e8,
               seeds=0, num_params=100, target_iteration=None,
               target_residual=None, notes=None):
  """A TimedSweep by hand (no files); per-point values broadcast."""
  g = len(algos)
  steps, workers = np.shape(next(b for b in bits_up if b is not None))
  if bits_down is None:
    bits_down = np.full((g, steps, workers), 32.0 * num_params)
  if loss is None:
    loss = np.tile(np.linspace(10.0, 5.0, steps), (g, 1))
  return ts.TimedSweep(
      path=pathlib.Path('/synthetic'), algos=tuple(algos),
      loss=np.asarray(loss, np.float64),
      final_loss=np.asarray(final_loss if final_loss is not None
                            else np.full(g, 4.0), np.float64),
      loss_every=np.broadcast_to(np.asarray(loss_every, np.int64), (g,)),
      diverged=np.asarray(diverged if diverged is not None
                          else np.zeros(g, bool)),
      bits_up=tuple(None if b is None else np.asarray(b, np.float64)
                    for b in bits_up),
      bits_down=np.asarray(bits_down, np.float64), notes=notes or {},
      flops=np.broadcast_to(np.asarray(flops, np.float64), (g,)),
      seeds=np.broadcast_to(np.asarray(seeds, np.int64), (g,)),
      num_params=num_params, target_residual=target_residual,
      target_iteration=tuple(target_iteration or (None,) * g))


def reference_time(net, flops, bits_TxM, down_TxM, s_TxM, k,
                   num_params=None):
  """sum_{j < k} T[j] from the transcription, given the slowdowns."""
  workers = np.shape(bits_TxM)[1]
  return sum(network_test.reference_round(
      net, [flops] * workers, bits_TxM[j], down_TxM[j], s_TxM[j],
      num_params=num_params) for j in range(k))


class PerWorkerBitsTest(absltest.TestCase):

  def test_deterministic_sizes_are_rebuilt_exactly(self):
    rng = np.random.default_rng(0)
    sent = rng.random((8, 4)) < 0.6
    sent[3] = False  # a step without uploads
    bits = np.where(sent, 4 * 7850 + 32, 0).astype(np.int64)
    got, why = ts.per_worker_bits(sent, np.cumsum(bits.sum(1)), 'uniform')
    self.assertIsNone(why)
    np.testing.assert_array_equal(got, bits)
    self.assertEqual(got.dtype, np.int64)
    none, why = ts.per_worker_bits(np.zeros((3, 2), bool), np.zeros(3),
                                   'identity')
    np.testing.assert_array_equal(none, np.zeros((3, 2)))

  def test_refused_where_not_exact(self):
    sent = np.ones((2, 2), bool)
    # Step 0: 10 + 21 bits over 2 uploads do not divide evenly.
    _, why = ts.per_worker_bits(sent, np.cumsum([31, 30]), 'top_k')
    self.assertIn('divide evenly', why)
    # Even steps of 15 and 16 bits per upload: two sizes.
    _, why = ts.per_worker_bits(sent, np.cumsum([30, 32]), 'top_k')
    self.assertIn('2 different sizes (15 to 16 bits)', why)
    # Bits on a step nobody uploaded at.
    _, why = ts.per_worker_bits(np.array([[1, 1], [0, 0]], bool),
                                np.cumsum([30, 5]), 'top_k')
    self.assertIn('without uploads has bits', why)
    # Uploads of 10 and 20 bits then one of 15 pass the totals' checks
    # (15 per upload each step): a data-dependent compressor is refused by
    # name, whatever its totals.
    sent = np.array([[1, 1], [1, 0]], bool)
    for compressor in ('rand_p', 'qsgd'):
      got, why = ts.per_worker_bits(sent, np.cumsum([30, 15]), compressor)
      self.assertIsNone(got)
      self.assertIn(f'its compressor {compressor} sends uploads of '
                    'data-dependent size', why)
    with self.assertRaisesRegex(ValueError, r'cum_bits has shape \(3,\)'):
      ts.per_worker_bits(sent, np.zeros(3), 'top_k')

  def test_downlink_is_the_broadcast_over_the_workers(self):
    got = ts.downlink_per_worker(np.cumsum([30, 0, 60]), 3)
    np.testing.assert_array_equal(got, [[10] * 3, [0] * 3, [20] * 3])


class TargetTest(absltest.TestCase):

  def bits(self):
    return np.ones((T, M))

  def test_residual_target_is_the_sweeps(self):
    sweep = make_sweep(['gd', 'laq', 'lag'], [self.bits()] * 3,
                       target_residual=1e-6, target_iteration=(4, None, 6),
                       diverged=[False, False, False])
    target = ts.choose_target(sweep, residual=True)
    self.assertEqual(target.kind, 'residual')
    self.assertEqual(target.level, 1e-6)
    np.testing.assert_array_equal(target.iteration, [4, -1, 6])
    self.assertIn('2 of 3 presets reach it', target.rule)
    self.assertEqual(ts.untimed(sweep, target, 1), 'target not reached')

  def test_loss_level_every_surviving_preset_reaches(self):
    # Logged every 2: the 4.5 at k = 3 is not an iterate that counts.
    loss = np.array([[9, np.nan, 6, np.nan, 5, np.nan],
                     [9, np.nan, 8, 4.5, 7, np.nan],
                     [9, np.nan, np.nan, np.nan, np.nan, np.nan]])
    sweep = make_sweep(['sgd', 'slaq', 'ssgd'], [self.bits()] * 3, loss=loss,
                       final_loss=[4.0, 6.5, np.nan], loss_every=2,
                       diverged=[False, False, True], target_residual=1e-6)
    # Residual asked for, but nobody reached it: the loss level instead.
    target = ts.choose_target(sweep, residual=True)
    self.assertEqual(target.kind, 'loss')
    self.assertEqual(target.level, 6.5)  # slaq's final loss
    # sgd at k = 2 (6 <= 6.5); slaq only at theta^T (k = T = 6).
    np.testing.assert_array_equal(target.iteration, [2, 6, -1])
    self.assertIn('no preset reached the residual target 1e-06', target.rule)
    self.assertIn('f(θ^k) ≤ 6.5: the highest final loss f(θ^T) among the 2 '
                  'presets that ended below their initial loss (that of '
                  'slaq)', target.rule)
    self.assertEqual(ts.untimed(sweep, target, 2), 'diverged')
    self.assertEqual(ts.untimed(sweep._replace(diverged_at=(None, None, 3)),
                                target, 2), 'diverged at k=3')
    # A preset that ran away (finite, above where it started) does not set
    # the level; it is timed where it passed the level on the way.
    away = sweep._replace(final_loss=np.array([4.0, 1e7, np.nan]))
    target = ts.choose_target(away, residual=False)
    self.assertEqual(target.level, 4.0)  # sgd's, not slaq's 1e7
    np.testing.assert_array_equal(target.iteration, [6, -1, -1])
    self.assertIn('slaq ended above where it started', target.rule)
    low = away._replace(loss=np.where(np.isnan(loss), np.nan, 3.5 + 0 * loss)
                        )._replace(final_loss=np.array([4.0, 1e7, np.nan]))
    self.assertRaisesRegex(ValueError, 'ended below its initial loss',
                           ts.choose_target, low, residual=False)
    everyone = sweep._replace(diverged=np.ones(3, bool))
    with self.assertRaisesRegex(ValueError, 'every point of /synthetic '
                                'diverged'):
      ts.choose_target(everyone, residual=False)


class ReplayTest(absltest.TestCase):

  def test_profiles_match_the_transcription_and_replay(self):
    rng = np.random.default_rng(1)
    p = 100
    gd = np.full((T, M), 32.0 * p)
    laq = np.where(rng.random((T, M)) < 0.5, 4.0 * p + 32, 0.0)
    down = np.stack([np.full((T, M), 32.0 * p),
                     rng.integers(1, 5000, (T, M)).astype(float)])
    sweep = make_sweep(['gd', 'laq'], [gd, laq], bits_down=down,
                       flops=[3e9, 5e8], seeds=[3, 5], num_params=p,
                       target_residual=1e-6, target_iteration=(4, 6))
    target = ts.choose_target(sweep, residual=True)
    times = nr.profile_times(sweep, target)
    self.assertEqual(list(times), ['gd', 'laq'])
    self.assertEqual(list(times['gd']['mobile']), ['star', 'ring'])
    self.assertEqual(list(times['laq']['mobile']), ['star'])
    for g, algo in enumerate(sweep.algos):
      k, seed = int(target.iteration[g]), int(sweep.seeds[g])
      for profile in net_lib.PROFILES:
        # The stragglers as `network.replay(..., seed=seed)` draws them.
        s = net_lib.slowdowns(net_lib.make_network(profile), seed, T, M)
        for topology, got in times[algo][profile].items():
          net = net_lib.make_network(profile, num_workers=M,
                                     topology=topology)
          want = reference_time(net, sweep.flops[g], sweep.bits_up[g],
                                down[g], s, k, num_params=p)
          self.assertAlmostEqual(got / want, 1.0, delta=1e-9,
                                 msg=(algo, profile, topology))
          replayed = net_lib.replay(net, np.full(M, sweep.flops[g]),
                                    sweep.bits_up[g], down[g],
                                    slowdown_TxM=s,
                                    num_params=p).time_s[:k].sum()
          self.assertAlmostEqual(got / replayed, 1.0, delta=1e-12)
    mobile = net_lib.make_network('mobile', num_workers=M)
    self.assertAlmostEqual(times['laq']['mobile']['star'] / net_lib.replay(
        mobile, np.full(M, 5e8), laq, down[1], seed=5).time_s.sum(), 1,
                           delta=1e-12)
    # Mobile's stragglers are drawn: the seed matters.
    other = nr.profile_times(sweep._replace(seeds=np.array([4, 5])), target)
    self.assertNotEqual(other['gd']['mobile']['star'],
                        times['gd']['mobile']['star'])
    self.assertEqual(other['gd']['cross_silo']['star'],
                     times['gd']['cross_silo']['star'])

  def test_a_grid_of_bandwidths_is_one_program(self):
    sweep = make_sweep(['gd'], [np.full((T, M), 3200.0)],
                       target_residual=1e-6, target_iteration=(T,))
    target = ts.choose_target(sweep, residual=True)
    grid = nr.bandwidth_grid(2)
    self.assertLen(grid, 11)
    self.assertEqual((grid[0], grid[-1]), nr.BANDWIDTH_RANGE)
    nr.bandwidth_times(sweep, target, grid)
    before = nr._program()._cache_size()
    curves = nr.bandwidth_times(sweep, target, grid * 1.5)
    self.assertEqual(nr._program()._cache_size(), before)  # no recompile
    for i in (0, 5, 10):
      for topology in ('star', 'ring'):
        net = net_lib.make_network('cross_silo', num_workers=M,
                                   up_bps=grid[i] * 1.5,
                                   down_bps=grid[i] * 1.5,
                                   topology=topology)
        want = reference_time(net, 1e8, sweep.bits_up[0],
                              sweep.bits_down[0], np.ones((T, M)), T,
                              num_params=100)
        self.assertAlmostEqual(curves['gd'][topology][i] / want, 1.0,
                               delta=1e-9)
    self.assertTrue(np.all(np.diff(curves['gd']['star']) <= 0))


class CrossoverTest(absltest.TestCase):
  """On cross_silo with F = 0 and M = 10 identical workers, a star round is
  2 l + (up + down) / min(x, 1e8) (the 1 Gbit/s server binds above
  x = 1e9 / M), a ring round 18 l + 1.8 (32 p) / x; l = 0.04 s."""

  def test_laq_against_gd_by_hand(self):
    m, p, steps = 10, 10_000, 20
    up_gd, up_laq, down = 32 * p, 4 * p + 32, 32 * p
    k_gd, k_laq = 10, 15
    sweep = make_sweep(['gd', 'laq'],
                       [np.full((steps, m), float(up_gd)),
                        np.full((steps, m), float(up_laq))],
                       flops=0.0, num_params=p, target_residual=1e-6,
                       target_iteration=(k_gd, k_laq))
    target = ts.choose_target(sweep, residual=True)
    grid = nr.bandwidth_grid(4)
    curves = nr.bandwidth_times(sweep, target, grid)
    star = lambda k, up, x: k * (0.08 + (up + down) / min(x, 1e8))
    for i, x in enumerate(grid):
      self.assertAlmostEqual(curves['gd']['star'][i] / star(k_gd, up_gd, x),
                             1, delta=1e-12)
      self.assertAlmostEqual(curves['laq']['star'][i]
                             / star(k_laq, up_laq, x), 1, delta=1e-12)
      self.assertAlmostEqual(curves['gd']['ring'][i]
                             / (k_gd * (0.72 + 1.8 * 32 * p / x)), 1,
                             delta=1e-12)
    # k_gd (2l + (up_gd + down) / x) = k_laq (2l + (up_laq + down) / x):
    want = ((k_laq * (up_laq + down) - k_gd * (up_gd + down))
            / (0.08 * (k_gd - k_laq)))
    self.assertAlmostEqual(want, 2_498_800.0)
    segments = cr.fastest_segments(grid, curves, nr.Exact(sweep, target),
                                   cr.contenders(curves))
    self.assertEqual([(s.algo, s.topology) for s in segments],
                     [('laq', 'star'), ('gd', 'star')])
    self.assertAlmostEqual(segments[0].hi / want, 1, delta=cr.RTOL)
    self.assertEqual(segments[1].lo, segments[0].hi)
    self.assertEqual(cr.describe_segments(segments),
                     'below 2.5 Mbit/s **laq**; above 2.5 Mbit/s **gd (star)**')

  def test_ring_against_star_by_hand(self):
    # 32 p = 4.8e7 bits: below 1e8 the star 0.08 + 9.6e7 / x meets the ring
    # 0.72 + 8.64e7 / x at x = 1.5e7; above, the star's 1.04 s meets it at
    # x = 2.7e8.
    m, p, steps = 10, 1_500_000, 20  # the shapes of the test above
    sweep = make_sweep(['gd'], [np.full((steps, m), 32.0 * p)], flops=0.0,
                       num_params=p, target_residual=1e-6,
                       target_iteration=(2,))
    target = ts.choose_target(sweep, residual=True)
    grid = nr.bandwidth_grid(4)
    curves = nr.bandwidth_times(sweep, target, grid)
    segments = cr.fastest_segments(grid, curves, nr.Exact(sweep, target),
                                   cr.contenders(curves))
    self.assertEqual([s.topology for s in segments], ['ring', 'star', 'ring'])
    self.assertAlmostEqual(segments[0].hi / 1.5e7, 1, delta=cr.RTOL)
    self.assertAlmostEqual(segments[1].hi / 2.7e8, 1, delta=cr.RTOL)
    self.assertEqual(cr.describe_segments(segments),
                     'below 15 Mbit/s **gd (ring)**; from 15 Mbit/s to 270 '
                     'Mbit/s **gd (star)**; above 270 Mbit/s **gd (ring)**')

  def test_no_crossover_and_the_bandwidth_format(self):
    only = [cr.Segment(1e6, 1e11, 'laq', 'star')]
    self.assertEqual(cr.describe_segments(only, 'faster'),
                     'no crossover from 1 Mbit/s to 100 Gbit/s: **laq** is '
                     'the faster throughout')
    self.assertEqual([cr.bps(x) for x in (999.7e6, 4.24e7, 1.55e9, 950.0)],
                     ['1 Gbit/s', '42 Mbit/s', '1.6 Gbit/s', '950 bit/s'])
    self.assertAlmostEqual(
        cr.bisect_crossing(lambda x: x - 3e7, 1e7, 1e8) / 3e7, 1,
        delta=cr.RTOL)


class TableTest(absltest.TestCase):

  def test_winner_per_profile_is_bold(self):
    sweep = make_sweep(['gd', 'laq', 'ssgd', 'lag'],
                       [np.ones((T, M)), np.ones((T, M)), None,
                        np.ones((T, M))],
                       flops=[1e6, 1e6, 2e6, 1e6], target_residual=1e-6,
                       target_iteration=(3, 5, 4, 2),
                       notes={'ssgd': ts.STALE + ': why'})
    target = ts.choose_target(sweep, residual=True)
    times = {'gd': {'datacenter': {'star': 2.0, 'ring': 1.0},
                    'mobile': {'star': 5.0, 'ring': 6.0}},
             'laq': {'datacenter': {'star': 3.0}, 'mobile': {'star': 4.0}},
             'lag': {'datacenter': {'star': 1.5}, 'mobile': {'star': 4.0}}}
    text = ft.profile_table(sweep, target, times)
    lines = text.splitlines()
    self.assertEqual(lines[0], '| preset | FLOPs per worker step | k* | '
                     'datacenter (s) | mobile (s) |')
    self.assertEqual(lines[2], '| gd | 1.000e+06 | 3 | **1 (ring)** | '
                     '5 (star) |')
    self.assertEqual(lines[3], '| laq | 1.000e+06 | 5 | 3 | **4** |')
    self.assertEqual(lines[4], '| ssgd | 2.000e+06 | 4 | no per-worker bits '
                     '| no per-worker bits |')
    self.assertEqual(lines[5], '| lag | 1.000e+06 | 2 | 1.5 | **4** |')
    self.assertEqual(ft.winners_sentence(times),
                     'Fastest to the target: datacenter **gd (ring)** (1 s), '
                     'mobile **laq** and **lag** (tied, 4 s).')
    body = '\n'.join(ft.kind_lines('Minibatch', sweep, target, times))
    self.assertIn('**Not timed: ssgd** (curves.npz predates per-worker '
                  'bits; rerun the sweep: why).', body)


def write_sweep(folder, algos, uploads, cum_bits, *, per_worker=None,
                config=None, num_train=600, loss=None, final_loss=None):
  """A finished sweep's four files as `experiments.run.grid` writes them
  (older sweeps: `bits` is each point's b; newer ones: per-worker), every
  point marked `diverged` False in results.csv as results from before the
  one rule were where the loss stayed finite."""
  g, steps, workers = uploads.shape
  folder.mkdir(parents=True)
  outputs.write_json(folder / 'config.json', {
      'dataset': 'mnist', 'data_dir': '', 'model': 'logreg', 'hidden': 200,
      'batch_size': 20, 'num_workers': workers, 'train_subset': num_train,
      **(config or {})})
  outputs.write_json(folder / 'sweep.json', {
      'num_params': 7850, 'num_train': num_train, 'target_residual': 1e-6,
      'fstar': [{'l2': 0.01, 'fstar': 1.0}]})
  outputs.atomic_write(folder / 'results.csv', outputs.results_csv(
      [{'point': i, 'algo': a, 'diverged': False, 'target_iteration': None}
       for i, a in enumerate(algos)]))
  arrays = {'loss': (np.tile(np.linspace(5.0, 2.0, steps), (g, 1))
                     if loss is None else np.asarray(loss, np.float64)),
            'final_loss': (np.linspace(1.0, 1.5, g) if final_loss is None
                           else np.asarray(final_loss, np.float64)),
            'loss_every': np.ones(g, np.int64),
            'cum_bits': cum_bits,
            'cum_bits_down': np.cumsum(np.full((g, steps), 32 * 7850 *
                                               workers), 1),
            'uploads': uploads, 'algo': np.asarray(algos),
            'seed': np.zeros(g, np.int64)}
  if per_worker is None:
    arrays['bits'] = np.full(g, 4, np.int64)
  else:
    arrays.update(bits=per_worker, grid_bits=np.full(g, 4, np.int64))
  outputs.write_npz(folder / 'curves.npz', arrays)


class LoadSweepTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(tempfile.mkdtemp(prefix='laq_family_time_'))

  def test_older_sweep_rebuilt_where_exact(self):
    sent = np.ones((2, T, M), bool)
    sent[1, ::2] = False
    sizes = np.array([32 * 7850, 4 * 7850 + 32])
    per = sent * sizes[:, None, None]
    write_sweep(self.dir / 'full', ['gd', 'laq'], sent,
                np.cumsum(per.sum(2), 1))
    sweep = ts.load_sweep(self.dir / 'full')  # FLOPs from the problem
    # 600 images over M workers, 4 D C FLOPs a sample.
    np.testing.assert_array_equal(sweep.flops, [600 // M * 4 * 784 * 10] * 2)
    for g in range(2):
      np.testing.assert_array_equal(sweep.bits_up[g], per[g])
    np.testing.assert_array_equal(sweep.bits_down, np.full((2, T, M),
                                                           32.0 * 7850))
    self.assertEqual(sweep.notes, {})
    self.assertEqual((sweep.num_params, sweep.target_residual), (7850, 1e-6))

  def test_newer_sweep_uses_its_saved_bits(self):
    rng = np.random.default_rng(2)
    sent = rng.random((2, T, M)) < 0.7
    per = sent * rng.integers(100, 200, (2, T, M))  # rand_p-like sizes
    algos = ['sgd', 'ssgd']
    write_sweep(self.dir / 'new', algos, sent, np.cumsum(per.sum(2), 1),
                per_worker=per)
    sweep = ts.load_sweep(self.dir / 'new', flops=lambda a: 7.0)
    np.testing.assert_array_equal(sweep.bits_up[1], per[1])
    self.assertEqual(sweep.notes, {})
    # The same files without per-worker bits: ssgd cannot be rebuilt.
    write_sweep(self.dir / 'old', algos, sent, np.cumsum(per.sum(2), 1))
    old = ts.load_sweep(self.dir / 'old')
    self.assertIsNone(old.bits_up[1])
    self.assertEqual(old.notes['ssgd'], f'{ts.STALE}: its compressor rand_p '
                     'sends uploads of data-dependent size')
    # Minibatch presets compute on their batch (20 samples).
    self.assertEqual(old.flops[0], 20 * 4 * 784 * 10)

  def test_section_writes_the_figure_and_says_the_target(self):
    sent = np.ones((3, T, M), bool)
    sizes = np.array([32 * 7850, 4 * 7850 + 32, 32 * 7850])
    per = sent * sizes[:, None, None]
    # laq ran above 10x f(theta^0) at k = 2, then came back (results.csv
    # says it did not diverge: the one rule, read from the curves, does).
    loss = np.tile(np.linspace(5.0, 2.0, T), (3, 1))
    loss[1, 2] = 60.0
    write_sweep(self.dir / 'logreg' / 'full', ['gd', 'laq', 'lag'], sent,
                np.cumsum(per.sum(2), 1), loss=loss,
                final_loss=[1.0, 0.5, 1.5])
    study = Study('logreg', 'LR', {'full': ('tiny', 'full')}, convex=True)
    drawn = []
    figure = ft.bandwidth_figure
    with unittest.mock.patch.object(
        ft, 'bandwidth_figure',
        lambda *a: drawn.append(figure(*a)) or drawn[-1]):
      text = '\n'.join(ft.section(study, self.dir))
    self.assertTrue((self.dir / 'logreg' / ft.FIGURE).is_file())
    self.assertIn('no preset reached the residual target 1e-06', text)
    self.assertIn('f(θ^k) ≤ 1.5', text)
    # laq: named with its iteration, timed nowhere, compared with nothing.
    self.assertIn('| laq | 6.272e+06 | — | diverged at k=2 | diverged at k=2 '
                  '| diverged at k=2 |', text)
    self.assertIn('**Diverged, not timed** (a logged loss NaN/inf or above '
                  '10x f(θ^0); in no ranking, figure or crossover): **laq** '
                  '(diverged at k=2).', text)
    self.assertIn('- Full batch: LAQ against GD cannot be compared (laq '
                  'diverged at k=2).', text)
    fastest = next(l for l in text.splitlines() if 'fastest' in l.lower()
                   and l.startswith(('Fastest', '- ')))
    self.assertNotIn('laq', fastest)
    ax = drawn[0].axes[0]
    self.assertEqual([l.get_label() for l in ax.get_lines()
                      if not l.get_label().startswith('_')],
                     ['gd (faster of star, ring)', 'lag'])
    self.assertIn('not drawn: laq (diverged at k=2)', ax.get_title())
    self.assertIn(f'![logreg: time to target against bandwidth](logreg/'
                  f'{ft.FIGURE})', text)


  def test_every_point_diverged(self):
    # The report is written: not timed, said why, no figure.
    sent = np.ones((2, T, M), bool)
    per = sent * 32 * 7850
    write_sweep(self.dir / 'mlp' / 'minibatch', ['slaq', 'sgd'], sent,
                np.cumsum(per.sum(2), 1),
                loss=[[2.0, 1.0, np.nan, np.nan, np.nan, np.nan],
                      [2.0, 1.0, 25.0, 1.0, 1.0, 1.0]], final_loss=[np.nan,
                                                                   1.0])
    study = Study('mlp', 'MLP', {'minibatch': ('tiny', 'minibatch')},
                  convex=False)
    text = '\n'.join(ft.section(study, self.dir))
    self.assertIn('**Minibatch: not timed** (every point of ', text)
    self.assertIn('**slaq** (diverged at k=2), **sgd** (diverged at k=2).',
                  text)
    self.assertIn('- Minibatch: no preset is timed (every point of ', text)
    self.assertFalse((self.dir / 'mlp' / ft.FIGURE).exists())


@pytest.mark.slow
class RealSweepTest(absltest.TestCase):

  def test_rebuilt_bits_equal_the_sweeps_own(self):
    x, y = common.mnist_shards(4, 40, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), 4, stochastic=True,
                      batch_size=10)
    algos = ['sgd', 'slaq', 'terngrad', 'ef_signsgd', 'topk_ef', 'ssgd',
             'qsgd']
    points = sweep_lib.expand_grid(
        {'algo': algos}, dict(hyper.DEFAULTS, step_size=0.05, bits=3))
    result = sweep_lib.run_sweep(spec, data, points, 8)
    curves = sweep_metrics.curve_arrays(result)
    for g, algo in enumerate(algos):
      got, why = ts.per_worker_bits(
          curves['uploads'][g], curves['cum_bits'][g],
          hyper.get_algorithm(algo).compressor)
      if algo in ('ssgd', 'qsgd'):
        self.assertIsNone(got, algo)
        self.assertIn('data-dependent size', why)
        # Their totals alone give them away too.
        self.assertIsNotNone(ts.per_worker_bits(
            curves['uploads'][g], curves['cum_bits'][g])[1], algo)
      else:
        self.assertIsNone(why, algo)
        np.testing.assert_array_equal(got, result.bits_GxTxM[g], algo)


if __name__ == '__main__':
  absltest.main()
