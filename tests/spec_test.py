"""laq_jax.spec: RunSpec, the static part of a run, and what it refuses.

Every refusal is one line that names the value given and what is allowed;
checked here one by one on hand-made values: RunSpec's own fields,
`check_data` on shards of wrong shapes, dtypes, labels and counts (the value
checks only on concrete arrays), `check_hyper` on Hypers the program does
not compile in or whose grid is ragged, and `resolve_grid_axis`.
"""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import compressors
from laq_jax import spec as spec_lib

M, N, D, C = 3, 8, 5, 4


def problem():
  return lj.get_problem('logreg', D, C)


def good_data(**replace):
  rng = np.random.default_rng(0)
  data = lj.Data(rng.normal(size=(M, N, D)),
                 rng.integers(0, C, size=(M, N)).astype(np.int32))
  return data._replace(**replace)


class RunSpecTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('problem', dict(problem='logreg'),
       r"problem='logreg' is not allowed: it must be a laq_jax.Problem"),
      ('workers_zero', dict(num_workers=0),
       r'num_workers=0 is not allowed: it must be an integer >= 1'),
      ('workers_float', dict(num_workers=2.5),
       r'num_workers=2.5 is not allowed: it must be an integer >= 1'),
      ('workers_bool', dict(num_workers=True),
       r'num_workers=True is not allowed: it must be an integer >= 1'),
      ('memory', dict(memory=0),
       r'memory=0 is not allowed: it must be an integer >= 1 and <= '
       r'100,000 \(D, the history length\)'),
      ('memory_huge', dict(memory=10**6),
       r'memory=1000000 is not allowed: it must be an integer >= 1 and <= '
       r'100,000'),
      ('round_size', dict(round_size=-1, participation=True),
       r'round_size=-1 is not allowed: it must be an integer >= 0 \(0: every '
       r'client computed\)'),
      ('client_batch', dict(client_batch=-1),
       r'client_batch=-1 is not allowed: it must be an integer >= 0 \(0: '
       r'every row at once, vmapped\)'),
      ('batch', dict(stochastic=True, batch_size=0),
       r'batch_size=0 is not allowed: it must be an integer >= 1'),
      ('stochastic', dict(stochastic='yes'),
       r"stochastic='yes' is not allowed: it must be True or False"),
      ('downlink', dict(downlink=1),
       r'downlink=1 is not allowed: it must be True or False'),
      ('loss_every', dict(loss_every=-1),
       r'loss_every=-1 is not allowed: it must be an integer >= 0 \(0: 1 for '
       r'full-batch runs, 10 for minibatch runs, at least ceil\(M / S\) where a '
       r'round computes S of M clients\)'),
      ('loss_every_bool', dict(loss_every=True),
       r'loss_every=True is not allowed'),
      ('grid_axis', dict(grid_axis=None),
       r'grid_axis=None is not allowed; allowed: auto, map, vmap'),
      ('rule', dict(rule='laq'),
       r"rule='laq' is not allowed: it must be a laq_jax.Rule"),
      ('gradient', dict(gradient=3),
       r'gradient=3 is not allowed: it must be a function'),
      ('compressor', dict(compressors=('uniform', 'unifrom')),
       r"RunSpec.compressors: unknown compressor 'unifrom'"),
      ('server', dict(servers=('sgd', 'adma')),
       r"RunSpec.servers: unknown server 'adma'"),
      ('field', dict(num_worker=3),
       r"RunSpec: no field 'num_worker'; did you mean 'num_workers'\?"),
  )
  def test_refusals_are_one_line_naming_value_and_allowed(self, kwargs,
                                                          pattern):
    kwargs = {'problem': problem(), 'num_workers': M, **kwargs}
    with self.assertRaisesRegex(ValueError, pattern) as caught:
      lj.RunSpec(**kwargs)
    self.assertNotIn('\n', str(caught.exception))

  def test_the_run_and_the_config_share_one_schema(self):
    # Each run integer RunSpec takes is refused with the config's words
    # (after "it must be"): both read laq_jax.round.fields.RUN_INTEGERS.
    from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
    from configs import default  # pylint: disable=g-import-not-at-top
    for name, bad_value in (('num_workers', 0), ('memory', 100_001),
                            ('loss_every', -2), ('batch_size', 0),
                            ('client_batch', -1)):
      kwargs = {'problem': problem(), 'num_workers': M, 'stochastic': True,
                name: bad_value}
      with self.assertRaises(ValueError) as spec_error:
        lj.RunSpec(**kwargs)
      config = default.get_config()
      config[name] = bad_value
      with self.assertRaises(ValueError) as config_error:
        config_lib.validate_config(config)
      spec_words = str(spec_error.exception).partition('it must be ')[2]
      self.assertEqual(str(config_error.exception),
                       f'config.{name}={bad_value!r} is not allowed: it must '
                       f'be {spec_words}')
      self.assertIn('an integer >=', spec_words)

  def test_a_full_batch_run_ignores_the_batch_size(self):
    self.assertEqual(lj.RunSpec(problem(), M, batch_size=0).batch_size, 0)

  def test_loss_every_in_effect(self):
    self.assertEqual(lj.RunSpec(problem(), M).log_every, 1)
    self.assertEqual(lj.RunSpec(problem(), M, stochastic=True).log_every,
                     spec_lib.MINIBATCH_LOSS_EVERY)
    self.assertEqual(lj.RunSpec(problem(), M, stochastic=True,
                                loss_every=3).log_every, 3)

  def test_parts_in_registry_order_as_objects(self):
    spec = lj.RunSpec(problem(), M, compressors=('top_k', 'identity'),
                      triggers=('laq',), servers=('adam', 'sgd'))
    self.assertEqual(spec.compressors, ('identity', 'top_k'))
    self.assertEqual(spec.servers, ('sgd', 'adam'))
    self.assertEqual([p.name for p in spec.parts.compressors],
                     ['identity', 'top_k'])
    self.assertEqual([p.name for p in spec.parts.servers], ['sgd', 'adam'])
    # (every registered compressor but the opt-in ones)
    self.assertEqual(lj.RunSpec(problem(), M).compressors,
                     tuple(n for n in lj.COMPRESSORS
                           if not compressors.REGISTRY.get(n).opt_in))
    self.assertEqual(lj.RunSpec(problem(), M).compressors[-1], 'terngrad')
    self.assertEqual(lj.RunSpec(problem(), M).servers, ('sgd',))

  def test_equal_specs_are_one_static_key(self):
    a = lj.RunSpec(problem(), M, compressors=('uniform',))
    b = lj.RunSpec(problem(), M, compressors=('uniform',))
    self.assertEqual(a, b)
    self.assertEqual(hash(a), hash(b))
    self.assertNotEqual(a, lj.RunSpec(problem(), M + 1,
                                      compressors=('uniform',)))


class CheckDataTest(parameterized.TestCase):

  def test_good_data_passes(self):
    spec = lj.RunSpec(problem(), M, stochastic=True, batch_size=N)
    spec.check_data(good_data())
    spec.check_data(good_data(count_M=np.array([8, 1, 5], np.int32)))
    spec.check_data(lj.fast_layout(lj.Data(
        jnp.asarray(good_data().x_MxNxD), jnp.asarray(good_data().y_MxN))))

  @parameterized.named_parameters(
      ('x_list', lambda d: d._replace(x_MxNxD=d.x_MxNxD.tolist()),
       r'Data.x_MxNxD is list: it must be an array \[M workers, N samples, '
       r'D features\]'),
      ('x_rank', lambda d: d._replace(x_MxNxD=d.x_MxNxD.reshape(M, N * D)),
       r'Data.x_MxNxD has shape \(3, 40\): it must have 3 axes'),
      ('workers', lambda d: d._replace(x_MxNxD=d.x_MxNxD[:2],
                                       y_MxN=d.y_MxN[:2]),
       r'Data.x_MxNxD has 2 workers \(shape \(2, 8, 5\)\) but '
       r'RunSpec.num_workers=3'),
      ('y_shape', lambda d: d._replace(y_MxN=d.y_MxN[:, :7]),
       r'Data.y_MxN has shape \(3, 7\): it must be \[M, N\] = \(3, 8\)'),
      ('no_samples', lambda d: d._replace(x_MxNxD=d.x_MxNxD[:, :0],
                                          y_MxN=d.y_MxN[:, :0]),
       r'every shard needs at least one sample and one feature'),
      ('x_int', lambda d: d._replace(x_MxNxD=d.x_MxNxD.astype(np.int32)),
       r'Data.x_MxNxD has dtype int32: it must be float32 or float64'),
      ('y_float', lambda d: d._replace(y_MxN=d.y_MxN.astype(np.float32)),
       r'Data.y_MxN has dtype float32: it must be integer class labels 0..3'),
      ('xt_shape', lambda d: d._replace(xt_MxDxN=np.zeros((M, N, D))),
       r'Data.xt_MxDxN has shape \(3, 8, 5\): it must be \(3, 5, 8\)'),
      ('count_shape', lambda d: d._replace(count_M=np.array([8, 8])),
       r'Data.count_M has shape \(2,\): it must be \(3,\)'),
      ('features', lambda d: d._replace(x_MxNxD=d.x_MxNxD[..., :4]),
       r"Data.x_MxNxD has D=4 features, which the problem 'logreg' does not "
       r'take'),
      ('nan', lambda d: d._replace(x_MxNxD=np.where(
          np.arange(D) == 2, np.nan, d.x_MxNxD)),
       r'Data.x_MxNxD holds NaN or inf'),
      ('inf', lambda d: d._replace(x_MxNxD=np.where(
          np.arange(D) == 2, -np.inf, d.x_MxNxD)),
       r'Data.x_MxNxD holds NaN or inf'),
      ('label_negative', lambda d: d._replace(
          y_MxN=np.where(np.arange(N) == 3, -1, d.y_MxN)),
       r"Data.y_MxN holds labels -1..3: they must be in 0..3 \(the problem "
       r"'logreg' has 4 classes\)"),
      ('label_too_big', lambda d: d._replace(
          y_MxN=np.where(np.arange(N) == 3, C, d.y_MxN)),
       r'Data.y_MxN holds labels 0..4: they must be in 0..3'),
      ('count_zero', lambda d: d._replace(count_M=np.array([8, 0, 3])),
       r"Data.count_M holds 0..8: each client's samples must be in 1..N=8"),
      ('count_over', lambda d: d._replace(count_M=np.array([9, 1, 3])),
       r"Data.count_M holds 1..9: each client's samples must be in 1..N=8"),
  )
  def test_refusals(self, change, pattern):
    with self.assertRaisesRegex(ValueError, pattern) as caught:
      lj.RunSpec(problem(), M).check_data(change(good_data()))
    self.assertNotIn('\n', str(caught.exception))

  def test_a_minibatch_larger_than_a_shard(self):
    spec = lj.RunSpec(problem(), M, stochastic=True, batch_size=N + 1)
    with self.assertRaisesRegex(ValueError, r'batch_size=9 is not allowed: it '
                                r'must be at most the shard size N=8'):
      spec.check_data(good_data())
    # Clients of their own sizes draw min(batch_size, count): allowed.
    spec.check_data(good_data(count_M=np.array([8, 2, 5], np.int32)))

  def test_a_problem_with_the_wrong_number_of_logits(self):
    base = problem()
    odd = lj.Problem('odd', base.init,
                     lambda p, x: jnp.concatenate([base.apply(p, x),
                                                   base.apply(p, x)], -1), C)
    with self.assertRaisesRegex(ValueError, r"the problem 'odd' gives logits "
                                r'of shape \(1, 8\) for one sample of D=5 '
                                r'features: it must be \(1, 4\)'):
      lj.RunSpec(odd, M).check_data(good_data())

  def test_values_are_checked_on_concrete_arrays_only(self):
    # Traced, a NaN cannot be seen: the shapes are still checked.
    spec = lj.RunSpec(problem(), M)
    bad = good_data(x_MxNxD=np.full((M, N, D), np.nan))

    @jax.jit
    def check(x, y):
      spec.check_data(lj.Data(x, y))
      return x.sum()

    check(bad.x_MxNxD, bad.y_MxN)  # no error
    with self.assertRaisesRegex(ValueError, '2 workers'):
      check(bad.x_MxNxD[:2], bad.y_MxN[:2])


class CheckHyperTest(absltest.TestCase):

  def test_not_a_hyper(self):
    with self.assertRaisesRegex(ValueError, r'hyper is dict: it must be a '
                                r'laq_jax.Hyper'):
      lj.RunSpec(problem(), M).check_hyper({'bits': 3})

  def test_features_the_program_does_not_compile_in(self):
    with self.assertRaisesRegex(ValueError, r'hyper uses error_feedback but '
                                r'RunSpec.error_feedback=False; set it True'):
      lj.RunSpec(problem(), M, error_feedback=False).check_hyper(
          lj.make_hyper('topk_ef'))
    with self.assertRaisesRegex(ValueError, r'hyper uses downlink but '
                                r'RunSpec.downlink=False; set it True'):
      lj.RunSpec(problem(), M, downlink=False).check_hyper(
          lj.make_hyper('two_laq'))
    # The same Hypers pass a program that compiles those in.
    lj.RunSpec(problem(), M).check_hyper(lj.make_hyper('topk_ef'))
    lj.RunSpec(problem(), M).check_hyper(lj.make_hyper('two_laq'))

  def test_a_traced_hyper_is_refused_in_one_line(self):
    # Inside jit the compressor index cannot be checked: a part not
    # compiled in would run another part's branch (the program's first)
    # silently. One line instead, before anything runs.
    spec = lj.RunSpec(problem(), M, compressors=('uniform',),
                      triggers=('laq',))
    data = good_data()
    h = lj.make_hyper('topk_ef', dtype=jnp.float32)  # top_k: not compiled
    state = lj.init_state(spec, lj.make_hyper('laq'), jnp.float32)
    with self.assertRaisesRegex(ValueError, r'^hyper is traced \(run_chunk '
                                r'or run called inside jax.jit[^\n]*$'):
      jax.jit(lambda s, h: lj.run_chunk(spec, s, data, h, 2))(state, h)

  def test_a_part_without_its_parameters(self):
    h = lj.make_hyper('gd')
    h = h._replace(params={k: v for k, v in h.params.items()
                           if k != 'momentum'})
    with self.assertRaisesRegex(ValueError, r"hyper.params has no group "
                                r"'momentum' for the server 'momentum'"):
      lj.RunSpec(problem(), M, servers=('sgd', 'momentum')).check_hyper(h)

  def test_a_ragged_grid_names_the_field(self):
    grid = lj.stack_hypers([lj.make_hyper('laq', bits=b) for b in (2, 3, 4)])
    spec = lj.RunSpec(problem(), M)
    spec.check_hyper(grid)
    for ragged, pattern in (
        (grid._replace(bits=grid.bits[:2]), r'hyper.bits has shape \(2,\)'),
        (grid._replace(network=grid.network._replace(
            up_bps=grid.network.up_bps[0])), r'hyper.network.up_bps has shape '
         r'\(\)'),
        (grid._replace(params={**grid.params, 'adam': {
            **grid.params['adam'], 'b1': grid.params['adam']['b1'][:1]}}),
         r"hyper.params\['adam.b1'\] has shape \(1,\)")):
      with self.assertRaisesRegex(ValueError, pattern + r' but '
                                  r'hyper.step_size has 3 grid points'):
        spec.check_hyper(ragged)


class ResolveGridAxisTest(absltest.TestCase):

  def test_a_problem_without_a_written_gradient_maps_on_a_cpu(self):
    base = problem()
    plain = lj.Problem('plain', base.init, base.apply, C)  # autodiff only
    self.assertEqual(spec_lib.resolve_grid_axis(lj.RunSpec(plain, M)), 'map')
    self.assertEqual(spec_lib.resolve_grid_axis(lj.RunSpec(problem(), M)),
                     'vmap')
    # An accelerator vmaps; a choice made is kept everywhere.
    with mock.patch.object(jax, 'default_backend', lambda: 'tpu'):
      self.assertEqual(spec_lib.resolve_grid_axis(lj.RunSpec(plain, M)),
                       'vmap')
      self.assertEqual(spec_lib.resolve_grid_axis(
          lj.RunSpec(plain, M, grid_axis='map')), 'map')


class ClientBatchTest(absltest.TestCase):
  """`RunSpec.client_batch`: the rows' gradients and local steps in a loop
  of batches (`stages.over_workers`) give the vmapped program's results."""

  def test_batches_give_the_vmapped_results(self):
    from laq_jax import sweep as sweep_lib  # pylint: disable=g-import-not-at-top
    workers = 5  # batches of 2: 2, 2 and a remainder of 1
    rng = np.random.default_rng(1)
    data = lj.Data(rng.normal(size=(workers, N, D)),
                   rng.integers(0, C, (workers, N)).astype(np.int32))
    for algo, settings in (('fedavg', {'local.steps': 3, 'local.lr': 0.1}),
                           ('slaq', {}), ('error feedback', None)):
      with self.subTest(algo=algo):
        if settings is None:  # error feedback compiled in: [M, P] memory
          spec = lj.RunSpec(problem(), workers, stochastic=True,
                            batch_size=4)
          self.assertEqual(lj.init_state(spec, lj.make_hyper('topk_ef'))
                           .rule.error_MxP.shape,
                           (workers, problem().num_params()))
          continue
        theta = {}
        for batch in (0, 2):
          spec = lj.RunSpec(problem(), workers, stochastic=True,
                            batch_size=4, client_batch=batch,
                            **sweep_lib.parts_of([{'algo': algo}]))
          hyper = lj.make_hyper(algo, **settings)
          state, _ = lj.run(spec, data, hyper, 4)
          theta[batch] = np.asarray(state.theta_P)
        np.testing.assert_allclose(theta[2], theta[0], rtol=1e-12,
                                   atol=1e-14)
        self.assertGreater(np.abs(theta[0]).max(), 0)  # it moved
        # no error feedback compiled in: its memory has no width
        self.assertEqual(state.rule.error_MxP.shape, (workers, 0))


if __name__ == '__main__':
  absltest.main()
