"""The LASG/CADA report: a sweep of configs/lasg.py read into tables.

    text = report(['runs/lasg/network', 'runs/lasg/lasg_mnist'], command)

Per sweep (one compiled program): each preset's uploads (and the share of
SGD's), uplink bits, gradients computed (LASG's pairs cost two), final
training loss against the loss it started from, test accuracy, and the
simulated seconds of the run on the three network profiles (the sweep's
per-worker bits, downloads and gradients replayed, `laq_jax.network.
replay`). A run that diverged or ended above its initial loss is marked as
having run away. The verdict line says whether every LASG preset stayed
within a point of SGD's accuracy where SLAQ ran away.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Sequence

import numpy as np

from experiments.run import outputs
from experiments.run import replay as replay_lib
from experiments.run.markdown import fmt, table
from experiments.studies.family.family_report import ran_away

PROFILES = ('datacenter', 'cross_silo', 'mobile')
COLUMNS = ('preset', 'uploads', 'of SGD\'s', 'uplink bits', 'gradients',
           'final loss', 'initial loss', 'test accuracy',
           *(f'{p} (s)' for p in PROFILES), 'ran away')


def load(workdir: pathlib.Path) -> dict:
  """A finished sweep's config, rows (with `initial_loss`) and curves."""
  workdir = pathlib.Path(workdir)
  if not (workdir / 'sweep.json').is_file():
    raise FileNotFoundError(f'{workdir} is not a finished sweep (no '
                            'sweep.json)')
  rows = [{k: outputs.parse_cell(v) for k, v in r.items()}
          for r in outputs.read_results(workdir / 'results.csv')]
  with np.load(workdir / 'curves.npz') as npz:
    curves = {k: npz[k] for k in npz.files}
  for row, loss_T in zip(rows, curves['loss']):
    finite = loss_T[np.isfinite(loss_T)]
    row['initial_loss'] = float(finite[0]) if finite.size else None
  return {'config': json.loads((workdir / 'config.json').read_text()),
          'info': json.loads((workdir / 'sweep.json').read_text()),
          'rows': rows, 'curves': curves}


def times(sweep: dict) -> list[dict[str, float]]:
  """Each point's total simulated seconds on each profile (replayed)."""
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  config, curves = sweep['config'], sweep['curves']
  bits = curves['bits']
  _, steps, workers = bits.shape
  out = []
  for g, row in enumerate(sweep['rows']):
    flops, num_params = replay_lib.flops_per_worker_step(
        dict(config, algo=row['algo']), sweep['info'].get('num_train'))
    if 'grads' in curves:
      grads, down = curves['grads'][g], curves['bits_down'][g]
    else:
      grads = np.ones((steps, workers))
      per_step = np.diff(curves['cum_bits_down'][g], prepend=0)
      down = np.repeat(per_step[:, None] / workers, workers, 1)
    out.append({p: float(np.sum(network.replay(
        network.make_network(p, num_workers=workers), np.full(workers, flops),
        bits[g], down, seed=int(row['seed']), grads_TxM=grads,
        num_params=num_params).time_s)) for p in PROFILES})
  return out


def section(title: str, sweep: dict) -> list[str]:
  rows, curves = sweep['rows'], sweep['curves']
  by_algo = {r['algo']: r for r in rows}
  sgd = by_algo.get('sgd')
  timed = times(sweep)
  lines = [f'## {title}', '',
           f'{len(rows)} presets, one compiled program, '
           f'{rows[0]["iterations"]:,} iterations, M = '
           f'{curves["bits"].shape[-1]} workers; wall time '
           f'{sweep["info"].get("wall_time_s", math.nan):.0f} s.', '']
  body = []
  for g, r in enumerate(rows):
    grads = (int(curves['grads'][g].sum()) if 'grads' in curves
             else int(r['iterations']) * curves['bits'].shape[-1])
    share = (r['total_uploads'] / sgd['total_uploads']
             if sgd and sgd['total_uploads'] else None)
    body.append([r['algo'], fmt(r['total_uploads']), fmt(share, 'pct'),
                 fmt(r['total_bits']), fmt(grads),
                 fmt(r['final_loss'], 'sci'), fmt(r['initial_loss'], 'sci'),
                 fmt(r['final_test_accuracy'], 'pct'),
                 *(fmt(timed[g][p], '.4g') for p in PROFILES),
                 'yes' if ran_away(r) else ''])
  lines += [table(list(COLUMNS), body, 'l' + 'r' * (len(COLUMNS) - 2) + 'l'),
            '']
  lines += [verdict(by_algo), '']
  return lines


def verdict(by_algo: dict[str, dict]) -> str:
  """Whether the LASG presets stayed within a point of SGD where SLAQ did
  or did not run away, in one sentence with the numbers."""
  sgd = by_algo.get('sgd')
  lasg = {a: r for a, r in by_algo.items() if a.startswith('lasg')}
  if sgd is None or not lasg:
    return ''
  # (a run without accuracy, diverged, is named, never compared)
  held = {a: (not ran_away(r)) and None not in (
      r['final_test_accuracy'], sgd['final_test_accuracy']) and (
          r['final_test_accuracy'] >= sgd['final_test_accuracy'] - 0.01)
          for a, r in lasg.items()}
  slaq = by_algo.get('slaq')
  where = ('where SLAQ (Algorithm 1) ran away '
           f'({fmt(slaq["final_test_accuracy"], "pct")}, final loss '
           f'{fmt(slaq["final_loss"], "sci")})' if slaq and ran_away(slaq)
           else 'with SLAQ' if slaq else 'here')
  good = [a for a, ok in held.items() if ok]
  bad = [a for a, ok in held.items() if not ok]
  return (f'LASG {where}: within 1 point of SGD\'s test accuracy '
          f'({fmt(sgd["final_test_accuracy"], "pct")}) and not run away: '
          + (', '.join(f'{a} ({fmt(lasg[a]["final_test_accuracy"], "pct")}, '
                       f'{fmt(lasg[a]["total_uploads"])} uploads)'
                       for a in good) or 'none')
          + ('; not: ' + ', '.join(
              f'{a} ({fmt(lasg[a]["final_test_accuracy"], "pct")})'
              for a in bad) if bad else '') + '.')


TITLES = {'network': 'The minibatch network (the paper report\'s setting)',
          'lasg_mnist': 'LASG\'s own MNIST setting (M = 20, label-sorted '
                        'shards, minibatch 6)'}


def report(workdirs: Sequence[str | pathlib.Path], command: str) -> str:
  lines = ['# LASG and CADA beside SGD and SLAQ', '',
           f'Produced by `{command}` (laq-jax) from the sweeps of '
           '`configs/lasg.py` (its docstring gives every preset\'s settings '
           'and where they come from; docs/algorithm.md, "LASG and CADA", '
           'the rules). Every number is read from the sweeps\' results.csv '
           'and curves.npz; the simulated seconds replay each run\'s '
           'per-worker bits, downloads and gradients on the three profiles '
           '(`laq_jax.network`). "Gradients" counts what the algorithms '
           'compute: two per LASG/CADA pair, one on a forced step, none for '
           'a worker LASG-PS\'s server did not select.', '']
  for workdir in workdirs:
    workdir = pathlib.Path(workdir)
    name = workdir.name
    lines += section(TITLES.get(name, name), load(workdir))
  return '\n'.join(lines) + '\n'
