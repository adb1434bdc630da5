"""Loaded by every Python process the test suite starts (./test.sh puts this
folder on PYTHONPATH): when $LAQ_JAX_COMPILE_STATS names a file, the
process's time in JAX's tracing, lowering and XLA's backend compile, and its
persistent-cache hits, are appended to it as one JSON line at exit, tagged
with $LAQ_JAX_STATS_TAG (the test module that started it).

JAX is not imported here: a hook on `jax._src.monitoring`'s first import
registers the listeners, so processes that never import JAX pay nothing.
"""
import os
import sys

if os.environ.get('LAQ_JAX_COMPILE_STATS'):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  try:
    import _compile_stats  # pylint: disable=g-import-not-at-top
    _compile_stats.install_hook(subprocess=True)
  except Exception:  # pylint: disable=broad-except
    pass
  finally:
    del sys.path[0]
