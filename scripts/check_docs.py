"""Checks that every number the documentation quotes is the data's.

    python scripts/check_docs.py            # check; exit 1 with each problem
    python scripts/check_docs.py --write    # rewrite every marker's text

Reads README.md and every Markdown file under docs/ (the Sphinx build's
outputs excepted). Checks:
- markers: `<!-- r:STUDY/KEY -->TEXT<!-- /r -->` (or `r:STUDY/KEY:FORMAT`,
  FORMAT a kind of `experiments.run.markdown.fmt`: int, sci, pct, full, or a
  format spec such as .2f) must hold the value of KEY in
  docs/STUDY/results.json (`experiments.run.results_data`), formatted;
  `--write` puts it there. A number in a report's prose, the README's
  at-a-glance table or docs/benchmarks.md's headline tables lives in one.
- claims: a sentence with a claim word ("beat", "fastest", "within N", ...)
  that quotes a marker must not quote a point the data says diverged
  (KEY's folder has diverged = true), and "within N" must hold for the
  numbers it quotes.
- files: every relative link and image of the Markdown points at a file.
- staleness: a report folder (docs/STUDY/REPORT.md) whose results.json's
  source hash is not the code's as it is now, or that has no results.json,
  must say so in its text: "stale since <commit>: <what changed>" or
  "verified unchanged by same_results at <commit>".
Constants, the papers' numbers and machine facts stay plain text.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import sys
from typing import Any, Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.run import results_data  # pylint: disable=g-import-not-at-top,wrong-import-position
from experiments.run.markdown import fmt  # pylint: disable=g-import-not-at-top,wrong-import-position

MARKER = re.compile(r'<!-- r:(?P<key>[^ :>]+)(?::(?P<kind>[^ >]+))? -->'
                    r'(?P<text>.*?)<!-- /r -->', re.S)
CLAIM = re.compile(r'\b(beats?|beaten|fastest|slowest|within \d+(?:\.\d+)?|'
                   r'fewer|saves?|savings?|best)\b', re.I)
WITHIN = re.compile(r'\bwithin (\d+(?:\.\d+)?)', re.I)
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
STALE = re.compile(r'stale since [0-9a-f]{7,40}: \S|verified unchanged by '
                   r'same_results at [0-9a-f]{7,40}', re.I)
SKIP_DIRS = ('_build', 'api/_generated')


def markdown_files(root: pathlib.Path) -> list[pathlib.Path]:
  """README.md and docs/**/*.md, not the Sphinx build's outputs."""
  files = [root / 'README.md'] if (root / 'README.md').exists() else []
  for f in sorted((root / 'docs').rglob('*.md')):
    rel = f.relative_to(root / 'docs').as_posix()
    if not any(rel.startswith(s + '/') for s in SKIP_DIRS):
      files.append(f)
  return files


class Data:
  """docs/STUDY/results.json, read once each."""

  def __init__(self, root: pathlib.Path):
    self.root = root
    self._cache: dict[str, dict | None] = {}

  def study(self, study: str) -> dict | None:
    if study not in self._cache:
      self._cache[study] = results_data.read(self.root / 'docs' / study)
    return self._cache[study]

  def value(self, key: str) -> tuple[bool, Any]:
    """(found, value) of 'STUDY/REST'."""
    study, _, rest = key.partition('/')
    data = self.study(study)
    if data is None or rest not in data['values']:
      return False, None
    return True, data['values'][rest]

  def diverged(self, key: str) -> bool:
    """Whether KEY's point (its folder: KEY without the last part) diverged."""
    point = key.rsplit('/', 1)[0]
    found, value = self.value(point + '/diverged')
    return found and bool(value)


def render(value: Any, kind: str | None) -> str:
  """A marker's text for `value`: `fmt(value, kind)`; without a kind, ints
  with thousands separators, floats to 4 significant digits, booleans as
  yes/no."""
  if kind:
    return fmt(value, kind)
  if value is None or (isinstance(value, float) and not math.isfinite(value)):
    return fmt(None)
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if isinstance(value, int):
    return fmt(value, 'int')
  if isinstance(value, float):
    return format(value, '.4g')
  return str(value)


def sentences(text: str) -> Iterator[str]:
  """The text cut into sentences and table rows (a rough cut: at '. ' and
  line ends that end a paragraph or a table row)."""
  for block in re.split(r'\n\s*\n|\n(?=\|)|(?<=\|)\n', text):
    for s in re.split(r'(?<=[.;!?])\s+(?=[A-Z(*`])', block):
      if s.strip():
        yield s


def check_markers(path: pathlib.Path, text: str, data: Data,
                  write: bool) -> tuple[list[str], str]:
  problems = []
  rel = path.relative_to(data.root)

  def fix(m: re.Match) -> str:
    key, kind, shown = m['key'], m['kind'], m['text']
    found, value = data.value(key)
    if not found:
      study = key.partition('/')[0]
      where = (f'docs/{study}/results.json has no such key'
               if data.study(study) is not None
               else f'docs/{study}/results.json does not exist')
      problems.append(f'{rel}: marker {key}: {where}')
      return m[0]
    want = render(value, kind)
    if shown != want:
      if write:
        return m[0].replace(f'-->{shown}<!--', f'-->{want}<!--', 1)
      problems.append(f'{rel}: marker {key} says {shown!r}, the data '
                      f'{want!r} (python scripts/check_docs.py --write)')
    return m[0]

  code = code_spans(text)
  new = MARKER.sub(lambda m: m[0] if in_code(m.start(), code) else fix(m),
                   text)
  return problems, new


def code_spans(text: str) -> list[tuple[int, int]]:
  """Where the text's code is (fenced blocks and `inline` spans): a marker
  written there is an example, not a number."""
  spans = [m.span() for m in re.finditer(r'```.*?```', text, re.S)]
  for m in re.finditer(r'`[^`\n]+`', text):
    if not in_code(m.start(), spans):
      spans.append(m.span())
  return spans


def in_code(at: int, spans: list[tuple[int, int]]) -> bool:
  return any(a <= at < b for a, b in spans)


def check_claims(path: pathlib.Path, text: str, data: Data) -> list[str]:
  problems = []
  rel = path.relative_to(data.root)
  for s in sentences(text):
    words = CLAIM.findall(s)
    code = code_spans(s)
    marks = [m for m in MARKER.finditer(s) if not in_code(m.start(), code)]
    if not words or not marks:
      continue
    short = ' '.join(MARKER.sub(lambda m: m['text'], s).split())[:120]
    for m in marks:
      if data.diverged(m['key']):
        problems.append(f'{rel}: "{short}": the claim ({", ".join(words)}) '
                        f'quotes {m["key"]}, a point that diverged')
    for w in WITHIN.finditer(s):
      bound = float(w[1])
      for m in marks:
        found, value = data.value(m['key'])
        if (found and isinstance(value, (int, float))
            and not isinstance(value, bool) and abs(value) > bound):
          problems.append(f'{rel}: "{short}": "within {w[1]}" but '
                          f'{m["key"]} is {value}')
  return problems


def check_links(path: pathlib.Path, text: str, root: pathlib.Path
                ) -> list[str]:
  problems = []
  rel = path.relative_to(root)
  # code spans and blocks are examples, not links
  plain = re.sub(r'```.*?```', '', text, flags=re.S)
  plain = re.sub(r'`[^`\n]*`', '', plain)
  for m in LINK.finditer(plain):
    target = m[1].split('#', 1)[0]
    if not target or re.match(r'[a-z][a-z0-9+.-]*:', target):
      continue  # an anchor, or a URL (http:, mailto:, ...)
    if not (path.parent / target).exists():
      problems.append(f'{rel}: links to {m[1]}, which does not exist')
  return problems


def check_stale(root: pathlib.Path, data: Data) -> list[str]:
  problems = []
  for report in sorted((root / 'docs').glob('*/REPORT.md')):
    study = report.parent.name
    text = report.read_text()
    said = STALE.search(text) is not None
    results = data.study(study)
    rel = report.relative_to(root)
    if results is None:
      if not said:
        problems.append(
            f'{rel}: no results.json beside it, and it does not say "stale '
            'since <commit>: <what changed>": regenerate it')
      continue
    now = results_data.source_hash(results['sources'], root)
    if now != results['source_hash'] and not said:
      problems.append(
          f'{rel}: its source ({", ".join(results["sources"])}) changed since '
          f'it was generated (hash {results["source_hash"]}, now {now}): '
          'regenerate it, or say "stale since <commit>: <what changed>" or '
          '"verified unchanged by same_results at <commit>"')
  return problems


# The README's at-a-glance table: (setting, study, folder, [(label, point)],
# [(column header, results.json quantity, fmt kind)]). Rows of a study with no
# results.json yet (its report predates it) are left out and named.
AT_TARGET = [('iterations to target', 'target_iteration', 'int'),
             ('uploads to target', 'target_uploads', 'int'),
             ('bits to target', 'target_bits', 'sci')]
AT_BUDGET = [('uploads', 'total_uploads', 'int'),
             ('bits', 'total_bits', 'sci'),
             ('test accuracy', 'final_test_accuracy', 'pct')]
AT_A_GLANCE = [
    ('logistic regression, full batch (the paper)', 'paper', 'logreg',
     [('LAQ', 'laq'), ('GD', 'gd')], AT_TARGET),
    ('Scaffnew to the exact residual 1e-10 (the successors; logistic '
     'regression, M = 10 label-sorted, a CPU\'s size)', 'successors',
     'scaffnew', [('Scaffnew', 'scaffnew'), ('FedAvg', 'fedavg'),
                  ('GD', 'gd')], AT_TARGET),
    ('the MLP, full batch (the paper)', 'paper', 'mlp',
     [('LAQ', 'laq'), ('GD', 'gd')], AT_BUDGET),
    ('logistic regression, minibatch (the paper)', 'paper',
     'logreg_stochastic', [('SLAQ', 'slaq'), ('SGD', 'sgd')], AT_BUDGET),
    ('the MLP, minibatch (the paper)', 'paper', 'mlp_stochastic',
     [('SLAQ', 'slaq'), ('SGD', 'sgd')], AT_BUDGET),
    ('the MLP, minibatch, SLAQ as the authors\' scripts run it', 'paper',
     'authors_code/mlp_stochastic', [('SLAQ', 'slaq')], AT_BUDGET),
    ('LASG and CADA on the minibatch MLP', 'paper', 'lasg_network',
     [('LASG-WK2', 'lasg_wk2'), ('CADA2', 'cada2'), ('SGD', 'sgd'),
      ('Adam (CADA\'s baseline)', 'cada_adam')], AT_BUDGET),
    ('LASG at its authors\' setting (their CNN, M = 20, 10,000 steps)',
     'lasg', 'lasg_mnist',
     [('LASG-WK2', 'lasg_wk2'), ('LASG-PS', 'lasg_ps'), ('SGD', 'sgd')],
     AT_BUDGET),
    ('Fashion-MNIST\'s CNN, 30 rounds (the workloads, a CPU\'s budget)',
     'workloads', 'fmnist_cnn',
     [('FedAvg', 'fedavg'), ('FedAdam', 'fedadam'), ('SGD (FedSGD)', 'sgd'),
      ('SLAQ', 'slaq')], AT_BUDGET),
    ('the FedAvg family, logistic regression on 100 clients, q = 0.1, 500 '
     'rounds (federated)', 'federated', 'logreg/local',
     [('FedAvg', 'fedavg'), ('SCAFFOLD', 'scaffold')], AT_BUDGET),
]
# The README's excerpt of what `./run.sh` (the quick reproduction) shows, from
# a quick run's results.json committed in docs/quick (same shape).
QUICK_EXCERPT = [
    ('logistic regression, full batch', 'quick', 'logreg',
     [('LAQ', 'laq'), ('GD', 'gd'), ('LAG', 'lag')], AT_TARGET),
    ('the MLP, minibatch', 'quick', 'mlp_stochastic',
     [('SLAQ', 'slaq'), ('SGD', 'sgd'), ('QSGD', 'qsgd')], AT_BUDGET),
]
# name -> the generated block's rows (`<!-- NAME ... -->` to `<!-- /NAME -->`).
BLOCKS = {'at-a-glance': 'AT_A_GLANCE', 'quick-excerpt': 'QUICK_EXCERPT'}


def at_a_glance(data: Data, spec=None) -> str:
  """A generated table block (the README's at-a-glance table by default),
  from docs/*/results.json: one table per run of settings that share their
  columns, a row per point, each setting linked to its report."""
  lines = []
  pending = []
  columns_before = None
  for setting, study, folder, points, columns in (
      AT_A_GLANCE if spec is None else spec):
    if data.study(study) is None:
      pending.append(study)
      continue
    if columns != columns_before:
      lines += ['', '| setting | | ' + ' | '.join(h for h, _, _ in columns)
                + ' |', '|---|---|' + '---:|' * len(columns)]
      columns_before = columns
    for i, (label, point) in enumerate(points):
      key = f'{study}/{folder}/{point}'
      found, at = data.value(key + '/diverged_at')
      if data.diverged(key + '/x'):
        cells = ([f'diverged at k={at}' if found and at is not None
                  else 'diverged'] + [''] * (len(columns) - 1))
      else:
        cells = []
        for _, quantity, kind in columns:
          found, value = data.value(f'{key}/{quantity}')
          cells.append(f'<!-- r:{key}/{quantity}:{kind} -->'
                       f'{render(value, kind)}<!-- /r -->' if found
                       else fmt(None))
      where = f'[{setting}](docs/{study}/REPORT.md)' if i == 0 else ''
      lines.append(f'| {where} | {label} | ' + ' | '.join(cells) + ' |')
  if pending:
    names = ', '.join(dict.fromkeys(pending))
    lines += ['', f'Not in this table yet: {names} (the report predates '
              'its results.json; it says what it is stale since).']
  return '\n'.join(lines).strip('\n')


def check_glance(path: pathlib.Path, text: str, data: Data, write: bool
                 ) -> tuple[list[str], str]:
  """The generated blocks of a Markdown file (`BLOCKS`), as the data makes
  them."""
  problems = []
  for name, spec_name in BLOCKS.items():
    start = text.find(f'<!-- {name}')
    if start < 0:
      continue
    close = f'<!-- /{name} -->'
    head_end = text.index('-->', start) + 3
    end = text.find(close, head_end)
    want = '\n' + at_a_glance(data, globals()[spec_name]) + '\n'
    if end < 0:  # first time: the block ends where the table ends
      new = text[:head_end] + want + close + text[head_end:]
    elif text[head_end:end] == want:
      continue
    else:
      new = text[:head_end] + want + text[end:]
    if write:
      text = new
    else:
      problems.append(f'{path.relative_to(data.root)}: the {name} table is '
                      'not the data\'s (python scripts/check_docs.py --write)')
  return problems, text


def check(root: pathlib.Path = ROOT, write: bool = False) -> list[str]:
  """Every problem found, one line each (empty: the docs hold)."""
  data = Data(root)
  problems = []
  for path in markdown_files(root):
    text = path.read_text()
    found, new = check_markers(path, text, data, write)
    problems += found
    found, new = check_glance(path, new, data, write)
    problems += found
    if write and new != text:
      path.write_text(new)
      text = new
    problems += check_claims(path, text, data)
    problems += check_links(path, text, root)
  problems += check_stale(root, data)
  return problems


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--write', action='store_true',
                      help="rewrite every marker's text from the data")
  parser.add_argument('--root', default=str(ROOT), help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  problems = check(pathlib.Path(args.root), args.write)
  for p in problems:
    print(p)
  if problems:
    print(f'{len(problems)} problem(s) in the documentation', file=sys.stderr)
    return 1
  print('the documentation holds: every marker is its data, every link '
        'exists, no report is stale unsaid')
  return 0


if __name__ == '__main__':
  sys.exit(main())
