"""Executes the notebooks top to bottom, headlessly, as a user would.

Each notebook runs in a fresh IPython kernel (nbclient) started with this
test's own interpreter, in `notebooks/` as the working directory, with
LAQ_JAX_QUICK=1 (the notebooks shrink themselves: a data subset, few
iterations) and LAQ_JAX_DATA pointing at MNIST. Any cell that raises fails
the test. The outputs stay in memory: the committed notebooks are never
written. A second test checks the committed files themselves: valid, outputs
cleared, no absolute paths, the install cell and quick switch present, float64
turned on where a float64 config runs, and no name of the old API left.
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
import pytest

from tests import common

pytestmark = pytest.mark.slow  # an integration test (see conftest.py)

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / 'notebooks'
NOTEBOOKS = ('quickstart', 'sweep', 'custom_problem', 'extend')
ALGORITHMS = ('gd', 'qgd', 'lag', 'laq')
WORKERS, PARAMS = 10, 784 * 10 + 10  # the quickstart: MNIST logreg, M = 10
CELL_TIMEOUT_S = 600
KERNEL_NAME = 'laq-jax-notebook-test'
# Notebooks that build float64 configs: they turn float64 on themselves.
FLOAT64_NOTEBOOKS = ('quickstart', 'sweep')
# Names the API no longer has (moved to experiments.*, laq_jax.metrics and
# laq_jax.plotting, or gone); not even the prose may use them.
OLD_API = (
    'from laq_jax import build', 'laq_jax.build', 'set_precision',
    'sweep.summarize', 'sweep.columns', 'sweep.curve_arrays',
    'sweep.pareto_front', 'sweep.paper_references', 'sweep.heatmap_figure',
    'sweep.pareto_figure', 'sweep.heatmap_quantity',
    'sweep.points_from_config', 'sweep.point_config', 'def cell(')


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


def split_row(line: str) -> list[str]:
  return [c.strip() for c in line.strip().strip('|').split('|')]


def table_header(markdown: str) -> list[str]:
  """The header cells of a Markdown table (its first line starting with |)."""
  return split_row(next(line for line in markdown.splitlines()
                        if line.startswith('|')))


def number(text: str) -> float | None:
  """A table cell as a number ('1,234', '1.2e+07', '90.5%'); None for a dash
  (not reached)."""
  if text == '—':
    return None
  return float(text.replace(',', '').rstrip('%'))


def table_rows(markdown: str, first_column: str) -> dict[str, list[str]]:
  """{first cell: cells} of a Markdown table's body rows."""
  rows = {}
  for line in markdown.splitlines():
    cells = split_row(line)
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
    # Two tables: the totals, then what each run spent to reach the target.
    tables = [o['data']['text/markdown'] for o in cell_outputs(nb, 'table')
              if 'text/markdown' in o.get('data', {})]
    self.assertLen(tables, 2)
    totals, to_target = tables
    rows = table_rows(totals, 'algorithm')
    self.assertEqual(sorted(rows), sorted(ALGORITHMS))
    header = table_header(totals)
    column = {name: header.index(name) for name in (
        'iterations', 'uploads', 'bits', 'test accuracy')}
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
    # To the target, under the exact and the paper's residual: iterations,
    # uploads and bits spent before the first iterate at or below it.
    target_rows = table_rows(to_target, 'algorithm')
    self.assertEqual(sorted(target_rows), sorted(ALGORITHMS))
    header = table_header(to_target)
    reached = {}
    for name in ('exact', "paper's"):
      at = {what: header.index(f'{what} ({name})')
            for what in ('iterations', 'uploads', 'bits')}
      reached[name] = []
      for a in ALGORITHMS:
        k, spent, spent_bits = (number(target_rows[a][at[w]])
                                for w in ('iterations', 'uploads', 'bits'))
        if k is None:
          self.assertIsNone(spent, (name, a))
          self.assertIsNone(spent_bits, (name, a))
          continue
        reached[name].append(a)
        self.assertBetween(k, 0, steps)  # theta^0 .. theta^T
        self.assertLessEqual(spent, uploads[a])
        self.assertLessEqual(spent_bits, bits[a] * (1 + 1e-3))
        if a in ('gd', 'qgd'):  # steps 0..k-1, every worker
          self.assertEqual(spent, WORKERS * k, (name, a))
        if a == 'gd':
          self.assertAlmostEqual(spent_bits / max(32 * PARAMS * spent, 1),
                                 1 if k else 0, delta=1e-3)
    # The paper's residual is measured from the smallest average loss any
    # of the four reached, so the run that reached it gets there.
    self.assertNotEmpty(reached["paper's"],
                        "no run reached the target under the paper's residual")

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

  def test_extend(self):
    # Parts with their own parameters and state (rand-k's k, PowerSGD's Q,
    # an ema trigger, optax servers) from user code run beside LAQ in one
    # compiled program, and through the launcher by a config naming the
    # user's module.
    nb = execute('extend')
    text = ''.join(outputs(nb, 'text/plain'))
    self.assertRegex(text, r'programs compiled by the sweep: 1\b')
    self.assertIn('9 points', text)  # rand_k.k varies rand-k's point only
    self.assertIn("'powersgd_r2'", text)
    self.assertIn("'ema'", text)
    self.assertIn("'radam'", text)
    self.assertIn("'last_gradient'", text)  # a user's estimator
    self.assertIn('refused: rand_k.k=0 is not allowed', text)
    tables = [t for t in outputs(nb, 'text/markdown') if '| algorithm |' in t]
    self.assertLen(tables, 1)
    rows = table_rows(tables[0], 'algorithm')
    self.assertEqual(sorted(rows), sorted(
        ['laq', 'rand_k_gd k=20', 'rand_k_gd k=100', 'natural_gd',
         'powersgd_ef', 'laq_ema', 'gd_momentum', 'gd_radam',
         'tpc_v1_topk']))
    uploads = {name: number(cells[1]) for name, cells in rows.items()}
    bits = {name: number(cells[2]) for name, cells in rows.items()}
    # Eager presets upload every step; natural compression costs 9 bits a
    # coordinate where full precision pays 32.
    self.assertEqual(uploads['gd_momentum'], max(uploads.values()))
    self.assertAlmostEqual(
        bits['natural_gd'] / uploads['natural_gd'],
        bits['gd_momentum'] / uploads['gd_momentum'] * 9 / 32,
        delta=bits['gd_momentum'] / uploads['gd_momentum'] * 1e-3)
    self.assertLess(uploads['laq_ema'], uploads['gd_momentum'])  # it skips
    # The user's estimator sends top-k (1% of p) every step.
    self.assertEqual(uploads['tpc_v1_topk'], uploads['gd_momentum'])
    self.assertLess(bits['tpc_v1_topk'], bits['gd_momentum'] / 10)
    self.assertRegex(text, r'powersgd_ef via the launcher: \d+ uploads')
    self.assertIn("'metrics.csv'", text)

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
    # float64 configs need float64 on, turned on once in the code (nothing
    # in the library does it); the prose and code name no removed API.
    if name in FLOAT64_NOTEBOOKS:
      self.assertTrue("jax.config.update('jax_enable_x64', True)" in code,
                      f'{name} runs float64 configs but never turns x64 on')
    source = '\n'.join(c.source for c in nb.cells)
    for old in OLD_API:
      self.assertFalse(old in source, f'{name} uses the old API: {old!r}')


if __name__ == '__main__':
  absltest.main()
