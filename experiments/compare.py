r"""Overlays finished runs in the paper's figures and tabulates them.

    python -m experiments.compare --workdirs runs/quick/{gd,qgd,lag,laq} \
        --out runs/quick/compare

writes into --out: table.md (the paper's table: iterations, uploads, bits,
test accuracy, and the iterations / uploads / bits at which each run first
reached its target residual), comparison.json (the same rows),
loss_vs_iterations.png, loss_vs_uploads.png, loss_vs_bits.png (all runs
overlaid: residuals when every run has f*, else losses) and
upload_raster_LABEL.png per run.
"""

from __future__ import annotations

import pathlib
import re
from typing import Sequence

from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS
flags.DEFINE_list('workdirs', None, 'Finished run folders (space- or '
                  'comma-separated).')
flags.DEFINE_string('out', None, 'Folder for the table and figures.')
flags.DEFINE_list('labels', None, 'Legend labels, one per workdir (default: '
                  'the algorithm, or the folder name when algorithms repeat).')


def default_labels(runs) -> list[str]:
  algos = [r.summary['algo'] for r in runs]
  if len(set(algos)) == len(algos):
    return algos
  return [r.workdir.name for r in runs]


def _int(x) -> str:
  return '—' if x is None else f'{x:,}'


def _sci(x) -> str:
  return '—' if x is None else f'{x:.3e}'


def _percent(x) -> str:
  return '—' if x is None else f'{100 * x:.2f}%'


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
        'target_bits': s['target_bits'], 'wall_time_s': s['wall_time_s']})
  return out


def markdown_table(table_rows: Sequence[dict]) -> str:
  """The paper-style Markdown table."""
  targets = sorted({r['target_residual'] for r in table_rows})
  target = f'{targets[0]:g}' if len(targets) == 1 else 'target'
  has_residual = any(r['final_residual'] is not None for r in table_rows)
  header = ['algorithm', 'iterations', 'uploads', 'bits', 'test accuracy',
            'final residual' if has_residual else 'final loss',
            f'iterations to {target}', f'uploads to {target}',
            f'bits to {target}', 'wall time (s)']
  lines = ['| ' + ' | '.join(header) + ' |',
           '|' + '|'.join(['---'] + ['---:'] * (len(header) - 1)) + '|']
  for r in table_rows:
    final = r['final_residual'] if has_residual else r['final_loss']
    cells = [r['label'], _int(r['iterations']), _int(r['uploads']),
             _sci(r['bits']), _percent(r['test_accuracy']), _sci(final),
             _int(r['target_iteration']), _int(r['target_uploads']),
             _sci(r['target_bits']), f'{r["wall_time_s"]:.1f}']
    lines.append('| ' + ' | '.join(cells) + ' |')
  notes = [
      '',
      'iterations / uploads / bits: the whole run (uploads summed over '
      'workers; bits exact: b*p+32 per quantized upload, 32*p otherwise). '
      '"… to target": spent before the first iterate whose loss residual '
      'f(theta^k) - f* is at or below the target (— where not reached or f* '
      'unknown). Test accuracy of the final iterate.']
  return '\n'.join(lines + notes) + '\n'


def compare(workdirs: Sequence[str], out: str,
            labels: Sequence[str] | None = None) -> list[dict]:
  """Writes the comparison of `workdirs` into `out`; returns the table rows."""
  from experiments import train  # pylint: disable=g-import-not-at-top
  from laq_jax import plotting  # pylint: disable=g-import-not-at-top
  runs = [train.load_run(w) for w in workdirs]
  if labels is not None and len(labels) != len(runs):
    raise ValueError(f'--labels has {len(labels)} entries for {len(runs)} '
                     'workdirs; give one label per workdir')
  labels = list(labels) if labels else default_labels(runs)
  residual = all(r.summary.get('fstar') is not None for r in runs)
  curves = [train.run_curve(r, label, residual)
            for r, label in zip(runs, labels)]
  out = pathlib.Path(out)
  title = ', '.join(sorted({f'{r.summary["model"]} M={r.summary["num_workers"]}'
                            for r in runs}))
  for x, fig in plotting.loss_figures(curves, title=title).items():
    train.save_figure(fig, out / train.FIGURES[x])
  for run, label in zip(runs, labels):
    safe = re.sub(r'[^A-Za-z0-9_.-]+', '_', label)
    train.save_figure(plotting.upload_raster(run.sent_TxM, title=label),
                      out / f'upload_raster_{safe}.png')
  table_rows = rows(runs, labels)
  table = markdown_table(table_rows)
  train.atomic_write(out / 'table.md', table)
  train.write_json(out / 'comparison.json', table_rows)
  logging.info('comparison of %d runs in %s:\n%s', len(runs), out, table)
  return table_rows


def main(argv):
  # Space-separated workdirs arrive as extra arguments after the first.
  extra = [a for a in argv[1:] if not a.startswith('-')]
  workdirs = list(FLAGS.workdirs or []) + extra
  if not workdirs or not FLAGS.out:
    raise app.UsageError('give --workdirs DIR [DIR ...] and --out DIR')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  compare(workdirs, FLAGS.out, FLAGS.labels)
  print((pathlib.Path(FLAGS.out) / 'table.md').read_text())


if __name__ == '__main__':
  app.run(main)
