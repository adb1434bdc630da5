"""laq_jax.layouts: which layout the fast gradient reads, per machine."""
import json
import tempfile
import os
from unittest import mock

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

import laq_jax as lj
from laq_jax import layouts


def mnist_like(dtype=np.float32):
  rng = np.random.default_rng(0)
  x = (rng.integers(0, 256, size=(2, 30, 12)) / 255).astype(dtype)
  y = rng.integers(0, 3, size=(2, 30))
  return lj.Data(jnp.asarray(x), jnp.asarray(y))


class ChooseTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    layouts._MEMO.clear()
    self.home = tempfile.mkdtemp()
    self.enterContext(mock.patch.dict(os.environ, {'XDG_CACHE_HOME':
                                                   self.home}))
    os.environ.pop(layouts.ENV, None)

  def test_cpu_rule_is_transposed_and_float64_has_one_choice(self):
    self.assertEqual(layouts.choose(mnist_like(), 1 / 255), 'transposed')
    self.assertEqual(layouts.choose(mnist_like(np.float64), 1 / 255),
                     'transposed')
    data = layouts.auto_layout(mnist_like(), 1 / 255)
    self.assertIsNotNone(data.xt_MxDxN)
    self.assertIsNone(data.xq_MxNxD)

  def test_forced_by_the_environment(self):
    with mock.patch.dict(os.environ, {layouts.ENV: 'bf16_split'}):
      self.assertEqual(layouts.choose(mnist_like(), 1 / 255), 'bf16_split')
      # not applicable without integer features: the one that is
      self.assertEqual(layouts.choose(mnist_like(), None), 'transposed')
      self.assertIsNotNone(
          layouts.auto_layout(mnist_like(), 1 / 255).xq_MxNxD)
    with mock.patch.dict(os.environ, {layouts.ENV: 'fastest'}):
      with self.assertRaisesRegex(ValueError, "LAQ_JAX_LAYOUT='fastest'.*"
                                  'auto, probe, transposed, bf16_split'):
        layouts.choose(mnist_like(), 1 / 255)

  def test_probe_picks_the_faster_once_and_caches_it(self):
    calls = []

    def probe(data, scale):
      calls.append(data.x_MxNxD.shape)
      return {'plain': 0.5, 'transposed': 0.3, 'bf16_split': 0.1}

    with mock.patch.dict(os.environ, {layouts.ENV: 'probe'}):
      self.assertEqual(layouts.choose(mnist_like(), 1 / 255, probe),
                       'bf16_split')
      self.assertEqual(layouts.choose(mnist_like(), 1 / 255, probe),
                       'bf16_split')
      self.assertLen(calls, 1)  # memoized
      layouts._MEMO.clear()
      self.assertEqual(layouts.choose(mnist_like(), 1 / 255, probe),
                       'bf16_split')
      self.assertLen(calls, 1)  # from the file
    cache = json.loads((layouts._cache_path()).read_text())
    (key, entry), = cache.items()
    self.assertIn('2x30x12', key)
    self.assertEqual(entry['choice'], 'bf16_split')

  def test_time_layouts_times_every_applicable_layout(self):
    times = layouts.time_layouts(mnist_like(), 1 / 255, repeats=1)
    self.assertEqual(set(times), {'plain', 'transposed', 'bf16_split'})
    self.assertTrue(all(t > 0 for t in times.values()))
    self.assertEqual(set(layouts.time_layouts(mnist_like(), None,
                                              repeats=1)),
                     {'plain', 'transposed'})


if __name__ == '__main__':
  absltest.main()
