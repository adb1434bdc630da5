"""RunSpec.upload_memory: FedAvg's family keeps no [M, P] copy of the last
uploads (issue 53 item 4's memory), with the same results bit for bit."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import points as points_lib
from tests import common

M, N, D, C = 12, 30, 6, 4


def data():
  rng = np.random.default_rng(1)
  return lj.Data(jnp.asarray(rng.normal(size=(M, N, D))),
                 jnp.asarray(rng.integers(0, C, size=(M, N))))


def spec_and_hyper(points, memory, round_size=0):
  parts = points_lib.parts_of(points)
  parts['upload_memory'] = memory
  spec = lj.RunSpec(lj.get_problem('logreg', D, C), M, stochastic=True,
                    batch_size=5, round_size=round_size, loss_every=1,
                    grid_axis='vmap', **parts)
  return spec, points_lib.stack_points(points, dtype=jnp.float64)


class SameRun(parameterized.TestCase):

  def check_the_same_run(self, points, round_size):
    """`points` run with and without the memory: the same run."""
    self.assertFalse(points_lib.parts_of(points)['upload_memory'])
    ran = {}
    for memory in (True, False):
      spec, hyper = spec_and_hyper(points, memory, round_size)
      ran[memory] = lj.run(spec, data(), hyper, 12, chunk_size=6)
    (kept, trace), (lean, lean_trace) = ran[True], ran[False]
    width = lean.rule.last_upload_MxP.shape[-1]
    self.assertEqual(width, 0)
    self.assertEqual(kept.rule.last_upload_MxP.shape[-1],
                     kept.theta_P.shape[-1])
    # Who uploads, what and how many bits: exact. The floats are the same
    # bits at XLA's defaults; the suite's legacy emitters round the two
    # programs' loss apart by an ulp (tests/conftest.py), hence 1e-13.
    for field in ('sent_M', 'bits_M', 'participants_M', 'grads_M'):
      np.testing.assert_array_equal(getattr(lean_trace, field),
                                    getattr(trace, field), err_msg=field)
    np.testing.assert_allclose(lean.theta_P, kept.theta_P, rtol=1e-13,
                               atol=1e-15)
    np.testing.assert_allclose(lean_trace.loss, trace.loss, rtol=1e-13)
    # the one diagnostic that read the memory: ||Q - Qhat||^2 is ||Q||^2
    # now, equal where a client uploads for the first time
    first = np.cumsum(trace.sent_M, axis=-2) == 1
    np.testing.assert_array_equal(
        np.where(first & trace.sent_M, lean_trace.innovation_M, 0),
        np.where(first & trace.sent_M, trace.innovation_M, 0))



class UploadMemoryTest(SameRun):

  @parameterized.named_parameters(
      ('fedavg_s_of_m', [dict(algo='fedavg', clients_per_round=4)], 0),
      ('fedavg_gathered', [dict(algo='fedavg', clients_per_round=4)], 4))
  def test_without_it_the_same_run_bit_for_bit(self, points, round_size):
    self.check_the_same_run(points, round_size)

  def test_which_points_need_it(self):
    need = points_lib.needs_upload_memory
    for algo in ('fedavg', 'fedavgm', 'fedadam', 'fedprox', 'fedpaq',
                 'local_sgd', 'scaffold', 'fednova', 'feddyn', 'scaffnew'):
      self.assertFalse(need({'algo': algo}), algo)
    for algo in ('laq', 'sgd', 'fedlaq', 'ef21', 'marina', 'lasg_wk2'):
      self.assertTrue(need({'algo': algo}), algo)  # a trigger, an estimator
    #   or the plain sum of the uploads (sgd: weighting sum)
    self.assertTrue(need({'algo': 'fedavg', 'absent': 'stale'}))
    self.assertTrue(need({'algo': 'fedavg', 'weighting': 'sum'}))
    self.assertFalse(need({'algo': 'sgd', 'absent': 'drop',
                           'weighting': 'uniform'}))
    self.assertTrue(points_lib.parts_of(
        [{'algo': 'fedavg'}, {'algo': 'laq'}])['upload_memory'])

  def test_a_point_that_reads_it_is_refused(self):
    for algo, kwargs, words in (
        ('laq', {}, 'trigger laq; estimator innovation; absent stale; '
         'weighting sum'),
        ('fedavg', {'absent': 'stale'}, 'absent stale'),
        ('fedavg', {'weighting': 'sum'}, 'weighting sum')):
      # (every part compiled in: the refusal is the memory's)
      spec, _ = spec_and_hyper([{'algo': algo, **kwargs}], False)
      hyper = lj.make_hyper(algo, **kwargs)
      with self.assertRaisesRegex(ValueError, rf'hyper reads the last '
                                  rf'uploads \({words}\) but '
                                  r'RunSpec.upload_memory=False'):
        spec.check_hyper(hyper)

  def test_the_state_is_smaller_by_m_p(self):
    # The compiled chunk's arguments: the same but the [M, P] memory.
    points = [dict(algo='fedavg', clients_per_round=4)]
    sizes = {}
    for memory in (True, False):
      spec, hyper = spec_and_hyper(points, memory, round_size=4)
      hyper = jax.tree.map(lambda a: a[0], hyper)  # one run
      state = lj.init_state(spec, hyper, jnp.float64)
      compiled = lj.run_chunk.lower(spec, state, data(), hyper, 2).compile()
      sizes[memory] = compiled.memory_analysis().argument_size_in_bytes
    p = lj.get_problem('logreg', D, C).num_params()
    self.assertEqual(sizes[True] - sizes[False], M * p * 8)

  def test_the_launchers_leave_it_out_for_fedavg(self):
    from experiments.run import build as build_lib  # pylint: disable=g-import-not-at-top
    for algo, memory in (('fedavg', False), ('laq', True)):
      config = common.tiny_config(algo=algo)
      if algo == 'fedavg':
        config.clients_per_round, config.batch_size = 5, 10
      built = build_lib.build(config)
      self.assertEqual(built.spec.upload_memory, memory, algo)
      self.assertFalse(built.spec.stragglers)  # cross_silo: none to draw


@pytest.mark.slow  # (the fast tier's time: the two above stay fast)
class MoreProgramsTest(SameRun):

  @parameterized.named_parameters(
      ('fedadam_bernoulli', [dict(algo='fedadam', participation=0.4)], 0),
      ('every_client', [dict(algo='local_sgd')], 0),
      ('fednova_feddyn', [dict(algo='fednova', clients_per_round=5),
                          dict(algo='feddyn', clients_per_round=5)], 0),
      ('a_vmapped_grid', [dict(algo='fedavg', clients_per_round=3, seed=s,
                               step_size=a)
                          for s in (0, 1) for a in (0.05, 0.1)], 3))
  def test_without_it_the_same_run_bit_for_bit(self, points, round_size):
    self.check_the_same_run(points, round_size)


if __name__ == '__main__':
  absltest.main()
