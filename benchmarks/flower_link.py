"""Seconds held against a real link: the deployed laq and gd on Flower, each
SuperNode in a network namespace of its own behind a veth link whose upload
is shaped with `tc tbf`, against the network model's bandwidth term.

    sudo python -m benchmarks.flower_link [--rates 64,256] [--rounds 8]

Per rate (kbit/s; 0: unshaped) and algorithm, `flwr run` runs
experiments/flower_app for `--rounds` rounds on 3 SuperNodes. Each reply
carries the time it left its ClientApp; the server notes when it holds it
(`laq_jax.flower`, polling every 100 ms), so `upload_s` is the client's
upload through the shaped link plus a fixed local cost (the ClientApp hands
the reply to its SuperNode, which pushes it). The unshaped run measures that
cost; a shaped run's upload time is its `upload_s` less the unshaped mean
for the same kind of reply (an upload, or a skip's notice).

The model's term for the same upload is `bits / up_bps` (laq_jax.network:
`u = up_latency_s + bits_up / up_bps`), the payload's bits alone. What it
leaves out and the link carries: Flower's framing of the message (its
protobuf records and object tree, `message_bytes`), the HTTP requests that
push it, TCP/IP headers and acknowledgements, TCP's slow start. `tc` here
has tbf and htb but not netem, so no latency is emulated (the model's
`up_latency_s` is not tested). Needs root, iproute2 and the flower extra;
prints a Markdown table and writes --out (JSON).
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, 'experiments', 'flower_app')
BIN = os.path.dirname(sys.executable)
CLIENTS = 3


def sh(*args, check=True):
  return subprocess.run(args, check=check, capture_output=True, text=True)


def free_port():
  with socket.socket() as s:
    s.bind(('', 0))
    return s.getsockname()[1]


class Namespaces:
  """CLIENTS namespaces laqfl<i>, each joined to the host by a veth pair:
  host 10.231.<i>.1, namespace 10.231.<i>.2."""

  def __init__(self):
    self.names = [f'laqfl{i}' for i in range(CLIENTS)]

  def __enter__(self):
    self.__exit__()
    for i, ns in enumerate(self.names):
      sh('ip', 'netns', 'add', ns)
      sh('ip', 'link', 'add', f'laqh{i}', 'type', 'veth', 'peer', 'name',
         f'laqn{i}')
      sh('ip', 'link', 'set', f'laqn{i}', 'netns', ns)
      sh('ip', 'addr', 'add', f'10.231.{i}.1/24', 'dev', f'laqh{i}')
      sh('ip', 'link', 'set', f'laqh{i}', 'up')
      for cmd in (('ip', 'addr', 'add', f'10.231.{i}.2/24', 'dev',
                   f'laqn{i}'), ('ip', 'link', 'set', f'laqn{i}', 'up'),
                  ('ip', 'link', 'set', 'lo', 'up')):
        sh('ip', 'netns', 'exec', ns, *cmd)
    return self

  def shape(self, kbit):
    """The namespaces' egress (their uploads) at `kbit` kbit/s (0: none)."""
    for i, ns in enumerate(self.names):
      sh('ip', 'netns', 'exec', ns, 'tc', 'qdisc', 'del', 'dev', f'laqn{i}',
         'root', check=False)
      if kbit:
        # burst: one packet (accurate at low rates); the queue holds 60 s
        sh('ip', 'netns', 'exec', ns, 'tc', 'qdisc', 'add', 'dev',
           f'laqn{i}', 'root', 'tbf', 'rate', f'{kbit}kbit', 'burst',
           '1600', 'latency', '60s')

  def __exit__(self, *exc):
    for i, ns in enumerate(self.names):
      sh('ip', 'link', 'del', f'laqh{i}', check=False)
      sh('ip', 'netns', 'del', ns, check=False)


def run(args):
  tmp = tempfile.mkdtemp(prefix='laq_link_')
  port = free_port()
  with open(os.path.join(tmp, 'config.toml'), 'w') as f:
    f.write(f'[superlink]\ndefault = "local"\n[superlink.local]\n'
            f'address = "127.0.0.1:{port}"\ninsecure = true\n')
  env = dict(os.environ, FLWR_HOME=tmp, PYTHONPATH=ROOT,
             PATH=BIN + os.pathsep + os.environ['PATH'], JAX_PLATFORMS='cpu',
             JAX_COMPILATION_CACHE_DIR=os.path.join(tmp, 'jax_cache'),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
  procs = []
  results = []
  try:
    with Namespaces() as nets:
      procs.append(subprocess.Popen(
          [os.path.join(BIN, 'flower-superlink'), '--insecure', '--host',
           '0.0.0.0', '--port', str(port), '--database',
           os.path.join(tmp, 'state.db')], env=env, cwd=tmp,
          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
          stderr=subprocess.DEVNULL))
      time.sleep(4)
      for i, ns in enumerate(nets.names):
        procs.append(subprocess.Popen(
            ['ip', 'netns', 'exec', ns, os.path.join(BIN, 'flower-supernode'),
             '--insecure', '--superlink', f'10.231.{i}.1:{port}', '--port',
             '9094', '--node-config', f'partition-id={i} num-partitions=3'],
            env=env, cwd=tmp, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
      time.sleep(4)
      for kbit in [0] + args.rates:
        nets.shape(kbit)
        for algo in args.algos:
          out = os.path.join(tmp, f'{algo}_{kbit}.json')
          config = {'algo': f'{algo}:step_size=0.5' if algo == 'laq'
                            else algo,
                    'rounds': args.rounds, 'out': out,
                    'round-timeout-s': 600.0}
          start = time.perf_counter()
          subprocess.run(
              [os.path.join(BIN, 'flwr'), 'run', APP, 'local',
               '--run-config', ' '.join(f'{k}={json.dumps(v)}'
                                        for k, v in config.items())],
              env=env, cwd=tmp, capture_output=True, check=True)
          while not os.path.exists(out):
            time.sleep(0.5)
            if time.perf_counter() - start > 1800:
              raise RuntimeError(f'{algo} at {kbit} kbit/s: no record')
          with open(out) as f:
            record = json.load(f)[algo]
          results.append({'algo': algo, 'kbit': kbit, 'record': record})
          print(f'# {algo} at {kbit or "unshaped"} kbit/s: '
                f'{record["wall_s"]:.1f} s', flush=True)
      nets.shape(0)
  finally:
    for p in procs:
      p.terminate()
    for p in procs:
      try:
        p.wait(10)
      except subprocess.TimeoutExpired:
        p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
  return results


def replies(record):
  for r in record['rounds']:
    for c in r['clients'].values():
      yield r['round'], c


def table(results):
  """Per algorithm and rate: the mean upload time of an upload against the
  model's bits / up_bps, and per round the slowest client's."""
  base = {}
  for res in results:
    if res['kbit'] == 0:
      for kind in (True, False):
        times = [c['upload_s'] for _, c in replies(res['record'])
                 if c['sent'] == kind]
        base[(res['algo'], kind)] = sum(times) / max(len(times), 1)
  rows = []
  for res in results:
    if res['kbit'] == 0:
      continue
    bps = res['kbit'] * 1e3
    ups = [c for _, c in replies(res['record']) if c['sent']]
    skips = [c for _, c in replies(res['record']) if not c['sent']]
    measured = [c['upload_s'] - base[(res['algo'], True)] for c in ups]
    model = [c['bits'] / bps for c in ups]
    framed = [8 * c['message_bytes'] / bps for c in ups]
    skip_measured = [c['upload_s'] - base[(res['algo'], False)]
                     for c in skips]
    # per round: the slowest client's (the round waits for it)
    per_round_m, per_round_model = [], []
    for r in res['record']['rounds']:
      cs = list(r['clients'].values())
      per_round_m.append(max(c['upload_s'] - base[(res['algo'], c['sent'])]
                             for c in cs))
      per_round_model.append(max(c['bits'] / bps for c in cs))
    mean = lambda xs: sum(xs) / max(len(xs), 1)
    rows.append(dict(
        algo=res['algo'], kbit=res['kbit'], uploads=len(ups),
        skips=len(skips), payload_bytes=mean([c['payload_bytes']
                                              for c in ups]),
        message_bytes=mean([c['message_bytes'] for c in ups]),
        measured_s=mean(measured), model_s=mean(model),
        framed_s=mean(framed), skip_s=mean(skip_measured),
        round_measured_s=mean(per_round_m),
        round_model_s=mean(per_round_model)))
  lines = ['| algorithm | link (kbit/s) | uploads / skips | payload (bytes) | '
           'message (bytes) | measured upload (s) | model: bits / up_bps (s) '
           '| ratio | message bytes / up_bps (s) | a skip\'s notice (s) | '
           'per round: measured / model (s) |',
           '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
  for r in rows:
    lines.append(
        f'| {r["algo"]} | {r["kbit"]} | {r["uploads"]} / {r["skips"]} | '
        f'{r["payload_bytes"]:,.0f} | {r["message_bytes"]:,.0f} | '
        f'{r["measured_s"]:.3f} | {r["model_s"]:.3f} | '
        f'{r["measured_s"] / r["model_s"]:.2f} | {r["framed_s"]:.3f} | '
        f'{r["skip_s"]:.3f} | {r["round_measured_s"]:.3f} / '
        f'{r["round_model_s"]:.3f} |')
  return rows, '\n'.join(lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rates', default='64,256',
                      help='upload rates in kbit/s, comma-separated')
  parser.add_argument('--rounds', type=int, default=8)
  parser.add_argument('--algos', default='laq,gd')
  parser.add_argument('--out', default='')
  args = parser.parse_args()
  args.rates = [int(r) for r in args.rates.split(',') if r]
  args.algos = args.algos.split(',')
  if os.geteuid() != 0 or not shutil.which('tc') or not shutil.which('ip'):
    sys.exit('error: needs root and iproute2 (ip, tc)')
  results = run(args)
  rows, text = table(results)
  print(text)
  if args.out:
    with open(args.out, 'w') as f:
      json.dump({'rows': rows, 'results': results}, f)


if __name__ == '__main__':
  main()
