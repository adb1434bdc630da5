"""The two tiers and their budgets (tests/BUDGETS.md), read from the test
files themselves: the fast tier (`-m "not slow"`) still reaches every
laq_jax module, every slow test file has its row (what it proves, its
budget) in BUDGETS.md, and every row there names a slow test file."""

import ast
import importlib.util
import os
import pathlib
import re

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = ROOT / 'tests'


def _is_slow_mark(node) -> bool:
  """`pytest.mark.slow` (or a list holding it)."""
  if isinstance(node, (ast.List, ast.Tuple)):
    return any(_is_slow_mark(e) for e in node.elts)
  return (isinstance(node, ast.Attribute) and node.attr == 'slow'
          and isinstance(node.value, ast.Attribute)
          and node.value.attr == 'mark')


def slow_marks(path: pathlib.Path) -> dict[str, bool]:
  """{test function or Class.method: slow?} of one test file (a class
  without test methods of its own, one that inherits them, is not seen)."""
  tree = ast.parse(path.read_text())
  module_slow = any(
      isinstance(n, ast.Assign) and any(
          isinstance(t, ast.Name) and t.id == 'pytestmark' for t in n.targets)
      and _is_slow_mark(n.value) for n in tree.body)
  marked = lambda n: any(_is_slow_mark(d) for d in n.decorator_list)  # noqa: E731
  out = {}
  for n in tree.body:
    if isinstance(n, ast.FunctionDef) and n.name.startswith('test'):
      out[n.name] = module_slow or marked(n)
    elif isinstance(n, ast.ClassDef) and n.name.endswith('Test'):
      for m in n.body:
        if isinstance(m, ast.FunctionDef) and m.name.startswith('test'):
          out[f'{n.name}.{m.name}'] = module_slow or marked(n) or marked(m)
  return out


def laq_jax_modules() -> list[str]:
  """'loop', 'data.mnist', ...: every module of the library but packages'
  __init__."""
  lib = ROOT / 'laq_jax'
  return sorted(str(p.relative_to(lib).with_suffix('')).replace(os.sep, '.')
                for p in lib.rglob('*.py') if p.name != '__init__.py')


def imported(path: pathlib.Path) -> set[str]:
  """The laq_jax modules a file names: `from laq_jax import m`, `from
  laq_jax.m import ...`, `import laq_jax.m`, `lj.m.` (laq_jax imported as
  lj), and `from laq_jax.data import m`."""
  tree = ast.parse(path.read_text())
  names, aliases = set(), {'laq_jax'}
  for n in ast.walk(tree):
    if isinstance(n, ast.ImportFrom) and n.module and (
        n.module == 'laq_jax' or n.module.startswith('laq_jax.')):
      sub = n.module[len('laq_jax.'):] if n.module != 'laq_jax' else ''
      if sub:
        names.add(sub)
      names.update(f'{sub}.{a.name}' if sub else a.name for a in n.names)
    elif isinstance(n, ast.Import):
      for a in n.names:
        if a.name.startswith('laq_jax'):
          names.add(a.name[len('laq_jax.'):])
          if a.name == 'laq_jax':
            aliases.add(a.asname or a.name)
  for n in ast.walk(tree):
    if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        and n.value.id in aliases):
      names.add(n.attr)
    if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
        and isinstance(n.value.value, ast.Name)
        and n.value.value.id in aliases):
      names.add(f'{n.value.attr}.{n.attr}')
  return {canonical(n) for n in names}


def canonical(name: str) -> str:
  """A module's name under its layer ('loop' -> 'round.loop',
  laq_jax.MOVED); others as they are."""
  import laq_jax  # pylint: disable=g-import-not-at-top
  first, dot, rest = name.partition('.')
  return laq_jax.MOVED[first] + dot + rest if first in laq_jax.MOVED else name


def budget_rows() -> dict[str, float]:
  """{tests/x_test.py: budget s} of BUDGETS.md's table of slow files, read
  by the parser ./test.sh's budget table uses (scripts/run_tests.py)."""
  spec = importlib.util.spec_from_file_location(
      'run_tests', ROOT / 'scripts' / 'run_tests.py')
  runner = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(runner)
  return {k: v for k, v in runner.budgets().items()
          if k.startswith('tests/')}


class TiersTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.files = {p: slow_marks(p) for p in sorted(TESTS.glob('*_test.py'))}

  def test_the_fast_tier_reaches_every_library_module(self):
    reached = set()
    for path, tests in self.files.items():
      if any(not slow for slow in tests.values()):
        reached |= imported(path)
        # tests/x_test.py tests laq_jax/x.py (or laq_jax/data/x.py)
        reached.add(canonical(path.stem[:-len('_test')]))
        reached.add('data.' + path.stem[:-len('_test')])
    missing = [m for m in laq_jax_modules() if m not in reached]
    self.assertEqual(missing, [], 'laq_jax modules no fast test imports')

  def test_every_slow_file_has_its_budget_and_reason(self):
    slow = sorted(str(p.relative_to(ROOT)) for p, tests in self.files.items()
                  if any(tests.values()))
    rows = budget_rows()
    self.assertEqual(sorted(set(slow) - set(rows)), [],
                     'slow test files without a row in tests/BUDGETS.md')
    self.assertEqual(sorted(set(rows) - set(slow)), [],
                     'rows of tests/BUDGETS.md naming no slow test file')
    self.assertTrue(all(b > 0 for b in rows.values()))

  def test_this_module_compiles_with_most_optimizations_off(self):
    # tests/conftest.py: a module without XLA_DEFAULTS, unless the
    # environment asks for XLA's defaults everywhere.
    import jax  # pylint: disable=g-import-not-at-top
    self.assertEqual(jax.config.read('jax_disable_most_optimizations'),
                     os.environ.get('LAQ_JAX_TEST_OPTIMIZE') != '1')
    marked = sorted(p.name for p in TESTS.glob('*_test.py') if re.search(
        r'^XLA_DEFAULTS = True', p.read_text(), re.M))
    self.assertEqual(marked, ['flower_test.py', 'resume_test.py',
                              'train_test.py'])
    # the older emitters (./test.sh's processes) are this process's alone:
    # the processes a test starts find XLA's defaults in $XLA_FLAGS
    self.assertNotIn('fusion_emitters', os.environ.get('XLA_FLAGS', ''))
    self.assertNotIn('LAQ_JAX_TEST_EMITTERS', os.environ)

  def test_the_parser_sees_marks(self):
    # an independent count: the files whose whole module is marked
    whole = sorted(p.name for p in TESTS.glob('*_test.py') if re.search(
        r'^pytestmark = pytest\.mark\.slow', p.read_text(), re.M))
    parsed = sorted(p.name for p, tests in self.files.items()
                    if tests and all(tests.values()) and re.search(
                        r'^pytestmark', p.read_text(), re.M))
    self.assertEqual(whole, parsed)
    self.assertIn('reproduce_test.py', whole)


if __name__ == '__main__':
  absltest.main()
