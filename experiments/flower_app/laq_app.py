"""The Flower App's entry points: `client` (a ClientApp) and `server` (a
ServerApp), laq-jax's presets on MNIST logistic regression, split over the
SuperNodes (the simulation's contiguous shards: the server numbers its
nodes, in node-id order, and node m computes on shard m).

The run config (pyproject.toml, or `flwr run --run-config`) names the
preset, the clients, the rounds; each process builds the same run from it
with the launchers' `experiments.run.build` (the clone on PYTHONPATH).
"""
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
if os.path.isdir(os.path.join(_ROOT, 'laq_jax')) and _ROOT not in sys.path:
  sys.path.insert(0, _ROOT)

from laq_jax import flower  # pylint: disable=g-import-not-at-top,wrong-import-position


_LOADED = {}


def _load_once(build):
  """build.load_dataset, once per dataset in this process (the runs of a
  deployment share their clients' data)."""
  load = build.load_dataset
  if getattr(load, 'once', False):
    return

  def load_once(config, dtype):
    key = (config.dataset, config.data_dir, str(dtype))
    if key not in _LOADED:
      _LOADED[key] = load(config, dtype)
    return _LOADED[key]

  load_once.once = True
  build.load_dataset = load_once


def _one(run_config, item):
  """(spec, data, hyper) of one preset with its overrides."""
  from configs import default  # pylint: disable=g-import-not-at-top
  from experiments.run import build  # pylint: disable=g-import-not-at-top
  _load_once(build)
  algo, *overrides = item.split(':')
  config = default.get_config()
  config.algo = algo
  config.num_workers = int(run_config['clients'])
  config.precision = 'float32'
  config.model = 'logreg'
  config.train_subset = int(run_config['train-subset'])
  config.fstar = 'none'
  config.num_iters = int(run_config['rounds'])
  overrides += str(run_config.get('config', '')).split()
  for override in overrides:
    name, _, value = override.partition('=')
    group = config
    *path, last = name.split('.')
    for p in path:
      group = group[p]
    old = group[last]
    if isinstance(old, bool):
      group[last] = value.lower() in ('1', 'true')
    elif old is None:
      group[last] = float(value)
    else:
      group[last] = type(old)(value)
  built = build.build(config)
  return built.spec, built.data, built.hyper


def make_run(run_config):
  """{preset: (spec, data, hyper)} of the runs the config names: `algo`, a
  comma-separated list of presets, each with its own overrides after
  colons ('laq:step_size=0.5,lag,fedpaq,fedavg')."""
  runs = {}
  for item in str(run_config['algo']).split(','):
    name = item.split(':')[0]
    if name in runs:
      raise ValueError(f'preset {name!r} named twice in algo')
    runs[name] = _one(run_config, item)
  return runs


def misbehave(run_config, step, reply, worker):
  """Rewrites a reply as run_config['misbehave'] says (tests of the
  server's gate): '<client>:<how>@<round>[/<preset>],...', how one of
  length (a byte short), width (b = 40), nan (a NaN radius), claim (says
  it is client 0: the server hears its node, not what it says), crash (the
  ClientApp raises), exit (its process dies mid-round); with /<preset>, only that preset's reply (crash and exit
  end the whole message: every preset's)."""
  plan = {}
  for item in filter(None, str(run_config.get('misbehave', '')).split(',')):
    who, _, rest = item.partition(':')
    rest, _, only = rest.partition('/')
    how, _, at = rest.partition('@')
    plan[(int(who), int(at))] = (how, only)
  how, only = plan.get((worker, step), (None, ''))
  if how is None or (only and only != reply.get('name')
                     and how not in ('crash', 'exit')):
    return reply
  reply = dict(reply)
  payload = reply.get('payload') or b''
  if how == 'length':
    reply.update(sent=True, payload=payload[:-1] or b'\0')
  elif how == 'width':
    reply['format.bits'] = 40
  elif how == 'nan':  # uniform's radius: the 32 bits after the b p codes
    import numpy as np  # pylint: disable=g-import-not-at-top
    bits = np.unpackbits(np.frombuffer(payload, np.uint8))
    start = int(reply['bits']) - 32
    bits[start:start + 32] = np.unpackbits(
        np.frombuffer(np.array(np.nan, '>f4').tobytes(), np.uint8))
    reply['payload'] = np.packbits(bits).tobytes()
  elif how == 'claim':
    reply['worker'] = 0
  elif how == 'crash':
    raise RuntimeError('the client failed mid-round')
  elif how == 'exit':
    os._exit(1)  # pylint: disable=protected-access
  return reply


client = flower.client_app(make_run, misbehave=misbehave)
server = flower.server_app(make_run)
