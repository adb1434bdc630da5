"""Tests of experiments/run/fstar.py: where f* comes from, and its cache.

The solver is replaced by a stand-in that counts its calls (optimum_test
checks the solver itself), so these tests see exactly when f* is solved,
read from the cache or taken from the config. The data are the built-in
heart_scale set (270 samples): nothing large is loaded.
"""

import dataclasses
import json
import os
import pathlib
from unittest import mock

from absl.testing import absltest
import ml_collections
import numpy as np

import configs
from experiments.run import build
from experiments.run import fstar
from laq_jax import data as data_lib
from laq_jax import optimum
from laq_jax import problems
from laq_jax import sweep as sweep_lib
from tests import common

_env = common.IsolatedEnv('laq_fstar_test_')


def setUpModule():
  _env.enter()


def tearDownModule():
  _env.exit()


def heart_config(**overrides):
  config = configs.load('mnist_logreg', 'dataset=builtin:heart_scale,'
                        'train_subset=0,num_iters=30')
  config.update(overrides)
  return config


def fake_solve(value):
  """A stand-in for optimum.solve returning `value`, counting calls."""
  def solve(problem, data, l2):
    del problem
    solve.calls.append((float(l2), np.asarray(data.x_MxNxD).dtype))
    return optimum.Optimum(value + float(l2), np.zeros(3), 1e-12, 1e-20, 7,
                           'stand-in solver')
  solve.calls = []
  return solve


class CacheDirTest(absltest.TestCase):

  def test_env_then_default(self):
    self.assertEqual(fstar.CACHE_ENV_VAR, 'LAQ_JAX_CACHE')
    with mock.patch.dict(os.environ, {'LAQ_JAX_CACHE': '~/somewhere'}):
      self.assertEqual(fstar.cache_dir(),
                       pathlib.Path('~/somewhere').expanduser())
    with mock.patch.dict(os.environ):
      os.environ.pop('LAQ_JAX_CACHE')
      self.assertEqual(fstar.cache_dir(), data_lib.default_cache_dir())

  def test_path_depends_on_the_key_only(self):
    key = {'format': 2, 'precision': 'float64', 'l2': 0.01}
    path = fstar.fstar_cache_path(key)
    self.assertEqual(path.parent, fstar.cache_dir() / 'fstar')
    self.assertRegex(path.name, '^[0-9a-f]{20}\\.json$')
    self.assertEqual(path, fstar.fstar_cache_path(dict(reversed(list(
        key.items())))))
    for changed in ({'format': 3}, {'precision': 'float32'}, {'l2': 0.1}):
      self.assertNotEqual(path, fstar.fstar_cache_path({**key, **changed}))


class ObjectiveKeyTest(absltest.TestCase):

  def test_what_determines_f(self):
    key = build.objective_key(heart_config())
    self.assertEqual(key, {
        'format': build.OBJECTIVE_FORMAT, 'precision': 'float64',
        'dataset': 'builtin:heart_scale', 'train_subset': 0,
        'split': 'contiguous', 'num_workers': 10, 'l2': 0.01,
        'model': 'logreg'})
    same = (dict(algo='gd'), dict(bits=2), dict(step_size=0.5),
            dict(num_iters=7), dict(seed=3), dict(data_seed=3))
    for overrides in same:
      self.assertEqual(build.objective_key(heart_config(**overrides)), key,
                       overrides)
    changes = (dict(precision='float32'), dict(l2=0.1), dict(num_workers=5),
               dict(split='iid'), dict(model='mlp'))
    for overrides in changes:
      self.assertNotEqual(build.objective_key(heart_config(**overrides)),
                          key, overrides)
    self.assertEqual(build.objective_key(heart_config(split='iid',
                                                      data_seed=3)
                                         )['data_seed'], 3)
    self.assertEqual(build.objective_key(heart_config(model='mlp',
                                                      hidden=7))['hidden'], 7)


class ResolveTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    # Each test starts from an empty cache.
    cache = fstar.cache_dir() / 'fstar'
    for path in cache.glob('*.json'):
      path.unlink()

  def resolve(self, config, solve):
    with mock.patch.object(optimum, 'solve', solve):
      return fstar.resolve_fstar(config, build.build(config))

  def test_given_none_and_nonconvex(self):
    solve = fake_solve(1.0)
    # A number: only from Python (ConfigDict is type-safe, and
    # --config.fstar=2.5 arrives as the string '2.5').
    given = ml_collections.ConfigDict({**heart_config().to_dict(),
                                       'fstar': 2.5})
    self.assertEqual(self.resolve(given, solve),
                     {'fstar': 2.5, 'fstar_method': 'given in config.fstar',
                      'fstar_source': 'config'})
    got = self.resolve(heart_config(fstar='none'), solve)
    self.assertEqual((got['fstar'], got['fstar_source']), (None, 'none'))
    got = self.resolve(heart_config(model='mlp', hidden=4), solve)
    self.assertEqual((got['fstar'], got['fstar_source']), (None, 'none'))
    self.assertIn('nonconvex', got['fstar_method'])
    self.assertEqual(solve.calls, [])

  def test_solved_once_then_cached(self):
    config = heart_config()
    solve = fake_solve(1.0)
    first = self.resolve(config, solve)
    self.assertEqual(solve.calls, [(0.01, np.float64)])
    self.assertEqual(first['fstar'], 1.01)
    self.assertEqual(first['fstar_method'], 'stand-in solver')
    key = fstar.cache_key(build.build(config))
    self.assertEqual({k: v for k, v in key.items() if k != 'loss'},
                     build.objective_key(config))
    path = fstar.fstar_cache_path(key)
    self.assertEqual(first['fstar_source'], f'computed (cached at {path})')
    cached = json.loads(path.read_text())
    self.assertEqual((cached['key'], cached['fstar']), (key, 1.01))
    # Again, and for another algorithm on the same objective: the cache.
    for again in (config, heart_config(algo='gd', step_size=0.1)):
      got = self.resolve(again, solve)
      self.assertEqual(got, {'fstar': 1.01,
                             'fstar_method': 'stand-in solver',
                             'fstar_source': f'cache:{path}'})
    self.assertLen(solve.calls, 1)

  def test_key_changes_miss_the_cache(self):
    solve = fake_solve(1.0)
    self.resolve(heart_config(), solve)
    self.resolve(heart_config(precision='float32'), solve)
    self.assertLen(solve.calls, 2)
    # A new objective format: an older f* is never served.
    with mock.patch.object(build, 'OBJECTIVE_FORMAT',
                           build.OBJECTIVE_FORMAT + 1):
      got = self.resolve(heart_config(), fake_solve(5.0))
    self.assertEqual(got['fstar'], 5.01)
    self.assertLen(list((fstar.cache_dir() / 'fstar').glob('*.json')), 3)

  def test_a_model_registered_again_is_solved_again(self):
    # Keyed on the model's code, not its name: the same name with other
    # logits (a user's model edited in a notebook) misses the cache.
    solve = fake_solve(1.0)
    self.resolve(heart_config(), solve)
    logreg = problems.REGISTRY.get('logreg')
    def doubled(input_dim=784, num_classes=10):
      p = logreg(input_dim, num_classes)
      return dataclasses.replace(
          p, apply=lambda params, x: 2.0 * p.apply(params, x),
          workers_value_and_grad=None, workers_value=None)
    problems.REGISTRY.register('logreg', doubled, replace=True)
    try:
      self.resolve(heart_config(), fake_solve(3.0))
      got = self.resolve(heart_config(), solve)
    finally:
      problems.REGISTRY.register('logreg', logreg, replace=True)
    self.assertEqual(got['fstar'], 3.01)  # the edited model's, cached
    self.assertLen(solve.calls, 1)
    self.assertEqual(self.resolve(heart_config(), solve)['fstar'], 1.01)

  def test_a_bad_cache_file_is_solved_again(self):
    config = heart_config()
    path = fstar.fstar_cache_path(fstar.cache_key(build.build(config)))
    path.parent.mkdir(parents=True, exist_ok=True)
    for content in ('{broken', json.dumps({'key': {'other': 1},
                                           'fstar': 9.0})):
      path.write_text(content)
      solve = fake_solve(1.0)
      self.assertEqual(self.resolve(config, solve)['fstar'], 1.01)
      self.assertLen(solve.calls, 1)
      self.assertEqual(json.loads(path.read_text())['fstar'], 1.01)

  def test_one_per_l2_of_a_sweep(self):
    config = heart_config()
    points = sweep_lib.expand_grid({'algo': ['gd', 'laq'],
                                    'l2': [0.01, 0.1]}, config)
    self.assertLen(points, 4)
    solve = fake_solve(1.0)
    with mock.patch.object(optimum, 'solve', solve):
      got = fstar.resolve_fstars(config, build.build(config), points)
    self.assertEqual(sorted(got), [0.01, 0.1])
    self.assertEqual(got[0.01]['fstar'], 1.01)
    self.assertEqual(got[0.1]['fstar'], 1.1)
    self.assertEqual(sorted(l2 for l2, _ in solve.calls), [0.01, 0.1])
    path = fstar.fstar_cache_path(fstar.cache_key(
        build.build(heart_config(l2=0.1))))
    self.assertEqual(got[0.1]['fstar_source'], f'computed (cached at {path})')


if __name__ == '__main__':
  absltest.main()
