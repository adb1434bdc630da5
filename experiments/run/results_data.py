"""Results as data beside a report: results.json, what its sentences quote.

    # after a study wrote WORKDIR/REPORT.md from its sweeps:
    results_data.publish(workdir, 'paper', command)  # results.json, header
    values = results_data.read(workdir)['values']    # 'logreg/laq/...'

Every report folder (docs/paper, docs/compressors, ...) commits a
results.json next to its REPORT.md: per point, the numbers its tables and
sentences quote (uploads, bits, iterations or rounds to target, accuracy,
loss, seconds per profile, diverged), flat under 'values' as
'EXPERIMENT/POINT/QUANTITY' keys; and how they were made: the command, the
machine, the date, the commit the working tree was at (the parent of the
change that commits the report) and a hash of the source the study depends
on (`source_hash`). `scripts/check_docs.py` checks every
`<!-- r:STUDY/KEY -->…<!-- /r -->` marker of the Markdown against these
values, and a report's source hash against the code as it is.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import pathlib
import platform
import subprocess
from typing import Any, Iterable, Mapping

FILE = 'results.json'
ROOT = pathlib.Path(__file__).resolve().parents[2]

# What every study's numbers depend on: the library, the configs and the
# experiment runner (the study's own folder and launcher are added).
COMMON_SOURCES = ('laq_jax', 'configs', 'experiments/run')
# Each study's own code (and its launcher), by the folder name of its report
# under docs/.
STUDY_SOURCES = {
    'paper': ('experiments/studies/paper', 'experiments/reproduce.py'),
    'compressors': ('experiments/studies/family', 'experiments/family.py'),
    'federated': ('experiments/studies/federated', 'experiments/federated.py'),
    'lasg': ('experiments/studies/lasg', 'experiments/lasg.py'),
    # CADA at its authors' MNIST setting: the LASG report's code, its own
    # folder (docs/cada)
    'cada': ('experiments/studies/lasg', 'experiments/lasg.py'),
    'workloads': ('experiments/studies/workloads', 'experiments/workloads.py'),
    'successors': ('experiments/studies/successors',
                   'experiments/successors.py'),
}


def study_sources(study: str) -> tuple[str, ...]:
  """The paths (relative to the repository) `study`'s numbers depend on."""
  if study not in STUDY_SOURCES:
    raise ValueError(f'study={study!r} is not known: use one of '
                     f'{", ".join(STUDY_SOURCES)}')
  return COMMON_SOURCES + STUDY_SOURCES[study]


def _files(paths: Iterable[str], root: pathlib.Path) -> list[pathlib.Path]:
  out = []
  for p in paths:
    path = root / p
    if path.is_dir():
      out += [f for f in path.rglob('*.py') if '__pycache__' not in f.parts]
    elif path.is_file():
      out.append(path)
  return sorted(set(out))


def source_hash(paths: Iterable[str], root: str | os.PathLike = ROOT) -> str:
  """sha256 (16 hex digits) of the Python files under `paths` (relative to
  `root`): each file's relative path and bytes, in path order."""
  root = pathlib.Path(root)
  h = hashlib.sha256()
  for f in _files(paths, root):
    h.update(f.relative_to(root).as_posix().encode() + b'\0')
    h.update(f.read_bytes() + b'\0')
  return h.hexdigest()[:16]


def commit(root: str | os.PathLike = ROOT, paths: Iterable[str] = ()
           ) -> tuple[str | None, bool]:
  """(HEAD's commit, whether the tracked files under `paths` differ from it:
  the study's sources, not the reports being regenerated; all of them when
  `paths` is empty); (None, False) outside a git checkout."""
  try:
    head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(['git', 'status', '--porcelain',
                            '--untracked-files=no', '--', *paths], cwd=root,
                           check=True, capture_output=True,
                           text=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None, False
  return head, bool(dirty)


def cpu() -> tuple[str, int | None]:
  """(this machine's CPU model, its core count)."""
  model = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          model = line.split(':', 1)[1].strip()
          break
  except OSError:
    pass
  return model, os.cpu_count()


def machine() -> str:
  """This machine in a few words: CPU model, cores, OS, Python, JAX and its
  devices."""
  model, cores = cpu()
  words = [f'{model}, {cores} cores', f'{platform.system()}',
           f'Python {platform.python_version()}']
  try:
    import jax  # pylint: disable=g-import-not-at-top
    devices = jax.devices()
    words.append(f'JAX {jax.__version__} on {len(devices)} '
                 f'{devices[0].platform.upper()} device(s)')
  except Exception:  # pylint: disable=broad-except
    pass
  return ', '.join(words)


def _plain(value: Any) -> Any:
  """A JSON value: numpy scalars as Python ones, NaN/inf as None."""
  if hasattr(value, 'item') and not isinstance(value, (list, dict, str)):
    value = value.item()
  if isinstance(value, float) and not math.isfinite(value):
    return None
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  return value


# What a report quotes of each sweep point (results.csv columns), where the
# point has them.
POINT_COLUMNS = (
    'iterations', 'total_uploads', 'total_bits', 'total_bits_down',
    'final_loss', 'final_residual', 'final_test_accuracy', 'target_iteration',
    'target_uploads', 'target_bits', 'target_time_s', 'paper_target_iteration',
    'paper_target_uploads', 'paper_target_bits', 'total_time_s', 'diverged',
    'diverged_at')


def sweep_values(workdir: str | os.PathLike) -> dict[str, Any]:
  """Every sweep folder's points under `workdir` (a folder holding
  results.csv and curves.npz, at any depth) as 'FOLDER/POINT/COLUMN' values
  (POINT the point's algo, or algo_INDEX where a folder runs one algo at
  several points); divergence by the one rule
  (`outputs.mark_divergence`); and every single run's folder (summary.json)
  as 'FOLDER/ALGO/COLUMN'."""
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  workdir = pathlib.Path(workdir)
  values = {}
  # Single runs (experiments.main's folders: summary.json, no results.csv;
  # the paper's authors_code rows and cross-check) as 'FOLDER/ALGO/COLUMN';
  # their `diverged` is the one rule already (run_results).
  for summary_path in sorted(workdir.rglob('summary.json')):
    folder = summary_path.parent
    if (folder / 'results.csv').exists():
      continue
    try:
      summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
      continue
    if not isinstance(summary, dict) or 'algo' not in summary:
      continue
    name = folder.relative_to(workdir).as_posix()
    prefix = '' if name == '.' else name + '/'
    for column in POINT_COLUMNS:
      if column in summary:
        values[f'{prefix}{summary["algo"]}/{column}'] = _plain(
            summary[column])
  for csv_path in sorted(workdir.rglob('results.csv')):
    folder = csv_path.parent
    if not (folder / 'curves.npz').exists():
      continue
    rows = [{k: outputs.parse_cell(v) for k, v in row.items()}
            for row in outputs.read_results(csv_path)]
    outputs.mark_divergence(rows, folder)
    algos = [str(r.get('algo', r.get('point'))) for r in rows]
    name = folder.relative_to(workdir).as_posix()
    prefix = '' if name == '.' else name + '/'
    for g, row in enumerate(rows):
      point = algos[g] if algos.count(algos[g]) == 1 else f'{algos[g]}_{g}'
      for column in POINT_COLUMNS:
        if column in row:
          values[f'{prefix}{point}/{column}'] = _plain(row[column])
  return values


def write(folder: str | os.PathLike, study: str, values: Mapping[str, Any],
          *, command: str, sources: Iterable[str] | None = None,
          root: str | os.PathLike = ROOT) -> dict[str, Any]:
  """Writes FOLDER/results.json (see the module docstring); returns it."""
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  sources = tuple(study_sources(study) if sources is None else sources)
  head, dirty = commit(root, sources)
  data = {
      'study': study,
      'command': command,
      'machine': machine(),
      'date': datetime.datetime.now(datetime.timezone.utc).strftime(
          '%Y-%m-%d %H:%M UTC'),
      'commit': head,
      'uncommitted_changes': dirty,
      'sources': list(sources),
      'source_hash': source_hash(sources, root),
      'values': {k: _plain(v) for k, v in sorted(values.items())},
  }
  outputs.write_json(pathlib.Path(folder) / FILE, data)
  return data


def read(folder: str | os.PathLike) -> dict[str, Any] | None:
  """FOLDER/results.json, or None when there is none."""
  path = pathlib.Path(folder) / FILE
  if not path.exists():
    return None
  return json.loads(path.read_text())


def header_line(data: Mapping[str, Any]) -> str:
  """The report's provenance line, from its results.json."""
  at = data['commit'][:10] if data.get('commit') else 'no git checkout'
  if data.get('uncommitted_changes'):
    at += ' with uncommitted changes'
  return (f'Generated on {data["date"]} by `{data["command"]}` at commit '
          f'{at}, source hash {data["source_hash"]} '
          f'({", ".join(data["sources"])}), on {data["machine"]}; every '
          f'number it quotes is in [{FILE}]({FILE}).')


STAMP = 'Generated on '


def wall_times(workdir: str | os.PathLike, info: str = 'reproduce.json'
               ) -> dict[str, Any]:
  """'EXPERIMENT/wall_time_s' and 'EXPERIMENT/load_average_at_start' of
  every experiment folder under `workdir` that recorded them (`info`, as
  the paper's reproduction writes it): measurements, not results, so never
  in `sweep_values` (scripts/same_results.py compares those)."""
  workdir = pathlib.Path(workdir)
  out = {}
  for path in sorted(workdir.rglob(info)):
    d = json.loads(path.read_text())
    name = path.parent.relative_to(workdir).as_posix()
    if 'wall_time_s' in d:
      out[f'{name}/wall_time_s'] = d['wall_time_s']
    load = d.get('hardware', {}).get('load_average_at_start')
    if load:
      out[f'{name}/load_average_at_start'] = load[0]
  return out


def publish(workdir: str | os.PathLike, study: str, command: str,
            report: str = 'REPORT.md', extra: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
  """After a study wrote WORKDIR/REPORT.md: writes WORKDIR/results.json
  (every sweep point's quoted values, `sweep_values`, plus `extra`) and puts
  its provenance line (`header_line`) under the report's title, replacing
  an earlier one. Returns the data."""
  workdir = pathlib.Path(workdir)
  data = write(workdir, study, {**sweep_values(workdir), **(extra or {})},
               command=command)
  path = workdir / report
  if path.exists():
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    outputs.atomic_write(path, stamp(path.read_text(), data))
  return data


def stamp(text: str, data: Mapping[str, Any]) -> str:
  """A report's text with `header_line(data)` under its title (an earlier
  provenance line replaced)."""
  lines = [l for l in text.split('\n') if not l.startswith(STAMP)]
  at = 1 if lines and lines[0].startswith('# ') else 0
  lines[at:at] = ['', header_line(data)]
  return '\n'.join(lines).replace('\n\n\n', '\n\n')
