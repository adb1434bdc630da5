"""Tests of experiments/run/markdown.py: cells, tables and column tables by
hand."""

import math

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from experiments.run import markdown

DASH = '\u2014'


class FmtTest(parameterized.TestCase):

  @parameterized.parameters(
      (1234, 'int', '1,234'),
      (1234.0, 'int', '1,234'),
      (np.int64(2**40), 'int', '1,099,511,627,776'),
      (0, 'int', '0'),
      (1.23456e-5, 'sci', '1.235e-05'),
      (np.int64(123456789), 'sci', '1.235e+08'),
      (0.90816, 'pct', '90.82%'),
      (1.0, 'pct', '100.00%'),
      (2.302585092994046, 'full', '2.30258509299'),
      (1 / 3, '.4f', '0.3333'),
      (12.345, '.1f', '12.3'),
  )
  def test_kinds(self, value, kind, expected):
    self.assertEqual(markdown.fmt(value, kind), expected)

  def test_default_kind_is_int(self):
    self.assertEqual(markdown.fmt(5000), '5,000')

  @parameterized.parameters('int', 'sci', 'pct', 'full', '.4f')
  def test_missing_values_are_a_dash(self, kind):
    for value in (None, float('nan'), math.inf, -math.inf, np.float64('nan')):
      self.assertEqual(markdown.fmt(value, kind), DASH, (value, kind))
    self.assertEqual(markdown.DASH, DASH)


class TableTest(absltest.TestCase):

  def test_default_alignment(self):
    self.assertEqual(
        markdown.table(['algorithm', 'uploads', 'bits'],
                       [['laq', '577', '1.2e+06'], ['gd', 4000, None]]),
        '| algorithm | uploads | bits |\n'
        '|---|---:|---:|\n'
        '| laq | 577 | 1.2e+06 |\n'
        '| gd | 4000 | None |')

  def test_explicit_alignment(self):
    self.assertEqual(markdown.table(['a', 'b', 'c'], [], align='rlr'),
                     '| a | b | c |\n|---:|---|---:|')

  def test_columns_table(self):
    rows = [{'algo': 'laq', 'total_uploads': 577, 'acc': 0.9082,
             'target_iteration': None},
            {'algo': 'gd', 'total_uploads': 40000, 'acc': 0.9,
             'target_iteration': 3116}]
    text = markdown.columns_table(
        rows, [('uploads', 'total_uploads', 'int'), ('accuracy', 'acc', 'pct'),
               ('iterations to 1e-6', 'target_iteration', 'int')],
        label=('algorithm', 'algo'))
    self.assertEqual(text.splitlines(), [
        '| algorithm | uploads | accuracy | iterations to 1e-6 |',
        '|---|---:|---:|---:|',
        f'| laq | 577 | 90.82% | {DASH} |',
        '| gd | 40,000 | 90.00% | 3,116 |'])


if __name__ == '__main__':
  absltest.main()
