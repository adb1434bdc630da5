"""The launchers' command line: absl flags, and one line for any bad input.

    cli.run(main)        # instead of absl's app.run(main)

Bad input on the command line (an unknown flag, an unknown or mistyped
config field in `--config.FIELD=VALUE` or in `--config=FILE.py:FIELD=VALUE`,
a value that does not parse as the field's type, a missing config file) ends
the process with exit status 1 and ONE line on stderr,

    error: --config.bitz: no field 'bitz'; did you mean 'bits'?

never a traceback. Values of the right type that are not allowed are the
launchers' config check's (`experiments.run.config.validate_config`), with the
same kind of line.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

from absl import app
from absl import flags

EXIT_BAD_INPUT = 1


class CommandLineError(ValueError):
  """The command line names something that does not exist or does not
  parse (the message is the one line the launcher prints)."""


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
  """The choices nearest to a mistyped `name` (`laq_jax.show.closest`)."""
  from laq_jax import show  # pylint: disable=g-import-not-at-top
  return show.closest(name, choices, n)


def unknown(name: str, choices: Iterable[str], what: str = 'field') -> str:
  """"no field 'x'; did you mean 'y'?" (`laq_jax.show.unknown`)."""
  from laq_jax import show  # pylint: disable=g-import-not-at-top
  return show.unknown(name, choices, what)


# ----------------------------------------------------------------------------
# Config files and their overrides, checked the way ml_collections applies
# them, but with a message a user can act on.

def _children(node) -> list[str] | None:
  """The field names of a ConfigDict / mapping node, None for a leaf."""
  if isinstance(node, Mapping) or hasattr(node, 'keys') and hasattr(
      node, 'get_ref'):
    return [str(k) for k in node.keys()]
  return None


def _get(node, key):
  return node[key]


def check_path(config, path: str, flag: str = 'config') -> None:
  """Raises CommandLineError unless `config.PATH` ('a.b.c') exists."""
  node, walked = config, []
  for part in path.split('.'):
    names = _children(node)
    where = f'--{flag}.{".".join(walked + [part])}'
    if names is None:
      raise CommandLineError(
          f'{where}: {".".join(walked)!r} is a value, not a group of fields')
    if part not in names and not names and walked:
      raise CommandLineError(
          f'{where}: {flag}.{".".join(walked)} is empty; set it whole, e.g. '
          f'--{flag}.{".".join(walked)}="{{\'{part}\': ...}}"')
    if part not in names:
      inside = f' in {flag}.{".".join(walked)}' if walked else ''
      raise CommandLineError(f'{where}: ' + unknown(part, names).replace(
          ';', inside + ';', 1))
    node = _get(node, part)
    walked.append(part)


def overrides(argv: Sequence[str], flag: str = 'config'
              ) -> list[tuple[str, str | None]]:
  """The (field path, value text or None) of every --FLAG.PATH[=VALUE]."""
  found = []
  pattern = re.compile(r'^--?(no)?' + re.escape(flag) + r'\.([^=]*)(=(.*))?$',
                       re.S)
  for arg in argv[1:]:
    if arg == '--':
      break
    m = pattern.match(arg)
    if m:
      found.append((m.group(2), m.group(4)))
  return found


def config_argument(argv: Sequence[str], flag: str = 'config') -> str | None:
  """The value of --FLAG=VALUE / --FLAG VALUE in argv (the last one)."""
  value = None
  args = list(argv[1:])
  for i, arg in enumerate(args):
    if arg == '--':
      break
    if arg in (f'--{flag}', f'-{flag}') and i + 1 < len(args):
      value = args[i + 1]
    elif arg.startswith((f'--{flag}=', f'-{flag}=')):
      value = arg.split('=', 1)[1]
  return value


def load_config_file(text: str, flag: str = 'config'):
  """Loads `PATH[:ARG]` as ml_collections' config flag does (get_config(ARG)).

  Raises:
    CommandLineError: no such file, no get_config, or get_config refused the
      argument (its message).
  """
  path, *arg = text.split(':', 1)
  if not path:
    raise CommandLineError(f'--{flag}={text!r}: give a config file, e.g. '
                           'configs/mnist_logreg.py')
  if not os.path.isfile(path):
    raise CommandLineError(f'--{flag}={path}: no such file')
  spec = importlib.util.spec_from_file_location(f'_cli_{flag}_config', path)
  if spec is None or spec.loader is None:
    raise CommandLineError(f'--{flag}={path}: not a Python config file')
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except
    raise CommandLineError(f'--{flag}={path}: the file fails to load: '
                           f'{type(e).__name__}: {e}') from None
  if not hasattr(module, 'get_config'):
    raise CommandLineError(f'--{flag}={path}: the file has no get_config()')
  try:
    return module.get_config(*arg)
  except (ValueError, TypeError, KeyError) as e:
    raise CommandLineError(f'--{flag}={text}: {_text(e)}') from None


def _text(error: BaseException) -> str:
  """An exception's message as one line."""
  text = str(error.args[0]) if isinstance(error, KeyError) and error.args \
      else str(error)
  lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
  if not lines:
    return type(error).__name__
  if any(l.startswith('Traceback') for l in lines):
    # ml_collections wraps the config file's error in its traceback: keep
    # the last line, the error itself, without its exception type.
    return re.sub(r'^[A-Za-z_.]*(Error|Exception): ', '', lines[-1])
  return ' '.join(lines)


def _kind(value) -> str:
  if isinstance(value, bool):
    return 'true or false'
  if isinstance(value, int):
    return 'an integer'
  if isinstance(value, float):
    return 'a number'
  if isinstance(value, tuple):
    return "a tuple, e.g. '(2, 4)'"
  if _children(value) is not None:
    return "a dict, e.g. \"{'key': value}\""
  return 'text'


def _value_error(config, path, text) -> str | None:
  """The message for --config.PATH=TEXT whose text does not parse."""
  node = config
  for part in path.split('.'):
    node = _get(node, part)
  kind = _kind(node)
  if node is None:  # a placeholder: its declared type
    parent = config
    for part in path.split('.')[:-1]:
      parent = _get(parent, part)
    try:
      declared = parent.get_ref(path.split('.')[-1]).get_type()
      kind = _kind(declared()) if declared is not None else 'a value'
    except Exception:  # pylint: disable=broad-except
      kind = 'a value'
  try:
    literal = ast.literal_eval(text)
  except (SyntaxError, ValueError):
    literal = None
  dotted = [k for k in literal if isinstance(k, str) and '.' in k] \
      if isinstance(literal, dict) else []
  if dotted:  # ml_collections takes no dots in a key: nest them
    group, name = dotted[0].split('.', 1)
    return (f'config.{path}={text!r} is not allowed: a key holds a dot '
            f'({dotted[0]!r}); nest a part\'s parameters instead, e.g. '
            f"{{'{group}': {{'{name}': ...}}}}")
  return f'config.{path}={text!r} is not allowed: it must be {kind}'


def diagnose(argv: Sequence[str], error: BaseException,
             config_flags: Sequence[str] = ('config',)) -> str:
  """The one line for a failed flag parse: what is wrong, by name."""
  for flag in config_flags:
    text = config_argument(argv, flag)
    given = overrides(argv, flag)
    if text is None:
      if given:
        return (f'--{flag}.{given[0][0]} needs --{flag}=FILE.py first (the '
                'config whose field it overrides)')
      continue
    try:
      config = load_config_file(text, flag)
    except CommandLineError as e:
      return str(e)
    for path, _ in given:
      try:
        check_path(config, path, flag)
      except CommandLineError as e:
        return str(e)
    message = _text(error)
    for path, value in given:
      if f'--{flag}.{path}' in message or f'{flag}.{path}' in message:
        return _value_error(config, path, value)
  message = _text(error)
  message = re.sub(r'^flag (--\S+): ', r'\1: ', message)
  unknown_flag = re.match(r"Unknown command line flag '([^']+)'", message)
  if unknown_flag:
    known = [name for name in flags.FLAGS if not name.startswith(
        tuple(f'{f}.' for f in config_flags))]
    near = closest(unknown_flag.group(1), known)
    hint = ('; did you mean ' + ' or '.join(f'--{n}' for n in near) + '?'
            if near else '; see --helpshort')
    return f'unknown flag --{unknown_flag.group(1)}{hint}'
  return message


def parse_flags(argv: Sequence[str],
                flag_values: flags.FlagValues | None = None,
                config_flags: Sequence[str] = ('config',)) -> list[str]:
  """Parses argv into `flag_values` (default absl's FLAGS).

  Raises:
    CommandLineError: one line naming what is wrong.
  """
  flag_values = flags.FLAGS if flag_values is None else flag_values
  for flag in config_flags:  # ml_collections defers a missing file's error
    text = config_argument(argv, flag)
    if text is not None and not os.path.isfile(text.split(':', 1)[0]):
      raise CommandLineError(f'--{flag}={text.split(":", 1)[0]}: no such '
                             'file')
  try:
    return flag_values(list(argv))
  except Exception as e:  # pylint: disable=broad-except
    # flags.Error (a value that does not parse, an unknown flag) and what
    # ml_collections raises for an unknown field (AttributeError, KeyError)
    # or a config file that fails (ValueError, TypeError, IOError).
    raise CommandLineError(diagnose(argv, e, config_flags)) from None


def _flags_parser(argv: Sequence[str]) -> list[str]:
  try:
    return parse_flags(argv)
  except CommandLineError as e:
    fail(e)


def fail(message: Any) -> None:
  """Exits with status 1 and `error: MESSAGE` as the one line on stderr."""
  text = ' '.join(str(message).split('\n'))
  sys.stderr.write(f'error: {text}\n')
  sys.stderr.flush()
  sys.exit(EXIT_BAD_INPUT)


def run(main: Callable[[list[str]], Any]) -> None:
  """absl's app.run(main), with one line for bad command-line input."""

  def checked(argv):
    try:
      return main(argv)
    except app.UsageError as e:
      fail(e)

  app.run(checked, flags_parser=_flags_parser)


__all__ = ['CommandLineError', 'EXIT_BAD_INPUT', 'check_path', 'closest',
           'diagnose', 'fail', 'load_config_file', 'overrides',
           'parse_flags', 'run', 'unknown']
