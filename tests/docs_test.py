"""The API reference's pages (docs/api/*.rst) against the library: every
public name documented, each with an example; every Markdown page of docs/
in the toctree. Reads files and imports modules only: no Sphinx run
(scripts/docs.sh builds the reference, --examples runs the examples)."""

import importlib
import importlib.util
import inspect
import pathlib
import re

from absl.testing import absltest

import laq_jax

DOCS = pathlib.Path(__file__).resolve().parent.parent / 'docs'
API = DOCS / 'api'
DIRECTIVE = re.compile(r'^\.\. (?:auto(?:function|class|exception|data)|'
                       r'py:data):: (\w+)', re.M)
EXAMPLE = re.compile(r'^   \.\. (?:testcode|code-block)::', re.M)


def pages() -> dict[str, str]:
  """{module documented: its page's text}."""
  out = {}
  for path in sorted(API.glob('*.rst')):
    text = path.read_text()
    found = re.search(r'^\.\. currentmodule:: ([\w.]+)', text, re.M)
    if found:
      out[found.group(1)] = text
  return out


# Modules behind an optional extra: {module: the package it needs}. Where
# that package is not installed, the tests that import a module pass over it
# (the docs build mocks the package: docs/conf.py); the others still read
# its page.
OPTIONAL = {'laq_jax.deploy.flower': 'flwr', 'laq_jax.flower': 'flwr'}


def load(module_name: str):
  """The module, or None where its optional package is not installed."""
  try:
    return importlib.import_module(module_name)
  except ImportError:
    needs = OPTIONAL.get(module_name)
    if needs and importlib.util.find_spec(needs) is None:
      return None
    raise


def documented(text: str) -> list[str]:
  return DIRECTIVE.findall(text)


def public_names(module) -> list[str]:
  """`__all__`, else what the module defines (functions, classes) and its
  constants (UPPER_CASE), none starting with '_'."""
  if hasattr(module, '__all__'):
    return list(module.__all__)
  names = []
  for name, value in vars(module).items():
    if name.startswith('_') or inspect.ismodule(value):
      continue
    defined = getattr(value, '__module__', None) == module.__name__ and (
        inspect.isclass(value) or inspect.isfunction(value))
    if defined or name.isupper():
      names.append(name)
  return names


class ApiPagesTest(absltest.TestCase):

  def test_every_name_of_the_package_is_on_its_page(self):
    on_page = set(documented(pages()['laq_jax']))
    self.assertEqual(sorted(set(laq_jax.__all__) - on_page), [])

  def test_every_public_name_of_each_module_is_documented(self):
    top = {name: getattr(laq_jax, name) for name in laq_jax.__all__}
    for module_name, text in pages().items():
      if module_name == 'laq_jax':
        continue
      module = load(module_name)
      if module is None:
        continue
      on_page = set(documented(text))
      missing = [n for n in public_names(module) if n not in on_page
                 and not any(getattr(module, n) is v for v in top.values())]
      self.assertEqual(missing, [], f'{module_name}: not in docs/api')

  def test_the_modules_users_compose_with_have_pages(self):
    for name in ('parts', 'compressors', 'estimators', 'trigger', 'servers',
                 'clients', 'broadcasts',
                 'participation', 'network', 'hyper', 'loop', 'rules',
                 'problems', 'models', 'record', 'sweep', 'data', 'wire',
                 'codecs',
                 'deploy', 'flower'):
      # (a module's page names its layer's path: laq_jax.parts.compressors)
      path = laq_jax.MOVED.get(name, name)
      self.assertIn(f'laq_jax.{path}', pages())

  def test_every_documented_name_has_an_example(self):
    for module_name, text in pages().items():
      entries = re.split(r'^(?=\.\. (?:auto(?:function|class|exception|data)'
                         r'|py:data):: )', text, flags=re.M)
      for entry in entries[1:]:
        name = DIRECTIVE.match(entry).group(1)
        self.assertRegex(entry, EXAMPLE, f'{module_name}.{name}: no example')

  def test_documented_names_exist(self):
    for module_name, text in pages().items():
      module = load(module_name)
      if module is None:
        continue
      for name in documented(text):
        self.assertTrue(hasattr(module, name), f'{module_name}.{name}')

  def test_every_page_is_in_the_api_toctree(self):
    index = (API / 'index.rst').read_text()
    for path in API.glob('*.rst'):
      if path.stem != 'index':
        self.assertRegex(index, rf'(?m)^   {path.stem}$')


class MarkdownPagesTest(absltest.TestCase):

  def test_every_markdown_page_is_in_the_toctree(self):
    index = (DOCS / 'index.md').read_text()
    for path in DOCS.rglob('*.md'):
      relative = path.relative_to(DOCS)
      if relative.parts[0] == '_build' or relative.name == 'index.md':
        continue
      self.assertRegex(index, rf'(?m)^{re.escape(str(relative.with_suffix("")))}$',
                       f'docs/{relative} is not in docs/index.md')


if __name__ == '__main__':
  absltest.main()
