"""Rounds with local work (laq_jax/parts/clients.py, loop.local_gradients).

FedAvg, FedProx, SCAFFOLD, FedPAQ and the FedOpt servers round by round
against the NumPy oracle (tests/reference.run_local, written from the
contract); K = 1 FedAvg against minibatch SGD; the servers against optax
applied by hand; the weighted mean against NumPy; one program with the
lazy family; resume; bad input. Real MNIST, 4 workers x 40 images,
logistic regression, float64.
"""

import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import laq_jax as lj
from laq_jax import checkpoint
from laq_jax import participation
from laq_jax import points
from laq_jax import randomness
from laq_jax import servers
from laq_jax import sweep
from tests import common
from tests import reference

M, N, B = 4, 40, 8
ROUNDS = 12


def _spec(algos, participation_=True, **kw):
  """The RunSpec of a sweep of `algos` (the parts their points need)."""
  base = dict(lj.hyper.DEFAULTS, algo=algos[0])
  pts = [dict(p, algo=a) for a in algos
         for p in points.expand_grid({}, base)]
  parts = points.parts_of(pts)
  parts['participation'] = participation_
  return lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                    batch_size=B, loss_every=1, **{**parts, **kw})


def _data(dtype=np.float64):
  x, y = common.mnist_shards(M, N, dtype=dtype)
  return x, y, lj.Data(jnp.asarray(x), jnp.asarray(y))


def _batches(seed, rounds, steps):
  """laq_jax's documented draws: (seed, step, worker), then fold_in j."""
  out = []
  for k in range(rounds):
    row = []
    for m in range(M):
      key = randomness.batch_key(seed, k, m)
      row.append([common.batch_rows(
          key if j == 0 else jax.random.fold_in(key, j), N, B)
                  for j in range(steps)])
    out.append(row)
  return out


class OracleTest(parameterized.TestCase):
  """Every round's parameters, uploads and bits against the oracle."""

  @parameterized.named_parameters(
      ('fedavg', 'fedavg', {}, {}),
      ('fedprox', 'fedprox', {'local.mu': 0.5}, dict(mu=0.5)),
      ('fedavgm', 'fedavgm', {'momentum.momentum': 0.8},
       dict(server='momentum', momentum=0.8)),
      ('fedadam', 'fedadam', {'fedadam.tau': 0.01},
       dict(server='fedadam', tau=0.01)),
      ('fedyogi', 'fedyogi', {'fedyogi.tau': 0.01},
       dict(server='fedyogi', tau=0.01)),
      ('scaffold', 'scaffold', {}, dict(control=True)),
      ('fedpaq', 'fedpaq', {'qsgd.levels': 4},
       dict(compressor='qsgd', levels=4)),
      ('local_sgd_uniform', 'local_sgd', {}, dict(weighting='uniform')),
  )
  def test_rounds(self, algo, params, oracle_kw):
    x, y, data = _data()
    client = lj.ALGORITHMS[algo].client
    steps, lr, seed = 3, 0.2, 5
    h = lj.make_hyper(algo, dtype=jnp.float64, participation=0.6, seed=seed,
                      # (step_size, the rate on gradients, is not the
                      # server's step on model changes: eta_s is)
                      l2=0.01, step_size=0.003, server_lr=0.7,
                      **{f'{client}.steps': steps, f'{client}.lr': lr},
                      **params)
    spec = _spec([algo])
    state, trace = lj.run(spec, data, h, ROUNDS)
    theta0 = lj.init_state(spec, h, jnp.float64).theta_P
    present = np.asarray(trace.participants_M)
    self.assertTrue(0 < present.sum() < present.size)  # partial rounds
    uniforms = [[np.asarray(jax.random.uniform(
        randomness.compress_key(seed, k, m), (theta0.size,), jnp.float64))
                 for m in range(M)] for k in range(ROUNDS)]
    ref = reference.run_local(
        x, y, rounds=ROUNDS, theta0=np.asarray(theta0),
        batches=_batches(seed, ROUNDS, steps), present=present,
        local_steps=steps, client_lr=lr, server_lr=0.7, lam=0.01,
        uniforms=uniforms, **oracle_kw)
    np.testing.assert_array_equal(trace.bits_M, np.asarray(ref['bits']))
    np.testing.assert_array_equal(trace.sent_M, present)
    np.testing.assert_array_equal(trace.grads_M, steps * present)
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-10)
    np.testing.assert_allclose(state.theta_P, ref['theta'], rtol=1e-9,
                               atol=1e-12)
    # Downlink: theta (and SCAFFOLD's c) to the participants.
    per = 32 * theta0.size * (2 if algo == 'scaffold' else 1)
    np.testing.assert_array_equal(trace.bits_down_M, per * present)


def _taus(seed, rounds, e_min, e_max):
  """tau_m of each round and client: E_m ceil(N / B) with E_m = E_min +
  floor(u (E_max - E_min + 1)), u the documented LOCAL_WORK draw."""
  return [[int(e_min + np.floor(float(randomness.local_work_uniform(
      seed, k, m)) * (e_max - e_min + 1))) * -(-N // B) for m in range(M)]
          for k in range(rounds)]


class FedNovaTest(parameterized.TestCase):
  """FedNova (after-laq.md section 7) against the oracle, round by round."""

  @parameterized.named_parameters(
      ('vanilla', {}, {}),
      ('momentum', {'fednova.momentum': 0.8}, dict(rho=0.8)),
      ('prox', {'fednova.mu': 0.5}, dict(mu=0.5)),
      ('samples', {}, dict(weighting='samples')),
      ('unnormalized', {'fednova.normalize': 0}, dict(normalize=False)),
  )
  def test_rounds(self, params, oracle_kw):
    x, y, data = _data()
    lr, seed = 0.05, 7
    weighting = oracle_kw.get('weighting', 'uniform')
    h = lj.make_hyper('fednova', dtype=jnp.float64, participation=0.6,
                      seed=seed, l2=0.01, server_lr=0.9, weighting=weighting,
                      **{'fednova.lr': lr, 'fednova.epochs_min': 1,
                         'fednova.epochs_max': 3}, **params)
    spec = _spec(['fednova'])
    state, trace = lj.run(spec, data, h, ROUNDS)
    theta0 = lj.init_state(spec, h, jnp.float64).theta_P
    present = np.asarray(trace.participants_M)
    self.assertTrue(0 < present.sum() < present.size)  # partial rounds
    taus = _taus(seed, ROUNDS, 1, 3)
    self.assertLen({t for row in taus for t in row}, 3)  # E_m = 1, 2, 3
    ref = reference.run_fednova(
        x, y, rounds=ROUNDS, theta0=np.asarray(theta0),
        batches=_batches(seed, ROUNDS, max(max(r) for r in taus)),
        present=present, taus=taus, client_lr=lr, server_lr=0.9, lam=0.01,
        **oracle_kw)
    np.testing.assert_array_equal(trace.grads_M, np.asarray(taus) * present)
    np.testing.assert_array_equal(trace.bits_M, np.asarray(ref['bits']))
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-10)
    np.testing.assert_allclose(state.theta_P, ref['theta'], rtol=1e-9,
                               atol=1e-12)

  def test_equal_work_is_fedavg(self):
    """Every client K steps of client SGD (E_min = 0), uniform weights:
    tau_eff = K, K (Delta_m / K) = Delta_m, so FedNova is FedAvg to
    rounding (after-laq.md section 7 (g))."""
    _, _, data = _data()
    common_kw = dict(dtype=jnp.float64, participation=0.6, seed=3, l2=0.01,
                     server_lr=1.0, weighting='uniform')
    nova = lj.make_hyper('fednova', **common_kw, **{
        'fednova.epochs_min': 0, 'fednova.steps': 4, 'fednova.lr': 0.1})
    avg = lj.make_hyper('fedavg', **common_kw,
                        **{'local.steps': 4, 'local.lr': 0.1})
    spec = _spec(['fednova', 'fedavg'])
    a, ta = lj.run(spec, data, nova, ROUNDS)
    b, tb = lj.run(spec, data, avg, ROUNDS)
    np.testing.assert_allclose(a.theta_P, b.theta_P, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(ta.grads_M, tb.grads_M)
    # its one number more: ||a_m||_1 beside Delta_m
    np.testing.assert_array_equal(ta.bits_M, tb.bits_M + 32 * ta.sent_M)

  def test_in_one_program_with_fedavg(self):
    """A grid of fednova and fedavg points is one program, each point as
    run alone."""
    _, _, data = _data()
    kw = dict(dtype=jnp.float64, seed=4, l2=0.01, weighting='uniform')
    hypers = [lj.make_hyper('fednova', **kw), lj.make_hyper('fedavg', **kw)]
    spec = _spec(['fednova', 'fedavg'], participation_=False,
                 grid_axis='vmap')
    grid, trace = lj.run(spec, data, lj.stack_hypers(hypers), 4)
    for i, h in enumerate(hypers):
      alone, alone_trace = lj.run(spec, data, h, 4)
      np.testing.assert_allclose(grid.theta_P[i], alone.theta_P, rtol=1e-10,
                                 atol=1e-13)
      np.testing.assert_array_equal(trace.grads_M[i], alone_trace.grads_M)

  def test_stale_clients_and_deployment_are_refused(self):
    with self.assertRaisesRegex(ValueError, "absent='stale' is not allowed "
                                "with algo='fednova'"):
      lj.make_hyper('fednova', participation=0.5, absent='stale')
    with self.assertRaisesRegex(ValueError, "weighting='sum' is not allowed "
                                "with algo='fednova'"):
      lj.make_hyper('fednova', weighting='sum')
    with self.assertRaisesRegex(ValueError, r'fednova.epochs_max=1 is not '
                                r'allowed with fednova.epochs_min=3'):
      lj.make_hyper('fednova', **{'fednova.epochs_min': 3,
                                  'fednova.epochs_max': 1})
    from laq_jax import deploy  # pylint: disable=g-import-not-at-top
    with self.assertRaisesRegex(ValueError, "client 'fednova' .* is not "
                                'deployable yet'):
      deploy.check_deployable(_spec(['fednova']), lj.make_hyper('fednova'),
                              np.float32)


class RelationsTest(absltest.TestCase):

  def test_fedavg_k1_is_minibatch_sgd(self):
    """K = 1, client SGD eta_l, server step 1, uniform mean, everyone:
    theta - (1/M) sum eta_l g_m, minibatch SGD at alpha = eta_l / M (its
    step is on the SUM of the gradients); the uploads are eta_l g_m."""
    _, _, data = _data()
    eta = 0.3
    fedavg = lj.make_hyper('fedavg', dtype=jnp.float64, server_lr=1.0,
                           weighting='uniform', seed=2,
                           **{'local.steps': 1, 'local.lr': eta})
    sgd = lj.make_hyper('sgd', dtype=jnp.float64, step_size=eta / M, seed=2)
    s1, t1 = lj.run(_spec(['fedavg'], participation_=False), data, fedavg, 20)
    s2, t2 = lj.run(_spec(['sgd'], participation_=False), data, sgd, 20)
    np.testing.assert_allclose(s1.theta_P, s2.theta_P, rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_allclose(t1.loss, t2.loss, rtol=1e-12)
    np.testing.assert_allclose(t1.grad_norm_sq, eta ** 2 * t2.grad_norm_sq,
                               rtol=1e-10)
    np.testing.assert_array_equal(t1.grads_M, t2.grads_M)

  def test_fedavg_swept_beside_sgd_runs_at_its_own_server_step(self):
    """A grid over algo = (sgd, fedavg) from a config whose step_size is
    FedSGD's alpha (configs/federated.py's 0.2 / M): sgd steps by alpha,
    fedavg by its own eta_s = 1 (server_lr 0: the preset's), in one
    program; its point equals a run with eta_s = 1 whatever alpha is, and
    not one at alpha (what the grid ran before server_lr)."""
    _, _, data = _data()
    alpha = 0.002
    base = dict(lj.hyper.DEFAULTS, algo='sgd', step_size=alpha, seed=3,
                params={'local': {'steps': 2}})
    pts = points.expand_grid({'algo': ['sgd', 'fedavg']}, base)
    by_algo = {p['algo']: p for p in pts}
    self.assertEqual(by_algo['sgd']['step_size'], alpha)
    self.assertEqual(by_algo['fedavg']['server_lr'], 1.0)
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=B, loss_every=1, grid_axis='map',
                      **points.parts_of(pts))
    _, grid = lj.run(spec, data, points.stack_points(pts, jnp.float64), 4)
    g = [p['algo'] for p in pts].index('fedavg')
    alone = _spec(['fedavg'], participation_=False)
    runs = {}
    for name, kw in (('eta_s=1', dict(step_size=0.5, server_lr=1.0)),
                     ('eta_s=alpha', dict(step_size=alpha,
                                          server_lr=alpha))):
      _, runs[name] = lj.run(alone, data, lj.make_hyper(
          'fedavg', dtype=jnp.float64, seed=3, **{'local.steps': 2}, **kw),
                             4)
    np.testing.assert_allclose(grid.loss[g], runs['eta_s=1'].loss,
                               rtol=1e-12)
    self.assertGreater(np.max(np.abs(np.asarray(grid.loss[g])
                                     - np.asarray(runs['eta_s=alpha'].loss))),
                       1e-6)
    # sgd's point steps by alpha: its run alone at step_size = alpha.
    _, sgd = lj.run(_spec(['sgd'], participation_=False), data,
                    lj.make_hyper('sgd', dtype=jnp.float64, seed=3,
                                  step_size=alpha), 4)
    np.testing.assert_allclose(grid.loss[1 - g], sgd.loss, rtol=1e-12)

  @pytest.mark.slow
  def test_one_program_with_the_lazy_family(self):
    """sgd, slaq, fedavg, scaffold and fedadam: one compiled program; each
    point equals its own run (the gradient client draws what
    minibatch_gradients draws)."""
    _, _, data = _data()
    base = dict(lj.hyper.DEFAULTS, algo='sgd', participation=0.75, seed=1,
                step_size=0.05)
    pts = points.expand_grid(
        {'algo': ['sgd', 'slaq', 'fedavg', 'scaffold', 'fedadam']}, base)
    self.assertLen(points.programs(pts), 1)
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=B, loss_every=1, grid_axis='map',
                      **points.parts_of(pts))
    result = sweep.run_sweep(spec, data, pts, num_steps=8)
    for i, p in enumerate(pts):
      alone = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                         batch_size=B, loss_every=1,
                         **points.parts_of([p]))
      _, trace = lj.run(alone, data, points.stack_points([p]), 8)
      np.testing.assert_allclose(result.loss_GxT[i], trace.loss[0],
                                 rtol=1e-5, err_msg=p['algo'])
      np.testing.assert_array_equal(result.bits_GxTxM[i], trace.bits_M[0],
                                    err_msg=p['algo'])

  def test_resume_carries_client_and_server_state(self):
    """Two chunks from the state between them = one run, bit for bit
    (SCAFFOLD's control variates, FedAdam's moments)."""
    _, _, data = _data()
    for algo in ('scaffold', 'fedadam'):
      spec = _spec([algo])
      h = lj.make_hyper(algo, dtype=jnp.float64, participation=0.5)
      # chunks of one length: one compiled program
      whole, trace = lj.run(spec, data, h, 8, chunk_size=4)
      half, _ = lj.run(spec, data, h, 4)
      if algo == 'scaffold':
        self.assertGreater(float(jnp.abs(half.rule.server['scaffold']).max()),
                           0)
      # through an orbax checkpoint on disk, as the launchers resume
      folder = tempfile.mkdtemp(prefix=f'laq_local_{algo}_')
      ckpt = checkpoint.Checkpointer(folder,
                                     checkpoint.fingerprint({'a': algo}))
      ckpt.save(4, half, {'k': np.arange(4)})
      restored = ckpt.restore(lj.init_state(spec, h, jnp.float64))
      common.assert_trees_equal(self, restored.state, half)
      rest, trace2 = lj.run(spec, data, h, 4, state=restored.state)
      common.assert_trees_equal(self, whole, rest)
      np.testing.assert_array_equal(trace.loss[4:], trace2.loss)


class ServersTest(absltest.TestCase):

  def test_momentum_is_optax_sgd_by_hand(self):
    rng = np.random.default_rng(0)
    steps = [rng.normal(size=5) for _ in range(4)]
    theta = rng.normal(size=5)
    h = lj.make_hyper('fedavgm', dtype=jnp.float64, step_size=0.5,
                      **{'momentum.momentum': 0.7})
    part = servers.REGISTRY.get('momentum')
    state = servers.init_states([part], jnp.asarray(theta), h)
    tx = optax.sgd(0.5, momentum=0.7)
    opt = tx.init(theta)
    ours, want = jnp.asarray(theta), theta
    for g in steps:
      ours, state = servers.update(jnp.asarray(g), ours, h, [part], state)
      updates, opt = tx.update(g, opt, want)
      want = optax.apply_updates(want, updates)
    np.testing.assert_allclose(ours, want, rtol=1e-14)

  def test_fedadam_fedyogi_are_reddi_algorithm_2(self):
    rng = np.random.default_rng(1)
    steps = [rng.normal(size=6) for _ in range(5)]
    theta = rng.normal(size=6)
    for name in ('fedadam', 'fedyogi'):
      h = lj.make_hyper(name, dtype=jnp.float64, step_size=0.1,
                        **{f'{name}.tau': 0.05})
      part = servers.REGISTRY.get(name)
      state = servers.init_states([part], jnp.asarray(theta), h)
      ours = jnp.asarray(theta)
      m, v, want = np.zeros(6), np.full(6, 0.05 ** 2), theta.copy()
      for g in steps:
        ours, state = servers.update(jnp.asarray(g), ours, h, [part], state)
        m = 0.9 * m + 0.1 * g
        v = (v - 0.01 * g * g * np.sign(v - g * g) if name == 'fedyogi'
             else 0.99 * v + 0.01 * g * g)
        want = want - 0.1 * m / (np.sqrt(v) + 0.05)
      np.testing.assert_allclose(ours, want, rtol=1e-13, err_msg=name)


class WeightedMeanTest(absltest.TestCase):

  def test_against_numpy(self):
    rng = np.random.default_rng(2)
    up = rng.normal(size=(5, 3))
    counts = np.array([10., 3., 7., 1., 4.])
    taken = np.array([True, False, True, True, False])
    for weighting, absent in (('samples', 'drop'), ('uniform', 'drop'),
                              ('samples', 'stale'), ('uniform', 'stale')):
      h = lj.make_hyper('fedavg', dtype=jnp.float64, weighting=weighting,
                        absent=absent)
      got = participation.weighted_step(jnp.asarray(up), jnp.asarray(taken),
                                        jnp.asarray(counts), h)
      w = counts if weighting == 'samples' else np.ones(5)
      if absent == 'drop':
        w = w * taken
      np.testing.assert_allclose(got, (w[:, None] * up).sum(0) / w.sum(),
                                 rtol=1e-14, err_msg=(weighting, absent))
    nobody = participation.weighted_step(
        jnp.asarray(up), jnp.zeros(5, bool), jnp.asarray(counts),
        lj.make_hyper('fedavg', dtype=jnp.float64))
    np.testing.assert_array_equal(nobody, np.zeros(3))


class BadInputTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('k0', {'local.steps': 0}, 'local.steps=0', 'an integer in 1..10,000'),
      ('k_float', {'local.steps': 2.5}, 'local.steps=2.5',
       'an integer in 1..10,000'),
      # (10**9 ran for minutes without a line)
      ('k_huge', {'local.steps': 10**9}, 'local.steps=1000000000',
       'an integer in 1..10,000'),
      ('lr0', {'local.lr': 0.0}, 'local.lr=0.0', 'a finite number > 0'),
      ('lr_neg', {'scaffold.lr': -1.0}, 'scaffold.lr=-1.0',
       'a finite number > 0'),
      ('mu_neg', {'local.mu': -0.1}, 'local.mu=-0.1', 'a finite number >= 0'),
      ('tau0', {'fedadam.tau': 0.0}, 'fedadam.tau=0.0', 'a finite number > 0'),
      ('b1', {'fedyogi.b1': 1.0}, 'fedyogi.b1=1.0', 'a number in [0, 1)'),
      ('weighting', {'weighting': 'mean'}, "weighting='mean'",
       'one of auto, sum, samples, uniform'),
  )
  def test_one_line(self, overrides, value, allowed):
    with self.assertRaises(ValueError) as raised:
      lj.make_hyper('fedavg', **overrides)
    message = str(raised.exception)
    self.assertNotIn('\n', message)
    self.assertIn(f'{value} is not allowed: it must be {allowed}', message)

  def test_unknown_client(self):
    with self.assertRaisesRegex(ValueError, "client 'locl'.*local"):
      lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                 clients=('locl',))

  def test_local_needs_minibatches_and_compiled_parts(self):
    with self.assertRaisesRegex(ValueError, 'stochastic=False'):
      lj.RunSpec(lj.get_problem('logreg'), M, clients=('local',))
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=B, weighting=True)
    _, _, data = _data()
    with self.assertRaisesRegex(ValueError, "client.*local.*RunSpec.clients"):
      lj.run(spec, data, lj.make_hyper('fedavg'), 1)
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=B, clients=('gradient', 'local'))
    with self.assertRaisesRegex(ValueError, 'weighting'):
      lj.run(spec, data, lj.make_hyper('fedavg'), 1)


class UserClientTest(absltest.TestCase):

  def test_a_client_part_from_user_code(self):
    """notebooks/user_parts.py's local_adam (optax.adam, its own K, lr and
    b1) runs beside FedAvg in one program, no library edit; K = 1 local
    Adam step from fresh moments moves each coordinate by lr sign(g) (up
    to eps): the upload is lr * sign(g_m)."""
    from notebooks import user_parts  # pylint: disable=g-import-not-at-top
    user_parts.register()
    _, _, data = _data()
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=B, loss_every=1, weighting=True,
                      clients=('local', 'local_adam'), servers=('sgd',))
    h = lj.make_hyper('fedavg_adam', dtype=jnp.float64,
                      **{'local_adam.steps': 1, 'local_adam.lr': 0.01})
    state0 = lj.init_state(spec, h, jnp.float64)
    one, adam = lj.run(spec, data, h, 1, state=state0)
    # theta^1 = theta^0 - mean_m lr sign(g_m) (equal shards: equal weights)
    g = []
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    for m in range(M):
      idx = common.batch_rows(randomness.batch_key(0, 0, m), N, B)
      _, g_m = reference.shard_loss_and_grad(
          np.asarray(state0.theta_P), x[m][idx], y[m][idx], 0.01, 10)
      g.append(g_m)
    want = np.asarray(state0.theta_P) - np.mean(
        [0.01 * g_m / (np.abs(g_m) + 1e-8) for g_m in g], axis=0)
    np.testing.assert_allclose(one.theta_P, want, rtol=1e-9, atol=1e-12)
    self.assertEqual(int(adam.grads_M.sum()), M)


class FedDynTest(parameterized.TestCase):
  """FedDyn (after-laq.md section 6) against the oracle, round by round."""

  def test_rounds(self):
    x, y, data = _data()
    steps, lr, alpha, seed = 3, 0.1, 0.3, 8
    h = lj.make_hyper('feddyn', dtype=jnp.float64, participation=0.6,
                      seed=seed, l2=0.01, server_lr=0.9,
                      **{'feddyn.steps': steps, 'feddyn.lr': lr,
                         'feddyn.alpha': alpha})
    spec = _spec(['feddyn'])
    state, trace = lj.run(spec, data, h, ROUNDS)
    theta0 = lj.init_state(spec, h, jnp.float64).theta_P
    present = np.asarray(trace.participants_M)
    self.assertTrue(0 < present.sum() < present.size)  # partial rounds
    ref = reference.run_feddyn(
        x, y, rounds=ROUNDS, theta0=np.asarray(theta0),
        batches=_batches(seed, ROUNDS, steps), present=present, steps=steps,
        client_lr=lr, alpha=alpha, server_lr=0.9, lam=0.01)
    np.testing.assert_array_equal(trace.bits_M, np.asarray(ref['bits']))
    np.testing.assert_array_equal(trace.grads_M, steps * present)
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-10)
    np.testing.assert_allclose(state.theta_P, ref['theta'], rtol=1e-9,
                               atol=1e-12)
    nu = np.asarray(state.rule.parts_M['feddyn'])
    np.testing.assert_allclose(nu, ref['nu'], rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(state.rule.server['feddyn_server'], ref['n'],
                               rtol=1e-8, atol=1e-11)
    self.assertGreater(np.abs(nu).max(), 1e-3)  # it moved

  def test_gathered_rounds_equal_masked(self):
    """A gathered round (round_size: the participants' rows alone, nu_m
    moved on them and written back) equals the masked program's round."""
    _, _, data = _data()
    h = lj.make_hyper('feddyn', dtype=jnp.float64, clients_per_round=2,
                      seed=3, l2=0.01, **{'feddyn.steps': 2})
    masked, trace = lj.run(_spec(['feddyn']), data, h, ROUNDS)
    gathered, _ = lj.run(_spec(['feddyn'], round_size=2), data, h, ROUNDS)
    present = np.asarray(trace.participants_M)
    self.assertTrue(0 < present.sum() < present.size)  # partial rounds
    np.testing.assert_allclose(gathered.theta_P, masked.theta_P, rtol=1e-12,
                               atol=1e-15)
    for got, want in ((gathered.rule.parts_M['feddyn'],
                       masked.rule.parts_M['feddyn']),
                      (gathered.rule.server['feddyn_server'],
                       masked.rule.server['feddyn_server'])):
      np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    self.assertGreater(np.abs(masked.rule.parts_M['feddyn']).max(), 1e-3)

  def test_in_one_program_with_fedavg(self):
    """A grid of feddyn and fedavg points is one program, each point as
    run alone."""
    _, _, data = _data()
    kw = dict(dtype=jnp.float64, seed=4, l2=0.01, participation=0.5)
    hypers = [lj.make_hyper('feddyn', **kw), lj.make_hyper('fedavg', **kw)]
    spec = _spec(['feddyn', 'fedavg'], grid_axis='vmap')
    grid, _ = lj.run(spec, data, lj.stack_hypers(hypers), 4)
    for i, h in enumerate(hypers):
      alone, _ = lj.run(spec, data, h, 4)
      np.testing.assert_allclose(grid.theta_P[i], alone.theta_P, rtol=1e-10,
                                 atol=1e-13)


class ScaffnewTest(parameterized.TestCase):
  """Scaffnew / ProxSkip (after-laq.md section 5) against the oracle."""

  def _run(self, rounds=ROUNDS, **params):
    x, y, data = _data()
    h = lj.make_hyper('scaffnew', dtype=jnp.float64, seed=6, l2=0.01,
                      **{'scaffnew.lr': 0.05, **params})
    # B = the shard: every local step a full-shard gradient
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=N, loss_every=1, clients=('scaffnew',),
                      weighting=True)
    state, trace = lj.run(spec, data, h, rounds)
    theta0 = lj.init_state(spec, h, jnp.float64).theta_P
    return x, y, state, trace, np.asarray(theta0)

  @parameterized.parameters((0.3, 0), (0.2, 3))
  def test_rounds(self, p, k_cap):
    x, y, state, trace, theta0 = self._run(
        **{'scaffnew.p': p, 'scaffnew.k_cap': k_cap})
    with jax.enable_x64(True):
      coins = [float(randomness.round_coin(6, k, jnp.float64))
               for k in range(ROUNDS)]
    ref = reference.run_scaffnew(x, y, rounds=ROUNDS, theta0=theta0,
                                 coins=coins, p=p, gamma=0.05, lam=0.01,
                                 k_cap=k_cap)
    steps = np.asarray(ref['steps'])
    self.assertGreater(len(set(steps.tolist())), 1)  # K_k varies
    if k_cap:
      self.assertEqual(steps.max(), k_cap)
    np.testing.assert_array_equal(trace.grads_M, steps[:, None] * np.ones(M))
    np.testing.assert_array_equal(trace.bits_M, 32 * theta0.size)
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-10)
    np.testing.assert_allclose(state.theta_P, ref['theta'], rtol=1e-9,
                               atol=1e-12)
    h_state = np.asarray(state.rule.parts_M['scaffnew'])
    np.testing.assert_allclose(h_state, ref['h'], rtol=1e-8, atol=1e-10)
    self.assertGreater(np.abs(h_state).max(), 1e-3)  # it moved

  def test_p_one_is_gd(self):
    # K = 1 every round: theta - gamma mean(g_m - h_m), GD on the sum at
    # alpha = gamma / M (the contract's (g)).
    x, y, data = _data()
    _, _, state, trace, _ = self._run(**{'scaffnew.p': 1.0})
    np.testing.assert_array_equal(trace.grads_M, 1)
    gd = lj.make_hyper('gd', dtype=jnp.float64, l2=0.01, step_size=0.05 / M)
    spec = lj.RunSpec(lj.get_problem('logreg'), M, loss_every=1)
    gd_state, gd_trace = lj.run(spec, data, gd, ROUNDS)
    np.testing.assert_allclose(trace.loss, gd_trace.loss, rtol=1e-12)
    np.testing.assert_allclose(state.theta_P, gd_state.theta_P, rtol=1e-10,
                               atol=1e-13)

  def test_refused_without_every_client(self):
    for kw in (dict(participation=0.5), dict(clients_per_round=2),
               dict(deadline_s=1.0)):
      with self.assertRaisesRegex(ValueError, "algo='scaffnew' is not "
                                  'allowed with partial participation or a '
                                  'deadline'):
        lj.make_hyper('scaffnew', **kw)
    with self.assertRaisesRegex(ValueError, r"scaffnew.p=0(\.0)? is not "
                                r'allowed'):
      lj.make_hyper('scaffnew', **{'scaffnew.p': 0.0})


if __name__ == '__main__':
  absltest.main()
