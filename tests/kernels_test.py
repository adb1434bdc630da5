"""benchmarks/kernels.py's count of kernels per iteration, on HLO text
written here (its rules one by one) and on a compiled scan whose kernels
are known."""

from absl.testing import absltest
import jax
import jax.numpy as jnp

from benchmarks import kernels

HLO = '''HloModule m

%fused (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

%small (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused
}

%large (b: f32[4]) -> f32[4] {
  %b = f32[4]{0} parameter(0)
  %f1 = f32[4]{0} fusion(%b), kind=kLoop, calls=%fused
  %f2 = f32[4]{0} fusion(%f1), kind=kLoop, calls=%fused
  ROOT %c = f32[4]{0} copy(%f2)
}

%inner_body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[4]{0} get-tuple-element(%t), index=1
  %y = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused
  ROOT %r = (s32[], f32[4]{0}) tuple(%i, %y)
}

%inner_cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %k = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %k), direction=LT
}

%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[4]{0} get-tuple-element(%t), index=1
  %w = (s32[], f32[4]{0}) while(%t), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
  %x2 = f32[4]{0} get-tuple-element(%w), index=1
  %d = f32[4]{0} conditional(%i, %x2, %x2), branch_computations={%small, %large}
  %e = f32[4]{0} add(%d, %x)
  ROOT %r = (s32[], f32[4]{0}) tuple(%i, %e)
}

%cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %k = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %k), direction=LT
}

ENTRY %main (x: f32[4]) -> (s32[], f32[4]) {
  %x = f32[4]{0} parameter(0)
  %z = s32[] constant(0)
  %t = (s32[], f32[4]{0}) tuple(%z, %x)
  ROOT %w = (s32[], f32[4]{0}) while(%t), condition=%cond, body=%body
}
'''


class KernelsTest(absltest.TestCase):

  def test_the_rules_one_by_one(self):
    comps, body = kernels.scan_body(HLO)
    self.assertEqual(body, 'body')
    # the inner loop: 3 x (its body's fusion + its condition's compare);
    # the conditional: 1 + the larger branch (2 fusions and a copy); the add
    self.assertEqual(kernels.count(comps, 'body'), 3 * (1 + 1) + 1 + 3 + 1)
    result = kernels.per_iteration(HLO)
    self.assertEqual(result['kernels'], 11)
    self.assertEqual(result['fusions'], 3 + 2)
    self.assertEqual(result['by_opcode']['copy'], 1)
    # what a fusion fuses is not walked
    self.assertNotIn('negate', result['by_opcode'])

  def test_the_logged_objectives_conditional_counts_apart(self):
    # the same conditional named by the logged objective's scope: an
    # iteration that does not log takes its smaller branch (1 + 1), one
    # that logs its larger (1 + 3); others stay at their largest
    named = HLO.replace(
        'branch_computations={%small, %large}',
        'branch_computations={%small, %large}, metadata={op_name="jit(f)/'
        'while/body/' + kernels.stages.LOGGED_OBJECTIVE + '/cond"}')
    result = kernels.per_iteration(named)
    self.assertEqual(result['kernels'], 3 * (1 + 1) + 1 + 1 + 1)
    self.assertEqual(result['kernels_logging'], 11)
    self.assertEqual(kernels.per_iteration(HLO)['kernels'], 11)

  def test_a_compiled_chunk_names_its_logged_objective(self):
    # a minibatch chunk that logs every 5th iteration: its compiled
    # conditional carries the scope, and not logging costs fewer kernels
    import laq_jax  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    text = kernels._chunk(  # pylint: disable=protected-access
        'sgd', laq_jax.get_problem('logreg', 6, 3), 2,
        kernels._data(np.random.default_rng(0), 2, 8, 6, 3),  # pylint: disable=protected-access
        stochastic=True, batch_size=2, loss_every=5)
    self.assertIn(kernels.stages.LOGGED_OBJECTIVE, text)
    result = kernels.per_iteration(text)
    self.assertLess(result['kernels'], result['kernels_logging'])

  def test_a_compiled_scan(self):
    # a scan of one elementwise body: the count is at least one kernel and
    # no more than the body's few operations (XLA may fuse them into one)
    fn = jax.jit(lambda x: jax.lax.scan(
        lambda c, _: (jnp.sin(c) * 2.0 + 1.0, None), x, None, length=7)[0])
    text = fn.lower(jnp.ones(16)).compile().as_text()
    result = kernels.per_iteration(text)
    self.assertGreaterEqual(result['kernels'], 1)
    self.assertLessEqual(result['kernels'], 6)


if __name__ == '__main__':
  absltest.main()
