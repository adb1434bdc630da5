"""laq_jax.rules: the family's step against a slow NumPy transcription.

Every preset against tests/reference.py (written loop by loop from
docs/algorithm.md, not from laq_jax), step by step in float64; and the
equivalences the algorithm implies: lag/laq with xi = c_e = c_0 = 0 are
gd/qgd, qgd with many bits tracks gd, and the staleness clock.
"""

from typing import NamedTuple

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import metrics
from laq_jax import randomness
from tests import common
from tests import reference

M, N = common.SMALL_M, common.SMALL_N
small_run = common.small_run


class ReferenceTest(parameterized.TestCase):
  """Every algorithm against the spec's NumPy loop, step by step, float64."""

  def check(self, state, trace, ref):
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-11)
    np.testing.assert_allclose(trace.grad_norm_sq, ref['grad_norm_sq'],
                               rtol=1e-9)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               atol=1e-11)

  @parameterized.product(algo=('gd', 'qgd', 'lag', 'laq'),
                         authors_code=(False, True))
  def test_full_batch_matches_numpy(self, algo, authors_code):
    a = lj.ALGORITHMS[algo]
    kwargs = dict(step_size=0.05, bits=3, xi=0.8, err_weight=3.0,
                  threshold_offset=0.0, max_staleness=20)
    state, trace, (x, y) = small_run(algo, steps=80,
                                     authors_code=authors_code, **kwargs)
    ref = reference.run(x, y, steps=80, alpha=0.05, bits=3,
                        compressor=a.compressor, innovation=a.innovation,
                        lazy_on=a.lazy, tbar=20, authors_code=authors_code)
    self.check(state, trace, ref)
    if a.lazy:  # the rule really skipped, so the test exercises the trigger
      self.assertLess(trace.sent_M.sum(), trace.sent_M.size)

  @parameterized.parameters('sgd', 'sqgd', 'slag', 'slaq', 'qsgd', 'ssgd')
  def test_stochastic_matches_numpy(self, algo):
    a = lj.ALGORITHMS[algo]
    steps, seed = 40, 5
    state, trace, (x, y) = small_run(algo, steps=steps, step_size=0.03,
                                     bits=3, threshold_offset=0.01,
                                     err_weight=1.5, seed=seed,
                                     **{'qsgd.levels': 50,
                                        'rand_p.keep_prob': 0.3})
    # The minibatches and the compressors' draws are the documented ones:
    # fold_in(seed, stream, step, worker).
    batches = [[common.batch_rows(randomness.batch_key(seed, k, m), N, 10)
                for m in range(M)] for k in range(steps)]
    uniforms = [[np.asarray(jax.random.uniform(
        randomness.compress_key(seed, k, m), (7850,), jnp.float64))
                 for m in range(M)] for k in range(steps)]
    ref = reference.run(x, y, steps=steps, alpha=0.03, bits=3,
                        compressor=a.compressor, innovation=a.innovation,
                        lazy_on=a.lazy, c_e=1.5, c_0=0.01, batches=batches,
                        levels=50, keep_prob=0.3, uniforms=uniforms)
    self.check(state, trace, ref)


NEW_PRESETS = ('terngrad', 'ef_signsgd', 'topk_ef', 'ef21', 'ef21_sgd', 'clag',
               'two_laq')


class FamilyTest(parameterized.TestCase):
  """The field's presets against the NumPy loop, step by step, float64."""

  @parameterized.parameters(*NEW_PRESETS)
  def test_preset_matches_numpy(self, algo):
    a = lj.ALGORITHMS[algo]
    steps, seed, bits, zeta = 30, 7, 3, 200.0
    kwargs = dict(step_size=0.03, bits=bits, threshold_offset=0.01,
                  err_weight=1.5, seed=seed,
                  **{'top_k.k': 0.05, 'clag.zeta': zeta})
    state, trace, (x, y) = small_run(algo, steps=steps, **kwargs)
    batches = None
    if a.stochastic:
      batches = [[common.batch_rows(randomness.batch_key(seed, k, m), N, 10)
                  for m in range(M)] for k in range(steps)]
    uniforms = [[np.asarray(jax.random.uniform(
        randomness.compress_key(seed, k, m), (7850,), jnp.float64))
                 for m in range(M)] for k in range(steps)]
    ref = reference.run(x, y, steps=steps, alpha=0.03, bits=bits, c_e=1.5,
                        c_0=0.01, batches=batches, uniforms=uniforms,
                        top_k=0.05, zeta=zeta,
                        **reference.family(algo, bits))
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_array_equal(trace.bits_down_M.astype(np.int64),
                                  ref['bits_down'])
    np.testing.assert_allclose(trace.loss, ref['loss'], rtol=1e-10)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               atol=1e-10)
    np.testing.assert_allclose(np.asarray(state.rule.broadcast_P),
                               ref['theta_hat'], atol=1e-10)
    if a.lazy:  # the trigger really skipped
      self.assertLess(trace.sent_M.sum(), trace.sent_M.size)

  def run_with(self, algo, compressor, steps=25, **kw):
    h = lj.make_hyper(algo, dtype=jnp.float64, step_size=0.03, **kw)
    h = h._replace(compressor=jnp.int32(lj.COMPRESSORS.index(compressor)))
    x, y = common.mnist_shards(M, N)
    spec = lj.RunSpec(lj.get_problem('logreg'), M)
    return lj.run(spec, lj.Data(jnp.asarray(x), jnp.asarray(y)), h, steps)

  @parameterized.parameters(('ef21', dict()), ('clag', {'clag.zeta': 0.0}))
  def test_with_the_identity_compressor_it_is_gd(self, algo, kw):
    # EF21 and CLAG (zeta = 0) with C = identity send every new gradient:
    # Qhat + (g - Qhat) = g (the identity returns g exactly).
    state, trace = self.run_with(algo, 'identity', **kw)
    gd_state, gd = self.run_with('gd', 'identity')
    np.testing.assert_array_equal(trace.loss, gd.loss)
    np.testing.assert_array_equal(np.asarray(state.theta_P),
                                  np.asarray(gd_state.theta_P))

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)
  def test_error_feedback_keeps_what_was_not_sent(self):
    # After every upload: what was sent plus the new memory equals the
    # gradient plus the old memory (u = Q + err'), so nothing is lost.
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), M)
    h = lj.make_hyper('topk_ef', dtype=jnp.float64, **{'top_k.k': 0.02})
    state = lj.init_state(spec, h, jnp.float64)
    grads = jax.vmap(jax.grad(lambda th, xm, ym: lj.objective(
        spec.problem, th, lj.Data(xm[None], ym[None]), h.l2)),
                     in_axes=(None, 0, 0))(state.theta_P, data.x_MxNxD,
                                           data.y_MxN)
    for _ in range(3):
      before = state.rule.error_MxP
      theta, rule, stats = lj.LAQ.step(grads, state.rule, state.theta_P, h,
                                       step_count=state.step)
      sent_MxP = rule.last_upload_MxP  # direct: Q replaces Qhat
      np.testing.assert_allclose(np.asarray(sent_MxP + rule.error_MxP),
                                 np.asarray(grads + before), atol=1e-14)
      self.assertTrue(np.all(np.asarray(stats.sent_M)))
      state = state._replace(step=state.step + 1, theta_P=theta, rule=rule)


class EquivalenceTest(parameterized.TestCase):

  @parameterized.parameters(('lag', 'gd', 'logreg'), ('laq', 'qgd', 'logreg'),
                            ('lag', 'gd', 'mlp'), ('laq', 'qgd', 'mlp'),
                            ('slaq', 'sqgd', 'mlp'))
  def test_lazy_with_zero_threshold_is_eager(self, lazy, eager, problem):
    zero = dict(xi=0.0, err_weight=0.0, threshold_offset=0.0, step_size=0.02)
    s1, t1, _ = small_run(lazy, steps=30, problem=problem, **zero)
    s2, t2, _ = small_run(eager, steps=30, problem=problem, **zero)
    self.assertTrue(np.all(t1.sent_M))
    np.testing.assert_array_equal(t1.loss, t2.loss)
    np.testing.assert_array_equal(np.asarray(s1.theta_P),
                                  np.asarray(s2.theta_P))

  def test_qgd_with_many_bits_tracks_gd(self):
    _, t_q, _ = small_run('qgd', steps=50, bits=24)
    _, t_g, _ = small_run('gd', steps=50)
    np.testing.assert_allclose(t_q.loss, t_g.loss, rtol=1e-6)
    _, t_coarse, _ = small_run('qgd', steps=50, bits=2)
    # ... and fewer bits really do change the trajectory.
    self.assertGreater(np.max(np.abs(t_coarse.loss - t_g.loss)), 1e-4)

  def test_staleness_clock_forces_uploads(self):
    # c_0 so large that the trigger never fires: every worker uploads at k = 0
    # (the paper's initialization), then only the clock makes it upload, after
    # exactly tbar skips, i.e. at k = tbar + 1, 2 (tbar + 1), ...
    tbar = 4
    _, trace, _ = small_run('lag', steps=20, threshold_offset=1e12,
                            max_staleness=tbar)
    expected = np.zeros(20, bool)
    expected[::tbar + 1] = True
    for m in range(M):
      np.testing.assert_array_equal(trace.sent_M[:, m], expected)

  def test_bits_add_up(self):
    _, trace, _ = small_run('laq', steps=40, bits=5)
    p = 7850
    sent = trace.sent_M
    self.assertEqual(int(trace.bits_M.astype(np.int64).sum()),
                     int(sent.sum()) * (5 * p + 32))
    _, trace, _ = small_run('lag', steps=40)
    self.assertEqual(int(trace.bits_M.astype(np.int64).sum()),
                     int(trace.sent_M.sum()) * 32 * p)


class RuleStateTest(absltest.TestCase):
  """laq_jax.rule_state: the records the rule's stages pass."""

  def test_init_gives_every_per_worker_field_its_worker_axis(self):
    # The fields a class states as PER_WORKER are the ones split over the
    # devices under shard_map: each must lead with M, the others must not
    # (sharding.py splits by this list, not by the names).
    from laq_jax import rule_state  # pylint: disable=g-import-not-at-top
    m, p = 3, 7
    parts = rule_state.Parts.of(clients=('gradient', 'scaffold'),
                                servers=('sgd', 'fedadam'))
    hyper = lj.make_hyper('laq', dtype=jnp.float64)
    state = rule_state.init(jnp.arange(p, dtype=jnp.float64), m, 10,
                            parts=parts, hyper=hyper)
    self.assertIn('scaffold', state.parts_M)  # a stateful client part's c_m
    for field in rule_state.RuleState._fields:
      per_worker = field in rule_state.RuleState.PER_WORKER
      for leaf in jax.tree.leaves(getattr(state, field)):
        self.assertEqual(leaf.shape[:1] == (m,), per_worker, field)
    np.testing.assert_array_equal(state.clock_M, [lj.rules.NEVER_UPLOADED] * m)
    np.testing.assert_array_equal(state.broadcast_P, np.arange(p))
    # the authors' scripts start the clocks at 0 (the trigger decides at k=0)
    authors = rule_state.init(jnp.zeros(p), m, 10, authors_code=True)
    np.testing.assert_array_equal(authors.clock_M, [0] * m)
    # the rule module re-exports the records it runs on
    self.assertIs(lj.rules.RuleState, rule_state.RuleState)
    self.assertIs(lj.rules.Parts, rule_state.Parts)


class _PlainState(NamedTuple):
  clock_M: jax.Array  # steps since the start, per worker
  PER_WORKER = ('clock_M',)


class _PlainStats(NamedTuple):
  sent_M: jax.Array
  bits_M: jax.Array
  bits_down_M: jax.Array
  PER_WORKER = ('sent_M', 'bits_M', 'bits_down_M')


def _plain_init(theta_P, num_workers, memory, hyper, *, parts):
  del theta_P, memory, hyper, parts
  return _PlainState(jnp.zeros((num_workers,), jnp.int32))


def _plain_step(grads_MxP, state, theta_P, hyper, *, step_count, worker_ids_M,
                num_workers, axis_name, parts):
  """Plain distributed GD, written from scratch: theta - alpha sum_m g_m."""
  del step_count, worker_ids_M, num_workers, parts
  total = jax.lax.psum(grads_MxP.sum(0), axis_name) if axis_name else (
      grads_MxP.sum(0))
  m, p = grads_MxP.shape
  stats = _PlainStats(jnp.ones((m,), bool), jnp.full((m,), 32 * p, jnp.int32),
                      jnp.full((m,), 32 * p, jnp.int32))
  new_state = _PlainState(state.clock_M + 1)
  return theta_P - hyper.step_size * total, new_state, stats


class AnotherRuleTest(absltest.TestCase):
  """A rule with its own state and stats types plugs in through RunSpec.rule
  alone: the loop, the record and the summaries take it unchanged."""

  def test_plain_gd_rule_matches_the_gd_preset(self):
    rule = lj.Rule(_plain_init, _plain_step, lambda state, theta: theta,
                   _PlainStats)
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    problem = lj.get_problem('logreg')
    h = lj.make_hyper('gd', dtype=jnp.float64, step_size=0.03)
    spec = lj.RunSpec(problem, M, rule=rule, downlink=False,
                      error_feedback=False)
    seen = []
    state, trace = lj.run(spec, data, h, 12, chunk_size=5,
                          callback=lambda c: seen.append(c.start))
    self.assertEqual(seen, [0, 5, 10])
    self.assertEqual(trace._fields, ('loss', 'grad_norm_sq', 'sent_M',
                                     'bits_M', 'bits_down_M', 'time_s',
                                     'slowest', 'slowdown_M',
                                     'participants_M'))
    np.testing.assert_array_equal(np.asarray(state.rule.clock_M),
                                  np.full(M, 12))
    gd_state, gd = lj.run(lj.RunSpec(problem, M), data, h, 12)
    np.testing.assert_allclose(trace.loss, gd.loss, rtol=1e-12)
    # Timed on the network like any rule: the same bits, the same seconds.
    np.testing.assert_array_equal(trace.time_s, gd.time_s)
    np.testing.assert_allclose(np.asarray(state.theta_P),
                               np.asarray(gd_state.theta_P), atol=1e-12)
    record = lj.Record.of(trace)
    summary = metrics.summarize(record, final_loss=float(gd.loss[-1]),
                                fstar=None, target=1e-6)
    self.assertEqual(summary['total_uploads'], 12 * M)
    self.assertEqual(summary['total_bits'], int(gd.bits_M.sum()))

  def test_a_callback_stops_the_run(self):
    x, y = common.mnist_shards(M, N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), M)
    h = lj.make_hyper('laq', dtype=jnp.float64)
    state, trace = lj.run(spec, data, h, 20, chunk_size=4,
                          callback=lambda c: c.start >= 4)
    self.assertEqual(int(state.step), 8)
    self.assertEqual(trace.loss.shape, (8,))
    # Resumed from there, the chunks count on from the state's step.
    starts = []
    lj.run(spec, data, h, 4, chunk_size=2, state=state,
           callback=lambda c: starts.append(c.start))
    self.assertEqual(starts, [8, 10])


if __name__ == '__main__':
  absltest.main()
