"""laq_jax.network against a NumPy transcription of docs/algorithm.md's
"Time on a modeled network", and hand-worked rounds."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from laq_jax import network as net_lib



def reference_round(net, flops, up, down, s, inn=None, num_params=None):
  """The contract's round time, written loop by loop in float64."""
  m = len(up)
  inn = [True] * m if inn is None else list(inn)
  get = lambda name, i: float(np.broadcast_to(getattr(net, name), (m,))[i])
  ws = [i for i in range(m) if inn[i]]
  c = {i: s[i] * flops[i] / get('flops_per_s', i) for i in ws}
  u = {i: get('up_latency_s', i) + up[i] / get('up_bps', i) for i in ws}
  arrive = max(max(c[i] + u[i] for i in ws),
               min(c[i] for i in ws) + max(get('up_latency_s', i) for i in ws)
               + sum(up[i] for i in ws) / float(net.server_in_bps))
  d = max(max(get('down_latency_s', i) + down[i] / get('down_bps', i)
              for i in ws),
          max(get('down_latency_s', i) for i in ws)
          + sum(down[i] for i in ws) / float(net.server_out_bps))
  if num_params is not None and int(net.topology) == 1:
    n = len(ws)
    hop = min(min(get('up_bps', i), get('down_bps', i)) for i in ws)
    lat = max(get('up_latency_s', i) for i in ws)
    return max(c.values()) + 2 * (n - 1) * (lat + (32 * num_params / n) / hop)
  return arrive + d


def round_of(net, flops, up, down, s, **kw):
  return float(net_lib.round_time(
      net, jnp.asarray(flops, jnp.float64), jnp.asarray(up, jnp.float64),
      jnp.asarray(down, jnp.float64), jnp.asarray(s, jnp.float64),
      **kw).time_s)


class RoundTimeTest(parameterized.TestCase):

  def test_two_workers_by_hand(self):
    # Worker 0: 1 GFLOP at 1 GFLOP/s (1 s), uploads 1e6 bits at 1 Mbit/s
    # (1 s) after 0.1 s latency: done at 2.1 s. Worker 1 skips: 2 GFLOP at
    # 4 GFLOP/s (0.5 s) + 0.2 s latency = 0.7 s. Ingress 1e7 bits/s: 0.5 s
    # (the faster compute) + 0.2 (the larger latency) + 0.1 = 0.8 s.
    # Arrive 2.1 s. Down: 3.2e6 bits at 8 Mbit/s = 0.4 s + 0.05 s latency;
    # egress 6.4e6 / 1.6e7 = 0.4 s + 0.05: d = 0.45 s. T = 2.55 s.
    net = net_lib.make_network(
        'cross_silo', num_workers=2, up_bps=1e6, down_bps=8e6,
        up_latency_s=[0.1, 0.2], down_latency_s=0.05,
        flops_per_s=[1e9, 4e9], server_in_bps=1e7, server_out_bps=1.6e7)
    got = net_lib.round_time(net, jnp.array([1e9, 2e9]),
                             jnp.array([1e6, 0.0]), jnp.array([3.2e6, 3.2e6]),
                             jnp.ones(2))
    self.assertAlmostEqual(float(got.time_s), 2.55, places=12)
    self.assertEqual(int(got.slowest), 0)
    # The ingress binds when it is slow: 1e6 bits at 1e6 bits/s after the
    # fastest compute and the largest latency: 0.5 + 0.2 + 1 = 1.7 < 2.1;
    # at 4e5 bits/s: 0.5 + 0.2 + 2.5 = 3.2 > 2.1.
    slow_in = net._replace(server_in_bps=jnp.float64(4e5))
    self.assertAlmostEqual(round_of(slow_in, [1e9, 2e9], [1e6, 0], [3.2e6] * 2,
                                    [1, 1]), 3.2 + 0.45, places=12)

  def test_limits(self):
    # Infinite bandwidth and zero latency leave compute only: the slowest
    # worker's s F / rate, and one straggler sets the round.
    net = net_lib.make_network(
        'datacenter', num_workers=3, up_bps=math.inf, down_bps=math.inf,
        up_latency_s=0.0, down_latency_s=0.0, flops_per_s=2e9,
        server_in_bps=math.inf, server_out_bps=math.inf)
    flops = [1e9, 1e9, 1e9]
    self.assertEqual(round_of(net, flops, [5e6] * 3, [1e6] * 3, [1, 1, 1]),
                     0.5)
    self.assertEqual(round_of(net, flops, [5e6] * 3, [1e6] * 3, [1, 7, 1]),
                     3.5)
    # A skip costs its latency only.
    lat = net._replace(up_latency_s=jnp.full(3, 0.25))
    self.assertEqual(round_of(lat, flops, [0, 0, 0], [0] * 3, [1, 1, 1]),
                     0.75)
    # Absent workers are out of every max, min and sum.
    self.assertEqual(round_of(net, flops, [0] * 3, [0] * 3, [1, 7, 1],
                              participants_M=jnp.array([True, False, True])),
                     0.5)

  @parameterized.parameters(0, 1, 2, 3, 4)
  def test_random_rounds_match_the_transcription(self, seed):
    rng = np.random.default_rng(seed)
    m = 5
    net = net_lib.make_network(
        'mobile', num_workers=m, up_bps=rng.uniform(1e5, 1e7, m),
        down_bps=rng.uniform(1e6, 1e8, m),
        up_latency_s=rng.uniform(0, 0.1, m),
        down_latency_s=rng.uniform(0, 0.1, m),
        flops_per_s=rng.uniform(1e8, 1e10, m),
        server_in_bps=rng.uniform(1e6, 1e8),
        server_out_bps=rng.uniform(1e6, 1e8),
        topology='ring' if seed % 2 else 'star')
    flops = rng.uniform(1e7, 1e9, m)
    up = np.where(rng.random(m) < 0.5, rng.integers(1, 10**6, m), 0)
    down = np.full(m, 32 * 7850.0)
    s = rng.lognormal(0, 0.5, m)
    inn = rng.random(m) < 0.8
    inn[0] = True
    want = reference_round(net, flops, up, down, s, inn, num_params=7850)
    got = round_of(net, flops, up, down, s, participants_M=jnp.asarray(inn),
                   num_params=7850)
    self.assertAlmostEqual(got / want, 1.0, delta=1e-12)

  def test_ring_by_hand(self):
    # 4 workers, p = 1e6 (32e6 bits), B = 1e9, l = 1e-3: the compute
    # (1 s) + 2 * 3 * (1e-3 + 8e6 / 1e9) = 1 + 6 * 9e-3.
    net = net_lib.make_network('cross_silo', num_workers=4, up_bps=1e9,
                               down_bps=2e9, up_latency_s=1e-3,
                               flops_per_s=1e9, topology='ring')
    got = round_of(net, [1e9] * 4, [32e6] * 4, [32e6] * 4, [1] * 4,
                   num_params=10**6)
    self.assertAlmostEqual(got, 1 + 6 * 9e-3, places=12)

  def test_stragglers_are_seeded_by_step_and_global_worker(self):
    net = net_lib.make_network('mobile', num_workers=8)
    all_s = net_lib.slowdown(net, 3, 17, jnp.arange(8))
    part = net_lib.slowdown(net, 3, 17, jnp.array([5, 6]))
    np.testing.assert_array_equal(all_s[5:7], part)  # any device layout
    self.assertFalse(np.allclose(all_s, net_lib.slowdown(net, 3, 18,
                                                         jnp.arange(8))))
    # lognormal(0, 0.5) over many draws: median about 1.
    s = net_lib.slowdowns(net, 0, 400, 8)
    self.assertAlmostEqual(float(np.median(np.log(s))), 0.0, delta=0.08)
    self.assertAlmostEqual(float(np.std(np.log(s))), 0.5, delta=0.05)
    none = net_lib.make_network('cross_silo', num_workers=8)
    np.testing.assert_array_equal(net_lib.slowdowns(none, 0, 3, 8),
                                  np.ones((3, 8)))
    exp = net_lib.make_network('cross_silo', num_workers=8,
                               straggler='exp', straggler_scale=2.0)
    s = net_lib.slowdowns(exp, 0, 500, 8)
    self.assertGreaterEqual(s.min(), 1.0)
    self.assertAlmostEqual(float(s.mean()) - 1, 2.0, delta=0.2)

  def test_a_sweep_over_bandwidths_is_one_program(self):
    nets = [net_lib.make_network('cross_silo', num_workers=3, up_bps=b)
            for b in (1e6, 1e7, 1e8, 1e9)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *nets)
    fn = jax.jit(jax.vmap(lambda n: net_lib.round_time(
        n, jnp.full(3, 1e9), jnp.full(3, 1e6), jnp.full(3, 1e6),
        jnp.ones(3)).time_s))
    times = np.asarray(fn(stacked))
    self.assertEqual(fn._cache_size(), 1)
    for t, n in zip(times, nets):
      self.assertAlmostEqual(
          t, reference_round(n, [1e9] * 3, [1e6] * 3, [1e6] * 3, [1] * 3),
          places=12)
    self.assertTrue(np.all(np.diff(times) < 0))  # faster uplinks, sooner

  def test_replay_equals_the_rounds(self):
    net = net_lib.make_network('mobile', num_workers=3)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 10**6, (6, 3))
    down = np.full((6, 3), 32 * 100)
    out = net_lib.replay(net, [1e8] * 3, bits, down, seed=4)
    s = net_lib.slowdowns(net, 4, 6, 3)
    for k in range(6):
      self.assertAlmostEqual(out.time_s[k] / reference_round(
          net, [1e8] * 3, bits[k], down[k], s[k]), 1.0, delta=1e-12)


class BadInputTest(parameterized.TestCase):

  @parameterized.parameters(
      ('up_bps', 0.0, '> 0'), ('down_bps', -1.0, '> 0'),
      ('up_bps', float('nan'), 'not NaN'), ('up_latency_s', -0.1, '>= 0'),
      ('down_latency_s', math.inf, 'finite'), ('flops_per_s', 0, '> 0'),
      ('straggler', 'gamma', 'none, exp, lognormal'),
      ('straggler_scale', -1.0, '>= 0'), ('topology', 'tree', 'star, ring'),
      ('server_in_bps', [1e9, 2e9], '> 0'), ('up_bps', True, '> 0'),
      ('up_bps', '1e9', '> 0'))
  def test_refused_naming_the_field(self, name, value, allowed):
    with self.assertRaisesRegex(ValueError,
                                f'network.{name}=.*not allowed.*{allowed}'):
      net_lib.make_network('cross_silo', **{name: value})

  def test_unknown_profile_and_field(self):
    with self.assertRaisesRegex(ValueError, "unknown network profile 'lan'"
                                '; allowed: datacenter, cross_silo, mobile'):
      net_lib.make_network('lan')
    with self.assertRaisesRegex(ValueError, r"\['up_mbps'\]; allowed"):
      net_lib.make_network('mobile', up_mbps=5)
    with self.assertRaisesRegex(ValueError, 'one per worker \\(3\\)'):
      net_lib.make_network('mobile', num_workers=3, up_bps=[1e6, 2e6])

  def test_every_profile_is_allowed_sourced_and_described_back(self):
    # laq_jax.profiles: each profile names every field, with a value its
    # own rules allow, a source for each figure it sources, and describe()
    # (summary.json's network) gives the profile's values back
    from laq_jax import profiles  # pylint: disable=g-import-not-at-top
    self.assertIs(net_lib.PROFILES, profiles.PROFILES)  # re-exported
    self.assertEqual(sorted(profiles.SOURCES), sorted(profiles.PROFILES))
    for name, values in profiles.PROFILES.items():
      self.assertEqual(sorted(values), sorted(profiles.FIELDS), name)
      for field, value in values.items():
        profiles.check_field(field, value)
      sourced = set(profiles.SOURCES[name]) - {'context'}
      self.assertLessEqual(sourced, set(profiles.FIELDS), name)
      self.assertIn('up_bps', sourced)
      described = profiles.describe(profiles.make_network(name, num_workers=2),
                                    name)
      for field, value in values.items():
        got = described[field]
        if field in profiles.PER_WORKER_FIELDS:
          self.assertEqual(got, [got[0]] * 2)
          got = got[0]
        self.assertEqual(float(got) if not isinstance(value, str) else got,
                         value, (name, field))

  def test_ring_only_for_full_precision_eager_presets(self):
    from laq_jax import hyper  # pylint: disable=g-import-not-at-top
    ring = net_lib.make_network('cross_silo', topology='ring')
    for name in ('gd', 'sgd'):
      net_lib.check_topology(ring, hyper.get_algorithm(name))
    for name in ('laq', 'qsgd', 'ef21', 'lag'):
      with self.assertRaisesRegex(ValueError, f"'ring' is not allowed for "
                                  f"'{name}'"):
        net_lib.check_topology(ring, hyper.get_algorithm(name))


def _small_run(algo, network, steps=12, workers=4, grid=None, **kw):
  """A logistic-regression run on synthetic data, its spec and Hyper."""
  import laq_jax as lj  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  x = rng.normal(size=(workers, 30, 6))
  y = rng.integers(0, 3, size=(workers, 30))
  spec = lj.RunSpec(lj.get_problem('logreg', 6, 3), workers,
                    stochastic=lj.ALGORITHMS[algo].stochastic, batch_size=5)
  data = lj.Data(jnp.asarray(x), jnp.asarray(y))
  if grid is None:
    hyper = lj.make_hyper(algo, dtype=jnp.float64, network=network, **kw)
  else:
    hyper = lj.stack_hypers([lj.make_hyper(algo, dtype=jnp.float64,
                                           network=network, **kw, **point)
                             for point in grid])
  _, trace = lj.run(spec, data, hyper, steps)
  return spec, hyper, trace


class InTheLoopTest(parameterized.TestCase):
  """T[k] in the Trace against the transcription, from the Trace's bits."""

  @parameterized.parameters(('laq',), ('sgd',), ('two_laq',))
  def test_trace_times_match_the_transcription(self, algo):
    import laq_jax as lj  # pylint: disable=g-import-not-at-top
    net = net_lib.make_network('mobile', num_workers=4,
                               up_bps=[1e6, 5e6, 2e7, 6e6],
                               flops_per_s=[1e8, 3e8, 1e9, 2e8])
    spec, hyper, trace = _small_run(algo, net, seed=5)
    per_sample = 4 * 6 * 3  # logistic regression: 4 D C per sample
    samples = 5 if spec.stochastic else 30
    flops = [per_sample * samples] * 4
    self.assertEqual(lj.flops_per_worker_step(spec, 30), flops[0])
    np.testing.assert_array_equal(trace.slowdown_M,
                                  net_lib.slowdowns(net, 5, 12, 4))
    bits = np.asarray(trace.bits_M)
    self.assertTrue(0 < bits.sum() < bits.size * bits.max() or
                    algo == 'sgd')
    for k in range(12):
      want = reference_round(net, flops, bits[k], trace.bits_down_M[k],
                             trace.slowdown_M[k])
      self.assertAlmostEqual(float(trace.time_s[k]) / want, 1.0,
                             delta=1e-12)
      finish = [trace.slowdown_M[k][m] * flops[m] / float(net.flops_per_s[m])
                + float(net.up_latency_s[m]) + bits[k][m]
                / float(net.up_bps[m]) for m in range(4)]
      self.assertEqual(int(trace.slowest[k]), int(np.argmax(finish)))
    self.assertEqual(trace.time_s.dtype, np.float64)

  def test_gd_on_a_ring(self):
    spec, hyper, trace = _small_run('gd', 'cross_silo',
                                    **{'network.topology': 'ring'})
    p = spec.problem.num_params()
    compute = 4 * 6 * 3 * 30 / 3.6e12
    want = compute + 2 * 3 * (0.040 + (32 * p / 4) / 1e9)
    np.testing.assert_allclose(trace.time_s, want, rtol=1e-12)

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)

  def test_a_grid_over_bandwidths_is_one_program(self):
    import laq_jax as lj  # pylint: disable=g-import-not-at-top
    grid = [{'network.up_bps': b} for b in (1e6, 1e7, 1e8)]
    spec, hyper, trace = _small_run('laq', 'cross_silo', grid=grid)
    before = lj.run_chunk._cache_size()
    _small_run('laq', 'cross_silo', grid=[{'network.up_bps': b}
                                          for b in (2e6, 3e7, 5e9)])
    self.assertEqual(lj.run_chunk._cache_size(), before)  # no recompile
    for g, point in enumerate(grid):
      _, _, alone = _small_run('laq', 'cross_silo', **point)
      np.testing.assert_array_equal(trace.time_s[g], alone.time_s)
      np.testing.assert_array_equal(trace.sent_M[g], alone.sent_M)
    # The same uploads at every bandwidth (the network only times them).
    np.testing.assert_array_equal(trace.bits_M[0], trace.bits_M[2])
    uploaded = trace.bits_M[0].sum(axis=-1) > 0
    self.assertTrue(uploaded.any())
    self.assertTrue(np.all(trace.time_s[0][uploaded]
                           > trace.time_s[1][uploaded]))
    self.assertTrue(np.all(trace.time_s[0] >= trace.time_s[1]))

  def test_a_ring_for_a_lazy_rule_is_refused_before_running(self):
    import laq_jax as lj  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(ValueError, "network.topology='ring' is not "
                                "allowed for 'laq'"):
      lj.make_hyper('laq', **{'network.topology': 'ring'})
    spec = lj.RunSpec(lj.get_problem('logreg', 6, 3), 2)
    ring = net_lib.make_network('cross_silo', topology='ring')
    hyper = lj.make_hyper('laq')._replace(network=ring)
    with self.assertRaisesRegex(ValueError, "topology='ring' is not allowed"):
      spec.check_hyper(hyper)
    with self.assertRaisesRegex(ValueError, 'network.up_bps=0.0 is not '
                                'allowed.*> 0'):
      lj.make_hyper('gd', **{'network.up_bps': 0.0})
    with self.assertRaisesRegex(ValueError, "network.profile='lan' is not "
                                'allowed'):
      lj.make_hyper('gd', network='lan')


class StragglersCompiledOutTest(parameterized.TestCase):
  """RunSpec.stragglers: no slowdown draws where no point has a straggler
  model, with the same results; refused where one has."""

  def test_the_same_run_without_the_draws(self):
    self.check_the_same_run([dict(algo='laq')])

  @pytest.mark.slow  # (the fast tier's time)
  def test_the_same_run_without_the_draws_with_a_deadline_and_a_grid(self):
    self.check_the_same_run([dict(algo='fedavg', clients_per_round=3,
                                  network='mobile', deadline_s=0.06,
                                  **{'network.straggler': 'none'})])
    self.check_the_same_run([dict(algo='slaq', seed=s) for s in (0, 1)])

  def check_the_same_run(self, points):
    import laq_jax as lj  # pylint: disable=g-import-not-at-top
    from laq_jax import points as points_lib  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(2)
    data = lj.Data(jnp.asarray(rng.normal(size=(6, 30, 5))),
                   jnp.asarray(rng.integers(0, 3, size=(6, 30))))
    parts = points_lib.parts_of(points)
    self.assertFalse(parts['stragglers'])
    ran = []
    for stragglers in (True, False):
      spec = lj.RunSpec(lj.get_problem('logreg', 5, 3), 6, batch_size=5,
                        stochastic=lj.ALGORITHMS[points[0]['algo']].stochastic,
                        loss_every=1, **{**parts, 'stragglers': stragglers})
      hyper = points_lib.stack_points(points, dtype=jnp.float64)
      ran.append(lj.run(spec, data, hyper, 8, chunk_size=4))
    (state_a, trace_a), (state_b, trace_b) = ran
    np.testing.assert_array_equal(trace_b.slowdown_M, 1.0)
    for a, b in zip(jax.tree.leaves((state_a, trace_a)),
                    jax.tree.leaves((state_b, trace_b))):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-13,
                                 atol=0)  # (bit for bit at XLA's defaults)

  def test_which_points_have_them_and_the_refusal(self):
    import laq_jax as lj  # pylint: disable=g-import-not-at-top
    from laq_jax import points as points_lib  # pylint: disable=g-import-not-at-top
    need = points_lib.needs_stragglers
    self.assertFalse(need({'algo': 'laq'}))  # cross_silo: none
    self.assertTrue(need({'algo': 'laq', 'network': 'mobile'}))  # lognormal
    self.assertTrue(need({'algo': 'laq', 'network.straggler': 'exp'}))
    self.assertFalse(need({'algo': 'laq', 'network': 'mobile',
                           'network.straggler': 'none'}))
    self.assertTrue(points_lib.parts_of(
        [{'algo': 'laq'}, {'algo': 'laq', 'network': 'mobile'}])['stragglers'])
    spec = lj.RunSpec(lj.get_problem('logreg'), 4, stragglers=False)
    with self.assertRaisesRegex(
        ValueError, r'hyper.network has stragglers \(lognormal\) but '
        r'RunSpec.stragglers=False compiles their draws out: set it True'):
      spec.check_hyper(lj.make_hyper('laq', network='mobile'))
    spec.check_hyper(lj.make_hyper('laq'))  # none: runs


if __name__ == '__main__':
  absltest.main()
