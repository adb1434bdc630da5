"""Checks that results are the same numbers: two folders, or one run and
its committed summary.

    python scripts/same_results.py runs/before runs/after
    python scripts/same_results.py W            # W: a --tiny reproduction
    python scripts/same_results.py W --write    # the change is meant

Two folders (a refactor moved nothing): every curves.npz array, every
metrics.csv and results.csv column, compared exactly (NaN equal to NaN);
wall-clock fields are skipped.

One folder: the run CI makes (`python -m experiments.reproduce --tiny`,
tests/reproduce_test.py) against the summary of the same run committed in
tests/same_results/paper_tiny.json, point by point and column by column
(`experiments.run.results_data.sweep_values`: uploads, bits, iterations to
target, accuracy, loss, divergence). A change that moves a result fails
here until that file is regenerated with --write in the same change (and
the full reports say they are stale, or are regenerated:
scripts/check_docs.py). Exact on the CPU and JAX the summary was written
with (both recorded: the CPU's model and vector instruction sets, JAX's
version): another instruction set may round differently, so elsewhere
floats agree to a relative 1e-3 (RTOL_OTHER_CPU), counts (uploads, bits,
iterations) to 2% (RTOL_COUNTS_OTHER_CPU: a trigger decision that flips on
a last-bit difference moves them), divergence exactly.

Prints one line per file and exits 1 on any difference (or a file that is
in one folder only). Columns and arrays renamed since the folder `before`
was written (RENAMED: the network's nested config group, the built-in
parts' parameters; such a column is absent after where no point used the
part: DROPPABLE) are matched by
their new names.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SUMMARY = ROOT / 'tests' / 'same_results' / 'paper_tiny.json'
COMMAND = 'python -m experiments.reproduce --tiny --workdir W'
# Floats on another instruction set: measured, the summary written with
# AVX-512 read on an AVX2-only EPYC (2026-12-06), SLAQ's final loss 1.0e-4
# and its test accuracy 1.3e-4 apart (its skips compound last-bit
# differences); 1e-3 leaves room, and a real change moves more.
RTOL_OTHER_CPU = 1e-3
# Counts (uploads, bits, iterations) on another instruction set: a trigger
# decision that flips on a last-bit difference moves them a little.
RTOL_COUNTS_OTHER_CPU = 0.02

# Measured on the machine, not computed by the run.
WALL = ('wall', 'seconds', 'elapsed', 'it_per_s', 'duration', 'compile')


# Old name -> new name, where a column or array was renamed.
RENAMED = {'network': 'network.profile',
           **{f'network_{f}': f'network.{f}' for f in (
               'up_bps', 'down_bps', 'up_latency_s', 'down_latency_s',
               'flops_per_s', 'straggler', 'straggler_scale', 'server_in_bps',
               'server_out_bps', 'topology')},
           # the built-in parts' own parameters, grouped by part
           'levels': 'qsgd.levels', 'keep_prob': 'rand_p.keep_prob',
           'top_k': 'top_k.k', 'zeta': 'clag.zeta'}


# Columns a grid holds now only where a point uses the part (the built-in
# parts' parameters): absent after where no point of the file used it.
DROPPABLE = ('qsgd.levels', 'rand_p.keep_prob', 'top_k.k', 'clag.zeta')


def _new_name(name: str) -> str:
  prefix = 'grid_' if name.startswith('grid_') else ''
  return prefix + RENAMED.get(name.removeprefix(prefix), name.removeprefix(
      prefix))


def _is_wall(name: str) -> bool:
  return any(w in name.lower() for w in WALL)


def _npz(a: pathlib.Path, b: pathlib.Path) -> list[str]:
  x, y = np.load(a, allow_pickle=False), np.load(b, allow_pickle=False)
  old = {_new_name(n): n for n in x.files}
  bad = sorted((set(old) ^ set(y.files)) - (set(DROPPABLE) - set(y.files)))
  for name in sorted(set(old) & set(y.files)):
    if _is_wall(name):
      continue
    u, v = x[old[name]], y[name]
    same = u.shape == v.shape and (
        np.array_equal(u, v, equal_nan=u.dtype.kind in 'fc')
        if u.dtype.kind in 'fcb iu' else np.array_equal(u, v))
    if not same:
      bad.append(name)
  return bad


def _csv(a: pathlib.Path, b: pathlib.Path) -> list[str]:
  rows = [list(csv.DictReader(open(p, newline=''))) for p in (a, b)]
  rows[0] = [{_new_name(k): v for k, v in r.items()} for r in rows[0]]
  if len(rows[0]) != len(rows[1]):
    return [f'{len(rows[0])} rows vs {len(rows[1])}']
  bad = set()
  for r, s in zip(*rows):
    for key in set(r) | set(s):
      if key in DROPPABLE and key not in s:
        continue
      if not _is_wall(key) and r.get(key) != s.get(key):
        bad.add(key)
  return sorted(bad)


def _results_data():
  sys.path.insert(0, str(ROOT))
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  return results_data


def cpu() -> str:
  """This machine's CPU model and vector instruction sets (/proc/cpuinfo:
  XLA compiles for the host's, and they decide the rounding), else the
  platform's word."""
  model = _results_data().machine().split(',')[0]
  try:
    with open('/proc/cpuinfo') as f:
      flags = next((l.split(':', 1)[1].split() for l in f
                    if l.startswith('flags')), [])
  except OSError:
    flags = []
  vector = [x for x in flags if x.startswith(('sse', 'avx', 'fma', 'amx'))]
  return f'{model} ({" ".join(vector)})' if vector else model


def summary(workdir) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  return {'command': COMMAND, 'cpu': cpu(), 'jax': jax.__version__,
          'python': sys.version.split()[0],
          'values': _results_data().sweep_values(workdir)}


def _same(a, b, rtol: float) -> bool:
  if isinstance(a, bool) or isinstance(b, bool) or not (
      isinstance(a, (int, float)) and isinstance(b, (int, float))):
    return a == b
  if rtol == 0:
    return a == b
  if isinstance(a, int) and isinstance(b, int):  # counts: uploads, bits, k
    return abs(a - b) <= RTOL_COUNTS_OTHER_CPU * max(abs(a), abs(b))
  return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=0.0)


def compare(now: dict, committed: dict) -> list[str]:
  """Every difference, one line each (empty: the same results)."""
  exact = now['cpu'] == committed['cpu'] and now['jax'] == committed['jax']
  rtol = 0.0 if exact else RTOL_OTHER_CPU
  a, b = now['values'], committed['values']
  out = [f'{k}: not in this run' for k in sorted(set(b) - set(a))]
  out += [f'{k}: new in this run ({a[k]!r})' for k in sorted(set(a) - set(b))]
  out += [f'{k}: {a[k]!r} here, {b[k]!r} committed'
          for k in sorted(set(a) & set(b)) if not _same(a[k], b[k], rtol)]
  if out and not exact:
    out.append(f'(compared within a relative {rtol:g}, counts '
               f'{RTOL_COUNTS_OTHER_CPU:g}: the summary was written on '
               f'{committed["cpu"]} with JAX {committed["jax"]}, this is '
               f'{now["cpu"]} with JAX {now["jax"]})')
  return out


def against_summary(args) -> int:
  now = summary(args.workdir)
  if not now['values']:
    print(f'error: {args.workdir} holds no sweep results (results.csv and '
          f'curves.npz): run `{COMMAND}` first', file=sys.stderr)
    return 2
  path = pathlib.Path(args.summary)
  if args.write:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(now, indent=1, sort_keys=True) + '\n')
    print(f'wrote {path}: {len(now["values"])} values')
    return 0
  if not path.exists():
    print(f'error: no committed summary at {path}: run with --write',
          file=sys.stderr)
    return 2
  problems = compare(now, json.loads(path.read_text()))
  for p in problems:
    print(p)
  if problems:
    print(f'{len(problems)} result(s) moved: if the change means to, run '
          f'`python scripts/same_results.py {args.workdir} --write` and say '
          'in the full reports what moved (scripts/check_docs.py)',
          file=sys.stderr)
    return 1
  print(f'same results: {len(now["values"])} values equal the committed '
        f'summary ({path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})')
  return 0


def folders(before: str, after: str) -> int:
  a, b = pathlib.Path(before), pathlib.Path(after)
  names = {p.relative_to(a) for p in a.rglob('*')
           if p.suffix in ('.npz', '.csv')}
  names |= {p.relative_to(b) for p in b.rglob('*')
            if p.suffix in ('.npz', '.csv')}
  failed = 0
  for name in sorted(names):
    if not (a / name).exists() or not (b / name).exists():
      print(f'ONLY IN ONE  {name}')
      failed += 1
      continue
    diff = (_npz if name.suffix == '.npz' else _csv)(a / name, b / name)
    print(f'{"DIFFERENT" if diff else "same     "}  {name}'
          + (f': {", ".join(diff)}' if diff else ''))
    failed += bool(diff)
  print(f'{len(names) - failed} of {len(names)} files the same')
  return 1 if failed else 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('workdir', nargs='+',
                      help='BEFORE AFTER, or one `--tiny` reproduction folder')
  parser.add_argument('--summary', default=str(SUMMARY),
                      help='the committed summary (default: %(default)s)')
  parser.add_argument('--write', action='store_true',
                      help='write this run as the committed summary')
  args = parser.parse_args(argv)
  if len(args.workdir) == 2:
    return folders(*args.workdir)
  if len(args.workdir) != 1:
    parser.error('give BEFORE AFTER, or one reproduction folder')
  args.workdir = args.workdir[0]
  return against_summary(args)


if __name__ == '__main__':
  sys.exit(main())
