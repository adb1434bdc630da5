"""The default JAX mode (x64 off): float32 end to end, in a fresh process.

The rest of the suite runs with x64 on (see conftest.py); this checks that the
library does not rely on it: dtypes stay float32/int32 and LAQ still skips.
"""

import textwrap

from absl.testing import absltest

import pytest

from tests import common

pytestmark = pytest.mark.slow  # a fresh process compiling two models

SCRIPT = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    assert not jax.config.jax_enable_x64
    import laq_jax as lj
    from tests import common
    x, y = common.mnist_shards(10, 100, dtype=np.float32)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    for model in ('logreg', 'mlp'):
      spec = lj.RunSpec(lj.get_problem(model, hidden=32), 10)
      state, trace = lj.run(spec, data, lj.make_hyper('laq'), 60, chunk_size=20)
      assert state.theta_P.dtype == jnp.float32, state.theta_P.dtype
      assert trace.bits_M.dtype == np.int32, trace.bits_M.dtype
      assert trace.loss[-1] < trace.loss[0], trace.loss
      assert 0 < trace.sent_M.sum() < trace.sent_M.size, trace.sent_M.sum()
    spec = lj.RunSpec(lj.get_problem('mlp', hidden=32), 10, stochastic=True,
                      batch_size=20)
    _, trace = lj.run(spec, data, lj.make_hyper('slaq', step_size=0.008), 20)
    # The objective at the logged iterations (every 10 in minibatch runs).
    assert np.all(np.isfinite(trace.loss[::10])), trace.loss
    assert np.all(np.isnan(np.delete(trace.loss, np.s_[::10]))), trace.loss
    print('OK')
""")


class Float32ModeTest(absltest.TestCase):

  def test_float32_default_mode(self):
    if common.mnist_dir() is None:
      self.skipTest('MNIST not found: set LAQ_JAX_DATA')
    out = common.run_script(SCRIPT, JAX_ENABLE_X64='0')
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    self.assertIn('OK', out.stdout)


if __name__ == '__main__':
  absltest.main()
