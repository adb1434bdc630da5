"""README.md and the user guide (docs/guide/*.md) against the repository:
the README stays short and starts with its two commands, its map names
every module of the library, the modules its commands run exist, and every
relative link of the README and the guide points at a file (and, into a
Markdown file, at one of its headings). Reads files only: no JAX program is
compiled."""

import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys

from absl.testing import absltest
import pytest

from tests import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / 'README.md'
GUIDE = ROOT / 'docs' / 'guide'
MAX_LINES = 200
MAP_HEADING = '## How it is built'

FENCE = re.compile(r'^```[^\n]*\n(.*?)^```', re.M | re.S)
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
# (lower case: `python -m experiments.NAME` is a placeholder)
MODULE_COMMAND = re.compile(
    r'python -m ((?:experiments|benchmarks)(?:\.[a-z_][a-z0-9_]*)+)\b')
# Repository paths named in the text (`configs/x.py`, `tests/y_test.py`).
PATH = re.compile(r'(?<![\w/.])((?:configs|tests|benchmarks|scripts|'
                  r'experiments|laq_jax|notebooks)/[\w/.-]*\.(?:py|sh|ipynb|md))')
# Placeholders the text names on purpose ("./test.sh tests/x_test.py").
PLACEHOLDERS = {'tests/x_test.py'}


def markdown_files() -> list[pathlib.Path]:
  return [README] + sorted(GUIDE.glob('*.md'))


def section(text: str, heading: str) -> str:
  """The text under the `## ` heading that starts with `heading`, up to the
  next `## ` heading."""
  start = text.index('\n' + heading)
  end = text.find('\n## ', start + 1)
  return text[start:end if end >= 0 else len(text)]


def slug(heading: str) -> str:
  """The anchor GitHub and MyST (myst_heading_anchors) give a heading."""
  text = heading.strip().lower().replace(' ', '-')
  return re.sub(r'[^\w\-]', '', text)


def anchors(path: pathlib.Path) -> set[str]:
  """The anchors of a Markdown file's headings (outside code fences)."""
  text = FENCE.sub('', path.read_text())
  return {slug(h) for h in re.findall(r'^#{1,6} +(.+?) *#*$', text, re.M)}


def relative_links(path: pathlib.Path) -> list[str]:
  text = FENCE.sub('', path.read_text())
  return [link for link in LINK.findall(text)
          if not re.match(r'[a-z][a-z0-9+.-]*:', link)]


def library_modules() -> list[str]:
  """The file names of the library's modules, in its subpackages too
  (data/'s are named by the data/ line)."""
  lib = ROOT / 'laq_jax'
  return sorted(p.name for p in lib.rglob('*.py')
                if p.name != '__init__.py' and 'data' not in
                p.relative_to(lib).parts[:-1])


def library_packages() -> list[str]:
  """The library's subpackages ('parts', 'round', ...)."""
  lib = ROOT / 'laq_jax'
  return sorted(p.parent.name for p in lib.glob('*/__init__.py'))


class ReadmeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.text = README.read_text()

  def test_short(self):
    lines = self.text.count('\n')
    self.assertLessEqual(lines, MAX_LINES,
                         f'README.md has {lines} lines; move detail to '
                         'docs/guide/')

  def test_first_code_block_runs_and_tests(self):
    first = FENCE.search(self.text)
    self.assertIsNotNone(first, 'README.md has no fenced code block')
    commands = [line.split('#')[0].strip()
                for line in first.group(1).splitlines()]
    self.assertIn('./run.sh', commands)
    self.assertIn('./test.sh', commands)

  def test_map_names_every_library_module(self):
    code_map = section(self.text, MAP_HEADING)
    modules = library_modules()
    self.assertNotEmpty(modules)
    missing = [m for m in modules if f'`{m}`' not in code_map]
    missing += [f'laq_jax/{p}/' for p in library_packages()
                if f'`laq_jax/{p}/`' not in code_map and f'`{p}/`' not in code_map]
    self.assertEqual(missing, [], f'laq_jax modules not in README.md\'s '
                     f'"{MAP_HEADING}"')
    for folder in ('laq_jax/', 'experiments/', 'configs/', 'notebooks/',
                   'benchmarks/', 'scripts/', 'tests/', 'docs/'):
      self.assertIn(f'`{folder}`', code_map)

  def test_architecture_guide_names_every_library_module(self):
    guide = (ROOT / 'docs' / 'guide' / 'architecture.md').read_text()
    modules = library_modules() + [f'{p}/' for p in library_packages()]
    missing = [m for m in modules
               if not re.search(rf'(^|[\s,]){re.escape(m)}([\s,]|$)', guide,
                                re.M)]
    self.assertEqual(missing, [], 'laq_jax modules not in '
                     'docs/guide/architecture.md\'s map')

  def test_named_modules_exist(self):
    for path in markdown_files():
      for name in MODULE_COMMAND.findall(path.read_text()):
        self.assertIsNotNone(importlib.util.find_spec(name),
                             f'{path.relative_to(ROOT)}: python -m {name}')

  def test_named_files_exist(self):
    for path in markdown_files():
      for name in set(PATH.findall(path.read_text())) - PLACEHOLDERS:
        self.assertTrue((ROOT / name).exists(),
                        f'{path.relative_to(ROOT)} names {name}')


class LinksTest(absltest.TestCase):

  def test_relative_links_point_at_files_and_headings(self):
    checked = 0
    for path in markdown_files():
      for link in relative_links(path):
        target, _, anchor = link.partition('#')
        where = (path.parent / target).resolve() if target else path
        name = f'{path.relative_to(ROOT)}: {link}'
        self.assertTrue(where.exists(), f'{name}: no such file')
        if anchor and where.suffix == '.md':
          self.assertIn(anchor, anchors(where), f'{name}: no such heading')
        checked += 1
    self.assertGreater(checked, 0)

  def test_every_guide_page_is_linked_from_the_readme(self):
    linked = {(README.parent / link.partition('#')[0]).resolve()
              for link in relative_links(README)}
    for page in GUIDE.glob('*.md'):
      self.assertIn(page.resolve(), linked,
                    f'README.md does not link docs/guide/{page.name}')

  def test_slug(self):
    self.assertEqual(slug('Hardware and wall time'), 'hardware-and-wall-time')
    self.assertEqual(
        slug("slaq as the authors' scripts run it (`authors_code`)"),
        'slaq-as-the-authors-scripts-run-it-authors_code')
    self.assertEqual(slug('Deployed on Flower: payloads, and seconds'),
                     'deployed-on-flower-payloads-and-seconds')


# The README's commands that take minutes, and the test that runs each at a
# tiny size (the file must name the command's launcher).
RUN_ELSEWHERE = {
    'experiments.reproduce': 'tests/reproduce_test.py',  # --tiny
    'experiments.federated': 'tests/federated_test.py',  # the tiny study
    'flower-superlink': 'tests/flower_test.py',  # a deployment, processes
    'flwr run': 'tests/flower_test.py',
}
# What makes the others tiny: every config takes these fields.
TINY = ['--config.num_iters=4', '--config.eval_every=2']


def readme_commands() -> list[str]:
  """Every command line of the README's code blocks that runs something
  (continuation lines joined; set-up lines such as `source` left out)."""
  out = []
  for block in FENCE.findall(README.read_text()):
    for line in block.replace('\\\n', ' ').splitlines():
      line = line.split('  #')[0].strip()
      if line.startswith(('python -m', 'flwr run', 'flower-', 'for i in')):
        out.append(line)
  return out


@pytest.mark.slow  # launchers in fresh processes, on MNIST
class CommandsTest(absltest.TestCase):
  """Each README command is run: here at 4 iterations, or by the test that
  RUN_ELSEWHERE names."""

  def test_every_command_runs(self):
    commands = readme_commands()
    self.assertNotEmpty(commands)
    env = common.IsolatedEnv('laq_readme_test_')
    env.enter()
    self.addCleanup(env.exit)
    ran = 0
    for line in commands:
      elsewhere = [k for k in RUN_ELSEWHERE if k in line]
      if elsewhere or line.startswith('for i in'):
        for key in elsewhere:
          test = (ROOT / RUN_ELSEWHERE[key]).read_text()
          launcher = key.split()[0].replace('experiments.', '')
          self.assertIn(launcher, test, f'{RUN_ELSEWHERE[key]} runs {line}')
        continue
      argv = shlex.split(line)
      workdir = [a for a in argv if a.startswith('--workdir')]
      self.assertLen(workdir, 1, line)
      argv[argv.index(workdir[0])] = f'--workdir={env.name}/run{ran}'
      with self.subTest(line):
        done = subprocess.run(
            [sys.executable] + argv[1:] + TINY, cwd=ROOT, text=True,
            capture_output=True, timeout=600, check=False,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        out = pathlib.Path(env.name, f'run{ran}')
        self.assertTrue((out / 'summary.json').exists()
                        or (out / 'results.csv').exists(), line)
      ran += 1
    self.assertGreaterEqual(ran, 3)

if __name__ == '__main__':
  absltest.main()
