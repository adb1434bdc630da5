"""The import graph: layers only import downward, and no new import circle.

Every `import` of the repository's own modules, at module level or inside a
function (a function-level import is an arrow all the same: it hides a
circle from Python, not from the design), read from the source with `ast`.

The layers, lowest first: the library (`laq_jax`), the configs (`configs`),
the launchers' machinery (`experiments.run`), the studies
(`experiments.studies`), the launchers (`experiments.*`), the benchmarks
(`benchmarks`). A module may import its own layer or a lower one.

Circles: none (the five of issue 51 were removed); KNOWN would list one
kept on purpose, and the test fails on any other, and on a KNOWN one that is
gone.
"""

import ast
import collections
import pathlib

from absl.testing import absltest

import laq_jax

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ('laq_jax', 'configs', 'experiments', 'benchmarks')

LAYERS = (('laq_jax', 0), ('configs', 1), ('experiments.run', 2),
          ('experiments.studies', 3), ('experiments', 4), ('benchmarks', 5))

KNOWN: set[frozenset[str]] = set()  # (none left)


def modules() -> dict[str, pathlib.Path]:
  out = {}
  for package in PACKAGES:
    for path in (ROOT / package).rglob('*.py'):
      name = '.'.join(path.relative_to(ROOT).with_suffix('').parts)
      out[name.removesuffix('.__init__')] = path
  return out


def edges(mods: dict[str, pathlib.Path]) -> dict[str, set[str]]:
  """{module: the repository modules it imports}."""
  out = collections.defaultdict(set)

  def known(name):
    # a module's flat name is its layer's module (laq_jax.MOVED)
    head, _, rest = name.partition('.')
    first, _, tail = rest.partition('.')
    if head == 'laq_jax' and first in laq_jax.MOVED:
      name = '.'.join(filter(None, ('laq_jax', laq_jax.MOVED[first], tail)))
    while name and name not in mods:
      name = name.rpartition('.')[0]
    return name

  for name, path in mods.items():
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        targets = [known(a.name) for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ''
        if node.level:
          parts = package.split('.')[:len(package.split('.')) - node.level
                                      + 1]
          base = '.'.join(parts + ([base] if base else []))
        targets = [known(f'{base}.{a.name}') for a in node.names]
      else:
        continue
      out[name].update(t for t in targets if t and t != name)
  return out


def layer(name: str) -> int:
  return next(rank for prefix, rank in LAYERS
              if name == prefix or name.startswith(prefix + '.'))


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on, found = {}, {}, [], set(), set()

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in graph.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = set()
      while True:
        w = stack.pop()
        on.discard(w)
        component.add(w)
        if w == v:
          break
      if len(component) > 1:
        found.add(frozenset(component))

  for v in list(graph):
    if v not in index:
      visit(v)
  return found


class ImportGraphTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.mods = modules()
    cls.graph = edges(cls.mods)

  def test_the_graph_is_read(self):
    # (an empty graph would pass everything below)
    self.assertIn('laq_jax.round.rules', self.graph['laq_jax.round.loop'])
    # (a flat name is its layer's module)
    self.assertIn('laq_jax.problems.layouts',
                  self.graph['experiments.run.build'])
    self.assertIn('experiments.run.errors',
                  self.graph['experiments.run.events'])
    self.assertGreater(len(self.mods), 100)

  def test_layers_import_downward(self):
    upward = sorted(f'{a} -> {b}' for a, targets in self.graph.items()
                    for b in targets if layer(b) > layer(a))
    self.assertEqual(upward, [], 'a module imports a higher layer '
                     f'({", ".join(p for p, _ in LAYERS)}, lowest first)')

  def test_no_new_import_circle(self):
    found = circles(self.graph)
    self.assertEqual(sorted(map(sorted, found - KNOWN)), [],
                     'a new import circle')
    self.assertEqual(sorted(map(sorted, KNOWN - found)), [],
                     'a known circle is gone: remove it from KNOWN')

  def test_a_circle_is_found(self):
    self.assertEqual(circles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}),
                     {frozenset('abc')})


if __name__ == '__main__':
  absltest.main()
