"""Where the suite's time goes: JAX's tracing, lowering to StableHLO and XLA's
backend compile, from jax's monitoring events, per test module.

The pytest process records per module (tests/conftest.py); every process the
suite starts records itself through tests/_site/sitecustomize.py. Both append
JSON lines to $LAQ_JAX_COMPILE_STATS; `python tests/_compile_stats.py FILE`
sums them per module (./test.sh prints that table).
"""
import atexit
import collections
import json
import os
import sys
import time

EVENTS = {
    '/jax/core/compile/jaxpr_trace_duration': 'trace',
    '/jax/core/compile/jaxpr_to_mlir_module_duration': 'lower',
    '/jax/core/compile/backend_compile_duration': 'compile',
    '/jax/compilation_cache/cache_retrieval_time_sec': 'cache_load',
    '/jax/compilation_cache/compile_time_saved_sec': 'saved',
}
COUNTS = {
    '/jax/compilation_cache/cache_hits': 'cache_hits',
    '/jax/compilation_cache/cache_misses': 'cache_misses',
}

totals = collections.Counter()


def _on_duration(event, duration, **_):
  key = EVENTS.get(event)
  if key is not None:
    totals[key] += duration
    if key == 'compile':
      totals['programs'] += 1


def _on_event(event, **_):
  key = COUNTS.get(event)
  if key is not None:
    totals[key] += 1


def register():
  from jax._src import monitoring  # pylint: disable=g-import-not-at-top
  if _on_duration not in monitoring.get_event_duration_listeners():
    monitoring.register_event_duration_secs_listener(_on_duration)
    monitoring.register_event_listener(_on_event)


def take():
  """The totals since the last take, and zero them."""
  out = dict(totals)
  totals.clear()
  return out


def append(record):
  path = os.environ.get('LAQ_JAX_COMPILE_STATS')
  if not path:
    return
  with open(path, 'a', encoding='utf-8') as f:
    f.write(json.dumps(record) + '\n')


def install_hook(subprocess=False):
  """Registers the listeners when jax._src.monitoring is first imported."""
  import importlib.abc  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top

  class _Finder(importlib.abc.MetaPathFinder):

    def find_spec(self, name, path, target=None):
      if name != 'jax._src.monitoring':
        return None
      sys.meta_path.remove(self)
      spec = importlib.util.find_spec(name)
      loader = spec.loader
      original = loader.exec_module

      def exec_module(module):
        original(module)
        monitoring = module
        monitoring.register_event_duration_secs_listener(_on_duration)
        monitoring.register_event_listener(_on_event)

      loader.exec_module = exec_module
      return spec

  sys.meta_path.insert(0, _Finder())
  if subprocess:
    start = time.time()

    def _dump():
      if totals:
        record = take()
        record['module'] = os.environ.get('LAQ_JAX_STATS_TAG', '?')
        record['process'] = 'sub'
        record['wall'] = time.time() - start
        append(record)

    atexit.register(_dump)


def summarize(path, out=sys.stdout):
  rows = collections.defaultdict(collections.Counter)
  with open(path, encoding='utf-8') as f:
    for line in f:
      r = json.loads(line)
      m = r.pop('module')
      proc = r.pop('process', 'main')
      rows[m]['procs' if proc == 'sub' else 'main_wall'] += (
          1 if proc == 'sub' else r.get('wall', 0.0))
      for k, v in r.items():
        if k != 'wall':
          rows[m][k] += v
  keys = ('trace', 'lower', 'compile', 'cache_load', 'saved', 'programs',
          'cache_hits')
  total = collections.Counter()
  print(f"{'module':32s} {'wall':>7s} {'sub':>4s} " +
        ' '.join(f'{k:>10s}' for k in keys), file=out)
  for m, r in sorted(rows.items(), key=lambda kv: -(kv[1]['trace'] + kv[1]['lower'] + kv[1]['compile'])):
    total.update(r)
    print(f"{m:32s} {r['main_wall']:7.1f} {r['procs']:4d} " +
          ' '.join(f'{r[k]:10.1f}' for k in keys), file=out)
  print(f"{'TOTAL':32s} {total['main_wall']:7.1f} {total['procs']:4d} " +
        ' '.join(f'{total[k]:10.1f}' for k in keys), file=out)


if __name__ == '__main__':
  summarize(sys.argv[1])
