"""xi's schedule, the logged objective's interval and the authors' minibatch
scripts (history window, contiguous blocks), against the NumPy oracle."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import pytest

from laq_jax.record import Record

import laq_jax as lj
from laq_jax import metrics
from laq_jax import randomness
from laq_jax import schedule
from laq_jax import trigger
from tests import common
from tests import reference

M, N = common.SMALL_M, common.SMALL_N


def factor_numpy(pairs, step):
  """The schedule's factor at `step`, in plain Python: the last
  breakpoint's at or before it, 1 before the first."""
  out = 1.0
  for s, c in pairs:
    if step >= s:
      out = c
  return out
small_run = common.small_run


class ParseTest(parameterized.TestCase):

  @parameterized.parameters(
      ('', ()), (None, ()), ('300:2,500:6', ((300, 2.0), (500, 6.0))),
      (' 0:0.5 ', ((0, 0.5),)), ([(10, 2), (20, 3.5)], ((10, 2.0), (20, 3.5))),
      ('1e2:2', ((100, 2.0),)))
  def test_valid(self, value, pairs):
    self.assertEqual(schedule.parse(value), pairs)
    self.assertEqual(schedule.parse(schedule.to_text(pairs)), pairs)

  @parameterized.parameters(
      '300', '300:x', 'a:2', '500:2,300:6', '300:2,300:6', '-1:2', '3.5:2',
      '10:-1', '10:nan', '10:inf', ','.join(f'{k}:2' for k in range(9)),
      [(1, 2, 3)], 7, [('a', 2)], [(True, 2)], f'{2**31 - 1}:2')
  def test_refused_with_the_value_and_what_is_allowed(self, value):
    with self.assertRaisesRegex(ValueError, r'xi_schedule=.*not allowed.*'
                                r'K1:C1'):
      schedule.parse(value)

  def test_factor_is_the_last_breakpoints_not_a_product(self):
    steps, factors = schedule.arrays('300:2,500:6')
    for k in (0, 299, 300, 499, 500, 1499, 2**30):
      self.assertEqual(float(schedule.factor_at(steps, factors, k)),
                       factor_numpy(((300, 2.0), (500, 6.0)), k), k)
    self.assertEqual(float(schedule.factor_at(steps, factors, 400)), 2.0)
    self.assertEqual(float(schedule.factor_at(steps, factors, 600)), 6.0)
    self.assertEqual(float(schedule.factor_at(steps, factors, 0)), 1.0)

  def test_hyper_and_config_refuse_a_bad_schedule(self):
    with self.assertRaisesRegex(ValueError, 'xi_schedule=.300:2,200:3'):
      lj.make_hyper('slaq', xi_schedule='300:2,200:3')
    with self.assertRaisesRegex(ValueError, 'where=.x'):
      lj.hyper.check_value('xi_schedule', 'x', where='where')

  def test_grids_stack_any_schedules(self):
    hs = [lj.make_hyper('slaq', xi_schedule=s) for s in ('', '5:2', '1:2,9:3')]
    grid = lj.stack_hypers(hs)
    self.assertEqual(grid.xi_steps.shape, (3, schedule.SLOTS))
    np.testing.assert_array_equal(grid.xi_factors[2, :3], [2, 3, 1])


class ScheduleInTheRuleTest(parameterized.TestCase):

  @parameterized.parameters('slaq', 'laq')
  def test_matches_numpy(self, algo):
    a = lj.ALGORITHMS[algo]
    steps, seed = 40, 3
    kw = dict(step_size=0.03, bits=3, err_weight=1.5, threshold_offset=0.01,
              seed=seed, xi=0.8)
    state, trace, (x, y) = small_run(algo, steps=steps,
                                     xi_schedule='10:3,25:0.5', **kw)
    batches = None
    if a.stochastic:
      batches = [[common.batch_rows(randomness.batch_key(seed, k, m), N, 10)
                  for m in range(M)] for k in range(steps)]
    ref = reference.run(x, y, steps=steps, alpha=0.03, bits=3, c_e=1.5,
                        c_0=0.01, xi=0.8, batches=batches,
                        xi_schedule=((10, 3.0), (25, 0.5)))
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_allclose(trace.threshold_M, ref['threshold'],
                               rtol=1e-9)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               atol=1e-10)
    # The schedule changes the decisions (the test can fail).
    _, plain, _ = small_run(algo, steps=steps, **kw)
    self.assertFalse(np.array_equal(plain.sent_M, trace.sent_M))
    # Before its first breakpoint a schedule is exactly no schedule.
    np.testing.assert_array_equal(plain.threshold_M[:10],
                                  trace.threshold_M[:10])


class AuthorsMinibatchScriptsTest(parameterized.TestCase):

  def test_history_window_is_the_scripts_rolling_buffer(self):
    memory, xi = 10, 3.0
    rng = np.random.default_rng(0)
    steps_sq = rng.uniform(0.5, 2.0, 40)  # ||theta^{k+1} - theta^k||^2
    for k in range(30):
      hist = np.zeros(memory)  # h_j = ||theta^{k+1-j} - theta^{k-j}||^2
      for j in range(1, memory + 1):
        if k - j >= 0:
          hist[j - 1] = steps_sq[k - j]
      got = float(trigger.history_threshold(
          np.asarray(hist), 1.0, xi, 1, k, True, minibatch_scripts=True))
      # The scripts' loop, literally: dtheta[:, 0:D-1] = dtheta[:, 1:D];
      # dtheta[:, D-1] = var - theta, for k = 1..K; then d = 1..D-1.
      buf = np.zeros(memory)
      for kk in range(1, k + 1):
        buf[:-1] = buf[1:].copy()
        buf[-1] = steps_sq[kk - 1]
      want = 0.0
      for d in range(1, memory):
        if k - d >= 0:
          want += (xi / k * buf[k - d] if k <= memory
                   else xi / memory * buf[memory - d])
      self.assertAlmostEqual(got, want, 12, k)
      if k > memory:  # the oldest of the D steps is left out
        self.assertAlmostEqual(want, xi / memory * hist[:-1].sum(), 12)
      if 1 <= k <= memory // 2:  # slots not filled yet: no history at all
        self.assertEqual(want, 0.0)
    # Without authors_code the minibatch reading is the default one.
    hist = np.arange(1.0, memory + 1)
    self.assertAlmostEqual(
        float(trigger.history_threshold(hist, 1.0, xi, 1, 30, False,
                                        minibatch_scripts=True)),
        xi / memory * hist.sum(), 12)

  def test_slaq_matches_the_numpy_scripts(self):
    steps, seed, batch = 30, 4, 10
    kw = dict(step_size=0.03, bits=3, err_weight=1.5, threshold_offset=0.01,
              seed=seed, xi=3.0)
    state, trace, (x, y) = small_run('slaq', steps=steps, authors_code=True,
                                     xi_schedule='12:2,20:6', **kw)
    # One of the shard's N / batch fixed contiguous blocks, drawn uniformly.
    blocks = [[int(jax.random.randint(randomness.batch_key(seed, k, m), (),
                                      0, N // batch)) for m in range(M)]
              for k in range(steps)]
    batches = [[np.arange(b * batch, (b + 1) * batch) for b in row]
               for row in blocks]
    ref = reference.run(x, y, steps=steps, alpha=0.03, bits=3, c_e=1.5,
                        c_0=0.01, xi=3.0, batches=batches, authors_code=True,
                        minibatch_scripts=True,
                        xi_schedule=((12, 2.0), (20, 6.0)))
    np.testing.assert_array_equal(trace.sent_M, ref['sent'])
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(trace.threshold_M, ref['threshold'],
                               rtol=1e-9)
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               atol=1e-10)
    self.assertLess(trace.sent_M.sum(), trace.sent_M.size)
    self.assertGreater(len({b for row in blocks for b in row}), 1)


  @parameterized.parameters('qsgd', 'ssgd')
  def test_qsgd_and_ssgd_as_the_scripts_count_them(self, algo):
    a = lj.ALGORITHMS[algo]
    steps, seed, batch = 12, 6, 10
    kw = {'step_size': 0.03, 'seed': seed, 'qsgd.levels': 50,
          'rand_p.keep_prob': 0.3}
    state, trace, (x, y) = small_run(algo, steps=steps, authors_code=True,
                                     **kw)
    blocks = [[int(jax.random.randint(randomness.batch_key(seed, k, m), (),
                                      0, N // batch)) for m in range(M)]
              for k in range(steps)]
    batches = [[np.arange(b * batch, (b + 1) * batch) for b in row]
               for row in blocks]
    uniforms = [[np.asarray(jax.random.uniform(
        randomness.compress_key(seed, k, m), (7850,), np.float64))
                 for m in range(M)] for k in range(steps)]
    ref = reference.run(x, y, steps=steps, alpha=0.03, bits=4,
                        compressor=a.compressor, innovation=False,
                        lazy_on=False, batches=batches, levels=50,
                        keep_prob=0.3, uniforms=uniforms, authors_code=True)
    np.testing.assert_array_equal(trace.bits_M.astype(np.int64), ref['bits'])
    np.testing.assert_allclose(np.asarray(state.theta_P), ref['theta'],
                               atol=1e-10)
    # ... and they differ from the default count (the switch does something).
    _, plain, _ = small_run(algo, steps=steps, **kw)
    self.assertFalse(np.array_equal(plain.bits_M, trace.bits_M))


@pytest.mark.slow  # (fast-tier budget: the full suite runs it)
class LossEveryValuesTest(parameterized.TestCase):

  @parameterized.parameters(('slaq', 7), ('laq', 3))
  def test_logged_values_are_the_every_step_ones(self, algo, every):
    kw = dict(step_size=0.03, bits=3, err_weight=1.5, seed=2)
    s1, t1, _ = small_run(algo, steps=25, loss_every=1, **kw)
    s2, t2, _ = small_run(algo, steps=25, loss_every=every, **kw)
    logged = metrics.logged(25, every)
    np.testing.assert_array_equal(logged, np.arange(25) % every == 0)
    np.testing.assert_array_equal(t2.loss[logged], t1.loss[logged])
    self.assertTrue(np.all(np.isnan(t2.loss[~logged])))
    # The run itself does not change.
    for field in ('sent_M', 'bits_M', 'grad_norm_sq', 'threshold_M'):
      np.testing.assert_array_equal(getattr(t2, field), getattr(t1, field))
    np.testing.assert_array_equal(s2.theta_P, s1.theta_P)


class LossEveryTest(parameterized.TestCase):

  def test_default_is_10_for_minibatch_runs_and_1_for_full_batch(self):
    problem = lj.get_problem('logreg')
    self.assertEqual(lj.RunSpec(problem, 4, stochastic=True).log_every, 10)
    self.assertEqual(lj.RunSpec(problem, 4).log_every, 1)
    self.assertEqual(lj.RunSpec(problem, 4, loss_every=3).log_every, 3)
    for bad in (-1, 2.5, True, '3'):
      with self.assertRaisesRegex(ValueError, 'loss_every=.*not allowed'):
        lj.RunSpec(problem, 4, loss_every=bad)

  def test_divergence_counts_logged_iterations_only(self):
    loss = np.array([5.0, np.nan, np.nan, 4.0, np.nan, np.nan, np.inf])
    self.assertIsNone(metrics.diverged_at(loss[:6], 3.0, 3))
    self.assertEqual(metrics.diverged_at(loss, 3.0, 3), 6)
    self.assertEqual(metrics.diverged_at(loss, 3.0, 1), 1)
    self.assertEqual(metrics.diverged_at(loss[:6], np.nan, 3), 6)
    summary = metrics.summarize(
        Record.from_arrays(loss=loss[:6], sent_M=np.ones((6, 2), bool),
                           bits_M=np.ones((6, 2), np.int32)),
        final_loss=3.5, fstar=3.0, target=0.6, loss_every=3)
    self.assertFalse(summary['diverged'])
    self.assertEqual(summary['loss_every'], 3)
    # The first logged iterate at or below the target: f(theta^T) (k = 6).
    self.assertEqual(summary['target_iteration'], 6)
    self.assertEqual(summary['target_uploads'], 12)


if __name__ == '__main__':
  absltest.main()
