"""A round that costs its participants (RunSpec.round_size): the same run as
the masked program, bit for bit, and the compute of S clients, not M."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import loop
from laq_jax import participation
from laq_jax import points as points_lib
from tests import common

M, N, D, C, S = 12, 30, 6, 4, 5

# Every kind of point, each with its own participation: exactly S' per
# round (stale and drop), Bernoulli q (q = 0.5 draws more than S = 5 of 12
# in about 40% of rounds: their chunks run the masked program), a deadline on the
# mobile network (55 ms of latency: a full-precision upload of these models
# misses 55.3 ms, a skip makes it).
SETTINGS = (dict(clients_per_round=3), dict(clients_per_round=5,
                                            absent='drop'),
            dict(participation=0.5), dict(participation=0.3, absent='drop'),
            dict(clients_per_round=4, network='mobile', deadline_s=0.0553))
FULL_BATCH = ('laq', 'gd', 'lag', 'ef21', 'clag', 'qgd')
MINIBATCH = ('slaq', 'sgd', 'qsgd', 'topk_ef', 'ef21_sgd', 'lasg_wk2',
             'lasg_ps', 'cada2', 'fedavg', 'fedprox', 'scaffold', 'fedadam',
             'fedpaq', 'fedlaq')


def data(unequal=False):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(M, N, D))
  y = rng.integers(0, C, size=(M, N))
  count = None
  if unequal:  # clients of 4..30 samples (some below a minibatch)
    count = 4 + (np.arange(M) * 7) % (N - 3)
    pad = np.arange(N)[None] >= count[:, None]
    x, y = np.where(pad[..., None], 0, x), np.where(pad, 0, y)
    count = jnp.asarray(count, jnp.int32)
  return lj.Data(jnp.asarray(x), jnp.asarray(y), count_M=count)


def grid(algos, model='logreg', round_size=0, grid_axis='map'):
  points = [dict(algo=a, seed=i, **SETTINGS[i % len(SETTINGS)])
            for i, a in enumerate(algos)]
  parts = points_lib.parts_of(points)
  spec = lj.RunSpec(lj.get_problem(model, D, C, hidden=8), M,
                    stochastic=lj.ALGORITHMS[algos[0]].stochastic,
                    batch_size=5, grid_axis=grid_axis, round_size=round_size,
                    **parts)
  return spec, points_lib.stack_points(points, dtype=jnp.float64)


def assert_same(test, masked, gathered, loss_rtol=0.0, loss_every=1):
  """The gathered run is the masked one; its loss logged every
  `loss_every` iterations (its spec's default: at least ceil(M / S)), NaN
  at the others."""
  (state0, trace0), (state1, trace1) = masked, gathered
  for field in trace0._fields:
    a, b = np.asarray(getattr(trace0, field)), np.asarray(getattr(trace1,
                                                                  field))
    if field == 'loss' and loss_every > 1:
      logged = np.arange(a.shape[-1]) % loss_every == 0
      test.assertTrue(np.isnan(b[..., ~logged]).all())
      a, b = a[..., logged], b[..., logged]
    if field == 'loss' and loss_rtol:
      np.testing.assert_allclose(b, a, rtol=loss_rtol, err_msg=field)
    else:
      np.testing.assert_array_equal(b, a, err_msg=field)
  for i, (a, b) in enumerate(zip(jax.tree.leaves(state0),
                                 jax.tree.leaves(state1))):
    np.testing.assert_array_equal(np.asarray(b), np.asarray(a),
                                  err_msg=f'state leaf {i}')


class SameResultsTest(parameterized.TestCase):

  @parameterized.parameters('map', 'vmap')
  def test_full_batch_presets(self, grid_axis):
    masked = grid(FULL_BATCH, grid_axis=grid_axis)
    gathered = grid(FULL_BATCH, round_size=S, grid_axis=grid_axis)
    steps = 12
    ref = lj.run(*masked[:1], data(), masked[1], steps)
    got = lj.run(*gathered[:1], data(), gathered[1], steps)
    # A gathered round computes S of M clients' gradients: the objective
    # over all M is logged every ceil(M / S) iterations by default.
    every = gathered[0].log_every
    self.assertEqual((masked[0].log_every, every), (1, math.ceil(M / S)))
    # The logged objective comes from a forward pass of its own (the
    # masked program's from its gradients' pass): to rounding.
    if grid_axis == 'map':
      assert_same(self, ref, got, loss_rtol=1e-14, loss_every=every)
      # a client not in the round computed nothing: its rows say so
      absent = ~np.asarray(got[1].participants_M)
      for field in ('sent_M', 'bits_M', 'bits_down_M', 'innovation_M',
                    'threshold_M', 'error_M', 'grads_M'):
        self.assertEqual(np.abs(np.asarray(getattr(got[1], field))[absent])
                         .sum(), 0, field)
    else:  # S-row products in place of M-row ones: to rounding, as a
      # vmapped grid's points already agree with their runs alone
      ref = (ref[0], ref[1]._replace(loss=ref[1].loss[:, ::every]))
      got = (got[0], got[1]._replace(loss=got[1].loss[:, ::every]))
      for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(got)):
        np.testing.assert_allclose(np.asarray(b, float), np.asarray(a, float),
                                   rtol=1e-9, atol=1e-12)
    sent = np.asarray(ref[1].sent_M)
    self.assertGreater(sent.sum(), 0)
    self.assertFalse(sent.all())

  @pytest.mark.slow  # 14 presets in one program, compiled twice: 40 s
  def test_minibatch_and_local_presets(self):
    # Clients of unequal sizes: the masked minibatches and the weighted
    # mean (equal ones: tests/_sharded_checks.py's gathered cases).
    masked = grid(MINIBATCH, model='mlp')
    gathered = grid(MINIBATCH, model='mlp', round_size=S)
    steps, chunk = 11, 3  # the loss is logged at 0 and 10
    ref = lj.run(masked[0], data(True), masked[1], steps)
    got = lj.run(gathered[0], data(True), gathered[1], steps,
                 chunk_size=chunk)
    assert_same(self, ref, got)
    # Both paths ran: a chunk runs on the rows when each of its rounds
    # draws at most S clients, else masked; Bernoulli points do both.
    counts = np.asarray(ref[1].participants_M).sum(-1)  # [G, T]
    bernoulli = [g for g in range(len(MINIBATCH))
                 if 'participation' in SETTINGS[g % len(SETTINGS)]]
    fits = [bool((counts[g, k:k + chunk] <= S).all()) for g in bernoulli
            for k in range(0, steps, chunk)]
    self.assertTrue(any(fits) and not all(fits), fits)
    self.assertTrue(np.asarray(ref[1].dropped_M).any())  # the deadline


class CostTest(absltest.TestCase):

  def test_a_gathered_round_computes_s_clients(self):
    """The compiled round's FLOPs (XLA's count) fall with S / M."""
    spec, hyper = grid(('slaq',), model='mlp', round_size=S)
    spec = lj.RunSpec(spec.problem, M, stochastic=True, batch_size=20,
                      participation=True, round_size=S, loss_every=1000)
    one = jax.tree.map(lambda a: a[0], hyper)._replace(
        clients_per_round=jnp.int32(S))
    state = lj.init_state(spec, one, jnp.float64)

    def flops(path):
      body = lambda st: loop.make_step(spec, data(), one, path=path)(
          st, None)
      cost = jax.jit(body).lower(state).compile().cost_analysis()
      cost = cost[0] if isinstance(cost, list) else cost
      return cost['flops']

    ratio = flops('gather') / flops('mask')
    self.assertLess(ratio, 1.5 * S / M)
    self.assertGreater(ratio, 0.5 * S / M)

  def test_the_full_objective_is_read_only_at_the_logged_iterations(self):
    """A gathered full-batch round reads every client's shard only inside
    the logged iterations' conditional (it read them every round, whatever
    loss_every said, before 2026-12-07: most of a launcher's round at M =
    1,000 and S = 10); with loss_every = 1 every round, unconditionally."""
    def unconditional(jaxpr, shape):  # primitives reading `shape` outside
      found = []                      # any conditional
      for eqn in jaxpr.eqns:
        if eqn.primitive.name == 'cond':
          continue
        subs = [getattr(v, 'jaxpr', v) for v in eqn.params.values()
                if isinstance(v, (jax.extend.core.Jaxpr,
                                  jax.extend.core.ClosedJaxpr))]
        for sub in subs:
          found += unconditional(sub, shape)
        if not subs and any(getattr(getattr(v, 'aval', None), 'shape', None)
                            == shape for v in eqn.invars):
          found.append(eqn.primitive.name)
      return set(found)

    shards = data()
    _, hyper = grid(('laq',), round_size=S)
    one = jax.tree.map(lambda a: a[0], hyper)._replace(
        clients_per_round=jnp.int32(S))
    for every, reads in ((None, {'gather'}), (1, {'gather', 'dot_general'})):
      spec = lj.RunSpec(lj.get_problem('logreg', D, C), M, participation=True,
                        round_size=S, loss_every=every or 0)
      self.assertEqual(spec.log_every, every or math.ceil(M / S))
      state = lj.init_state(spec, one, jnp.float64)
      jaxpr = jax.make_jaxpr(lambda st, spec=spec: loop.make_step(
          spec, shards, one, path='gather')(st, None))(state)
      # (gather: the round's rows of the shards)
      self.assertEqual(unconditional(jaxpr.jaxpr, shards.x_MxNxD.shape),
                       reads)

  def test_a_chunk_that_surely_fits_compiles_the_gathered_round_alone(self):
    # S' = 3 of 12 a round, all here: every round fits S = 5, so run_chunk
    # builds no masked program (its temporaries are every client's: at M =
    # 1,000 clients of a 1.6 M-parameter CNN, 21 GB) and gives the results
    # of the program that holds both behind its conditional.
    spec, hyper = grid(('fedavg', 'slaq'), round_size=S)
    fixed = hyper._replace(clients_per_round=jnp.asarray([3, 5]))
    self.assertTrue(loop.fits_for_sure(spec, fixed, M))
    for unsure in (hyper._replace(clients_per_round=jnp.asarray([3, 0])),
                   hyper._replace(clients_per_round=jnp.asarray([3, 6]))):
      self.assertFalse(loop.fits_for_sure(spec, unsure, M))  # q; S' > S
    self.assertFalse(loop.fits_for_sure(spec, fixed, S))  # S rows: no gather
    state = lj.init_state(spec, fixed, jnp.float64)
    sure = lj.run_chunk.lower(spec, state, data(), fixed, 3).compile()
    both = loop._compiled_chunk.lower(  # pylint: disable=protected-access
        spec, state, data(), fixed, 3, path='auto').compile()
    self.assertLess(sure.memory_analysis().temp_size_in_bytes,
                    both.memory_analysis().temp_size_in_bytes)
    common.assert_trees_equal(self, sure(state, data(), fixed),
                              both(state, data(), fixed))


class RoundSizeTest(absltest.TestCase):

  def test_binomial_bound_against_the_distribution(self):
    for m, q in ((12, 0.5), (1000, 0.1), (100, 0.03)):
      bound = participation.binomial_bound(m, q, 1e-6)
      tail = lambda s: sum(math.comb(m, k) * q**k * (1 - q)**(m - k)
                           for k in range(s + 1, m + 1))
      self.assertLessEqual(tail(bound), 1e-6)
      self.assertGreater(tail(bound - 1), 1e-6)
    self.assertEqual(participation.binomial_bound(50, 1.0), 50)

  def test_round_size_covers_every_point(self):
    self.assertEqual(participation.round_size(
        [dict(clients_per_round=10), dict(clients_per_round=30)], 1000), 30)
    bound = participation.binomial_bound(1000, 0.1)
    self.assertEqual(participation.round_size(
        [dict(participation=0.1), dict(clients_per_round=30)], 1000), bound)
    self.assertEqual(participation.round_size([dict()], 1000), 1000)
    self.assertEqual(participation.round_size(
        [lj.make_hyper('laq', clients_per_round=7)], 20), 7)

  def test_launchers_and_sweeps_choose_it(self):
    from experiments.run import build  # pylint: disable=g-import-not-at-top
    from laq_jax import sweep  # pylint: disable=g-import-not-at-top
    from tests import common  # pylint: disable=g-import-not-at-top
    # M = 10: 3 a round saves more than half of a round, Bernoulli(0.9)
    # nothing (its bound is 10).
    self.assertEqual(build.build(common.tiny_config(
        algo='slaq', batch_size=20, clients_per_round=3)).spec.round_size, 3)
    self.assertEqual(build.build(common.tiny_config(
        algo='slaq', batch_size=20, participation=0.9)).spec.round_size, 0)
    # a sweep's programs each cover their own points (gd takes every
    # client: its program gathers nothing)
    spec = lj.RunSpec(lj.get_problem('logreg', D, C), M, participation=True,
                      round_size=1)
    plan = sweep._plan(spec, [dict(algo='laq', clients_per_round=2),  # pylint: disable=protected-access
                              dict(algo='slaq', clients_per_round=4),
                              dict(algo='gd')], None)
    self.assertEqual([b.program.round_size for b in plan], [0, 4])

  def test_refusals_name_the_value(self):
    problem = lj.get_problem('logreg', D, C)
    with self.assertRaisesRegex(ValueError, 'round_size=4 is not allowed '
                                'with participation=False'):
      lj.RunSpec(problem, M, round_size=4)
    with self.assertRaisesRegex(ValueError, 'round_size=-1 is not allowed'):
      lj.RunSpec(problem, M, participation=True, round_size=-1)
    with self.assertRaisesRegex(ValueError, 'round_size=2.5 is not allowed'):
      lj.RunSpec(problem, M, participation=True, round_size=2.5)
    with self.assertRaisesRegex(ValueError, 'gradient part of your own'):
      lj.RunSpec(problem, M, participation=True, round_size=4,
                 gradient=loop.full_batch_gradients)


if __name__ == '__main__':
  absltest.main()
