r"""The launchers at federated scale: a round of S of M = 1,000 clients as
`experiments.main` and `experiments.sweep` run it, against S clients in all.

    LAQ_JAX_DATA=/path/to/mnist python benchmarks/launcher.py --out l.json
    LAQ_JAX_DATA=/path/to/mnist python benchmarks/launcher.py --quick

Each run is the launcher itself in a process of its own (its flags, its
chunks, its logged objective, its test accuracy after every chunk, its
outputs on disk), on configs/mnist_logreg.py in float32 (full batch, LAQ):
  M of 1,000   all 60,000 MNIST images over M = 1,000 clients of 60,
               `clients_per_round` S = 10 (the launcher gathers the
               round's rows, `RunSpec.round_size`);
  S in all     S = 10 clients of 60 images (`train_subset` 600), every one
               in every round.
The sweep runs the same two as a grid of two points (bits 3 and 4).
Each at two lengths, T and T + 2,000 iterations (issue 53's check: 200
and 2,200), repeated and interleaved; the cost of a round is the slope
between the two lengths' `run_time_s` (the launcher's time in its chunks,
from the first compiled call to the last: anything a run pays once cancels
in the slope; a first run of each fills JAX's compilation cache, which
the launchers read), the median of the repeats'. The goal:
M of 1,000 within 1.5x of S in all per round. Also each process's peak
RSS, and the same programs compiled and called without the launcher (the
objective at the launcher's interval, and never): where a round's time
goes. Prints a table and writes the raw times as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import machine  # pylint: disable=g-import-not-at-top

NUM_CLIENTS = 1000
PER_ROUND = 10
SHARD = 60  # images per client: 60,000 / 1,000
LAUNCHERS = {
    'main': ('experiments.main', 'configs/mnist_logreg.py', 'summary.json'),
    'sweep': ('experiments.sweep', 'configs/sweep_bits_xi.py', 'sweep.json'),
}
SETTINGS = {
    'M of 1,000': dict(num_workers=NUM_CLIENTS, clients_per_round=PER_ROUND),
    'S in all': dict(num_workers=PER_ROUND, train_subset=PER_ROUND * SHARD),
}
COMMON = dict(precision='float32', fstar='none')
SWEEP_GRID = ('--config.sweep.bits=(3,4)', '--config.sweep.xi=(0.8,)')
MORE_ITERS = 2000


def run_once(launcher: str, setting: str, iters: int, eval_every: int,
             workdir: str) -> dict:
  """One launcher process: its run_time_s, wall_time_s and peak RSS."""
  module, config, summary = LAUNCHERS[launcher]
  fields = dict(COMMON, **SETTINGS[setting], num_iters=iters,
                eval_every=eval_every)
  cmd = [sys.executable, '-m', module, f'--config={config}',
         f'--workdir={workdir}'] + [f'--config.{k}={v}'
                                    for k, v in fields.items()]
  if launcher == 'sweep':
    cmd += SWEEP_GRID
  log = os.path.join(os.path.dirname(workdir),
                     os.path.basename(workdir) + '.log')
  with open(log, 'w') as err:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=err)
    # (wait4: the child's own peak RSS, not the largest child's so far)
    _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode:
    with open(log) as f:
      raise RuntimeError(f'{" ".join(cmd)} failed ({proc.returncode}):\n'
                         f'{f.read()[-3000:]}')
  with open(os.path.join(workdir, summary)) as f:
    out = json.load(f)
  result = {k: out[k] for k in ('run_time_s', 'wall_time_s')}
  result['loss_every'] = out.get('loss_every')
  result['peak_rss_bytes'] = rusage.ru_maxrss * 1024
  return result


def compiled_per_round(setting: str, points: int, logged: bool,
                       lengths=(100, 600), repeats: int = 3) -> float:
  """ms a round of the launcher's compiled program alone (built as
  `experiments.main` builds it; `points` > 1: a vmapped grid of that many
  points, bits 3, 4, ...), from chunks of two lengths, each called on its
  own output, interleaved, best of `repeats`; the logged objective at the
  launcher's interval (`logged`) or never."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import laq_jax  # pylint: disable=g-import-not-at-top
  from benchmarks.timing import aot_run_chunk, chained, time_interleaved  # pylint: disable=g-import-not-at-top
  from configs import mnist_logreg  # pylint: disable=g-import-not-at-top
  from experiments.run import build as build_lib  # pylint: disable=g-import-not-at-top
  config = mnist_logreg.get_config()
  for k, v in dict(COMMON, **SETTINGS[setting]).items():
    config[k] = v
  built = build_lib.build(config)
  spec, hyper = built.spec, built.hyper
  if not logged:
    spec = dataclasses.replace(spec, loss_every=10**9)
  if points > 1:
    spec = dataclasses.replace(spec, grid_axis='vmap')
    hyper = jax.tree.map(lambda x: jnp.stack([x] * points), hyper)
    hyper = hyper._replace(bits=jnp.arange(3, 3 + points,
                                           dtype=hyper.bits.dtype))
  state = laq_jax.init_state(spec, hyper, built.dtype)
  fns = {}
  for n in lengths:
    compiled, _ = aot_run_chunk(spec, state, built.data, hyper, n,
                                donate=True)
    fns[n] = chained(compiled, state, built.data, hyper)
  t = time_interleaved(fns, repeats)
  return (min(t[lengths[1]]) - min(t[lengths[0]])) / (
      lengths[1] - lengths[0]) * 1e3


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--quick', action='store_true',
                      help='experiments.main only, one repeat')
  parser.add_argument('--repeats', type=int, default=None)
  parser.add_argument('--iters', type=int, default=200,
                      help='the shorter run (the longer: + 2,000)')
  parser.add_argument('--eval_every', type=int, default=200,
                      help="the chunk length (configs/mnist_logreg.py's)")
  parser.add_argument('--launchers', default=None,
                      help='comma-separated: main, sweep (default both)')
  parser.add_argument('--out', default=None, help='JSON file of raw results')
  args = parser.parse_args(argv)
  launchers = (args.launchers.split(',') if args.launchers
               else ['main'] if args.quick else list(LAUNCHERS))
  repeats = args.repeats or (1 if args.quick else 3)
  lengths = (args.iters, args.iters + MORE_ITERS)
  times = {}
  with tempfile.TemporaryDirectory() as tmp:
    for launcher in launchers:  # a first run of each fills JAX's
      for setting in SETTINGS:  # compilation cache (the launchers use it)
        run_once(launcher, setting, lengths[0], args.eval_every,
                 os.path.join(tmp, f'{launcher}_warm_{setting[0]}'))
    for r in range(repeats):  # interleaved: a slow phase hits every cell
      for launcher in launchers:
        for setting in SETTINGS:
          for iters in lengths:
            workdir = os.path.join(tmp, f'{launcher}_{r}_{iters}_'
                                   f'{setting[0]}')
            got = run_once(launcher, setting, iters, args.eval_every,
                           workdir)
            times.setdefault(f'{launcher}|{setting}|{iters}', []).append(got)
            print(f'  {launcher:5s} {setting:10s} T={iters:5d} '
                  f'run {got["run_time_s"]:7.2f} s  (loss every '
                  f'{got["loss_every"]})', flush=True)
  rows = []
  for launcher in launchers:
    per_round, rss = {}, {}
    for setting in SETTINGS:
      # the median of the repeats' slopes (each repeat's two lengths ran
      # one after the other)
      short, long = ([g['run_time_s'] for g in times[
          f'{launcher}|{setting}|{n}']] for n in lengths)
      per_round[setting] = float(np.median(
          np.subtract(long, short))) / MORE_ITERS * 1e3
      rss[setting] = max(g['peak_rss_bytes'] for n in lengths
                         for g in times[f'{launcher}|{setting}|{n}'])
    ratio = per_round['M of 1,000'] / per_round['S in all']
    rows.append(dict(launcher=launcher, per_round_ms=per_round,
                     ratio=ratio, peak_rss_bytes=rss))
  print(f'\n{"launcher":<10}{"M of 1,000 ms/round":>22}'
        f'{"S in all ms/round":>20}{"ratio":>8}{"peak RSS (MB)":>22}')
  for row in rows:
    pr, rss = row['per_round_ms'], row['peak_rss_bytes']
    print(f'{row["launcher"]:<10}{pr["M of 1,000"]:>22.3f}'
          f'{pr["S in all"]:>20.3f}{row["ratio"]:>7.2f}x'
          f'{rss["M of 1,000"] / 1e6:>12.0f} / {rss["S in all"] / 1e6:.0f}')
  # The same programs without the launcher: where a round's time goes.
  compiled = {}
  for launcher in launchers:
    points = 2 if launcher == 'sweep' else 1
    for setting in SETTINGS:
      for logged in (True, False):
        key = f'{launcher}|{setting}|{"logged" if logged else "never"}'
        compiled[key] = compiled_per_round(setting, points, logged)
  print('\nthe compiled program alone, ms/round (objective at the '
        "launcher's interval / never):")
  for launcher in launchers:
    for setting in SETTINGS:
      got = [compiled[f'{launcher}|{setting}|{w}']
             for w in ('logged', 'never')]
      print(f'  {launcher:5s} {setting:10s} {got[0]:7.3f} / {got[1]:7.3f}')
  if args.out:
    with open(args.out, 'w') as f:
      json.dump({'machine': machine.describe_machine(), 'rows': rows,
                 'compiled_ms_per_round': compiled,
                 'times': times, 'lengths': lengths,
                 'repeats': repeats}, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
