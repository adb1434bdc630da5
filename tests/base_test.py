"""laq_jax.data.base: the data modules' error and the cache folder.

(tests/data_test.py holds the cache folder with $XDG_CACHE_HOME set and
unset.) Here: a DataError is a ValueError, so callers that catch bad
arguments catch bad data too, and an empty $XDG_CACHE_HOME counts as unset
(the XDG Base Directory spec: "either not set or empty").
"""

import os
import pathlib
from unittest import mock

from absl.testing import absltest

from laq_jax import data
from laq_jax.data import base


class BaseTest(absltest.TestCase):

  def test_data_error_is_a_value_error(self):
    self.assertTrue(issubclass(base.DataError, ValueError))
    self.assertIs(data.DataError, base.DataError)
    with self.assertRaises(ValueError):  # what config validation catches
      data.make_shards([[1.0]], [0], 0)

  def test_empty_xdg_cache_home_is_unset(self):
    home = pathlib.Path('/home/someone')
    with mock.patch.dict(os.environ, {'XDG_CACHE_HOME': ''}), \
        mock.patch.object(pathlib.Path, 'home', return_value=home):
      self.assertEqual(base.default_cache_dir(),
                       home / '.cache' / 'laq_jax')


if __name__ == '__main__':
  absltest.main()
