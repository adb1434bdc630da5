"""laq_jax.broadcasts: what the server sends the workers after its step.

The built-ins through the slot (two_laq's quantized broadcast against LAQ's
quantizer in NumPy, tests/reference.py; 'full' as theta itself) and a
user's broadcast (an EF21-P-style top-k of the change, its own parameter),
in rounds against NumPy and in a run whose workers compute at what it
sent; the refusals.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import broadcasts
from laq_jax import compressors
from laq_jax import hyper as hyper_lib
from laq_jax import parts
from laq_jax import registry
from laq_jax import rules
from laq_jax import sweep
from tests import common
from tests import reference

M, P, T = 3, 30, 6
ALPHA = 0.05


def rule_steps(grads_TxMxP, parts_, h):
  """((theta, state), (stats, the broadcast the workers hold) per step)."""
  return common.rule_steps(grads_TxMxP, parts_, h, np.linspace(-1, 1, P),
                           per_step=lambda state: state.broadcast_P)


def top_k_down(inputs, *, params):
  """thetahat + top_k(theta - thetahat): EF21-P's primal compression."""
  change = inputs.theta_P - inputs.last_broadcast_P
  k = compressors.top_k_count(params['k'], change.shape[-1])
  keep = compressors.top_k_mask(change, k)
  bits = k * (32 + (change.shape[-1] - 1).bit_length())  # value + index
  return inputs.last_broadcast_P + jnp.where(keep, change, 0), bits


def user_part():
  return parts.broadcast('users_top_k', top_k_down, params=[
      parts.Param('k', 4, 'int', check=lambda a: a >= 1,
                  allowed='an integer >= 1')])


class BroadcastTest(absltest.TestCase):

  def test_built_ins_through_the_slot_against_numpy(self):
    g = np.random.default_rng(5).normal(size=(T, M, P))
    parts_ = rules.Parts.of(['identity'], ['eager'], ['sgd'],
                            error_feedback=False, downlink=True)
    self.assertEqual([p.name for p in parts_.broadcasts],
                     ['full', 'quantized'])
    for algo, bits in (('gd+broadcast=quantized', 3), ('two_laq', 3),
                       ('two_laq+broadcast=full', 0)):
      with self.subTest(algo):
        h = lj.make_hyper(algo, bits=3, step_size=ALPHA, dtype=jnp.float64)
        self.assertEqual(lj.get_algorithm(algo).downlink, bits > 0)
        self.assertEqual(int(h.downlink_bits), bits)
        if algo == 'two_laq':  # its own uploads are LAQ's: rounds alone
          continue
        with jax.enable_x64(True):
          _, (stats, sent_T) = rule_steps(jnp.asarray(g), parts_, h)
        theta = np.linspace(-1, 1, P)
        hat = theta.copy()
        for t in range(T):
          theta = theta - ALPHA * g[t].sum(0)
          hat = reference.quantize(theta, hat, bits)[0] if bits else theta
          np.testing.assert_allclose(np.asarray(sent_T[t]), hat, rtol=1e-12,
                                     atol=1e-14)
        np.testing.assert_array_equal(np.asarray(stats.bits_down_M),
                                      bits * P + 32 if bits else 32 * P)

  def test_a_users_broadcast_in_rounds_and_in_a_run(self):
    g = np.random.default_rng(6).normal(size=(T, M, P))
    with registry.scoped():
      broadcasts.REGISTRY.register('users_top_k', user_part())
      lj.register_algorithm(lj.Algorithm(
          'gd_down', False, 'identity', False, broadcast='users_top_k'))
      self.assertTrue(lj.get_algorithm('gd_down').downlink)
      parts_ = rules.Parts.of(['identity'], ['eager'], ['sgd'],
                              error_feedback=False, downlink=True,
                              broadcasts=['full', 'users_top_k'])
      h = lj.make_hyper('gd_down', step_size=ALPHA, dtype=jnp.float64,
                        **{'users_top_k.k': 5})
      with jax.enable_x64(True):
        _, (stats, sent_T) = rule_steps(jnp.asarray(g), parts_, h)
      theta = np.linspace(-1, 1, P)
      hat = theta.copy()
      for t in range(T):
        theta = theta - ALPHA * g[t].sum(0)
        change, _ = reference.top_k(theta - hat, 5)
        hat = hat + change
        np.testing.assert_allclose(np.asarray(sent_T[t]), hat, rtol=1e-12,
                                   atol=1e-14)
      np.testing.assert_array_equal(np.asarray(stats.bits_down_M), 5 * 37)

      # In a run the workers compute at what it sent: a grid of GD and it
      # (one program) parts ways after the first step, and it receives
      # 5 values a round.
      x, y = common.mnist_shards(M, 20, np.float32)
      data = lj.Data(jnp.asarray(x[..., ::40]), jnp.asarray(y))
      problem = lj.get_problem('logreg', input_dim=20, num_classes=10)
      spec = lj.RunSpec(problem, M, downlink=True,
                        broadcasts=('full', 'users_top_k'), grid_axis='map')
      grid = lj.stack_hypers([lj.make_hyper(a, step_size=0.05)
                              for a in ('gd', 'gd_down')])
      _, trace = lj.run(spec, data, grid, 4)
      np.testing.assert_array_equal(trace.loss[0][:2], trace.loss[1][:2])
      self.assertFalse(np.array_equal(trace.loss[0], trace.loss[1]))
      np.testing.assert_array_equal(trace.bits_down_M[0], 32 * 210)
      np.testing.assert_array_equal(trace.bits_down_M[1],
                                    4 * (32 + 8))  # k = 4 of P = 210
      # Its parameter is a grid axis for the points that use it.
      points = sweep.expand_grid({'algo': ['gd', 'gd_down'],
                                  'users_top_k.k': [2, 5]},
                                 dict(hyper_lib.DEFAULTS, algo='gd'))
      self.assertEqual([(p['algo'], p['users_top_k.k']) for p in points],
                       [('gd', 4), ('gd_down', 2), ('gd_down', 5)])

  def test_refusals(self):
    with self.assertRaisesRegex(ValueError, "broadcast='nope'.*full, "
                                'quantized'):
      lj.get_algorithm('laq+broadcast=nope')
    problem = lj.get_problem('logreg', input_dim=9, num_classes=3)
    spec = lj.RunSpec(problem, M, broadcasts=('full',))
    with self.assertRaisesRegex(
        ValueError, r"hyper uses broadcast\(s\) quantized but "
        r"RunSpec.broadcasts=\('full',\)"):
      spec.check_hyper(lj.make_hyper('two_laq'))
    with registry.scoped():
      stateful = parts.Part('broadcast', 'kept', top_k_down,
                            init=lambda p, dtype: jnp.zeros((p,), dtype))
      broadcasts.REGISTRY.register('kept', stateful)
      with self.assertRaisesRegex(ValueError, "broadcast 'kept' has an init"):
        broadcasts.broadcast(jnp.zeros(3), jnp.zeros(3),
                             lj.make_hyper('two_laq'),
                             broadcasts.REGISTRY.parts(['kept']))


if __name__ == '__main__':
  absltest.main()
