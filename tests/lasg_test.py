"""LASG and CADA (the LAQ authors' follow-ups) against the NumPy oracle.

Every new preset runs in ONE compiled program (a grid over presets) and each
point is checked step by step against `tests.reference.run_lasg`, written
from /work/shared/lasg-cada.md loop by loop: uploads, bits (up and down),
gradients computed, the trigger's two sides and the parameters. Then the
properties the contract states: WK2 with a zero threshold is SGD bit for
bit (at twice the compute), the pair's second gradient is on the same
minibatch rows as the first, WK1's refreshes come every tbar + 1 steps for
every worker at once, PS's idle workers are out of the round's time, and
CADA's server is AMSGrad without bias correction (a hand-written loop, and
optax's `amsgrad` with its corrections off).
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import jax.flatten_util
import optax

import laq_jax as lj
from laq_jax import loop
from laq_jax import network
from laq_jax import randomness
from laq_jax import rules
from tests import common
from tests import reference

M, N, BATCH, STEPS = 4, 40, 10, 40
PRESETS = ('lasg_wk2', 'lasg_wk1', 'lasg_ps', 'lasg_wk2_laq', 'lasg_wk1_laq',
           'lasg_ps_laq', 'cada1', 'cada2', 'cada_adam', 'cada1_mnist',
           'cada2_mnist', 'cada1_mnist_typo', 'cada2_mnist_typo',
           'cada_adam_typo')
ADAM_SERVERS = ('cada_amsgrad', 'cada_amsgrad_mnist', 'cada_amsgrad_mnist_typo')
# The typo's stale vhat on logistic regression's flat coordinates 0 and 1,
# two of its biases (the others' first aggregate is 0 on these shards, as
# every weight of an always-black pixel's is: a vhat frozen at 0 steps
# m / eps, and the run diverges, typo and oracle alike).
STALE = (0, 2)
# Settings where every rule both uploads and skips within 40 steps: a forced
# upload after tbar = 9 skips (WK1: a snapshot every 10 steps).
SETTINGS = dict(step_size=0.01, max_staleness=9, xi=0.2, err_weight=0.5,
                threshold_offset=0.0, l2=0.01, seed=4, bits=4)
ADAM_STEP = 0.002
CADA_C = 0.5
PS_L = 40.0


def spec(**kw):
  return lj.RunSpec(
      lj.get_problem('logreg'), M, stochastic=True, batch_size=BATCH,
      loss_every=1, compressors=('identity', 'uniform'),
      triggers=('eager', 'lasg_wk2', 'lasg_wk1', 'lasg_ps', 'cada_wk2',
                'cada_wk1'),
      servers=('sgd',) + ADAM_SERVERS, **kw)


def hyper(algo, **kw):
  a = lj.ALGORITHMS[algo]
  values = dict(SETTINGS)
  if a.server in ADAM_SERVERS:
    values['step_size'] = ADAM_STEP
  values.update({'cada_wk1.c': CADA_C, 'cada_wk2.c': CADA_C,
                 'lasg_ps.L': PS_L,
                 'cada_amsgrad_mnist_typo.stale_from': STALE[0],
                 'cada_amsgrad_mnist_typo.stale_to': STALE[1]}, **kw)
  return lj.make_hyper(algo, dtype=jnp.float64, **values)


def oracle(algo, x, y, **kw):
  a = lj.ALGORITHMS[algo]
  batches = [[common.batch_rows(randomness.batch_key(4, k, m), N, BATCH)
              for m in range(M)] for k in range(STEPS)]
  args = dict(steps=STEPS, alpha=SETTINGS['step_size'], batches=batches,
              trigger=a.trigger, quantized=a.compressor == 'uniform',
              bits=4, server=a.server, tbar=9, xi=0.2, c_e=0.5, c_0=0.0,
              c=CADA_C, L=PS_L)
  if a.server in ADAM_SERVERS:  # (the MNIST code's history: ||alpha agg||^2)
    args.update(alpha=ADAM_STEP, server='cada_amsgrad',
                history='moved' if a.server == 'cada_amsgrad' else 'sgd',
                stale_vhat=STALE if a.server.endswith('_typo') else (0, 0))
  args.update(kw)
  return reference.run_lasg(x, y, **args)


class OracleTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    cls.x, cls.y = x, y
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    grid = lj.stack_hypers([hyper(a) for a in PRESETS])
    cls.state, cls.trace = lj.run(spec(), data, grid, STEPS)

  def test_every_preset_matches_the_oracle_step_by_step(self):
    for g, algo in enumerate(PRESETS):
      with self.subTest(algo):
        ref = oracle(algo, self.x, self.y)
        t = jax.tree.map(lambda a: np.asarray(a)[g], self.trace)
        np.testing.assert_array_equal(t.sent_M, ref['sent'])
        np.testing.assert_array_equal(t.bits_M.astype(np.int64), ref['bits'])
        np.testing.assert_array_equal(t.bits_down_M.astype(np.int64),
                                      ref['bits_down'])
        np.testing.assert_array_equal(t.grads_M.astype(np.int64),
                                      ref['grads'])
        np.testing.assert_allclose(t.innovation_M, ref['innovation'],
                                   rtol=1e-9, atol=1e-14)
        np.testing.assert_allclose(t.threshold_M, ref['threshold'],
                                   rtol=1e-9, atol=1e-14)
        np.testing.assert_allclose(t.loss, ref['loss'], rtol=1e-11)
        np.testing.assert_allclose(np.asarray(self.state.theta_P)[g],
                                   ref['theta'], rtol=1e-9, atol=1e-12)
        # Neither always nor never, and not only the forced uploads: the
        # comparison is not trivial.
        sent = ref['sent'][1:]
        if lj.ALGORITHMS[algo].trigger != 'eager':
          self.assertLess(sent.sum(), 0.8 * sent.size, algo)
          forced = 2 * M if 'wk1' in lj.ALGORITHMS[algo].trigger else M
          self.assertGreater(sent.sum(), (STEPS // 10 - 1) * forced, algo)

  def test_the_accounting(self):
    for g, algo in enumerate(PRESETS):
      t = jax.tree.map(lambda a: np.asarray(a)[g], self.trace)
      with self.subTest(algo):
        trigger = lj.ALGORITHMS[algo].trigger
        if trigger in ('lasg_wk2', 'cada_wk2'):
          # Two gradients, except on the forced uploads (after tbar = 9
          # skips, or the first): one.
          forced = t.sent_M & (t.grads_M == 1)
          self.assertTrue(forced[0].all())
          self.assertTrue(np.isin(t.grads_M, (1, 2)).all())
        elif trigger in ('lasg_wk1', 'cada_wk1'):
          # The snapshot: every worker at once, every tbar + 1 = 10 steps.
          refresh = np.flatnonzero((t.grads_M == 1).all(1))
          np.testing.assert_array_equal(refresh, np.arange(9, STEPS, 10))
          self.assertTrue(t.sent_M[refresh].all())
        elif trigger == 'lasg_ps':
          # Only the selected compute, upload and download theta^k.
          np.testing.assert_array_equal(t.grads_M, t.sent_M.astype(int))
          np.testing.assert_array_equal(
              t.bits_down_M, np.where(t.sent_M, 32 * 7850, 0))
        else:
          np.testing.assert_array_equal(t.grads_M, 1)


class PropertiesTest(parameterized.TestCase):

  def test_wk2_with_zero_threshold_is_sgd_bit_for_bit(self):
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    zero = dict(xi=0.0, err_weight=0.0, threshold_offset=0.0)
    grid = lj.stack_hypers([hyper('lasg_wk2', **zero),
                            hyper('sgd', **zero)])
    state, trace = lj.run(spec(), data, grid, 25)
    self.assertTrue(np.asarray(trace.sent_M).all())
    np.testing.assert_array_equal(np.asarray(state.theta_P)[0],
                                  np.asarray(state.theta_P)[1])
    np.testing.assert_array_equal(np.asarray(trace.loss)[0],
                                  np.asarray(trace.loss)[1])
    # ... at twice the compute after the first (forced) step.
    grads = np.asarray(trace.grads_M)
    np.testing.assert_array_equal(grads[0, 1:], 2)
    np.testing.assert_array_equal(grads[1], 1)

  def test_the_pair_is_on_the_same_minibatch_rows(self):
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    s = loop.Setting(spec(), data, lj.hyper.cast(hyper('lasg_wk2'),
                                                 jnp.float64),
                     jnp.arange(M, dtype=jnp.int32), None, False)
    theta = jnp.asarray(np.random.default_rng(0).normal(size=7850) * 0.01)
    for step in (0, 7):
      _, grads, same = loop.minibatch_gradients(s)(step, theta, theta)
      xb, yb = same.sample_M
      for m in range(M):
        rows = common.batch_rows(randomness.batch_key(4, step, m), N, BATCH)
        np.testing.assert_array_equal(np.asarray(xb[m]), x[m][rows])
        np.testing.assert_array_equal(np.asarray(yb[m]), y[m][rows])
        # At the same parameters the pair's second gradient IS the first.
        second = same.grad_at(theta, (xb[m], yb[m]))
        np.testing.assert_array_equal(np.asarray(second),
                                      np.asarray(grads[m]))
    # Another step draws other rows (the test above could not pass by
    # accident with one fixed batch).
    self.assertFalse(np.array_equal(
        np.asarray(loop.minibatch_gradients(s)(0, theta, theta)[2]
                   .sample_M[0]),
        np.asarray(loop.minibatch_gradients(s)(7, theta, theta)[2]
                   .sample_M[0])))

  def test_ps_idle_workers_are_out_of_the_round(self):
    # On a network where compute dominates, a round with fewer selected
    # workers costs what those alone cost: the replay with the run's own
    # gradients and participants equals the trace.
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    for algo in ('lasg_ps', 'lasg_wk2'):
      h = hyper(algo, network='mobile')
      _, trace = lj.run(spec(), data, h, 30)
      t = jax.tree.map(np.asarray, trace)
      flops = float(loop.flops_per_worker_step(spec(), N))
      times = network.replay(
          h.network, np.full(M, flops), t.bits_M, t.bits_down_M, seed=4,
          grads_TxM=t.grads_M).time_s
      np.testing.assert_allclose(t.time_s, times, rtol=1e-12)
      if algo == 'lasg_ps':
        idle = t.grads_M == 0
        self.assertTrue(idle.any() and (~idle).any())

  def test_cada_server_is_amsgrad_without_bias_correction(self):
    rng = np.random.default_rng(3)
    steps = rng.normal(size=(8, 50))
    theta0 = rng.normal(size=50)
    h = lj.make_hyper('cada_adam', dtype=jnp.float64, step_size=0.01,
                      **{'cada_amsgrad.eps': 1e-6, 'cada_amsgrad.b2': 0.99})
    parts = lj.rules.Parts.of(['identity'], ['eager'], ['cada_amsgrad'])
    states = lj.servers.init_states(parts.servers, jnp.asarray(theta0), h)
    theta = jnp.asarray(theta0)
    for s in steps:
      theta, states = lj.servers.update(jnp.asarray(s), theta, h,
                                        parts.servers, states)
    # By hand: m, v from 0, vhat = max(vhat, v) from 0, eps outside the root.
    want, mom, vel, vmax = theta0.copy(), 0.0, 0.0, 0.0
    for s in steps:
      mom = 0.9 * mom + 0.1 * s
      vel = 0.99 * vel + 0.01 * s**2
      vmax = np.maximum(vmax, vel)
      want = want - 0.01 * mom / (np.sqrt(vmax) + 1e-6)
    np.testing.assert_allclose(np.asarray(theta), want, rtol=1e-12)
    # optax's amsgrad with its bias corrections (the `amsgrad` server) is
    # another map.
    tx = optax.amsgrad(0.01, b2=0.99, eps=1e-6)
    opt, biased = tx.init(jnp.asarray(theta0)), jnp.asarray(theta0)
    for s in steps:
      updates, opt = tx.update(jnp.asarray(s), opt, biased)
      biased = optax.apply_updates(biased, updates)
    self.assertGreater(np.max(np.abs(np.asarray(biased) - want)), 1e-3)

  def test_the_typo_server_freezes_vhat_on_its_range_alone(self):
    # CADA's MNIST code (utils_gpu.py:158): conv1's bias keeps vhat = v_1.
    # By hand against cada_amsgrad: outside [5, 12) the same bits; inside,
    # vhat is the first step's v for ever.
    rng = np.random.default_rng(5)
    steps = rng.normal(size=(8, 30)) * np.linspace(0.5, 3.0, 8)[:, None]
    theta0 = jnp.asarray(rng.normal(size=30))

    def run(server, **params):
      h = lj.make_hyper('cada_adam', dtype=jnp.float64, step_size=0.01,
                        **{f'{server}.{k}': v for k, v in params.items()})
      parts = lj.rules.Parts.of(['identity'], ['eager'], [server])
      states = lj.servers.init_states(parts.servers, theta0, h)
      theta = theta0
      for s in steps:
        theta, states = lj.servers.update(jnp.asarray(s), theta, h,
                                          parts.servers, states)
      return np.asarray(theta)

    plain = run('cada_amsgrad')
    typo = run('cada_amsgrad_mnist_typo', stale_from=5, stale_to=12)
    inside = np.arange(30)
    inside = (inside >= 5) & (inside < 12)
    np.testing.assert_array_equal(typo[~inside], plain[~inside])
    want, mom, vel, v1 = np.asarray(theta0).copy(), 0.0, 0.0, None
    for s in steps:
      mom = 0.9 * mom + 0.1 * s
      vel = 0.999 * vel + 0.001 * s**2
      v1 = vel if v1 is None else v1
      want = want - 0.01 * mom / (np.sqrt(v1) + 1e-7)
    np.testing.assert_allclose(typo[inside], want[inside], rtol=1e-12)
    self.assertGreater(np.max(np.abs(typo[inside] - plain[inside])), 1e-3)
    # An empty range is cada_amsgrad, bit for bit.
    np.testing.assert_array_equal(
        run('cada_amsgrad_mnist_typo', stale_from=0, stale_to=0), plain)

  def test_the_typo_range_is_the_lasg_cnn_conv1_bias(self):
    # The default, and configs/lasg.py:cada_mnist's setting from its model;
    # flat_range against an unravel of marked leaves (independent of it).
    problem = lj.get_problem('lasg_cnn')
    theta_P, unravel = lj.flat_params(problem, 0, jnp.float32)
    marked = jax.tree_util.tree_map_with_path(
        lambda path, leaf: jnp.full_like(leaf, 1.0 if jax.tree_util.keystr(
            path, simple=True, separator='/') == 'conv1/bias' else 0.0),
        unravel(theta_P))
    flat = np.asarray(jax.flatten_util.ravel_pytree(marked)[0])
    lo, hi = lj.flat_range(problem, 'conv1/bias')
    np.testing.assert_array_equal(np.flatnonzero(flat), np.arange(lo, hi))
    self.assertEqual(hi - lo, 20)
    params = lj.servers.REGISTRY.get('cada_amsgrad_mnist_typo').defaults()
    self.assertEqual((params['stale_from'], params['stale_to']), (lo, hi))
    with self.assertRaisesRegex(ValueError, "'conv9/bias' is not a parameter "
                                'of lasg_cnn: it must be one of conv1/bias'):
      lj.flat_range(problem, 'conv9/bias')

  @parameterized.parameters(('lasg_ps.L', -1.0, '>= 0'),
                            ('cada_wk1.c', float('nan'), '>= 0'),
                            ('cada_amsgrad.b1', 1.0, r'\[0, 1\)'),
                            ('cada_amsgrad.eps', 0.0, '> 0'))
  def test_bad_values_are_refused_in_one_line(self, key, value, allowed):
    with self.assertRaisesRegex(ValueError,
                                rf'{key}={value!r} is not allowed.*{allowed}'):
      lj.make_hyper('lasg_ps', **{key: value})

  def test_a_trigger_without_same_sample_gradients_is_refused(self):
    x, y = common.mnist_shards(M, N, dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))

    def plain(s):
      inner = loop.minibatch_gradients(s)
      return lambda step, theta, at: inner(step, theta, at)[:2]

    with self.assertRaisesRegex(ValueError, "trigger 'lasg_wk2' needs "
                                'same-sample gradients'):
      lj.run(spec(gradient=plain), data, hyper('lasg_wk2'), 3)


if __name__ == '__main__':
  absltest.main()
