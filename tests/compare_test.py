"""Tests of experiments/run/comparison.py (and the experiments.compare
launcher) on run folders written here by hand.

Every number of the table comes from a summary.json written in this file,
so each cell is checked against a value typed here (formatted by hand). The
comparison of two real runs is in train_test.py (slow).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from laq_jax.record import Record


def rec(loss, grad, sent, bits, bits_down):
  return Record.from_arrays(loss=loss, grad_norm_sq=grad, sent_M=sent,
                            bits_M=bits, bits_down_M=bits_down)

from experiments.run import comparison
from experiments.run import outputs
from tests import common

DASH = '\u2014'
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'
P = 7850  # logistic regression on MNIST

_tmp = None


def setUpModule():
  global _tmp
  _tmp = tempfile.TemporaryDirectory(prefix='laq_compare_test_')


def tearDownModule():
  _tmp.cleanup()


def summary(algo, **fields):
  base = {
      'algo': algo, 'model': 'logreg', 'num_workers': 2, 'iterations': 3,
      'total_uploads': 6, 'total_bits': 6 * 32 * P,
      'final_test_accuracy': 0.8512, 'final_loss': 2.5,
      'final_residual': 0.012, 'fstar': 2.488, 'target_residual': 1e-6,
      'target_iteration': None, 'target_uploads': None, 'target_bits': None,
      'paper_target_iteration': None, 'wall_time_s': 1.234}
  base.update(fields)
  return base


def write_run(name, algo, sent, **fields):
  """A finished run's four files (the figures are not needed)."""
  where = pathlib.Path(_tmp.name, name)
  sent = np.asarray(sent, bool)
  loss = np.linspace(4.0, 3.0, len(sent))
  s = summary(algo, **fields)
  outputs.write_json(where / 'config.json', {'algo': algo})
  outputs.write_json(where / 'summary.json', s)
  outputs.atomic_write(where / 'metrics.csv', outputs.metrics_csv(
      rec(loss, np.ones(len(sent)), sent, sent * 32 * P,
          np.full(np.shape(sent), 32 * P)), s['fstar'], {0: 0.1}, 1.0))
  outputs.write_npy(where / 'uploads.npy', sent)
  return str(where)


def no_figures(test):
  """Skips drawing (slow): each figure file is written empty instead."""
  from laq_jax import plotting  # pylint: disable=g-import-not-at-top
  test.enter_context(mock.patch.object(
      plotting, 'loss_figures',
      return_value={x: None for x in ('iterations', 'uploads', 'bits')}))
  test.enter_context(mock.patch.object(plotting, 'upload_raster'))
  test.enter_context(mock.patch.object(
      outputs, 'save_figure',
      side_effect=lambda fig, path: outputs.atomic_write(path, b'')))


class CompareTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.gd = write_run('gd', 'gd', [[1, 1]] * 3)
    cls.laq = write_run(
        'laq', 'laq', [[1, 1], [0, 1], [0, 0]], total_uploads=3,
        total_bits=3 * (4 * P + 32), final_test_accuracy=0.85,
        final_residual=9.5e-7, target_iteration=2, target_uploads=3,
        target_bits=3 * (4 * P + 32), paper_target_iteration=1,
        wall_time_s=0.25)

  def test_table_and_files(self):
    out = pathlib.Path(_tmp.name, 'out')
    rows = comparison.compare([self.gd, self.laq], str(out))
    self.assertEqual([r['label'] for r in rows], ['gd', 'laq'])
    self.assertEqual([r['uploads'] for r in rows], [6, 3])
    self.assertEqual(rows[1]['bits'], 3 * (4 * P + 32))
    self.assertEqual(rows[1]['workdir'], self.laq)
    self.assertEqual(json.loads((out / 'comparison.json').read_text()), rows)
    lines = (out / 'table.md').read_text().splitlines()
    self.assertEqual(lines[0], (
        '| algorithm | iterations | uploads | bits | test accuracy | '
        'final residual | iterations to 1e-06 | uploads to 1e-06 | '
        "bits to 1e-06 | iterations to 1e-06 (paper's residual) | "
        'wall time (s) |'))
    self.assertEqual(lines[1], '|---' + '|---:' * 10 + '|')
    self.assertEqual(lines[2], f'| gd | 3 | 6 | 1.507e+06 | 85.12% | '
                     f'1.200e-02 | {DASH} | {DASH} | {DASH} | {DASH} | 1.2 |')
    self.assertEqual(lines[3], '| laq | 3 | 3 | 9.430e+04 | 85.00% | '
                     '9.500e-07 | 2 | 3 | 9.430e+04 | 1 | 0.2 |')
    self.assertEqual(lines[4], '')
    self.assertIn('the paper\'s residual is the average worker loss',
                  lines[5])
    for name in ('loss_vs_iterations.png', 'loss_vs_uploads.png',
                 'loss_vs_bits.png', 'upload_raster_gd.png',
                 'upload_raster_laq.png'):
      self.assertEqual((out / name).read_bytes()[:8], PNG_MAGIC, name)

  def test_labels(self):
    no_figures(self)
    out = pathlib.Path(_tmp.name, 'labelled')
    rows = comparison.compare([self.gd, self.laq], str(out),
                           labels=['GD b=32', 'laq/4'])
    self.assertEqual([r['label'] for r in rows], ['GD b=32', 'laq/4'])
    self.assertTrue((out / 'upload_raster_GD_b_32.png').is_file())
    self.assertTrue((out / 'upload_raster_laq_4.png').is_file())
    with self.assertRaisesRegex(ValueError, '--labels has 1 entries for 2 '
                                'workdirs'):
      comparison.compare([self.gd, self.laq], str(out), labels=['x'])

  def test_repeated_algorithms_are_labelled_by_folder(self):
    no_figures(self)
    other = write_run('gd_again', 'gd', [[1, 1]] * 3)
    rows = comparison.compare([self.gd, other],
                           str(pathlib.Path(_tmp.name, 'repeated')))
    self.assertEqual([r['label'] for r in rows], ['gd', 'gd_again'])

  def test_without_fstar_the_final_loss(self):
    no_figures(self)
    no_fstar = write_run('mlp', 'laq', [[1, 0]] * 3, fstar=None,
                         final_residual=None, model='mlp')
    out = pathlib.Path(_tmp.name, 'no_fstar')
    comparison.compare([no_fstar], str(out))
    lines = (out / 'table.md').read_text().splitlines()
    self.assertIn('| final loss |', lines[0])
    self.assertIn('| 2.500e+00 |', lines[2])

  def test_unfinished_run_is_named(self):
    with self.assertRaisesRegex(FileNotFoundError, 'not a finished run'):
      comparison.compare([str(pathlib.Path(_tmp.name, 'nothing'))],
                      str(pathlib.Path(_tmp.name, 'never')))

  @pytest.mark.slow  # the launcher in its own process, end to end
  def test_command_line(self):
    out = pathlib.Path(_tmp.name, 'cli')
    env = dict(os.environ, PYTHONPATH=common.ROOT, JAX_PLATFORMS='cpu')
    result = subprocess.run(
        [sys.executable, '-m', 'experiments.compare', '--workdirs', self.gd,
         self.laq, f'--out={out}'], cwd=common.ROOT, env=env,
        capture_output=True, text=True, timeout=300, check=False)
    self.assertEqual(result.returncode, 0, result.stderr[-3000:])
    table = (out / 'table.md').read_text()
    self.assertEqual(result.stdout.strip(), table.strip())
    self.assertEqual([r['label'] for r in json.loads(
        (out / 'comparison.json').read_text())], ['gd', 'laq'])


if __name__ == '__main__':
  absltest.main()
