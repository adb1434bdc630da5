"""Fuzz tests of the input surface (hypothesis; the cases: tests/fuzz.py).

Every case must end in an allowed outcome: it runs, or it is refused with ONE
line that names the field, argument or file at fault; never a traceback,
never a bad value taken silently. The fast tier tries FAST cases per surface
(about 20 s in all); the full tier (`slow`) tries FULL per surface and, for a
sample of command lines, the launcher itself in a subprocess: exit 0 with
the run's files, or exit 1 with one `error:` line and no partial workdir.

Cases are derandomized (the same on every run) and nothing is stored
(database=None); `LAQ_JAX_FUZZ_SEED=N` draws another set.
"""

import os
import pathlib
import subprocess
import sys
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st
import pytest

from tests import common
from tests import fuzz

FAST = 40
FULL = 1000
SUBPROCESS_RUNS = 8

_seed = os.environ.get('LAQ_JAX_FUZZ_SEED')


def fuzz_settings(examples):
  return settings(max_examples=examples, deadline=None, database=None,
                  derandomize=_seed is None, print_blob=False,
                  suppress_health_check=list(HealthCheck))


_tmp = tempfile.TemporaryDirectory(prefix='laq_fuzz_test_')
TMP = pathlib.Path(_tmp.name)


def _check_cli(case):
  workdir = TMP / 'never_written'
  outcome = fuzz.cli_outcome(case, str(workdir))
  assert fuzz.cli_verdict(case, outcome) is None, (
      fuzz.cli_verdict(case, outcome), fuzz.cli_argv(case, 'W'), outcome[1])
  assert not workdir.exists()  # the check writes nothing


def _check_api(case):
  outcome = fuzz.api_outcome(case)
  assert fuzz.api_verdict(case, outcome) is None, (
      fuzz.api_verdict(case, outcome), case, outcome[1])


def _check_idx(case):
  path = TMP / 'file.idx'
  outcome = fuzz.idx_outcome(case, path)
  assert fuzz.idx_verdict(case, outcome, path) is None, (
      fuzz.idx_verdict(case, outcome, path), case, outcome[1])


def _check_libsvm(text):
  path = TMP / 'file.libsvm'
  outcome = fuzz.libsvm_outcome(text, path)
  assert fuzz.libsvm_verdict(text, outcome, path) is None, (
      fuzz.libsvm_verdict(text, outcome, path), text, outcome[1])


@fuzz_settings(FAST)
@given(fuzz.cli_case())
def test_command_line(case):
  _check_cli(case)


@fuzz_settings(FAST)
@given(fuzz.api_case())
def test_library(case):
  _check_api(case)


@fuzz_settings(FAST // 2)
@given(fuzz.idx_case())
def test_idx_files(case):
  _check_idx(case)


@fuzz_settings(FAST // 2)
@given(fuzz.libsvm_case())
def test_libsvm_files(text):
  _check_libsvm(text)


# --- payloads at the deployed server's gate (issue 52) ----------------------

_WIRE_P, _WIRE_M = 200, 3


def _wire_payloads():
  """A valid payload of each wire format (the compressors' own output)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from laq_jax import compressors, hyper as hyper_lib, quantize, wire  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  g = rng.normal(size=_WIRE_P).astype(np.float32)
  ref = (rng.normal(size=_WIRE_P) * 0.1).astype(np.float32)
  zeros = np.zeros(_WIRE_P, np.float32)
  h = hyper_lib.make_hyper('qsgd', dtype=jnp.float32)
  out = {}
  for fmt, value, reference in (
      (wire.Format('identity', _WIRE_P), g, zeros),
      (wire.Format('uniform', _WIRE_P, bits=4), np.asarray(
          quantize.quantize_innovation(g, ref, jnp.int32(4)).value_P), ref),
      (wire.Format('qsgd', _WIRE_P, levels=16), np.asarray(compressors.qsgd(
          g, jnp.zeros(_WIRE_P), jax.random.PRNGKey(0), h._replace(
              params={**h.params, 'qsgd': {'levels': jnp.int32(16)}}
          )).value_P), zeros),
      (wire.Format('top_k', _WIRE_P, k=20), None, zeros)):
    if value is None:  # top_k: the 20 largest, kept
      keep = np.argsort(-np.abs(g))[:20]
      value = zeros.copy()
      value[keep] = g[keep]
    fields = wire.fields_of(fmt, g, reference, value)
    out[fmt.compressor] = (fmt, wire.encode(fmt, fields), reference)
  return out


@fuzz_settings(FAST)
@given(st.sampled_from(('identity', 'uniform', 'qsgd', 'top_k')),
       st.lists(st.integers(0, 10**6), max_size=4),
       st.integers(-3, 3), st.binary(max_size=64), st.booleans(),
       st.one_of(st.none(), st.tuples(
           st.integers(0, 10**6),
           st.sampled_from((3e38, -3e38, 1e38, 1e30, float('inf'),
                            float('nan'), 0.0)))))
def test_payloads_at_the_gate(name, flips, cut, junk, replace, big):
  """Any payload, a valid one with bits flipped, cut or extended, or random
  bytes: decoded to finite values within `wire.bound`, or refused with a
  WireError; never another exception, never a value that would poison the
  aggregate."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from laq_jax import wire  # pylint: disable=g-import-not-at-top
  global _PAYLOADS  # pylint: disable=global-statement
  if _PAYLOADS is None:
    _PAYLOADS = _wire_payloads()
  fmt, payload, reference = _PAYLOADS[name]
  data = bytearray(junk if replace else payload)
  if big is not None and len(data) >= 4:
    # a float field (a radius, a norm, a value) set to an extreme: every
    # format's floats sit at 4-byte slots of these payloads
    slot = 4 * (big[0] % (len(data) // 4))
    data[slot:slot + 4] = np.array(big[1], '>f4').tobytes()
  for f in flips:
    if data:
      data[f % len(data)] ^= 1 << (f % 8)
  if cut < 0:
    data = data[:cut]
  elif cut > 0:
    data += bytes(cut)
  try:
    value = wire.decode(fmt, bytes(data), reference, num_workers=_WIRE_M)
  except wire.WireError:
    return
  assert np.all(np.isfinite(value))
  assert np.max(np.abs(value)) <= wire.bound(_WIRE_M)


_PAYLOADS = None


# The server's gate: one preset per wire format, MNIST logistic regression,
# M = 3 (tests/deploy_test.py's runs).
_SERVED = {'identity': ('lag', {}), 'uniform': ('laq', dict(step_size=0.5)),
           'qsgd': ('fedpaq', {}), 'top_k': ('ef21', {})}
_ROUND0 = {}


def _round0(name):
  """(spec, hyper, the three clients' round-0 uploads) of format `name`."""
  if name not in _ROUND0:
    from laq_jax import deploy  # pylint: disable=g-import-not-at-top
    from tests import deploy_test  # pylint: disable=g-import-not-at-top
    algo, overrides = _SERVED[name]
    spec, data, hyper = deploy_test.built(algo, **overrides)
    server = deploy.Server(spec, hyper)
    uploads = [deploy.Client(spec, data, hyper, m).round(server.broadcast(m))
               for m in range(3)]
    assert server.format.compressor == name and all(u.sent for u in uploads)
    _ROUND0[name] = spec, hyper, uploads
  return _ROUND0[name]


@fuzz_settings(FAST)
@given(st.sampled_from(tuple(_SERVED)), st.lists(st.integers(0, 10**7),
                                                  max_size=4),
       st.integers(-3, 3), st.booleans(),
       st.one_of(st.none(), st.tuples(
           st.integers(0, 10**7),
           st.sampled_from((3e38, -3e38, 1e30, float('inf'), float('nan'),
                            0.0)))),
       st.sampled_from(('honest', 'length', 'random')),
       st.integers(-10**9, 10**9))
def test_a_refused_client_leaves_theta_alone(name, flips, cut, send, big,
                                            declare, random_bits):
  """Client 1's round-0 upload, damaged (bits flipped, cut, extended, a
  float field at an extreme, its declared bits the honest count, its
  length's or any number) at `deploy.Server`: taken, it decodes to finite
  values within `wire.bound` and theta stays finite; refused, theta and the
  server's state are exactly those of a round where client 1 was absent."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from laq_jax import deploy, wire  # pylint: disable=g-import-not-at-top
  spec, hyper, uploads = _round0(name)
  data = bytearray(uploads[1].payload)
  if big is not None:
    slot = 4 * (big[0] % (len(data) // 4))
    data[slot:slot + 4] = np.array(big[1], '>f4').tobytes()
  for f in flips:
    data[f % len(data)] ^= 1 << (f % 8)
  data = bytes(data[:cut] if cut < 0 else data + bytes(cut))
  bits = {'honest': uploads[1].bits, 'length': 8 * len(data),
          'random': random_bits}[declare]

  def round_(hostile):
    server = deploy.Server(spec, hyper)
    for m in (0, 2):
      server.receive(m, True, uploads[m].payload, uploads[m].bits)
    if hostile:
      try:
        server.receive(1, send, data if send else None, bits)
      except wire.WireError as e:
        server.refuse(1, str(e))
    else:
      server.refuse(1, 'absent')
    taken = server.finish_round()
    return server, bool(taken[1])

  server, taken = round_(True)
  if taken:
    assert np.all(np.isfinite(np.asarray(server.theta_P)))
    held = np.asarray(server.state.last_upload_MxP[1])
    assert np.all(np.isfinite(held))
    assert np.max(np.abs(held)) <= wire.bound(3)
  else:
    absent, _ = round_(False)
    for got, want in zip(jax_leaves((server.theta_P, server.state)),
                         jax_leaves((absent.theta_P, absent.state))):
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def jax_leaves(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree.leaves(tree)


@pytest.mark.parametrize('name', ('identity', 'uniform', 'qsgd', 'top_k'))
def test_decoding_holds_memory_to_its_format(name):
  """What decoding a payload allocates (tracemalloc's peak, NumPy's arrays
  included), whatever the payload: random bytes of the format's largest
  valid length, at most 24x that length and the decoded vector's 4P bytes
  together (measured: up to 15x, the uniform format's bit unpacking); 50x
  that length, nothing (under 64 KiB): refused before it is read."""
  import tracemalloc  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from laq_jax import wire  # pylint: disable=g-import-not-at-top
  p = 20_000
  fmt = {'identity': wire.Format('identity', p),
         'uniform': wire.Format('uniform', p, bits=4),
         'qsgd': wire.Format('qsgd', p, levels=16),
         'top_k': wire.Format('top_k', p, k=200)}[name]
  largest = wire.payload_bytes(fmt.max_bits())
  reference = np.zeros(p, np.float32)
  rng = np.random.default_rng(0)
  # the first decode of a format may compile its reconstruction (a jitted
  # program, compressors._RECONSTRUCT): XLA's memory, not the decoding's,
  # so it happens once before anything is measured
  grad = rng.standard_normal(p).astype(np.float32)
  value = grad.copy()
  if name == 'top_k':  # k entries sent, the rest 0
    value[np.argsort(-np.abs(grad))[fmt.k:]] = 0
  valid = wire.encode(fmt, wire.fields_of(fmt, grad, reference, value))
  wire.decode(fmt, valid, reference, num_workers=_WIRE_M)
  for size, allowed in ((largest, 24 * (largest + 4 * p)),
                        (50 * largest, 64 * 1024)):
    for _ in range(3):
      payload = rng.bytes(size)
      tracemalloc.start()
      try:
        wire.decode(fmt, payload, reference, num_workers=_WIRE_M)
      except wire.WireError:
        pass
      finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
      assert peak <= allowed, (size, peak, allowed)


@pytest.mark.slow
@fuzz_settings(FULL)
@given(fuzz.cli_case())
def test_command_line_full(case):
  _check_cli(case)


@pytest.mark.slow
@fuzz_settings(FULL)
@given(fuzz.api_case())
def test_library_full(case):
  _check_api(case)


@pytest.mark.slow
@fuzz_settings(FULL)
@given(fuzz.idx_case())
def test_idx_files_full(case):
  _check_idx(case)


@pytest.mark.slow
@fuzz_settings(FULL)
@given(fuzz.libsvm_case())
def test_libsvm_files_full(text):
  _check_libsvm(text)


def _launch(argv, workdir):
  env = dict(os.environ, PYTHONPATH=common.ROOT, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  return subprocess.run([sys.executable, '-m', *argv], cwd=common.ROOT,
                        env=env, capture_output=True, text=True,
                        timeout=600, check=False)


_runs = iter(range(10**6))


@pytest.mark.slow
@fuzz_settings(SUBPROCESS_RUNS)
@given(fuzz.cli_case(launcher='main'))
def test_launcher_end_to_end(case):
  """The launcher itself: exit 0 and its files, or exit 1 with one line."""
  workdir = TMP / f'run{next(_runs)}'
  argv = fuzz.cli_argv(case, str(workdir))
  # Keep any run seconds long: the tiny budget, whatever the case set.
  argv += ['--config.num_iters=10', '--config.eval_every=5']
  done = _launch(argv, workdir)
  if done.returncode == 0:
    assert (workdir / 'summary.json').is_file(), done.stderr[-2000:]
    return
  lines = [l for l in done.stderr.splitlines() if l.strip()]
  assert 'Traceback' not in done.stderr, done.stderr[-3000:]
  assert done.returncode in (1, 3), (done.returncode, done.stderr[-3000:])
  assert lines and lines[-1].startswith('error: '), done.stderr[-3000:]
  if done.returncode == 1:  # refused before anything was written
    assert not workdir.exists() or not any(
        p.is_file() for p in workdir.rglob('*')), sorted(workdir.rglob('*'))


@pytest.mark.slow  # four launcher processes, end to end
def test_launcher_lines():
  """A few bad command lines, end to end: exit 1, one line, the hint."""
  cases = [
      (['experiments.main', '--config=configs/mnist_logreg.py:tiny',
        '--config.bitz=3'], "error: --config.bitz: no field 'bitz'; did you "
       "mean 'bits'?"),
      (['experiments.sweep', '--config=configs/sweep_bits_xi.py:tiny',
        '--config.sweep_grid_axis=vmapp'],
       "error: config.sweep_grid_axis='vmapp' is not allowed: it must be "
       "'auto' or 'map' or 'vmap'"),
      (['experiments.main', '--config=configs/mnist_logreg.py:tiny,bitz=3'],
       "no field 'bitz'; did you mean 'bits'?"),
      # ml_collections takes no dotted key: the line says how to nest it.
      (['experiments.sweep', '--config=configs/sweep_algos.py:tiny',
        "--config.sweep={'algo': ('fedavg',), 'local.lr': (0.1, 0.05)}"],
       "a key holds a dot ('local.lr'); nest a part's parameters instead, "
       "e.g. {'local': {'lr': ...}}"),
  ]
  for argv, want in cases:
    workdir = TMP / 'lines'
    done = _launch(argv + [f'--workdir={workdir}'], workdir)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.count('\n') == 1, done.stderr
    assert want in done.stderr, done.stderr
    assert not workdir.exists()
  # Workdirs that cannot hold results (issue 52: a file made
  # experiments.family print 5 tracebacks; an empty one wrote into the
  # current folder).
  afile = TMP / 'a_file'
  afile.write_text('not a folder')
  for argv, workdir, want in (
      (['experiments.family', '--tiny'], afile, 'is a file: give a folder'),
      (['experiments.main', '--config=configs/mnist_logreg.py:tiny'], '',
       "--workdir='' is empty")):
    done = _launch(argv + [f'--workdir={workdir}'], afile)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.count('\n') == 1, done.stderr
    assert want in done.stderr, done.stderr
  assert afile.read_text() == 'not a folder'


# Issue 52's hand-found command lines (a traceback, a hang or an unhelpful
# line before), as the launchers parse and check them: one line each,
# naming what is wrong. (End to end: test_launcher_lines; the workdirs and
# data files: there and in the data tests.)
HAND_FOUND = (
    (('main', 'mnist_logreg', [('flag', 'memory', '10000000000')]),
     'config.memory=10000000000 is not allowed'),  # an 80 GB allocation
    (('main', 'mnist_logreg', [('flag', 'algo', 'fedavg'),
                               ('flag', 'params.local.steps', '1000000000')]),
     'config.params.local.steps=1000000000 is not allowed'),  # a hang
    (('main', 'mnist_logreg', [('flag', 'num_iters', '3000000000'),
                               ('flag', 'eval_every', '3000000000')]),
     'config.num_iters=3000000000 is not allowed'),  # past the int32 counter
    (('main', 'sweep_bits_xi', []), 'python -m experiments.sweep'),
    (('main', 'mnist_logreg', [('flag', 'algo', 'l\u0430q')]),
     "'\u0430' U+0430 CYRILLIC SMALL LETTER A"),  # printed like 'laq'
    (('main', 'mnist_logreg', [('flag', 'num_workers', '10000000')]),
     'config.num_workers=10000000 is not allowed'),  # a refused suggestion
    (('sweep', 'sweep_algos', [
        ('flag', 'num_workers', '20'), ('flag', 'batch_size', '10'),
        ('flag', 'sweep', "{'algo': ('sgd',), 'clients_per_round': (5, 50)}")
    ]), 'config.clients_per_round=50 is not allowed'),  # a grid's value
)


@pytest.mark.parametrize('case,want', HAND_FOUND)
def test_hand_found_command_lines(case, want):
  kind, message = fuzz.cli_outcome(case, str(TMP / 'never_written'))
  assert kind == 'error' and want in message, (kind, message)
  assert fuzz._one_line(message) is None, message  # pylint: disable=protected-access
  if case[2]:  # names a field it sets
    assert fuzz.cli_verdict(case, (kind, message)) is None, message
  assert 'train_subset=10000000' not in message  # (itself refused)


def _other_value(value):
  """A value of the same type as `value`, different from it."""
  if isinstance(value, bool):
    return str(not value).lower()
  if isinstance(value, int):
    return str(value + 1)
  if isinstance(value, float):
    return repr(value * 0.5 if value else 0.5)
  return None


@pytest.mark.parametrize('name', fuzz.SWEEP_CONFIGS + fuzz.RUN_CONFIGS)
def test_every_documented_field_is_settable(name):
  """Every field of configs/default.py, and on sweep configs every sweep
  field (the optional ones too), can be set from the command line, in both
  forms, and a value that passes the check is the value the run takes."""
  import importlib  # pylint: disable=g-import-not-at-top
  from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
  sweep = name in fuzz.SWEEP_CONFIGS
  current = importlib.import_module(f'configs.{name}').get_config('tiny')
  values = {'sweep_grid_axis': 'vmap', 'sweep_batch_size': '2',
            'algo_settings': "{'laq': {'step_size': 0.01}}",
            'sweep': "{'bits': (2, 4)}"}
  fields = config_lib.FIELDS + ((config_lib.SWEEP_FIELDS
                                 + config_lib.OPTIONAL_SWEEP_FIELDS)
                                if sweep else ())
  taken = 0
  for field in fields:
    value = values.get(field) or _other_value(current[field]) or '__probe__'
    for form in ('flag', 'arg'):
      if form == 'arg' and set(value) & set(',:'):
        continue
      case = ('sweep' if sweep else 'main', name, [(form, field, value)])
      kind, message = fuzz.cli_outcome(case, str(TMP / 'w'))
      verdict = fuzz.cli_verdict(case, (kind, message))
      assert verdict is None, (field, form, value, verdict)
      if kind == 'error':  # refused for its value, never for its name
        assert 'no field' not in message, (field, message)
      taken += kind == 'ok'
  assert taken > len(fields) // 2  # most values are taken, and checked
