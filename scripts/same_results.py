"""Checks that two result folders hold the same numbers (a refactor moved
nothing): every curves.npz array, every metrics.csv and results.csv column,
compared exactly (NaN equal to NaN); wall-clock fields are skipped.

    python scripts/same_results.py runs/before runs/after

Prints one line per file and exits 1 on any difference (or a file that is
in one folder only). Columns and arrays renamed since the folder `before`
was written (RENAMED: the network's nested config group, the built-in
parts' parameters; such a column is absent after where no point used the
part: DROPPABLE) are matched by
their new names.
"""

from __future__ import annotations

import csv
import pathlib
import sys

import numpy as np

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


def main(before: str, after: str) -> int:
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


if __name__ == '__main__':
  sys.exit(main(*sys.argv[1:3]))
