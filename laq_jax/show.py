"""Error messages: values on one line, and the names nearest a typo."""

import difflib
from typing import Iterable

LIMIT = 80


def show(value, limit: int = LIMIT) -> str:
  """repr(value) on one line (an array's rows joined), cut at `limit`; a
  string with characters outside ASCII names them (a Cyrillic 'а' prints
  exactly like the Latin 'a' it was taken for)."""
  text = ' '.join(repr(value).split())
  text = text if len(text) <= limit else text[:limit - 3] + '...'
  return text + lookalikes(value)


def lookalikes(value) -> str:
  """" (not ASCII: 'а' U+0430 CYRILLIC SMALL LETTER A)" for a string with
  characters outside ASCII (the first three), else ''."""
  if not isinstance(value, str) or value.isascii():
    return ''
  import unicodedata  # pylint: disable=g-import-not-at-top
  odd = list(dict.fromkeys(c for c in value if not c.isascii()))
  named = [f'{c!r} U+{ord(c):04X} {unicodedata.name(c, "unnamed")}'
           for c in odd[:3]]
  return (' (not ASCII: ' + ', '.join(named)
          + (f' and {len(odd) - 3} more' if len(odd) > 3 else '') + ')')


def closest(name, choices: Iterable[str], n: int = 3) -> list[str]:
  """The choices nearest to a mistyped `name` (difflib's ratio >= 0.6, case
  ignored), then those it is a prefix or a word of."""
  name, choices = str(name), [str(c) for c in choices]
  lower = {c.lower(): c for c in reversed(choices)}
  near = [lower[c] for c in difflib.get_close_matches(
      name.lower(), list(lower), n=n, cutoff=0.6)]
  for choice in choices:
    if len(near) >= n:
      break
    if choice not in near and len(name) >= 3 and (
        choice.startswith(name.lower())
        or name.lower() in choice.split('_')):
      near.append(choice)
  return near


def unknown(name, choices: Iterable[str], what: str = 'field') -> str:
  """"no field 'x'; did you mean 'y'?" (or the list of what exists)."""
  choices = sorted(str(c) for c in choices)
  near = closest(name, choices)
  if near:
    hint = 'did you mean ' + ' or '.join(map(repr, near)) + '?'
  else:
    hint = f'{what}s: {", ".join(choices)}'
  return f'no {what} {show(name)}; {hint}'
