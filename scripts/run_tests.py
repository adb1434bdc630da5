"""The test suite as a few pytest processes, two at a time on two cores.

./test.sh calls this (after scripts/setup.sh). The test files are split into
groups balanced by their recorded times (tests/timings.json, this tier's;
a file with no record counts as the median), the longest group first, and
the groups run LAQ_JAX_TEST_JOBS at a time (default: the CPU count, at most
4). Each group is one pytest process whose output is printed whole when it
ends. The files that set XLA_DEFAULTS or XLA_DEFAULT_EMITTERS run in groups
of their own; the others' processes compile with XLA's older, faster loop
emitters (LAQ_JAX_TEST_EMITTERS=legacy, tests/conftest.py). No process runs
the whole suite: one that compiled every test's
programs in turn grew until XLA's compiler crashed (SIGSEGV); tests/conftest.py
also drops JAX's in-memory caches after each module, and the programs come
back from the persistent compilation cache (tests/conftest.py, .cache/jax/).

At the end it prints each group's time, the 30 slowest tests, where the
time went in JAX (tracing, lowering, XLA's compile, cache loads; per module,
tests/_compile_stats.py) and a budget table from tests/BUDGETS.md, with
"BUDGET EXCEEDED" where a budget was passed. Budgets never change the exit
status (machines are noisy): it is 1 when a group failed, else 0.

Usage: python scripts/run_tests.py [pytest args]     e.g. -m "not slow"
Environment: LAQ_JAX_TEST_EMITTERS=default (XLA's default code generator in
every process), LAQ_JAX_TEST_JOBS (processes at once), LAQ_JAX_TEST_GROUPS
(groups; default 3 per process at once), LAQ_JAX_TEST_TIMINGS (a file to
write this run's per-file times to, for tests/timings.json),
LAQ_JAX_TEST_OPTIMIZE (tests/conftest.py).
"""

from __future__ import annotations

import collections
import concurrent.futures
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMINGS = os.path.join(ROOT, 'tests', 'timings.json')
BUDGETS = os.path.join(ROOT, 'tests', 'BUDGETS.md')
sys.path.insert(0, os.path.join(ROOT, 'tests'))
import _compile_stats  # pylint: disable=g-import-not-at-top,wrong-import-position


def tier(args: list[str]) -> str:
  """'fast' for -m "not slow", else 'all'."""
  for i, a in enumerate(args):
    expr = None
    if a == '-m' and i + 1 < len(args):
      expr = args[i + 1]
    elif a.startswith('-m') and len(a) > 2:
      expr = a[2:]
    if expr is not None and re.fullmatch(r'\s*not\s+slow\s*', expr):
      return 'fast'
  return 'all'


def split(files: list[str], times: dict[str, float], groups: int
          ) -> list[list[str]]:
  """Longest-first into the group with the least time so far."""
  known = [times[f] for f in files if f in times]
  default = statistics.median(known) if known else 10.0
  cost = {f: times.get(f, default) for f in files}
  bins = [[0.0, []] for _ in range(min(groups, len(files)))]
  for f in sorted(files, key=lambda f: -cost[f]):
    b = min(bins, key=lambda b: b[0])
    b[0] += cost[f]
    b[1].append(f)
  bins.sort(key=lambda b: -b[0])
  return [sorted(b[1]) for b in bins if b[1]]


# LAQ_JAX_TEST_EMITTERS=default keeps XLA's default emitters in every
# process (an XLA without the older emitters' flag refuses it at start).
LEGACY_OK = os.environ.get('LAQ_JAX_TEST_EMITTERS', 'legacy') != 'default'


def needs_default_emitters(path: str) -> bool:
  """Whether a test file sets XLA_DEFAULTS or XLA_DEFAULT_EMITTERS
  (tests/conftest.py): its process keeps XLA's default code generator."""
  with open(os.path.join(ROOT, path), encoding='utf-8') as f:
    return bool(re.search(r'^XLA_DEFAULT(S|_EMITTERS) = True', f.read(),
                          re.M))


def plan(files: list[str], times: dict[str, float], groups: int
         ) -> list[tuple[list[str], bool]]:
  """(files, legacy emitters?) per group: the files that need XLA's
  default emitters in groups of their own (their share of the groups, at
  least one), the rest in groups whose processes compile with the older,
  faster ones (tests/conftest.py), longest group first."""
  default = [f for f in files if needs_default_emitters(f)]
  rest = [f for f in files if f not in default]
  if not default or not rest:
    return [(g, bool(rest)) for g in split(files, times, groups)]
  known = [times[f] for f in files if f in times]
  median = statistics.median(known) if known else 10.0
  cost = lambda fs: sum(times.get(f, median) for f in fs)
  share = cost(default) / max(cost(files), 1e-9)
  n_default = min(max(1, round(groups * share)), max(groups - 1, 1))
  out = ([(g, False) for g in split(default, times, n_default)]
         + [(g, True) for g in split(rest, times,
                                     max(groups - n_default, 1))])
  return sorted(out, key=lambda g: -cost(g[0]))


def budgets() -> dict[str, float]:
  """{'suite'|'fast'|test file: seconds} from tests/BUDGETS.md's tables:
  rows `| <name> | <budget s> | ...` whose name is `suite`, `fast tier` or
  a `tests/..._test.py` file."""
  out = {}
  if not os.path.exists(BUDGETS):
    return out
  with open(BUDGETS, encoding='utf-8') as f:
    for line in f:
      m = re.match(r'\|\s*`?([^|`]+?)`?\s*\|\s*([\d,.]+)\s*\|', line)
      if m:
        out[m.group(1).strip()] = float(m.group(2).replace(',', ''))
  return out


def junit_cases(path: str):
  """(file, test id, seconds, outcome) of each test case in a JUnit XML."""
  try:
    root = ET.parse(path).getroot()
  except (OSError, ET.ParseError):
    return
  for case in root.iter('testcase'):
    cls = case.get('classname', '')
    # 'tests.flower_test.FlowerDeploymentTest' -> tests/flower_test.py
    parts = cls.split('.')
    file = next(('/'.join(parts[:i + 1]) + '.py' for i in range(len(parts))
                 if parts[i].endswith('_test')), cls)
    outcome = 'passed'
    for tag in ('failure', 'error', 'skipped'):
      if case.find(tag) is not None:
        outcome = tag
    yield file, f"{file}::{'.'.join(parts[2:] + [case.get('name', '')])}", \
        float(case.get('time', 0) or 0), outcome


def main(argv: list[str]) -> int:
  args = argv[1:]
  which = tier(args)
  files = sorted(os.path.relpath(f, ROOT) for f in glob.glob(
      os.path.join(ROOT, 'tests', '*_test.py')))
  times = {}
  if os.path.exists(TIMINGS):
    with open(TIMINGS, encoding='utf-8') as f:
      times = json.load(f).get(which, {})
  jobs = int(os.environ.get('LAQ_JAX_TEST_JOBS') or min(os.cpu_count() or 1, 4))
  ngroups = int(os.environ.get('LAQ_JAX_TEST_GROUPS') or 3 * jobs)
  groups = plan(files, times, ngroups)
  tmp = tempfile.mkdtemp(prefix='laq_jax_tests_')
  stats = os.path.join(tmp, 'compile_stats.jsonl')
  env = dict(os.environ, LAQ_JAX_COMPILE_STATS=stats)
  print(f'== {len(files)} test files in {len(groups)} groups, {jobs} at a '
        f'time ({which} tier); logs in {tmp}', flush=True)
  lock = threading.Lock()
  start = time.monotonic()

  def run(i: int, chunk: list[str], legacy: bool):
    t0 = time.monotonic()
    log = os.path.join(tmp, f'group{i + 1}.log')
    with open(log, 'w', encoding='utf-8') as out:
      rc = subprocess.call(
          [sys.executable, '-m', 'pytest', *chunk, '-q', '-ra',
           '--durations=10', f'--junitxml={os.path.join(tmp, f"g{i + 1}.xml")}',
           '-p', 'no:cacheprovider', *args],
          cwd=ROOT, env=dict(env, LAQ_JAX_TEST_EMITTERS=(
              'legacy' if legacy and LEGACY_OK else 'default')),
          stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - t0
    with lock:
      print(f'== test group {i + 1}/{len(groups)} ({len(chunk)} files'
            f'{"" if legacy and LEGACY_OK else ", XLA default emitters"}: '
            f'{", ".join(os.path.basename(c) for c in chunk)}): exit {rc}, '
            f'{seconds:.0f} s', flush=True)
      with open(log, encoding='utf-8', errors='replace') as f:
        sys.stdout.write(f.read())
      sys.stdout.flush()
    return i, rc, seconds

  with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    results = sorted(pool.map(lambda ic: run(ic[0], *ic[1]),
                              enumerate(groups)))
  wall = time.monotonic() - start

  cases = []
  for i in range(len(groups)):
    cases += list(junit_cases(os.path.join(tmp, f'g{i + 1}.xml')))
  per_file = collections.Counter()
  for file, _, seconds, _ in cases:
    per_file[file] += seconds
  failed = [i for i, rc, _ in results if rc not in (0, 5)]  # 5: none selected

  print('\n== group times')
  for i, rc, seconds in results:
    print(f'  group {i + 1}: {seconds:7.1f} s  exit {rc}')
  print(f'  wall: {wall:.1f} s ({jobs} at a time), '
        f'{sum(s for *_, s in results):.1f} s of groups')
  print('\n== the 30 slowest tests (setup included)')
  for file, test, seconds, outcome in sorted(cases, key=lambda c: -c[2])[:30]:
    print(f'  {seconds:7.1f} s  {test}' + ('' if outcome == 'passed'
                                         else f' [{outcome}]'))
  if os.path.exists(stats):
    print('\n== where the time went in JAX, per test module (seconds; sub: '
          'processes it started)')
    _compile_stats.summarize(stats)

  limits = budgets()
  rows = [('fast tier' if which == 'fast' else 'suite', wall)]
  if which == 'all':
    rows += sorted(((f, per_file[f]) for f in per_file if f in limits),
                   key=lambda r: -r[1])
  print('\n== budgets (tests/BUDGETS.md; machines are noisy: a note, not a '
        'failure)')
  for name, seconds in rows:
    limit = limits.get(name)
    if limit is None:
      continue
    mark = '  BUDGET EXCEEDED' if seconds > limit else ''
    print(f'  {name:36s} {seconds:7.1f} s of {limit:6.0f} s{mark}')

  record = os.environ.get('LAQ_JAX_TEST_TIMINGS')
  if record:
    old = {}
    if os.path.exists(record):
      with open(record, encoding='utf-8') as f:
        old = json.load(f)
    old.setdefault(which, {}).update(
        {f: round(s, 1) for f, s in sorted(per_file.items())})
    with open(record, 'w', encoding='utf-8') as f:
      json.dump(old, f, indent=1, sort_keys=True)
      f.write('\n')
  if failed:
    print(f'== test groups {", ".join(str(i + 1) for i in failed)} FAILED')
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
