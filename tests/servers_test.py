"""laq_jax.servers: the server update as a part (sgd, and optax's).

(The built-in servers against optax run by hand are in tests/parts_test.py.)
Here: `sgd` is theta - alpha * step; a server of one's own
from an optax factory (a chain with a clipped Adam, whose state holds an
int32 count) steps as optax run by hand, and keeps its state as a flat
tuple of arrays that a file round trip restores; the update picks the
server the Hyper names among those compiled in; a sweep over servers and
their parameters is one program whose points equal their runs alone; and
the parameters' checks.
"""

from fractions import Fraction
import os
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

import laq_jax as lj
from laq_jax import checkpoint
from laq_jax import hyper as hyper_lib
from laq_jax import parts
from laq_jax import servers
from tests.objective_test import numpy_logreg

M, N, D, C = 3, 8, 5, 3
MINE = 'test_clipped_adam'
PRESETS = {'test_srv_sgd': 'sgd', 'test_srv_momentum': 'momentum',
           'test_srv_adam': 'adam', 'test_srv_mine': MINE}


def clipped_adam(lr, clip, b1):
  return optax.chain(optax.clip_by_global_norm(clip), optax.adam(lr, b1=b1))


def setUpModule():
  servers.REGISTRY.register(MINE, servers.optax_server(
      MINE, clipped_adam,
      [parts.Param('clip', 1.0, check=lambda a: a > 0,
                   allowed='a finite number > 0'),
       parts.Param('b1', 0.9, check=lambda a: (a >= 0) & (a < 1),
                   allowed='a number in [0, 1)')],
      doc='Adam on the clipped aggregate'))
  for name, server in PRESETS.items():
    lj.register_algorithm(lj.Algorithm(name, False, 'identity', False,
                                       server=server))


def tearDownModule():
  for name in PRESETS:
    hyper_lib.ALGORITHMS.pop(name, None)
  servers.REGISTRY.unregister(MINE)


def tiny_data():
  rng = np.random.default_rng(0)
  return lj.Data(jnp.asarray(rng.normal(size=(M, N, D))),
                 jnp.asarray(rng.integers(0, C, size=(M, N)), jnp.int32))


def hyper(preset, **overrides):
  return lj.make_hyper(preset, dtype=jnp.float64,
                       **{'step_size': 0.05, **overrides})


def gd_spec(servers_):
  """A program of plain GD steps (identity uploads, every round) with these
  servers compiled in: nothing else to compile."""
  return lj.RunSpec(lj.get_problem('logreg', D, C), M, servers=servers_,
                    compressors=('identity',), triggers=('eager',),
                    error_feedback=False, downlink=False, grid_axis='map')


class SgdTest(absltest.TestCase):

  def test_theta_minus_alpha_step(self):
    rng = np.random.default_rng(1)
    step, theta = rng.normal(size=50), rng.normal(size=50)
    h = hyper('gd', step_size=0.3)
    alpha = float(h.step_size)
    rounded_twice = theta - alpha * step
    # The same with one rounding (an FMA): the exact value, rounded once.
    rounded_once = np.array([float(Fraction(t) - Fraction(alpha) * Fraction(s))
                             for t, s in zip(theta, step)])
    self.assertTrue(np.any(rounded_once != rounded_twice))  # they differ
    # Eagerly: NumPy's two roundings, bit for bit. Compiled, XLA may fuse the
    # multiply and subtract into an FMA: each element is one of the two.
    np.testing.assert_array_equal(
        servers.sgd(jnp.asarray(step), jnp.asarray(theta), h), rounded_twice)
    got = np.asarray(jax.jit(servers.sgd)(jnp.asarray(step),
                                          jnp.asarray(theta), h))
    self.assertTrue(np.all((got == rounded_twice) | (got == rounded_once)))


class OptaxServerTest(absltest.TestCase):

  def test_the_part_declares_its_parameters_and_state(self):
    part = servers.REGISTRY.get(MINE)
    self.assertTrue(part.stateful)
    self.assertEqual(part.param_names, ('clip', 'b1'))
    h = hyper('test_srv_mine', **{f'{MINE}.clip': 0.5})
    self.assertEqual(float(h.params[MINE]['clip']), 0.5)
    self.assertEqual(int(h.server), servers.index(MINE))

  def test_steps_as_optax_by_hand_and_resumes_from_a_checkpoint(self):
    rng = np.random.default_rng(2)
    steps = rng.normal(size=(6, 20)) * 3  # norms above the clip of 2
    theta0 = rng.normal(size=20)
    h = hyper('test_srv_mine', **{f'{MINE}.clip': 2.0, f'{MINE}.b1': 0.7})
    compiled = servers.REGISTRY.parts(['sgd', MINE])
    states = servers.init_states(compiled, jnp.asarray(theta0), h)
    # A flat tuple of arrays: Adam's int32 count, then its two moments.
    self.assertIsInstance(states[MINE], tuple)
    self.assertEqual([(a.dtype, a.shape) for a in states[MINE]],
                     [(jnp.int32, ()), (jnp.float64, (20,)),
                      (jnp.float64, (20,))])
    update = jax.jit(lambda s, th, st: servers.update(s, th, h, compiled, st))
    tx = clipped_adam(0.05, 2.0, 0.7)
    want, opt = jnp.asarray(theta0), tx.init(jnp.asarray(theta0))
    theta = jnp.asarray(theta0)
    for t in range(6):
      theta, states = update(jnp.asarray(steps[t]), theta, states)
      updates, opt = tx.update(jnp.asarray(steps[t]), opt, want)
      want = optax.apply_updates(want, updates)
      np.testing.assert_allclose(theta, want, rtol=1e-12, atol=1e-14)
      if t == 2:
        # Checkpointed as plain arrays after step 3, restored into the
        # structure init gives: the rest of the run is the same bits.
        with tempfile.TemporaryDirectory() as tmp:
          with checkpoint.Checkpointer(os.path.join(tmp, 'ckpt'), 'fp') as c:
            c.save(3, states, {'steps': steps[:3]})
            like = servers.init_states(compiled, jnp.asarray(theta0), h)
            restored = c.restore(like).state
        resumed_theta, resumed = theta, restored
    for t in range(3, 6):
      resumed_theta, resumed = update(jnp.asarray(steps[t]), resumed_theta,
                                      resumed)
    np.testing.assert_array_equal(resumed_theta, theta)
    for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(states)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    self.assertEqual(int(states[MINE][0]), 6)  # Adam's count


class UpdateTest(absltest.TestCase):

  def test_the_hyper_picks_the_server(self):
    rng = np.random.default_rng(3)
    step, theta = jnp.asarray(rng.normal(size=8)), jnp.asarray(
        rng.normal(size=8))
    compiled = servers.REGISTRY.parts(['sgd', 'momentum', 'adam'])
    for preset, tx in (('test_srv_sgd', optax.sgd(0.05)),
                       ('test_srv_momentum', optax.sgd(0.05, momentum=0.9)),
                       ('test_srv_adam', optax.adam(0.05))):
      with self.subTest(preset):
        h = hyper(preset)
        states = servers.init_states(compiled, theta, h)
        self.assertEqual(sorted(states), ['adam', 'momentum'])
        got, new = jax.jit(lambda s, th, st, h=h: servers.update(
            s, th, h, compiled, st))(step, theta, states)
        updates, _ = tx.update(step, tx.init(theta), theta)
        np.testing.assert_allclose(got, optax.apply_updates(theta, updates),
                                   rtol=1e-13)
        # Only the chosen server's state moves.
        for name in ('momentum', 'adam'):
          moved = any(np.any(np.asarray(a) != np.asarray(b)) for a, b in
                      zip(new[name], states[name]))
          self.assertEqual(moved, name == lj.get_algorithm(preset).server,
                           name)

  def test_float32_theta_stays_float32(self):
    h = lj.make_hyper('test_srv_adam', dtype=jnp.float32)
    compiled = servers.REGISTRY.parts(['adam'])
    theta = jnp.ones(4, jnp.float32)
    states = servers.init_states(compiled, theta, h)
    got, _ = jax.jit(lambda s, th, st: servers.update(s, th, h, compiled, st))(
        jnp.ones(4, jnp.float32), theta, states)
    self.assertEqual(got.dtype, jnp.float32)


class SweepOverServersTest(absltest.TestCase):

  def test_one_program_each_point_optax_by_hand_and_its_run_alone(self):
    d = tiny_data()
    spec = gd_spec(('sgd', 'momentum', MINE))
    points = [('test_srv_sgd', {}, optax.sgd(0.05)),
              ('test_srv_momentum', {'momentum.momentum': 0.5},
               optax.sgd(0.05, momentum=0.5)),
              ('test_srv_momentum', {}, optax.sgd(0.05, momentum=0.9)),
              ('test_srv_mine', {f'{MINE}.clip': 0.1},
               clipped_adam(0.05, 0.1, 0.9))]
    alone = [hyper(preset, **params) for preset, params, _ in points]
    grid = lj.stack_hypers(alone)
    before = lj.run_chunk._cache_size()
    state = lj.init_state(spec, grid, jnp.float64)
    _, trace = lj.run_chunk(spec, state, d, grid, 4)
    self.assertEqual(lj.run_chunk._cache_size() - before, 1)  # one program
    x, y = np.asarray(d.x_MxNxD), np.asarray(d.y_MxN)
    l2 = float(alone[0].l2)
    for g, (_, _, tx) in enumerate(points):
      # By hand: f and the workers' summed gradient in NumPy, the server
      # step by optax (theta^0 = 0 for logistic regression).
      theta = jnp.zeros(C + D * C, jnp.float64)
      opt = tx.init(theta)
      for k in range(4):
        out = [numpy_logreg(np.asarray(theta), x[m], y[m], l2)
               for m in range(M)]
        self.assertAlmostEqual(float(trace.loss[g, k]),
                               sum(f for f, _ in out), delta=1e-12)
        updates, opt = tx.update(jnp.asarray(sum(g_ for _, g_ in out)), opt,
                                 theta)
        theta = optax.apply_updates(theta, updates)
      # Points run one after another: each is its run alone, bit for bit.
      _, want = lj.run(spec, d, alone[g], 4)
      np.testing.assert_array_equal(trace.loss[g], want.loss)
    self.assertFalse(np.array_equal(trace.loss[1], trace.loss[2]))


class ParamsTest(absltest.TestCase):

  def test_refusals_name_the_value_and_what_is_allowed(self):
    with self.assertRaisesRegex(ValueError, r'momentum.momentum=1.0 is not '
                                r'allowed: it must be a number in \[0, 1\)'):
      hyper('test_srv_momentum', **{'momentum.momentum': 1.0})
    with self.assertRaisesRegex(ValueError, r'adam.eps=0.0 is not allowed: it '
                                r'must be a finite number > 0'):
      hyper('test_srv_adam', **{'adam.eps': 0.0})
    with self.assertRaisesRegex(ValueError, "unknown server 'adma'"):
      servers.index('adma')

  def test_registry_order_is_the_hyper_index(self):
    self.assertEqual(servers.SERVERS[:6], ('sgd', 'momentum', 'nesterov',
                                           'adam', 'amsgrad', 'yogi'))
    for i, name in enumerate(servers.SERVERS):
      self.assertEqual(servers.index(name), i)


if __name__ == '__main__':
  absltest.main()
