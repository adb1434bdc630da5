"""Finished runs side by side: the paper's figures overlaid, and its table.

    rows = compare(workdirs, out)   # table.md, comparison.json, figures

What `python -m experiments.compare` writes (see experiments/compare.py):
table.md and comparison.json (one row per run), the loss figures with every
run overlaid, and an upload raster per run.
"""

from __future__ import annotations

import pathlib
import re
from typing import Sequence

from absl import logging

from experiments.run import markdown
from experiments.run import outputs


def default_labels(runs) -> list[str]:
  algos = [r.summary['algo'] for r in runs]
  if len(set(algos)) == len(algos):
    return algos
  return [r.workdir.name for r in runs]


def rows(runs, labels) -> list[dict]:
  """One row per run: the figures of the table, as numbers."""
  out = []
  for run, label in zip(runs, labels):
    s = run.summary
    out.append({
        'label': label, 'algo': s['algo'], 'workdir': str(run.workdir),
        'iterations': s['iterations'], 'uploads': s['total_uploads'],
        'bits': s['total_bits'], 'test_accuracy': s['final_test_accuracy'],
        'final_loss': s['final_loss'], 'final_residual': s['final_residual'],
        'target_residual': s['target_residual'],
        'target_iteration': s['target_iteration'],
        'target_uploads': s['target_uploads'],
        'target_bits': s['target_bits'],
        'paper_target_iteration': s.get('paper_target_iteration'),
        'network': (s.get('network') or {}).get('profile'),
        'total_time_s': s.get('total_time_s'),
        'target_time_s': s.get('target_time_s'),
        'wall_time_s': s['wall_time_s']})
  return out


def markdown_table(table_rows: Sequence[dict]) -> str:
  """The paper-style Markdown table, with a note on what it counts."""
  targets = sorted({r['target_residual'] for r in table_rows})
  target = f'{targets[0]:g}' if len(targets) == 1 else 'target'
  has_residual = any(r['final_residual'] is not None for r in table_rows)
  final = 'final_residual' if has_residual else 'final_loss'
  columns = [('iterations', 'iterations', 'int'), ('uploads', 'uploads', 'int'),
             ('bits', 'bits', 'sci'), ('test accuracy', 'test_accuracy', 'pct'),
             ('final residual' if has_residual else 'final loss', final, 'sci'),
             (f'iterations to {target}', 'target_iteration', 'int'),
             (f'uploads to {target}', 'target_uploads', 'int'),
             (f'bits to {target}', 'target_bits', 'sci'),
             (f"iterations to {target} (paper's residual)",
              'paper_target_iteration', 'int')]
  if any(r.get('total_time_s') is not None for r in table_rows):
    columns += [('network', 'network', 's'),
                ('simulated time (s)', 'total_time_s', 'sci'),
                (f'simulated time to {target} (s)', 'target_time_s', 'sci')]
  columns += [('wall time (s)', 'wall_time_s', '.1f')]
  note = ('iterations / uploads / bits: the whole run (uploads summed over '
          'workers; bits exact). "… to target": spent before the first '
          'iterate whose residual f(theta^k) - f* is at or below the target '
          "(— where not reached or f* unknown); the paper's residual is the "
          'average worker loss minus the smallest the run reached. Test '
          'accuracy of the final iterate. Simulated time: each run\'s rounds '
          'on its own config.network (laq_jax.network; replay them on '
          'other networks with experiments.timeline).')
  return (markdown.columns_table(table_rows, columns, ('algorithm', 'label'))
          + '\n\n' + note + '\n')


def compare(workdirs: Sequence[str], out: str,
            labels: Sequence[str] | None = None) -> list[dict]:
  """Writes the comparison of `workdirs` into `out`; returns the table rows."""
  from laq_jax import plotting  # pylint: disable=g-import-not-at-top
  runs = [outputs.load_run(w) for w in workdirs]
  if labels is not None and len(labels) != len(runs):
    raise ValueError(f'--labels has {len(labels)} entries for {len(runs)} '
                     'workdirs; give one label per workdir')
  labels = list(labels) if labels else default_labels(runs)
  residual = all(r.summary.get('fstar') is not None for r in runs)
  curves = [outputs.run_curve(r, label, residual)
            for r, label in zip(runs, labels)]
  out = pathlib.Path(out)
  title = ', '.join(sorted({f'{r.summary["model"]} M={r.summary["num_workers"]}'
                            for r in runs}))
  axes = plotting.PAPER_AXES + (
      ('time',) if all(c.time_s is not None for c in curves) else ())
  for x, fig in plotting.loss_figures(curves, title=title,
                                      axes=axes).items():
    outputs.save_figure(fig, out / outputs.FIGURES[x])
  for run, label in zip(runs, labels):
    safe = re.sub(r'[^A-Za-z0-9_.-]+', '_', label)
    outputs.save_figure(plotting.upload_raster(run.sent_TxM, title=label),
                      out / f'upload_raster_{safe}.png')
  table_rows = rows(runs, labels)
  table = markdown_table(table_rows)
  outputs.atomic_write(out / 'table.md', table)
  outputs.write_json(out / 'comparison.json', table_rows)
  logging.info('comparison of %d runs in %s:\n%s', len(runs), out, table)
  return table_rows

