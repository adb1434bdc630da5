"""Sphinx configuration of laq-jax's API reference (`scripts/docs.sh`).

The reference is built from the docstrings (autodoc, autosummary, napoleon
for their Google style) with the Markdown pages of docs/ included through
MyST; the build treats every warning as an error
(`sphinx-build -W --keep-going`).
"""

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Importing the library must not need a data set or a GPU.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

import laq_jax  # noqa: E402

project = 'laq-jax'
author = 'laq-jax authors'
release = version = laq_jax.__version__
copyright = 'the laq-jax authors'

extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx.ext.autosummary',
    'sphinx.ext.napoleon',
    'sphinx.ext.doctest',
    'sphinx.ext.viewcode',
]

source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build', 'Thumbs.db', '.DS_Store']

# Literal blocks without a language (the docstrings' formulas and tables,
# the Markdown pages' plain fences) are shown as they are; the examples
# (testcode) and fences that name a language are highlighted.
highlight_language = 'none'

html_theme = 'furo'
html_title = f'laq-jax {release}'

# The docstrings write names and code in single backquotes (`RunSpec`,
# `hyper.params['rand_k']`): shown as code, linked where the name is
# documented.
default_role = 'py:obj'

# -- autodoc / autosummary / napoleon ---------------------------------------
# The API pages (docs/api/*.rst) list every public name with autosummary and
# document it with autodoc, one entry each with its example; autosummary
# only makes the tables (no generated stub pages).
autosummary_generate = False
autodoc_member_order = 'bysource'
autodoc_preserve_defaults = True   # `dtype=jnp.float32`, not <class ...>
autodoc_typehints = 'signature'
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True           # Attributes: as fields (no duplicates)
# laq_jax.flower needs Flower (the flower extra), which the reference's
# build does not install (requirements-docs.txt): it is documented against a
# mock of flwr, installed or not, so the pages are the same either way.
autodoc_mock_imports = ['flwr']


def _skip_member(app, what, name, obj, skip, options):
  """NamedTuple fields: their `Attributes:` section documents them, so
  their generated 'Alias for field number N' properties are left out."""
  doc = getattr(obj, '__doc__', None) or ''
  if doc.startswith('Alias for field number'):
    return True
  return None


def _drop_type_docstring(app, what, name, obj, options, lines):
  """A module constant without a docstring of its own (a dict, a tuple)
  would show its type's (dict's); its entry in the API pages says what it
  is."""
  if what in ('data', 'attribute') and type(obj).__doc__ and (
      getattr(obj, '__doc__', None) == type(obj).__doc__):
    lines[:] = []


def setup(app):
  app.connect('autodoc-skip-member', _skip_member)
  app.connect('autodoc-process-docstring', _drop_type_docstring)


# -- the examples (sphinx.ext.doctest: scripts/docs.sh --examples) ----------
doctest_global_setup = '''
import os
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
'''
# Only the API pages' examples run (testcode blocks), not `>>>` lines that
# a docstring or a Markdown page may quote.
doctest_test_doctest_blocks = ''

# -- MyST: the Markdown pages of docs/ --------------------------------------
# Their headings get anchors (`algorithm.md#partial-participation` links
# resolve); no warning type is suppressed (`suppress_warnings` is unset).
myst_heading_anchors = 3
