"""laq_jax.loop: one compiled scan, chunks, grids, and real MNIST.

One program per (spec, chunk length, shapes) whatever the hyperparameters;
chunked runs equal one scan; a grid point equals its run alone bit for bit
(over 600 steps in bit_exact_test), and a vmapped grid
to rounding; and on real MNIST laq skips
most uploads while converging like gd.
"""

import dataclasses
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import sweep
from tests import common

M, N = common.SMALL_M, common.SMALL_N
small_run = common.small_run


class LoopTest(parameterized.TestCase):

  def test_model_sizes(self):
    self.assertEqual(lj.get_problem('logreg').num_params(), 7850)
    self.assertEqual(lj.get_problem('mlp').num_params(), 159010)

  def test_compiles_once_across_hyperparameters(self):
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), M, memory=7)
    before = lj.run_chunk._cache_size()
    for algo, bits, alpha, seed in [('laq', 3, 0.01, 0), ('gd', 8, 0.05, 1),
                                    ('lag', 2, 0.03, 2), ('qgd', 4, 0.02, 3)]:
      h = lj.make_hyper(algo, dtype=jnp.float64, bits=bits, step_size=alpha,
                        seed=seed)
      lj.run_chunk(spec, lj.init_state(spec, h, jnp.float64), data, h, 5)
    self.assertEqual(lj.run_chunk._cache_size() - before, 1)

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_chunks_equal_one_scan(self):
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), M)
    h = lj.make_hyper('laq', dtype=jnp.float64, step_size=0.05)
    s1, t1 = lj.run(spec, data, h, 30)
    s2, t2 = lj.run(spec, data, h, 30, chunk_size=7)
    np.testing.assert_array_equal(t1.sent_M, t2.sent_M)
    np.testing.assert_allclose(t1.loss, t2.loss, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(s1.theta_P), np.asarray(s2.theta_P),
                               rtol=1e-13)

  def test_donated_chunks_equal_copied_ones_and_leave_the_callers_state(self):
    # A federated run with partial participation, on its participants' rows
    # (round_size): donate=True updates the state in place, chunk after
    # chunk, and must compute what the copying program does, bit for bit.
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    parts = sweep.parts_of([{'algo': 'fedavg', 'clients_per_round': 2}])
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=5, round_size=2, **parts)
    h = lj.make_hyper('fedavg', dtype=jnp.float64, clients_per_round=2)
    state = lj.init_state(spec, h, jnp.float64)
    seen = []
    s1, t1 = lj.run(spec, data, h, 12, chunk_size=4, state=state)
    s2, t2 = lj.run(spec, data, h, 12, chunk_size=4, state=state,
                    donate=True, callback=lambda c: seen.append(
                        np.asarray(c.state.theta_P)))
    np.testing.assert_array_equal(np.asarray(s1.theta_P),
                                  np.asarray(s2.theta_P))
    np.testing.assert_array_equal(t1.sent_M, t2.sent_M)
    np.testing.assert_array_equal(t1.loss, t2.loss)
    self.assertLen(seen, 3)  # the callback read each chunk's state
    np.testing.assert_array_equal(seen[-1], np.asarray(s2.theta_P))
    # the caller's state is still theirs: untouched, and usable
    self.assertFalse(state.theta_P.is_deleted())
    np.testing.assert_array_equal(
        np.asarray(state.theta_P),
        np.asarray(lj.init_state(spec, h, jnp.float64).theta_P))
    # run_chunk(donate=True) consumes the state it is given
    given = jax.tree.map(jnp.copy, state)
    out, _ = lj.run_chunk(spec, given, data, h, 4, donate=True)
    self.assertTrue(given.theta_P.is_deleted())
    np.testing.assert_array_equal(
        np.asarray(out.theta_P),
        np.asarray(lj.run_chunk(spec, state, data, h, 4)[0].theta_P))

  def test_a_chunks_draws_at_once_are_each_rounds(self):
    # Every client's participation uniform, drawn for the chunk before its
    # scan (loop.chunk_draws), against each round drawing its own (a chunk
    # past loop.CHUNK_DRAWS): the same draws bit for bit, so the same
    # participants and decisions, for a single run and a vmapped grid,
    # gathered and masked rounds (Bernoulli participation on a straggling
    # network); the floats to rounding (two programs: XLA's older emitters,
    # the suite's, fuse them differently; at its defaults, bit for bit).
    from laq_jax import loop  # pylint: disable=g-import-not-at-top
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    points = [dict(algo='slaq', participation=0.4, network='mobile', seed=1),
              dict(algo='slaq', clients_per_round=2, network='mobile',
                   seed=2)]
    spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=True,
                      batch_size=5, round_size=3, grid_axis='vmap',
                      **sweep.parts_of(points))
    grid_h = sweep.stack_points(points, dtype=jnp.float64)
    one_h = jax.tree.map(lambda a: a[0], grid_h)
    self.assertTrue(loop.draws_at_once(spec, 6, points=2))
    for h in (one_h, grid_h):
      state = lj.init_state(spec, h, jnp.float64)
      chunk = lambda st, h=h: loop.scan_chunk(spec, st, data, h, 6)
      at_once = jax.jit(chunk)(state)
      with mock.patch.object(loop, 'CHUNK_DRAWS', 0):
        self.assertFalse(loop.draws_at_once(spec, 6))
        each = jax.jit(lambda st: chunk(st))(state)  # traced anew
      self.assertEqual(jax.tree.structure(at_once), jax.tree.structure(each))
      for a, b in zip(jax.tree.leaves(at_once), jax.tree.leaves(each)):
        a, b = np.asarray(a), np.asarray(b)
        if np.issubdtype(a.dtype, np.floating):
          np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
        else:  # steps, participants, uploads, bits, the slowest worker
          np.testing.assert_array_equal(a, b)
      slowdown = np.asarray(at_once[1].slowdown_M)
      self.assertGreater(np.ptp(slowdown), 0)  # the stragglers drew
      present = np.asarray(at_once[1].participants_M)
      self.assertFalse(present.all())

  def test_grid_equals_separate_runs(self):
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), M, grid_axis='map')
    points = [lj.make_hyper(a, dtype=jnp.float64, bits=b, xi=xi)
              for a, b, xi in [('laq', 2, 0.4), ('laq', 4, 1.6), ('gd', 4, 0.8),
                               ('lag', 3, 0.8)]]
    _, grid_trace = lj.run(spec, data, lj.stack_hypers(points), 25)
    for g, h in enumerate(points):
      _, t = lj.run(spec, data, h, 25)
      np.testing.assert_array_equal(grid_trace.sent_M[g], t.sent_M)
      np.testing.assert_allclose(grid_trace.loss[g], t.loss, rtol=1e-12)

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_vmapped_grid_agrees_to_rounding(self):
    # grid_axis='vmap' batches the points into wider products: the same
    # run up to rounding (uploads equal over this short run).
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    points = [lj.make_hyper(a, dtype=jnp.float64) for a in ('gd', 'laq')]
    _, mapped = lj.run(lj.RunSpec(lj.get_problem('logreg'), M,
                                  grid_axis='map'), data,
                       lj.stack_hypers(points), 40)
    _, vmapped = lj.run(lj.RunSpec(lj.get_problem('logreg'), M,
                                   grid_axis='vmap'), data,
                        lj.stack_hypers(points), 40)
    np.testing.assert_array_equal(vmapped.sent_M, mapped.sent_M)
    np.testing.assert_allclose(vmapped.loss, mapped.loss, rtol=1e-12)

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)

  def test_vmapped_grid_shares_the_data(self):
    # Vmapped, the points read one copy of the features: no [G, M, N, D]
    # array in the program (a conditional on a per-point value that reads
    # the data, the quantized broadcast's loss or the logged iterations of
    # a minibatch run, used to batch the features once per point), and a
    # minibatch grid's logged iterations are those of its points mapped.
    x, y = common.mnist_shards(M, N)
    data = lj.fast_layout(lj.Data(jnp.asarray(x), jnp.asarray(y)))
    d = x.shape[-1]
    for algo, stochastic in (('laq', False), ('two_laq', False),
                             ('slaq', True)):
      points = [lj.make_hyper(algo, dtype=jnp.float64, seed=s, bits=b)
                for s, b in ((1, 3), (2, 4), (3, 8))]
      grid = lj.stack_hypers(points)
      spec = lj.RunSpec(lj.get_problem('logreg'), M, stochastic=stochastic,
                        batch_size=5, grid_axis='vmap', loss_every=3)
      state = lj.init_state(spec, grid, jnp.float64)
      text = str(jax.make_jaxpr(
          lambda s, dd, h: lj.loop.scan_chunk(spec, s, dd, h, 4))(
              state, data, grid))
      for shape in ((3, M, N, d), (3, M * N, d), (3, M, d, N)):
        self.assertNotIn('f64[' + ','.join(map(str, shape)) + ']', text,
                         (algo, shape))
      _, vmapped = lj.run(spec, data, grid, 7)
      _, mapped = lj.run(dataclasses.replace(spec, grid_axis='map'), data,
                         grid, 7)
      np.testing.assert_array_equal(vmapped.sent_M, mapped.sent_M)
      np.testing.assert_array_equal(np.isnan(vmapped.loss),
                                    np.isnan(mapped.loss))
      np.testing.assert_allclose(vmapped.loss, mapped.loss, rtol=1e-12)
      self.assertEqual(vmapped.loss.shape, (3, 7))

  def test_auto_grid_axis(self):
    logreg, mlp = lj.get_problem('logreg'), lj.get_problem('mlp')
    resolve = lambda **kw: lj.spec.resolve_grid_axis(
        lj.RunSpec(kw.pop('problem', logreg), M, **kw))
    self.assertEqual(resolve(), 'vmap')  # full-batch logreg on a CPU
    self.assertEqual(resolve(stochastic=True), 'map')
    self.assertEqual(resolve(problem=mlp), 'map')
    self.assertEqual(resolve(grid_axis='map'), 'map')
    self.assertEqual(resolve(problem=mlp, grid_axis='vmap'), 'vmap')
    with mock.patch.object(jax, 'default_backend', lambda: 'gpu'):
      self.assertEqual(resolve(problem=mlp, stochastic=True), 'vmap')

  def test_unknown_grid_axis_is_named(self):
    with self.assertRaisesRegex(ValueError, "grid_axis='pmap'.*map, vmap"):
      lj.RunSpec(lj.get_problem('logreg'), M, grid_axis='pmap')

  def test_seed_changes_minibatches_only_when_stochastic(self):
    _, a, _ = small_run('slaq', steps=15, seed=1, problem='mlp')
    _, b, _ = small_run('slaq', steps=15, seed=1, problem='mlp')
    _, c, _ = small_run('slaq', steps=15, seed=2, problem='mlp')
    np.testing.assert_array_equal(a.loss, b.loss)
    self.assertFalse(np.array_equal(a.loss, c.loss))


class RealDataTest(absltest.TestCase):

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_lazy_skips_and_converges_on_mnist(self):
    # 10 workers x 600 real images, float32, the spec's LAQ defaults.
    x, y = common.mnist_shards(10, 600, dtype=np.float32)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), 10)
    steps = 300
    _, gd = lj.run(spec, data, lj.make_hyper('gd'), steps)
    state, laq = lj.run(spec, data, lj.make_hyper('laq'), steps)
    # far fewer uploads than gd (which sends 10 per step)
    self.assertLess(laq.sent_M.sum(), 0.3 * gd.sent_M.sum())
    # and converges like gd: the loss falls by the same margin
    drop_gd = gd.loss[0] - gd.loss[-1]
    drop_laq = laq.loss[0] - laq.loss[-1]
    self.assertGreater(drop_laq, 0.95 * drop_gd)
    self.assertLess(laq.loss[-1] - gd.loss[-1], 0.02 * gd.loss[-1])
    acc = lj.accuracy(spec.problem, state.theta_P, common.mnist()['x_test'],
                      common.mnist()['y_test'])
    self.assertGreater(acc, 0.85)


if __name__ == '__main__':
  absltest.main()
