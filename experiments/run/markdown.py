"""Markdown tables: the one renderer of the reports, compare and notebooks.

    print(table(['algorithm', 'uploads'], [['laq', fmt(577)]]))
    print(columns_table(rows, [('uploads', 'total_uploads', 'int')],
                        label=('algorithm', 'algo')))
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

DASH = '—'  # unknown, not reached, or not a number


def fmt(value: Any, kind: str = 'int') -> str:
  """A cell: 'int' 1,234; 'sci' 1.234e-05; 'pct' 90.82%; 'full' 12
  significant digits; any other kind is a format spec ('.4f'). None, NaN and
  inf give a dash."""
  if value is None or (isinstance(value, (float, np.floating))
                       and not math.isfinite(value)):
    return DASH
  if kind == 'int':
    return f'{int(value):,}'
  if kind == 'sci':
    return f'{value:.3e}'
  if kind == 'pct':
    return f'{100 * value:.2f}%'
  if kind == 'full':
    return f'{value:.12g}'
  return format(value, kind)


def table(header: Sequence[str], rows: Sequence[Sequence[str]],
          align: str | None = None) -> str:
  """A Markdown table. `align` has one letter per column, 'l' or 'r'
  (default: the first column left, the others right, for numbers)."""
  align = align or 'l' + 'r' * (len(header) - 1)
  rule = {'l': '---', 'r': '---:'}
  lines = ['| ' + ' | '.join(header) + ' |',
           '|' + '|'.join(rule[a] for a in align) + '|']
  lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
  return '\n'.join(lines)


def columns_table(rows: Sequence[Mapping[str, Any]],
                  columns: Sequence[tuple[str, str, str]],
                  label: tuple[str, str]) -> str:
  """One line per row: its `label` = (header, key), then each column
  (header, key, kind) of `fmt`."""
  return table([label[0]] + [h for h, _, _ in columns],
               [[str(r[label[1]])] + [fmt(r[k], kind) for _, k, kind in columns]
                for r in rows])
