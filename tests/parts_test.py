"""Parts that own their parameters and state (laq_jax.parts, laq_jax.servers),
added from user code (notebooks/user_parts.py), checked against independent
computations: PowerSGD against a NumPy transcription of the paper's
Algorithm 1, the servers against optax run by hand, the ema trigger by hand;
and the guarantees: one program for a sweep of presets built from different
parts (each point equal to its run alone: tests/bit_exact_test.py), resume
and devices equal, and no stale or silent programs."""

import os
import pathlib
import subprocess
import sys
import tempfile
import types

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import optax

import laq_jax as lj
from laq_jax import checkpoint
from laq_jax import compressors
from laq_jax import estimators
from laq_jax import hyper as hyper_lib
from laq_jax import parts
from laq_jax.parts import dispatch
from laq_jax import rules
from laq_jax import servers
from laq_jax import sweep
from laq_jax import trigger
from tests import common

M, N = 3, 40


def setUpModule():
  # The user's module registers its parts; put the registries back after.
  global _SAVED
  _SAVED = ([dict(r._parts) for r in parts.registries().values()],
            dict(hyper_lib.ALGORITHMS))
  import notebooks.user_parts  # pylint: disable=g-import-not-at-top,unused-import
  notebooks.user_parts.register()


def tearDownModule():
  registries, algorithms = _SAVED
  for reg, saved in zip(parts.registries().values(), registries):
    reg._parts = saved
  hyper_lib.ALGORITHMS.clear()
  hyper_lib.ALGORITHMS.update(algorithms)


def data(num_workers=M, per_worker=N):
  x, y = common.mnist_shards(num_workers, per_worker, np.float32)
  x = x[..., ::40]  # 20 features: P = 21 x 10, PowerSGD's 21 x 10 matrix
  return lj.Data(jnp.asarray(x), jnp.asarray(y))


def problem():
  return lj.get_problem('logreg', input_dim=20, num_classes=10)


def spec_for(algos, **kwargs):
  points = [{'algo': a} for a in algos]
  return lj.RunSpec(problem(), M, **{
      **sweep.parts_of(points), **kwargs})


def hyper(algo, **overrides):
  return lj.make_hyper(algo, step_size=0.05, **overrides)


class ParamsTest(absltest.TestCase):

  def test_a_part_declares_and_checks_its_own_parameters(self):
    h = hyper('rand_k_gd', **{'rand_k.k': 50})
    self.assertEqual(int(h.params['rand_k']['k']), 50)
    self.assertEqual(h.params['rand_k']['k'].dtype, jnp.int32)
    with self.assertRaisesRegex(ValueError, r"rand_k.k=0 is not allowed: it "
                                r"must be an integer >= 1"):
      hyper('rand_k_gd', **{'rand_k.k': 0})
    with self.assertRaisesRegex(ValueError, "did you mean 'rand_k.k'"):
      hyper('rand_k_gd', **{'rand_k.kk': 5})
    self.assertIn('rand_k.k: int = 100', hyper_lib.describe())

  def test_a_preset_sets_its_parts_parameters(self):
    self.assertAlmostEqual(float(hyper('gd_momentum').params['heavy_ball'][
        'momentum']), 0.9)
    self.assertAlmostEqual(float(hyper('gd_momentum', **{
        'heavy_ball.momentum': 0.5}).params['heavy_ball']['momentum']), 0.5)

  def test_a_user_written_server_is_the_librarys_momentum(self):
    # heavy_ball (user code: the velocity written out) against the
    # library's optax.sgd momentum server, composed onto GD: bit for bit.
    from tests import common  # pylint: disable=g-import-not-at-top
    x, y = common.mnist_shards(common.SMALL_M, common.SMALL_N)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    base = dict(hyper_lib.DEFAULTS, algo='gd', step_size=0.002)
    points = sweep.expand_grid(
        {'algo': ['gd_momentum', 'gd+server=momentum'],
         'heavy_ball.momentum': [0.5], 'momentum.momentum': [0.5]}, base)
    got = sweep.run_sweep(lj.RunSpec(lj.get_problem('logreg'),
                                     common.SMALL_M), data, points, 20)
    np.testing.assert_array_equal(got.loss_GxT[0], got.loss_GxT[1])
    plain = sweep.run_sweep(lj.RunSpec(lj.get_problem('logreg'),
                                       common.SMALL_M), data,
                            sweep.expand_grid({}, base), 20)
    self.assertFalse(np.array_equal(plain.loss_GxT[0], got.loss_GxT[0]))

  def test_a_grid_varies_a_part_parameter_only_where_it_is_used(self):
    base = dict(hyper_lib.DEFAULTS, algo='laq')
    points = sweep.expand_grid({'algo': ['laq', 'rand_k_gd'],
                                'rand_k.k': [50, 500]}, base)
    self.assertEqual([(p['algo'], p['rand_k.k']) for p in points],
                     [('laq', 100), ('rand_k_gd', 50), ('rand_k_gd', 500)])
    # A built-in part's parameter: the same rule.
    points = sweep.expand_grid({'algo': ['laq', 'ef21'],
                                'top_k.k': [0.02, 0.1]}, base)
    self.assertEqual([(p['algo'], p['top_k.k']) for p in points],
                     [('laq', 0.01), ('ef21', 0.02), ('ef21', 0.1)])
    with self.assertRaisesRegex(ValueError, "no point of the sweep uses the "
                                "part 'rand_k'"):
      sweep.expand_grid({'algo': ['laq'], 'rand_k.k': [5]}, base)


class ImportModulesTest(absltest.TestCase):

  def test_a_module_that_fails_is_named_in_one_line(self):
    # config.modules: a missing module, or one whose import fails (a
    # launcher's: absl's DuplicateFlagError), is a ValueError naming it.
    with tempfile.TemporaryDirectory() as tmp:
      pathlib.Path(tmp, 'laq_test_broken.py').write_text(
          "raise RuntimeError('defined twice')\n")
      pathlib.Path(tmp, 'laq_test_fine.py').write_text('X = 1\n')
      sys.path.insert(0, tmp)
      self.addCleanup(sys.path.remove, tmp)
      with self.assertRaisesRegex(ValueError, r"^modules='laq_test_broken' "
                                  r'fails on import \(RuntimeError: defined '
                                  r'twice\): .*not a launcher'):
        parts.import_modules('laq_test_fine, laq_test_broken')
      with self.assertRaisesRegex(ValueError, r"^modules='no_such_mod' could "
                                  'not be imported'):
        parts.import_modules(['no_such_mod'])
      parts.import_modules('laq_test_fine')


class StaleProgramsTest(absltest.TestCase):
  """The two silent wrong results of the issue, as regressions."""

  def test_a_part_registered_again_recompiles(self):
    halve = lambda g, r, k, h: compressors.Compressed(r + 0.5 * (g - r),
                                                      jnp.int32(1))
    quarter = lambda g, r, k, h: compressors.Compressed(r + 0.25 * (g - r),
                                                        jnp.int32(2))
    compressors.REGISTRY.register('test_mine', halve, replace=True)
    lj.register_algorithm(lj.Algorithm('test_mine_gd', False, 'test_mine',
                                       False), replace=True)
    d, h = data(), hyper('test_mine_gd')
    old = spec_for(['test_mine_gd'])
    _, trace_old = lj.run(old, d, h, 3)
    compressors.REGISTRY.register('test_mine', quarter, replace=True)
    new = spec_for(['test_mine_gd'])
    self.assertNotEqual(old, new)  # the same names, other parts
    _, trace_new = lj.run(new, d, h, 3)
    self.assertEqual(int(trace_old.bits_M[0, 0]), 1)
    self.assertEqual(int(trace_new.bits_M[0, 0]), 2)  # v2 runs, not v1
    # A RunSpec keeps the parts it was made with.
    _, again = lj.run(old, d, h, 3)
    np.testing.assert_array_equal(again.loss, trace_old.loss)

  def test_run_chunk_refuses_a_part_the_program_lacks(self):
    spec = spec_for(['gd'])  # identity, eager, sgd only
    d, h = data(), hyper('laq')
    state = lj.init_state(spec, h)
    for call in (lambda: lj.run_chunk(spec, state, d, h, 2),
                 lambda: lj.run(spec, d, h, 2)):
      with self.assertRaisesRegex(ValueError, r"hyper uses compressor\(s\) "
                                  r"uniform but RunSpec.compressors="):
        call()
    with self.assertRaisesRegex(ValueError, r"server\(s\) heavy_ball"):
      lj.run_chunk(spec, state, d, hyper('gd_momentum'), 2)

  def test_opt_in_parts_are_compiled_in_only_where_named(self):
    # LASG's and CADA's triggers take a second gradient every step in any
    # program that compiles them in: a RunSpec left to its defaults has
    # every registered trigger but them, and refuses their points by name.
    opt_in = {'lasg_wk2', 'lasg_wk1', 'lasg_ps', 'cada_wk2', 'cada_wk1',
              'tpc_lazy'}
    self.assertEqual({n for n in trigger.REGISTRY.names
                      if trigger.REGISTRY.get(n).opt_in}, opt_in)
    spec = lj.RunSpec(problem(), M)
    self.assertEqual(set(spec.triggers),
                     set(trigger.REGISTRY.names) - opt_in)
    with self.assertRaisesRegex(ValueError, r"trigger\(s\) lasg_ps .*"
                                r"RunSpec.triggers \(lasg_ps: opt-in"):
      spec.check_hyper(hyper('lasg_ps'))
    named = lj.RunSpec(problem(), M,
                       triggers=('laq', 'lasg_ps'))
    named.check_hyper(hyper('lasg_ps'))
    # A part of one's own can be opt-in too.
    part = parts.trigger('test_costly', trigger.eager, opt_in=True)
    trigger.REGISTRY.register('test_costly', part, replace=True)
    self.assertNotIn('test_costly', trigger.REGISTRY.default_names)
    self.assertIn('test_costly', trigger.REGISTRY.names)


def numpy_powersgd(grads_TxMxP, q0, rank, cols, step_size, theta0):
  """PowerSGD with error feedback, Algorithm 1 of Vogels et al. (2019) and
  epfml/powersgd's paper-code RankKReducer (reuse_query), for each worker on
  its own (no all-reduce): returns theta, each worker's Q, the bits."""
  num_steps, num_workers, num_params = grads_TxMxP.shape
  rows = -(-num_params // cols)
  q = np.repeat(q0[None], num_workers, 0).astype(np.float64)
  memory = np.zeros((num_workers, num_params))
  theta = theta0.astype(np.float64)
  for t in range(num_steps):
    out = np.zeros((num_workers, num_params))
    for m in range(num_workers):
      tensor = grads_TxMxP[t, m] + memory[m]
      matrix = np.zeros(rows * cols)
      matrix[:num_params] = tensor
      matrix = matrix.reshape(rows, cols)
      p = matrix @ q[m]
      for i in range(rank):  # orthogonalize: Gram-Schmidt, eps 1e-8
        p[:, i] /= np.sqrt(np.sum(p[:, i] ** 2)) + 1e-8
        if i + 1 < rank:
          p[:, i + 1:] -= np.sum(p[:, i:i + 1] * p[:, i + 1:], 0) * p[:, i:i + 1]
      q[m] = matrix.T @ p
      out[m] = (p @ q[m].T).reshape(-1)[:num_params]
      memory[m] = tensor - out[m]
    theta = theta - step_size * out.sum(0)
  return theta, q, 32 * rank * (rows + cols)


def rule_steps(grads_TxMxP, parts_, h, theta0, state=None):
  (theta, state), stats = common.rule_steps(grads_TxMxP, parts_, h, theta0,
                                            state)
  return theta, state, stats


class PowerSGDTest(absltest.TestCase):

  def test_a_hyper_made_before_a_new_parameter_is_refused(self):
    # A part registered again with one more parameter, used with a Hyper
    # made before: one line naming the parameter (was a KeyError deep in
    # the trace).
    scale = lambda g, r, k, h, params: compressors.Compressed(
        r + params['a'] * (g - r), jnp.int32(1))
    compressors.REGISTRY.register('test_scaled', parts.compressor(
        'test_scaled', scale, params=[parts.Param('a', 0.5)]), replace=True)
    lj.register_algorithm(lj.Algorithm('test_scaled_gd', False,
                                       'test_scaled', False), replace=True)
    h = hyper('test_scaled_gd')
    compressors.REGISTRY.register('test_scaled', parts.compressor(
        'test_scaled', scale, params=[parts.Param('a', 0.5),
                                      parts.Param('b', 2.0)]), replace=True)
    with self.assertRaisesRegex(
        ValueError, r"^hyper.params\['test_scaled'\] has no b \(it has a\), "
        r"which the compressor 'test_scaled' .*\(laq_jax.make_hyper\)$"):
      lj.run(spec_for(['test_scaled_gd']), data(), h, 2)
    lj.run(spec_for(['test_scaled_gd']), data(), hyper('test_scaled_gd'), 2)

  def test_matches_numpy_step_by_step(self):
    import notebooks.user_parts as up  # pylint: disable=g-import-not-at-top
    rng = np.random.default_rng(0)
    num_params = 205  # 21 x 10 with 5 zeros of padding
    grads = rng.normal(size=(6, M, num_params))
    theta0 = rng.normal(size=num_params)
    part = up.powersgd(rank=2, cols=10)
    parts_ = rules.Parts((part,), trigger.REGISTRY.parts(['eager']),
                         servers.REGISTRY.parts(['sgd']), error_feedback=True,
                         downlink=False)
    compressors.REGISTRY.register(part.name, part, replace=True)
    h = lj.make_hyper('powersgd_ef', step_size=0.1, dtype=jnp.float64)
    with jax.enable_x64(True):
      for steps in range(1, 7):  # step by step: every prefix
        theta, state, stats = rule_steps(jnp.asarray(grads[:steps]), parts_,
                                         h, jnp.asarray(theta0))
        want_theta, want_q, want_bits = numpy_powersgd(
            grads[:steps], np.asarray(part.init(num_params, jnp.float64)), 2,
            10, 0.1, theta0)
        np.testing.assert_allclose(np.asarray(theta), want_theta, rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(np.asarray(state.parts_M[part.name]),
                                   want_q, rtol=1e-10, atol=1e-12)
        self.assertTrue(np.all(np.asarray(stats.bits_M) == want_bits))
        self.assertEqual(want_bits, 32 * 2 * (21 + 10))


class ServersTest(absltest.TestCase):

  def _run(self, name, factory, dtype=np.float64):
    # float64: the server steps with the aggregate, kept as a running sum of
    # the uploads' changes, which agrees with the uploads' sum to rounding.
    rng = np.random.default_rng(1)
    grads = rng.normal(size=(5, M, 30)).astype(dtype)
    theta0 = rng.normal(size=30).astype(dtype)
    parts_ = rules.Parts.of(['identity'], ['eager'], [name],
                            error_feedback=False, downlink=False)
    with jax.enable_x64(dtype == np.float64):
      h = lj.make_hyper('gd', step_size=0.05, dtype=dtype)._replace(
          server=jnp.int32(servers.index(name)))
      theta, _, _ = rule_steps(jnp.asarray(grads), parts_, h,
                               jnp.asarray(theta0))
      # optax by hand: the server steps with the sum of the uploads.
      tx = factory(0.05)
      want = jnp.asarray(theta0)
      opt = tx.init(want)
      for t in range(grads.shape[0]):
        updates, opt = tx.update(jnp.asarray(grads[t].sum(0)), opt, want)
        want = optax.apply_updates(want, updates)
      return np.asarray(theta), np.asarray(want)

  def test_each_server_is_optax_run_by_hand(self):
    for name, factory in (
        ('sgd', optax.sgd),  # the paper's step, without optax in the way
        ('momentum', lambda lr: optax.sgd(lr, momentum=0.9)),
        ('nesterov', lambda lr: optax.sgd(lr, momentum=0.9, nesterov=True)),
        ('adam', lambda lr: optax.adam(lr)),
        ('amsgrad', lambda lr: optax.amsgrad(lr)),
        ('yogi', lambda lr: optax.yogi(lr, eps=1e-3))):
      with self.subTest(name):
        got, want = self._run(name, factory)
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


class TriggerStateTest(absltest.TestCase):

  def test_ema_trigger_by_hand(self):
    rng = np.random.default_rng(2)
    grads = rng.normal(size=(6, M, 30))
    parts_ = rules.Parts.of(['identity'], ['ema'], ['sgd'],
                            error_feedback=False, downlink=False)
    h = lj.make_hyper('laq_ema', step_size=0.05, dtype=jnp.float64, **{
        'ema.weight': 1.0, 'ema.decay': 0.5})._replace(
            compressor=jnp.int32(compressors.index('identity')),
            estimator=jnp.int32(estimators.index('innovation')))
    with jax.enable_x64(True):
      _, state, stats = rule_steps(jnp.asarray(grads), parts_, h,
                                   jnp.zeros(30))
    # By hand: full-precision innovation, the ema of every decision's lhs.
    last, ema, never = np.zeros((M, 30)), np.zeros(M), np.ones(M, bool)
    for t in range(6):
      lhs = np.sum((grads[t] - last) ** 2, 1)
      sent = never | (lhs >= ema)
      np.testing.assert_array_equal(np.asarray(stats.sent_M[t]), sent)
      ema = np.where(never, lhs, 0.5 * ema + 0.5 * lhs)
      last = np.where(sent[:, None], grads[t], last)
      never &= ~sent
    np.testing.assert_allclose(np.asarray(state.parts_M['ema']), ema,
                               rtol=1e-12)
    self.assertFalse(np.all(np.asarray(stats.sent_M)))  # it really skipped


USER = ['laq', 'rand_k_gd', 'natural_gd', 'powersgd_ef', 'laq_ema',
        'gd_momentum']


class GradientPartTest(absltest.TestCase):

  def test_a_gradient_part_of_ones_own(self):
    # Twice the full-batch gradient at half the step size is GD exactly
    # (powers of two scale without rounding): the part is compiled in by
    # identity, and the loop runs it in place of the built-in one.
    from laq_jax import loop  # pylint: disable=g-import-not-at-top

    def doubled(setting):
      full = loop.full_batch_gradients(setting)
      def gradients(step, theta_P, at_P):
        loss, grads, _ = full(step, theta_P, at_P)  # (no same-sample pair)
        return loss, 2 * grads
      return gradients

    d = data()
    _, want = lj.run(spec_for(['gd']), d, hyper('gd'), 5)
    spec = spec_for(['gd'], gradient=doubled)
    self.assertNotEqual(spec, spec_for(['gd']))
    _, got = lj.run(spec, d, lj.make_hyper('gd', step_size=0.025), 5)
    np.testing.assert_array_equal(got.loss, want.loss)
    np.testing.assert_array_equal(got.grad_norm_sq, 4 * want.grad_norm_sq)


class ResumeTest(absltest.TestCase):

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)

  def test_resume_through_a_checkpoint_is_bit_identical(self):
    d = data()
    spec = spec_for(USER, grid_axis='map')
    grid = lj.stack_hypers([hyper(a) for a in USER])
    whole, trace = lj.run(spec, d, grid, 6)
    half, _ = lj.run(spec, d, grid, 3)
    with tempfile.TemporaryDirectory() as tmp:
      with checkpoint.Checkpointer(os.path.join(tmp, 'ckpt'), 'fp') as ckpt:
        ckpt.save(3, half, {'loss': np.zeros(3)})
        restored = ckpt.restore(jax.tree.map(np.zeros_like, half)).state
    rest, trace2 = lj.run(spec, d, grid, 3, state=restored)
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(rest)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(trace.loss[:, 3:], trace2.loss)


_DEVICES_SCRIPT = r'''
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
sys.path.insert(0, os.getcwd())
import numpy as np, jax
import laq_jax as lj
from laq_jax import sharding
from tests import parts_test as t
t.setUpModule()
d = t.data()
spec = t.spec_for(t.USER, grid_axis="map")
grid = lj.stack_hypers([t.hyper(a) for a in t.USER])
_, want = lj.run(spec, d, grid, 4)
_, got = lj.run(spec, d, grid, 4,
                run_chunk_fn=sharding.make_run_chunk(sharding.make_mesh(3)))
for name in ("loss", "sent_M", "bits_M"):
  np.testing.assert_array_equal(np.asarray(getattr(got, name)),
                                np.asarray(getattr(want, name)), name)
print("EQUAL")
'''


class DevicesTest(absltest.TestCase):

  @pytest.mark.slow  # (fast-tier budget: the full suite runs it)

  def test_devices_equal_vmap_with_part_state(self):
    out = subprocess.run([sys.executable, '-c', _DEVICES_SCRIPT],
                         cwd=common.ROOT, capture_output=True, text=True,
                         timeout=600, env={**os.environ,
                                           'JAX_PLATFORMS': 'cpu'})
    self.assertIn('EQUAL', out.stdout, out.stderr[-3000:])


class DispatchTest(absltest.TestCase):
  """laq_jax/parts/dispatch.py: the switch among a program's parts."""

  def test_switch_merged_calls_each_part_and_merges_same_functions(self):
    double = lambda x: 2 * x
    made = {'a': parts.compressor('a', double),
            'other': parts.compressor('other', lambda x: x + 100),
            'b': parts.compressor('b', double),
            'c': parts.compressor('c', lambda x: -x)}
    # (a registry's names in its order: a new PartRegistry would take the
    # place of the library's compressors)
    reg = types.SimpleNamespace(names=tuple(made),
                                index=lambda n: tuple(made).index(n))
    compiled = (made['a'], made['b'], made['c'])  # 'other' not compiled in
    run = lambda i, x: dispatch.switch_merged(
        i, compiled, reg, lambda part, y: part.fn(y), x)
    x = jnp.float32(3.0)
    for name, want in (('a', 6.0), ('b', 6.0), ('c', -3.0)):
      self.assertEqual(float(run(reg.index(name), x)), want, name)
    # a and b share one function: two branches, not three
    jaxpr = jax.make_jaxpr(run)(jnp.int32(0), x)
    (cond,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == 'cond']
    self.assertLen(cond.params['branches'], 2)
    # the registry's index maps to the position among the compiled parts
    self.assertEqual(
        [int(dispatch.local_index(reg.index(n), compiled, reg))
         for n in ('a', 'b', 'c')], [0, 1, 2])

  def test_one_part_is_called_directly(self):
    one = (parts.compressor('a', lambda x: x + 1),)
    jaxpr = jax.make_jaxpr(lambda i, x: dispatch.switch(
        i, one, lambda p, y: p.fn(y), x))(jnp.int32(0), 1.0)
    self.assertNotIn('cond', str(jaxpr))

  def test_own_params_names_a_part_the_hyper_lacks(self):
    part = parts.compressor('unheard_of', lambda x: x,
                            params=[parts.Param('k', 1.0)])
    with self.assertRaisesRegex(ValueError, "no group 'unheard_of'"):
      dispatch.own_params(lj.make_hyper('laq'), part)


if __name__ == '__main__':
  absltest.main()
