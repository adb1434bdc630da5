"""laq_jax.estimators: what a worker compresses into its candidate upload.

The two built-ins against the rule's rounds written out in NumPy (EF21's
Qhat + top_k(g - Qhat) and top-k of g itself), composed by the estimator
slot; a user's estimator with memory (3PC's idealized v1, y + C(g - y)), its
memory moving on skipped rounds as well; and the refusals.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import compressors
from laq_jax import estimators
from laq_jax import hyper as hyper_lib
from laq_jax import parts
from laq_jax import randomness
from laq_jax import registry
from laq_jax import rules
from laq_jax import sweep
from laq_jax import trigger
from tests import common
from tests import reference

M, P, K, T = 3, 30, 4, 6
ALPHA = 0.05
PER_VALUE = 32 + 5  # a value and its index among P = 30


def rule_steps(grads_TxMxP, parts_, h):
  return common.rule_steps(grads_TxMxP, parts_, h, jnp.zeros((P,)))


def top_k(v, k=K):
  """NumPy: the k largest |v_i| kept (ties: the lowest indices)."""
  keep = np.argsort(-np.abs(v), kind='stable')[:k]
  out = np.zeros_like(v)
  out[keep] = v[keep]
  return out


def grads():
  return np.random.default_rng(3).normal(size=(T, M, P))


class BuiltInsTest(absltest.TestCase):

  def test_the_two_built_ins_against_numpy_through_the_slot(self):
    g = grads()
    parts_ = rules.Parts.of(['top_k'], ['eager'], ['sgd'],
                            error_feedback=False, downlink=False)
    self.assertEqual([p.name for p in parts_.estimators],
                     ['direct', 'innovation'])
    for algo, innovation in (('ef21', True), ('ef21+estimator=direct', False),
                             ('gd+compressor=top_k+estimator=innovation',
                              True)):
      with self.subTest(algo):
        self.assertEqual(lj.get_algorithm(algo).innovation, innovation)
        h = lj.make_hyper(algo, step_size=ALPHA, dtype=jnp.float64,
                          **{'top_k.k': K})
        self.assertEqual(bool(h.innovation), innovation)
        with jax.enable_x64(True):
          (theta, state), stats = rule_steps(jnp.asarray(g), parts_, h)
        qhat, theta_np = np.zeros((M, P)), np.zeros(P)
        for t in range(T):
          ref = qhat if innovation else np.zeros((M, P))
          qhat = np.stack([ref[m] + top_k(g[t, m] - ref[m])
                           for m in range(M)])
          theta_np = theta_np - ALPHA * qhat.sum(0)
        np.testing.assert_allclose(np.asarray(state.last_upload_MxP), qhat,
                                   rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(np.asarray(theta), theta_np, rtol=1e-12,
                                   atol=1e-15)
        np.testing.assert_array_equal(np.asarray(stats.bits_M),
                                      K * PER_VALUE)

  def test_the_slot_names_and_refusals(self):
    self.assertEqual(estimators.ESTIMATORS[:2], ('direct', 'innovation'))
    self.assertEqual(lj.get_algorithm('qsgd+estimator=innovation').name,
                     'qsgd+estimator=innovation')
    self.assertEqual(lj.get_algorithm('laq+estimator=innovation').name, 'laq')
    with self.assertRaisesRegex(ValueError, "estimator='nope'.*direct, "
                                'innovation'):
      lj.get_algorithm('laq+estimator=nope')
    problem = lj.get_problem('logreg', input_dim=9, num_classes=3)
    spec = lj.RunSpec(problem, M, estimators=('direct',))
    with self.assertRaisesRegex(
        ValueError, r"hyper uses estimator\(s\) innovation but "
        r"RunSpec.estimators=\('direct',\)"):
      spec.check_hyper(lj.make_hyper('laq'))
    with self.assertRaisesRegex(ValueError, 'RunSpec.estimators: .*nope'):
      lj.RunSpec(problem, M, estimators=('nope',))
    with self.assertRaisesRegex(
        ValueError, r"hyper uses compressor_b\(s\) uniform but "
        r"RunSpec.compressors_b=\('identity',\)"):
      spec.check_hyper(lj.make_hyper('qsgd+compressor_b=uniform'))


class UserEstimatorTest(absltest.TestCase):

  def test_an_estimator_with_memory_that_moves_on_skips(self):
    # 3PC's v1 (idealized): Q = y + top_k(g - y), y the worker's gradient of
    # its previous round, kept whether it uploads or not; a trigger that
    # uploads every other round.
    def last_gradient(inputs, *, state):
      out, comp = inputs.compress(inputs.grad_P, state,
                                  inputs.compressor_states)
      return (out, comp), inputs.grad_P

    def every_other(inputs):
      sent = inputs.clock >= 1  # (NEVER_UPLOADED at the first round)
      return trigger.Decision(sent, inputs.compressed_sq, inputs.raw_sq)

    g = grads()
    with registry.scoped():
      estimators.REGISTRY.register('last_gradient', parts.estimator(
          'last_gradient', last_gradient,
          init=lambda num_params, dtype: jnp.zeros((num_params,), dtype)))
      trigger.REGISTRY.register('every_other', every_other)
      lj.register_algorithm(lj.Algorithm(
          'v1_topk', False, 'top_k', False, 'every_other',
          estimator='last_gradient'))
      self.assertFalse(lj.get_algorithm('v1_topk').innovation)
      # A grid over its slot ({'estimator': [...]}) composes each preset
      # with each estimator.
      points = sweep.expand_grid(
          {'algo': ['ef21'], 'estimator': ['innovation', 'last_gradient']},
          dict(hyper_lib.DEFAULTS, algo='ef21'))
      self.assertEqual([p['algo'] for p in points],
                       ['ef21', 'ef21+estimator=last_gradient'])
      parts_ = rules.Parts.of(['top_k'], ['every_other'], ['sgd'],
                              estimators=['innovation', 'last_gradient'],
                              error_feedback=False, downlink=False)
      h = lj.make_hyper('v1_topk', step_size=ALPHA, dtype=jnp.float64,
                        **{'top_k.k': K})
      with jax.enable_x64(True):
        (theta, state), stats = rule_steps(jnp.asarray(g), parts_, h)
    qhat, y, theta_np = np.zeros((M, P)), np.zeros((M, P)), np.zeros(P)
    sent = []
    for t in range(T):
      q = np.stack([y[m] + top_k(g[t, m] - y[m]) for m in range(M)])
      up = t % 2 == 0
      sent.append(up)
      if up:
        qhat = q
      y = g[t]  # every round
      theta_np = theta_np - ALPHA * qhat.sum(0)
    np.testing.assert_array_equal(np.asarray(stats.sent_M),
                                  np.repeat(np.array(sent)[:, None], M, 1))
    np.testing.assert_array_equal(
        np.asarray(stats.bits_M),
        np.where(np.array(sent)[:, None], K * PER_VALUE, 0) + np.zeros((T, M),
                                                                      int))
    np.testing.assert_allclose(np.asarray(state.parts_M['last_gradient']),
                               g[-1], rtol=0, atol=0)
    np.testing.assert_allclose(np.asarray(state.last_upload_MxP), qhat,
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(theta), theta_np, rtol=1e-12,
                               atol=1e-15)
    # (y moved on the skipped rounds: with y kept at the last upload's
    # gradient, the uploads at t = 2, 4 would differ)
    stale_y = np.stack([g[2, m] for m in range(M)])
    self.assertFalse(np.allclose(
        qhat, np.stack([stale_y[m] + top_k(g[4, m] - stale_y[m])
                        for m in range(M)])))


class SecondSlotAndCoinTest(absltest.TestCase):

  def test_a_two_stage_estimator_and_a_coin(self):
    # 3PC's v2: b = Qhat + Q_b(g - y), Q = b + top_k(g - b) (Q_b: LAQ's
    # quantizer at b = 3 in the second slot); and MARINA's: g itself when
    # the round's coin u_k < 1/2, else Qhat + top_k(g - y); y the last
    # gradient. Both against the rounds in NumPy (the coins from
    # randomness.round_coin, as the contract's oracle takes them).
    def v2(inputs, *, state):
      b = inputs.compress_b(inputs.grad_P - state + inputs.qhat_P,
                            inputs.qhat_P)
      out, comp = inputs.compress(inputs.grad_P, b.value_P,
                                  inputs.compressor_states)
      return (out._replace(bits=out.bits + b.bits), comp), inputs.grad_P

    def marina(inputs, *, state):
      out, comp = inputs.compress(inputs.grad_P - state + inputs.qhat_P,
                                  inputs.qhat_P, inputs.compressor_states)
      full = inputs.coin < 0.5
      value = jnp.where(full, inputs.grad_P, out.value_P)
      bits = jnp.where(full, 32 * inputs.grad_P.shape[-1], out.bits)
      return (out._replace(value_P=value, bits=bits), comp), inputs.grad_P

    init = lambda num_params, dtype: jnp.zeros((num_params,), dtype)
    g = grads()
    with jax.enable_x64(True):  # (drawn in the run's precision)
      coins = [float(randomness.round_coin(0, k, jnp.float64))
               for k in range(T)]
    self.assertTrue(any(c < 0.5 for c in coins)
                    and any(c >= 0.5 for c in coins))
    with registry.scoped():
      for name, fn in (('v2', v2), ('marina_demo', marina)):
        estimators.REGISTRY.register(name, parts.estimator(name, fn,
                                                           init=init))
      lj.register_algorithm(lj.Algorithm(
          'tpc_v2_demo', False, 'top_k', False, estimator='v2',
          compressor_b='uniform'))
      lj.register_algorithm(lj.Algorithm(
          'marina_demo', False, 'top_k', False, estimator='marina_demo'))
      self.assertEqual(lj.get_algorithm(
          'tpc_v2_demo+compressor_b=identity').compressor_b, 'identity')
      parts_ = rules.Parts.of(['top_k'], ['eager'], ['sgd'],
                              estimators=['v2', 'marina_demo'],
                              compressors_b=['identity', 'uniform'],
                              error_feedback=False, downlink=False)
      for algo in ('tpc_v2_demo', 'marina_demo'):
        with self.subTest(algo):
          h = lj.make_hyper(algo, step_size=ALPHA, bits=3,
                            dtype=jnp.float64, **{'top_k.k': K})
          with jax.enable_x64(True):
            (theta, state), stats = rule_steps(jnp.asarray(g), parts_, h)
          qhat, y = np.zeros((M, P)), np.zeros((M, P))
          theta_np, bits = np.zeros(P), []
          for t in range(T):
            if algo == 'tpc_v2_demo':
              b = np.stack([reference.quantize(g[t, m] - y[m] + qhat[m],
                                               qhat[m], 3)[0]
                            for m in range(M)])
              qhat = np.stack([b[m] + top_k(g[t, m] - b[m])
                               for m in range(M)])
              bits.append(3 * P + 32 + K * PER_VALUE)
            elif coins[t] < 0.5:
              qhat, _ = g[t].copy(), bits.append(32 * P)
            else:
              qhat = np.stack([qhat[m] + top_k(g[t, m] - y[m])
                               for m in range(M)])
              bits.append(K * PER_VALUE)
            y = g[t]
            theta_np = theta_np - ALPHA * qhat.sum(0)
          np.testing.assert_allclose(np.asarray(state.last_upload_MxP),
                                     qhat, rtol=1e-12, atol=1e-14)
          np.testing.assert_allclose(np.asarray(theta), theta_np,
                                     rtol=1e-12, atol=1e-14)
          np.testing.assert_array_equal(
              np.asarray(stats.bits_M),
              np.repeat(np.array(bits)[:, None], M, 1))


if __name__ == '__main__':
  absltest.main()
