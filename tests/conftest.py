"""Shared test set-up.

float64 is turned on for the whole session, before any test runs, so that no
test depends on which module happened to enable it first (the suite must not
depend on order). Code paths in float32 still run in float32: every array in
laq_jax carries an explicit dtype. `tests/x32_test.py` checks the default
(x64 off) mode in a subprocess.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import jax  # pylint: disable=g-import-not-at-top

jax.config.update('jax_enable_x64', True)
