"""The input surface's fuzz cases (hypothesis strategies) and their verdicts.

Three surfaces, each a strategy of cases and a function that runs one case
and returns its outcome:

  command line  `cli_case`: a shipped config with one to three fields set
                (`--config.FIELD=VALUE` or `:FIELD=VALUE`) to values of the
                wrong type, out of range, non-finite, unknown names, near
                misses of real names; `cli_outcome` runs the launcher's flag
                parse and config check in this process.
  library       `api_case`: make_hyper, RunSpec, Data (+ run), stack_hypers,
                make_network and the participation fields with wrong values.
  data files    `idx_case`, `libsvm_case`: a valid file, then truncated,
                bytes flipped, junk appended, or (LIBSVM) lines and labels
                generated from tokens, good and bad.

`verdict(...)` returns None for an allowed outcome (it ran, or it refused
with one line that names what is wrong) and a short class of failure
otherwise ("traceback TypeError in make_hyper", "multi-line message", "bad
value accepted", ...). tests/fuzz_test.py asserts None for every case.
"""

from __future__ import annotations

import gzip
import math
import pathlib
import string
import traceback
from typing import Any

from hypothesis import strategies as st
import numpy as np

from tests import common

ROOT = pathlib.Path(common.ROOT)
RUN_CONFIGS = ('default', 'mnist_logreg', 'mnist_logreg_stochastic',
               'mnist_mlp', 'mnist_mlp_stochastic', 'compressors')
SWEEP_CONFIGS = ('sweep_bits_xi', 'sweep_algos', 'sweep_compressors',
                 'federated')
# Values as a user types them, wrong and right.
TEXT_VALUES = (
    '-1', '0', '1', '2', '3', '8', '0.5', '-0.5', '1e-3', '1e309', '-1e309',
    'nan', 'NaN', 'inf', '-inf', 'abc', '', ' ', 'true', 'false', 'True',
    'None', 'none', '[1, 2]', '(2, 4)', '(0.1,)', '()', "{'a': 1}", '{}',
    '1e30', '99999999999999999999', '0x10', '1_000', 'laq', 'slaq', 'mnist',
    'ring', 'star', 'vmap', 'map', 'devices', 'auto', 'drop', 'stale',
    'mobile', 'exp', '300:2,500:6', '10:2', 'libsvm:/nonexistent',
    'builtin:heart_scale', 'builtin:nope', 'dirichlet', 'iid', 'float16',
    '\u00e9', '1.0', '600', '6e3', 'samples', 'uniform', 'sum', 'fedavg',
    'scaffold', "{'laq': {'step_size': 0.01}}",
    "{'slaq': {'bitz': 3}}", "{'bits': (2, 4)}", "{'bitz': (2,)}",
)
MUST_LINE = 2000  # characters: a message may list the allowed names


# ----------------------------------------------------------------------------
# Names: real fields, near misses, made up ones.

def _config_fields(sweep: bool) -> tuple[str, ...]:
  from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.FIELDS + ((config_lib.SWEEP_FIELDS
                               + config_lib.OPTIONAL_SWEEP_FIELDS)
                              if sweep else ())


@st.composite
def near_miss(draw, names):
  """A real name with one edit (a typo)."""
  name = draw(st.sampled_from(names))
  i = draw(st.integers(0, len(name) - 1))
  edit = draw(st.sampled_from(('drop', 'double', 'swap', 'replace',
                               'upper', 'suffix')))
  if edit == 'drop':
    out = name[:i] + name[i + 1:]
  elif edit == 'double':
    out = name[:i] + name[i] + name[i:]
  elif edit == 'swap' and i + 1 < len(name):
    out = name[:i] + name[i + 1] + name[i] + name[i + 2:]
  elif edit == 'replace':
    out = name[:i] + draw(st.sampled_from(string.ascii_lowercase)) + \
        name[i + 1:]
  elif edit == 'upper':
    out = name.upper()
  else:
    out = name + draw(st.sampled_from(('s', '_', '2', 'x')))
  return out or 'x'


IDENTIFIER = st.from_regex(r'\A[a-z][a-z0-9_]{0,12}\Z', fullmatch=True)


def _nested_fields() -> tuple[str, ...]:
  """The nested groups' fields: every part's own parameters (LASG's L,
  CADA's c, the servers' b1, b2, eps, ...) and the network's."""
  from laq_jax import hyper as hyper_lib  # pylint: disable=g-import-not-at-top
  from laq_jax import parts as parts_lib  # pylint: disable=g-import-not-at-top
  return (tuple(f'params.{k}' for k in parts_lib.param_keys())
          + tuple(f for f in hyper_lib.DEFAULTS if '.' in f))


# Sweep axes the cases set (a tuple of values, or one): the single run's
# checks apply to every point (clients_per_round over the workers, the
# memory's bound, a step counter's).
SWEEP_AXES = ('bits', 'xi', 'algo', 'step_size', 'seed', 'clients_per_round',
              'participation', 'num_workers', 'memory', 'deadline_s',
              'num_iters', 'local.steps')


def field_names(sweep: bool):
  names = _config_fields(sweep) + _nested_fields()
  nested = st.one_of(
      st.builds(lambda a: f'sweep.{a}', st.one_of(
          st.sampled_from(SWEEP_AXES), IDENTIFIER)),
      st.builds(lambda a, b: f'algo_settings.{a}.{b}',
                st.sampled_from(('laq', 'slaq', 'ef21', 'nope')),
                st.sampled_from(('step_size', 'bits', 'bitz'))),
      st.builds(lambda a, b: f'{a}.{b}', st.sampled_from(names), IDENTIFIER))
  return st.one_of(st.sampled_from(names), st.sampled_from(names),
                   st.sampled_from(names), near_miss(names), IDENTIFIER,
                   nested if sweep else near_miss(names))


VALUE_TEXT = st.one_of(
    st.sampled_from(TEXT_VALUES), st.sampled_from(TEXT_VALUES),
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet=string.ascii_letters + string.digits + '._-+ ',
            max_size=8))


@st.composite
def cli_case(draw, launcher: str | None = None):
  """(launcher, config name, [(form, field, value text)])."""
  launcher = launcher or draw(st.sampled_from(('main', 'sweep')))
  sweep = launcher == 'sweep'
  name = draw(st.sampled_from(SWEEP_CONFIGS if sweep else RUN_CONFIGS))
  items = []
  for _ in range(draw(st.integers(1, 3))):
    field = draw(field_names(sweep))
    value = draw(VALUE_TEXT)
    if field in _DEFAULTS and draw(st.integers(0, 1)) == 0:
      value = draw(good_value(field))  # one the run takes
    if field.startswith('sweep.') and draw(st.booleans()):
      # an axis: a tuple of values, some of them a run takes
      axis = field.split('.', 1)[1]
      value = '(' + ', '.join(draw(st.lists(
          good_value(axis) if axis in _DEFAULTS else VALUE_TEXT,
          min_size=1, max_size=3)) + [draw(st.sampled_from(
              ('0', '-1', '10**12', '3', '0.5', "'laq'")))]) + ')'
    # The ':FIELD=VALUE' form splits on ',' and takes no nested fields.
    arg_form = ('.' not in field and not set(value) & set(',:')
                and draw(st.booleans()))
    items.append(('arg' if arg_form else 'flag', field, value))
  return launcher, name, items


_DEFAULTS = {k: v for k, v in __import__('configs.default').default
             .get_config().items() if v is not None}


@st.composite
def good_value(draw, field):
  """An allowed value of `field` (mostly): its default or one near it."""
  default = _DEFAULTS[field]
  if isinstance(default, bool):
    return draw(st.sampled_from(('true', 'false')))
  if isinstance(default, int):
    return str(draw(st.sampled_from((default, default + 1, 1, 2, 10))))
  if isinstance(default, float):
    return repr(draw(st.sampled_from((default, default * 0.5, default * 2,
                                      0.5, 1.0))))
  return str(default)


def cli_argv(case, workdir: str) -> list[str]:
  launcher, name, items = case
  arg = ','.join(['tiny'] + [f'{f}={v}' for form, f, v in items
                             if form == 'arg'])
  argv = [f'experiments.{launcher}', f'--config={ROOT}/configs/{name}.py:{arg}',
          f'--workdir={workdir}']
  argv += [f'--config.{f}={v}' for form, f, v in items if form == 'flag']
  return argv


def cli_outcome(case, workdir: str):
  """('ok', config) or ('error', message) or ('crash', traceback text): the
  launcher's flag parse and config check, as `experiments.main` / `.sweep`
  run them before anything is loaded or written."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  from experiments.run import cli  # pylint: disable=g-import-not-at-top
  from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
  argv = cli_argv(case, workdir)
  values = flags.FlagValues()
  flags.DEFINE_string('workdir', None, '', flag_values=values)
  flags.DEFINE_bool('overwrite', False, '', flag_values=values)
  config_flags.DEFINE_config_file('config', None, '', flag_values=values,
                                  lock_config=True, sys_argv=argv)
  try:
    cli.parse_flags(argv, values)
    config = values.config
    if case[0] == 'sweep':
      config_lib.points_from_config(config)
    else:
      config_lib.validate_config(config)
  except (cli.CommandLineError, config_lib.ConfigError) as e:
    return 'error', str(e)
  except Exception:  # pylint: disable=broad-except
    return 'crash', traceback.format_exc()
  return 'ok', config


def _matches(text: str, value) -> bool:
  """Whether a config value is what `text` asked for."""
  if isinstance(value, bool):
    return text.lower() in (('1', 'true', 'yes') if value else
                            ('0', 'false', 'no'))
  if isinstance(value, int) and not isinstance(value, bool):
    for base in (10, 0):  # '010'; any Python literal: '0x10', '0o20'
      try:
        return int(text, base) == value
      except ValueError:
        pass
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    try:
      wanted = float(text)
    except ValueError:
      return False
    return wanted == value or (math.isnan(wanted) and math.isnan(value))
  if isinstance(value, str):
    return value == text
  return True  # tuples and dicts: parsed by ml_collections' literal parser


def _one_line(message: str) -> str | None:
  if '\n' in message or 'Traceback' in message:
    return 'multi-line message'
  if not message.strip():
    return 'empty message'
  if len(message) > MUST_LINE:
    return f'message of {len(message)} characters'
  return None


def cli_verdict(case, outcome) -> str | None:
  kind, value = outcome
  if kind == 'crash':
    last = value.strip().splitlines()[-1]
    return f'traceback: {last.split(":")[0]}'
  if kind == 'error':
    bad = _one_line(value)
    if bad:
      return bad
    named = [f for _, f, _ in case[2]]
    parts = {p for f in named for p in f.split('.')}
    if not any(p in value for p in parts):
      return 'the message names none of the fields set'
    return None
  config = value  # ok: every value set is what the config holds
  final = {}
  for form, field, text in ([i for i in case[2] if i[0] == 'arg']
                            + [i for i in case[2] if i[0] == 'flag']):
    final[field] = text
  for field, text in final.items():
    node = config
    for part in field.split('.'):
      node = node[part]
    if not _matches(text, node):
      return 'a value set on the command line is not the value run'
  return None


# ----------------------------------------------------------------------------
# The library API.

PY_VALUES = st.one_of(
    st.sampled_from([-1, 0, 1, 2, 3, 8, 33, 0.5, -0.5, 1e-3, 1e300, 2**40,
                     float('nan'), float('inf'), float('-inf'), True, False,
                     None, 'abc', '', 'laq', 'ring', 'drop', 'exp',
                     '300:2,500:6', [1, 2], [], (0.1, 0.2), {}, {'a': 1},
                     complex(1, 1), b'x', object()]),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.asarray, st.lists(st.floats(-10, 10), max_size=3)),
    st.builds(lambda n: np.ones((n, 2)), st.integers(0, 2)),
    st.integers(-10**3, 10**3), st.floats())


def api_case():
  from laq_jax import hyper as hyper_lib  # pylint: disable=g-import-not-at-top
  from laq_jax import network as network_lib  # pylint: disable=g-import-not-at-top
  import laq_jax  # pylint: disable=g-import-not-at-top
  hyper_names = tuple(hyper_lib.DEFAULTS)
  participation = ('participation', 'clients_per_round', 'absent',
                   'deadline_s', 'weighting', 'local.steps', 'local.lr',
                   'local.mu', 'scaffold.lr', 'fedadam.tau', 'fedyogi.b2')
  kwargs = lambda names: st.dictionaries(  # noqa: E731
      st.one_of(st.sampled_from(names), near_miss(names)), PY_VALUES,
      min_size=1, max_size=3)
  algos = st.one_of(st.sampled_from(tuple(laq_jax.ALGORITHMS)), st.just('lqa'),
                    PY_VALUES)
  return st.one_of(
      st.tuples(st.just('make_hyper'), algos, kwargs(hyper_names)),
      st.tuples(st.just('make_hyper'), algos, kwargs(participation)),
      st.tuples(st.just('make_network'),
                st.one_of(st.sampled_from(tuple(network_lib.PROFILES)),
                          PY_VALUES),
                kwargs(network_lib.FIELDS + ('num_workers',))),
      st.tuples(st.just('RunSpec'), st.none(), kwargs((
          'num_workers', 'memory', 'stochastic', 'batch_size', 'compressors',
          'error_feedback', 'downlink', 'grid_axis', 'loss_every',
          'triggers', 'participation', 'problem', 'rule', 'clients',
          'weighting', 'servers'))),
      st.tuples(st.just('Data'), st.sampled_from(DATA_FAULTS),
                st.integers(0, 2**16)),
      st.tuples(st.just('stack_hypers'), st.sampled_from(STACK_FAULTS),
                st.integers(0, 2**16)),
  )


DATA_FAULTS = ('workers', 'labels_shape', 'x_rank', 'x_int', 'y_float',
               'nan', 'inf', 'label_negative', 'label_too_big', 'features',
               'count_shape', 'count_range', 'batch', 'x_list', 'xt_shape',
               'none')
STACK_FAULTS = ('none', 'mixed', 'not_hyper', 'empty', 'mismatched_grid',
                'mismatched_network')


def _small_data(rng, m=3, n=6, d=5):
  import laq_jax  # pylint: disable=g-import-not-at-top
  x = rng.normal(size=(m, n, d)).astype(np.float32)
  y = rng.integers(0, 4, size=(m, n)).astype(np.int32)
  return laq_jax.Data(x, y)


def api_outcome(case):
  """('ok', value) / ('error', message) / ('crash', traceback); for Data
  and stack_hypers, ('ok', ...) of a faulty input is 'accepted'."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import laq_jax  # pylint: disable=g-import-not-at-top
  kind = case[0]
  try:
    if kind == 'make_hyper':
      return 'ok', laq_jax.make_hyper(case[1], **case[2])
    if kind == 'make_network':
      return 'ok', laq_jax.make_network(case[1], **case[2])
    if kind == 'RunSpec':
      kwargs = {'problem': laq_jax.get_problem('logreg', 5, 4),
                'num_workers': 3, **case[2]}
      return 'ok', laq_jax.RunSpec(**kwargs)
    rng = np.random.default_rng(case[2])
    problem = laq_jax.get_problem('logreg', 5, 4)
    if kind == 'Data':
      fault = case[1]
      data = _small_data(rng)
      spec = laq_jax.RunSpec(problem, num_workers=3)
      x, y = data.x_MxNxD, data.y_MxN
      if fault == 'workers':
        spec = laq_jax.RunSpec(problem, num_workers=int(rng.choice([1, 2, 5])))
      elif fault == 'labels_shape':
        data = data._replace(y_MxN=y[:, :-1])
      elif fault == 'x_rank':
        data = data._replace(x_MxNxD=x.reshape(3, -1))
      elif fault == 'x_int':
        data = data._replace(x_MxNxD=x.astype(np.int32))
      elif fault == 'y_float':
        data = data._replace(y_MxN=y.astype(np.float32))
      elif fault in ('nan', 'inf'):
        x = x.copy()
        x[tuple(rng.integers(0, s) for s in x.shape)] = (
            np.nan if fault == 'nan' else -np.inf)
        data = data._replace(x_MxNxD=x)
      elif fault in ('label_negative', 'label_too_big'):
        y = y.copy()
        y[tuple(rng.integers(0, s) for s in y.shape)] = (
            -1 if fault == 'label_negative' else 4 + int(rng.integers(0, 3)))
        data = data._replace(y_MxN=y)
      elif fault == 'features':
        data = data._replace(x_MxNxD=x[:, :, :-1])
      elif fault == 'count_shape':
        data = data._replace(count_M=np.array([6, 6], np.int32))
      elif fault == 'count_range':
        data = data._replace(count_M=np.array([6, 0, 7], np.int32))
      elif fault == 'batch':
        spec = laq_jax.RunSpec(problem, num_workers=3, stochastic=True,
                               batch_size=7)
      elif fault == 'x_list':
        data = data._replace(x_MxNxD=x.tolist())
      elif fault == 'xt_shape':
        data = data._replace(xt_MxDxN=np.swapaxes(x, 1, 2)[:, :, :-1])
      hyper = laq_jax.make_hyper('laq', bits=3)
      spec.check_hyper(hyper)
      spec.check_data(data)
      if case[2] % 8 == 0:  # a sample runs: the check is the one run makes
        laq_jax.run(spec, data, hyper, 2)
      return 'ok', fault
    if kind == 'stack_hypers':
      fault = case[1]
      hypers = [laq_jax.make_hyper('laq', bits=b) for b in (2, 3, 4)]
      spec = laq_jax.RunSpec(problem, num_workers=3)
      if fault == 'mixed':
        hypers = [laq_jax.make_hyper(a) for a in ('gd', 'laq', 'ef21')] + [
            laq_jax.make_hyper('laq', network=laq_jax.make_network(
                'mobile', num_workers=3))]
      elif fault == 'not_hyper':
        hypers = hypers + [{'bits': 3}]
      elif fault == 'empty':
        hypers = []
      grid = laq_jax.stack_hypers(hypers)
      if fault == 'mismatched_grid':
        grid = grid._replace(bits=jnp.asarray([2, 3], jnp.int32))
      elif fault == 'mismatched_network':
        grid = grid._replace(network=grid.network._replace(
            up_bps=jnp.ones((2,))))
      spec.check_hyper(grid)
      return 'ok', fault
  except ValueError as e:
    return 'error', str(e)
  except Exception:  # pylint: disable=broad-except
    return 'crash', traceback.format_exc()
  raise AssertionError(kind)


def api_verdict(case, outcome) -> str | None:
  kind, value = outcome
  where = case[0] + (f'({case[1]})' if case[0] in ('Data', 'stack_hypers')
                     else '')
  if kind == 'crash':
    last = value.strip().splitlines()[-1]
    return f'traceback in {case[0]}: {last.split(":")[0]}'
  if kind == 'error':
    bad = _one_line(value)
    if bad:
      return f'{bad} from {case[0]}'
    if case[0] in ('make_hyper', 'make_network', 'RunSpec'):
      names = [str(k) for k in case[2]] + [str(case[1])]
      if not any(n in value for n in names) and 'profile' not in value \
          and 'algo' not in value:
        return f'{case[0]}: the message names none of the arguments'
    return None
  if case[0] == 'Data' and case[1] != 'none':
    return f'bad input accepted: {where}'
  if case[0] == 'stack_hypers' and case[1] not in ('none', 'mixed'):
    return f'bad input accepted: {where}'
  if case[0] == 'make_hyper':
    for name, v in case[2].items():
      if isinstance(v, float) and math.isnan(v):
        return f'bad input accepted: make_hyper({name}=nan)'
  return None


# ----------------------------------------------------------------------------
# Data files.

def idx_bytes(rng, kind: str) -> bytes:
  """A valid IDX file: images (rank 3, uint8) or labels (rank 1)."""
  n = int(rng.integers(1, 6))
  if kind == 'images':
    header = bytes([0, 0, 0x08, 3]) + np.array([n, 4, 4], '>u4').tobytes()
    body = rng.integers(0, 256, n * 16, dtype=np.uint8).tobytes()
  else:
    header = bytes([0, 0, 0x08, 1]) + np.array([n], '>u4').tobytes()
    body = rng.integers(0, 10, n, dtype=np.uint8).tobytes()
  return header + body


IDX_FAULTS = ('truncate', 'flip', 'flip_header', 'append', 'empty',
              'gzip_truncate', 'gzip', 'none')


@st.composite
def idx_case(draw):
  return (draw(st.sampled_from(('images', 'labels'))),
          draw(st.sampled_from(IDX_FAULTS)), draw(st.integers(0, 2**16)))


def idx_content(case) -> tuple[bytes, bool]:
  """(the file's bytes, whether it must be refused)."""
  kind, fault, seed = case
  rng = np.random.default_rng(seed)
  good = idx_bytes(rng, kind)
  content, refuse = good, False
  if fault == 'truncate':
    content, refuse = good[:int(rng.integers(0, len(good)))], True
  elif fault in ('flip', 'flip_header'):
    at = int(rng.integers(0, 8 if fault == 'flip_header' else len(good)))
    content = bytearray(good)
    content[at] ^= int(rng.integers(1, 256))
    content = bytes(content)
  elif fault == 'append':
    content, refuse = good + rng.bytes(int(rng.integers(1, 9))), True
  elif fault == 'empty':
    content, refuse = b'', True
  elif fault == 'gzip':
    content = gzip.compress(good)
  elif fault == 'gzip_truncate':
    packed = gzip.compress(good)
    content, refuse = packed[:int(rng.integers(1, len(packed)))], True
  return content, refuse


def idx_outcome(case, path: pathlib.Path):
  from laq_jax import data  # pylint: disable=g-import-not-at-top
  content, _ = idx_content(case)
  path.write_bytes(content)
  try:
    return 'ok', data.read_idx(path)
  except data.DataError as e:
    return 'error', str(e)
  except Exception:  # pylint: disable=broad-except
    return 'crash', traceback.format_exc()


def idx_verdict(case, outcome, path) -> str | None:
  kind, value = outcome
  content, refuse = idx_content(case)
  if kind == 'crash':
    return f'traceback reading IDX ({case[1]}): ' + \
        value.strip().splitlines()[-1].split(':')[0]
  if kind == 'error':
    return _one_line(value) or (None if str(path) in value else
                                'the IDX error does not name the file')
  if refuse:
    return f'corrupt IDX file accepted ({case[1]})'
  return None


LABELS = ('1', '-1', '+1', '0', '2', '3', '0.5', '1e3', 'nan', 'inf', '-inf',
          'abc', '', '1e400', '7')
INDICES = ('1', '2', '3', '4', '0', '-1', 'a', '1.5', '99', '')
VALUES = ('0.5', '-1', '0', '1e-3', 'nan', 'inf', 'x', '1e400', '', '3')


@st.composite
def libsvm_case(draw):
  """The lines of a LIBSVM file, from good and bad tokens."""
  lines = []
  for _ in range(draw(st.integers(0, 6))):
    kind = draw(st.sampled_from(('row', 'row', 'row', 'blank', 'comment',
                                 'qid', 'junk')))
    if kind == 'blank':
      lines.append('')
      continue
    if kind == 'comment':
      lines.append('# a comment')
      continue
    if kind == 'junk':
      lines.append(draw(st.text(alphabet=string.printable, max_size=12)))
      continue
    label = draw(st.sampled_from(LABELS))
    pairs = []
    for _ in range(draw(st.integers(0, 4))):
      sep = draw(st.sampled_from((':', ':', ':', '', '::')))
      pairs.append(draw(st.sampled_from(INDICES)) + sep
                   + draw(st.sampled_from(VALUES)))
    if kind == 'qid':
      pairs.insert(0, 'qid:1')
    lines.append(' '.join([label] + pairs))
  return '\n'.join(lines) + draw(st.sampled_from(('', '\n')))


def libsvm_outcome(text: str, path: pathlib.Path):
  from laq_jax import data  # pylint: disable=g-import-not-at-top
  path.write_text(text)
  try:
    return 'ok', data.load_libsvm(path)
  except data.DataError as e:
    return 'error', str(e)
  except Exception:  # pylint: disable=broad-except
    return 'crash', traceback.format_exc()


def libsvm_verdict(text, outcome, path) -> str | None:
  kind, value = outcome
  if kind == 'crash':
    return 'traceback reading LIBSVM: ' + \
        value.strip().splitlines()[-1].split(':')[0]
  if kind == 'error':
    return _one_line(value) or (None if str(path) in value else
                                'the LIBSVM error does not name the file')
  x, y = value
  if not libsvm_labels_ok(text):
    return 'LIBSVM label NaN/inf accepted'
  if not np.all(np.isfinite(x)):
    return 'LIBSVM features NaN/inf accepted'
  if y.size and (y.min() < 0 or y.max() >= max(len(np.unique(y)), 1)):
    return 'LIBSVM labels outside 0..C-1'
  return None


def libsvm_labels_ok(text: str) -> bool:
  """Whether every row's label is a finite number (what a class can be)."""
  for line in text.splitlines():
    line = line.split('#', 1)[0].strip()
    if not line:
      continue
    try:
      if not math.isfinite(float(line.split()[0])):
        return False
    except ValueError:
      return True  # the line does not parse: the parse error comes first
  return True


__all__ = ['api_case', 'api_outcome', 'api_verdict', 'cli_argv', 'cli_case',
           'cli_outcome', 'cli_verdict', 'idx_case', 'idx_outcome',
           'idx_verdict', 'libsvm_case', 'libsvm_outcome', 'libsvm_verdict']
