"""Executes the notebooks top to bottom, headlessly, as a user would.

Each notebook runs in a fresh IPython kernel (nbclient) started with this
test's own interpreter, in `notebooks/` as the working directory, with
LAQ_JAX_QUICK=1 (the notebooks shrink themselves: a data subset, few
iterations) and LAQ_JAX_DATA pointing at MNIST. Any cell that raises fails
the test. The outputs stay in memory: the committed notebooks are never
written. A second test checks the committed files themselves: valid, outputs
cleared, no absolute paths, and the install cell and quick switch present.
"""

import json
import os
import pathlib
import re
import sys
import tempfile
import time

from absl.testing import absltest
from absl.testing import parameterized
import nbformat

from tests import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / 'notebooks'
NOTEBOOKS = ('quickstart', 'sweep', 'custom_problem')
ALGORITHMS = ('gd', 'qgd', 'lag', 'laq')
WORKERS, PARAMS = 10, 784 * 10 + 10  # the quickstart: MNIST logreg, M = 10
CELL_TIMEOUT_S = 600
KERNEL_NAME = 'laq-jax-notebook-test'


def _kernel_manager(workdir: pathlib.Path):
  """A kernel manager whose kernel is this interpreter, whatever is installed.

  The kernelspec lives in a temporary folder, so no `python3` kernelspec found
  elsewhere (another venv, the system) can pick a different Python.
  """
  from jupyter_client.kernelspec import KernelSpecManager  # pylint: disable=g-import-not-at-top
  from jupyter_client.manager import KernelManager  # pylint: disable=g-import-not-at-top
  spec_dir = workdir / 'kernels' / KERNEL_NAME
  spec_dir.mkdir(parents=True)
  (spec_dir / 'kernel.json').write_text(json.dumps({
      'argv': [sys.executable, '-m', 'ipykernel_launcher', '-f',
               '{connection_file}'],
      'display_name': 'laq-jax test kernel',
      'language': 'python',
  }))
  specs = KernelSpecManager(kernel_dirs=[str(workdir / 'kernels')],
                            ensure_native_kernel=False)
  kwargs = {}
  if os.name == 'posix':
    # IPC sockets in the temporary folder: no TCP ports to race for when
    # several kernels start at once.
    kwargs = {'transport': 'ipc', 'ip': str(workdir / 'kernel')}
  return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs,
                       connection_file=str(workdir / 'connection.json'),
                       **kwargs)


def _kernel_env(workdir: pathlib.Path) -> dict[str, str]:
  env = dict(os.environ)
  env['LAQ_JAX_QUICK'] = '1'
  data_dir = common.mnist_dir()
  if data_dir:
    env['LAQ_JAX_DATA'] = data_dir
  # The checkout is importable whether or not it is installed.
  env['PYTHONPATH'] = os.pathsep.join(
      [str(ROOT)] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep)
                     if p])
  env['IPYTHONDIR'] = str(workdir / 'ipython')  # not the user's profile
  env.pop('MPLBACKEND', None)  # the kernel's inline backend draws figures
  env.pop('XLA_FLAGS', None)
  return env


def execute(name: str) -> nbformat.NotebookNode:
  """Runs notebooks/NAME.ipynb in quick mode; returns it with its outputs."""
  from nbclient import NotebookClient  # pylint: disable=g-import-not-at-top
  nb = nbformat.read(NOTEBOOK_DIR / f'{name}.ipynb', as_version=4)
  with tempfile.TemporaryDirectory(prefix='laq_notebook_test_') as tmp:
    workdir = pathlib.Path(tmp)
    km = _kernel_manager(workdir)
    client = NotebookClient(
        nb, km=km, timeout=CELL_TIMEOUT_S, startup_timeout=120,
        resources={'metadata': {'path': str(NOTEBOOK_DIR)}})
    try:
      client.execute(env=_kernel_env(workdir))
    finally:
      # nbclient leaves a kernel it was handed running.
      if km.has_kernel:
        km.shutdown_kernel(now=True)
  return nb


def outputs(nb, mime: str) -> list[str]:
  """Every output's `mime` representation, in cell order."""
  found = []
  for cell in nb.cells:
    for out in cell.get('outputs', []):
      if mime in out.get('data', {}):
        found.append(out['data'][mime])
      elif mime == 'text/plain' and out.get('output_type') == 'stream':
        found.append(out['text'])
  return found


def cell_outputs(nb, cell_id: str) -> list:
  cells = [c for c in nb.cells if c.get('id') == cell_id]
  assert len(cells) == 1, f'no single cell with id {cell_id!r}'
  return cells[0].get('outputs', [])


def table_rows(markdown: str, first_column: str) -> dict[str, list[str]]:
  """{first cell: cells} of a Markdown table's body rows."""
  rows = {}
  for line in markdown.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    if line.startswith('|') and cells[0] not in (first_column,) and not set(
        cells[0]) <= set('-: '):
      rows[cells[0]] = cells
  return rows


class NotebooksTest(parameterized.TestCase):

  def test_quickstart(self):
    start = time.perf_counter()
    nb = execute('quickstart')
    print(f'quickstart executed in {time.perf_counter() - start:.1f} s',
          file=sys.stderr)
    # The three loss figures and one upload raster per algorithm rendered.
    figures = [o for o in cell_outputs(nb, 'figures')
               if 'image/png' in o.get('data', {})]
    rasters = [o for o in cell_outputs(nb, 'raster')
               if 'image/png' in o.get('data', {})]
    self.assertLen(figures, 3)
    self.assertLen(rasters, len(ALGORITHMS))
    for out in figures + rasters:
      self.assertGreater(len(out['data']['image/png']), 1000)
    # The table: one row per algorithm with iterations, uploads and bits.
    tables = [t for t in outputs(nb, 'text/markdown') if '| algorithm |' in t]
    self.assertLen(tables, 1)
    rows = table_rows(tables[0], 'algorithm')
    self.assertEqual(sorted(rows), sorted(ALGORITHMS))
    header = [c.strip() for c in tables[0].splitlines()[0].strip('|')
              .split('|')]
    column = {name: header.index(name) for name in (
        'iterations', 'uploads', 'bits', 'test accuracy')}
    number = lambda text: float(text.replace(',', '').rstrip('%'))
    iterations = {number(r[column['iterations']]) for r in rows.values()}
    self.assertLen(iterations, 1)  # every algorithm ran the same budget
    (steps,) = iterations
    uploads = {a: number(rows[a][column['uploads']]) for a in ALGORITHMS}
    bits = {a: number(rows[a][column['bits']]) for a in ALGORITHMS}
    # GD and QGD: every worker uploads at every step; p = 784 * 10 + 10
    # logistic-regression parameters at 32 bits each, or b = 4 bits each
    # plus a 32-bit radius (the table shows 4 significant digits).
    self.assertEqual(uploads['gd'], WORKERS * steps)
    self.assertEqual(uploads['qgd'], WORKERS * steps)
    self.assertAlmostEqual(bits['gd'] / (WORKERS * steps * 32 * PARAMS), 1,
                           delta=1e-3)
    self.assertAlmostEqual(
        bits['qgd'] / (WORKERS * steps * (4 * PARAMS + 32)), 1, delta=1e-3)
    # The lazy ones skip uploads.
    self.assertLess(uploads['lag'], uploads['gd'])
    self.assertLess(uploads['laq'], uploads['gd'])
    self.assertLess(bits['qgd'], bits['gd'])
    self.assertLess(bits['laq'], bits['lag'])
    for a in ALGORITHMS:
      self.assertBetween(number(rows[a][column['test accuracy']]), 10, 100)

  def test_sweep(self):
    start = time.perf_counter()
    nb = execute('sweep')
    print(f'sweep executed in {time.perf_counter() - start:.1f} s',
          file=sys.stderr)
    for cell_id in ('heatmap', 'pareto'):
      images = [o for o in cell_outputs(nb, cell_id)
                if 'image/png' in o.get('data', {})]
      self.assertLen(images, 1, cell_id)
    text = ''.join(outputs(nb, 'text/plain'))
    self.assertIn('16 points', text)
    # One compiled program ran the whole grid.
    self.assertRegex(text, r'programs compiled by the sweep: 1\b')
    self.assertTrue(any('| bits b |' in t
                        for t in outputs(nb, 'text/markdown')))

  def test_custom_problem(self):
    start = time.perf_counter()
    nb = execute('custom_problem')
    print(f'custom_problem executed in {time.perf_counter() - start:.1f} s',
          file=sys.stderr)
    tables = [t for t in outputs(nb, 'text/markdown') if '| algorithm |' in t]
    self.assertLen(tables, 2)  # heart_scale and the LIBSVM file
    for table in tables:
      self.assertEqual(sorted(table_rows(table, 'algorithm')),
                       sorted(ALGORITHMS))
    self.assertLen(outputs(nb, 'image/png'), 4)
    self.assertIn('270 samples x 13 features', ''.join(
        outputs(nb, 'text/plain')))

  @parameterized.parameters(*NOTEBOOKS)
  def test_committed_notebook_is_clean(self, name):
    path = NOTEBOOK_DIR / f'{name}.ipynb'
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
      if cell.cell_type == 'code':
        self.assertEqual(cell.outputs, [], f'{name}: outputs not cleared')
        self.assertIsNone(cell.execution_count, name)
    text = path.read_text()
    home = os.path.expanduser('~')
    for absolute in (str(ROOT), home if len(home) > 1 else None, '/home/',
                     '/Users/', '/content/', '/tmp/', 'C:\\\\'):
      if absolute:
        self.assertNotIn(absolute, text, f'{name} holds an absolute path')
    code = '\n'.join(c.source for c in nb.cells if c.cell_type == 'code')
    self.assertIn('LAQ_JAX_REPO', code)
    self.assertIn("find_spec('laq_jax')", code)
    self.assertIn('LAQ_JAX_QUICK', code)
    # The notebooks call the library, not the launcher through a shell.
    self.assertIsNone(re.search(r'^\s*[!%](?!matplotlib inline)', code,
                                re.M), f'{name}: a shell or magic line')


if __name__ == '__main__':
  absltest.main()
