"""The results of `experiments.reproduce` on disk, read back.

    result = load_results(experiment, workdir)   # None when missing or stale

Per experiment NAME, WORKDIR/NAME holds the files of `experiments.run.grid`
(config.json, results.csv, curves.npz, sweep.json) and INFO, written last.
WORKDIR/crosscheck holds the cross-check's runs (`experiments.run.train`).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

from configs import paper
from experiments.run import config as config_lib
from experiments.run import outputs
from laq_jax import metrics

INFO = 'reproduce.json'
RESULT_FILES = ('config.json', 'results.csv', 'curves.npz', 'sweep.json', INFO)
CROSSCHECK = 'crosscheck'
CROSSCHECK_EXPERIMENT = 'logreg'
CROSSCHECK_DEVICES = 2
# name: (words, workers_on)
# The lazy row of the minibatch experiments once more as the authors'
# scripts run it (`authors_code=True`): WORKDIR/authors_code/NAME.
AUTHORS = 'authors_code'
AUTHORS_EXPERIMENTS = ('logreg_stochastic', 'mlp_stochastic')
CROSSCHECK_RUNS = {
    'single': ('run alone (experiments.main, workers vmapped)', 'vmap'),
    'devices': (f'workers on {CROSSCHECK_DEVICES} CPU devices (shard_map)',
                'devices'),
}
# WORKDIR/crosscheck/devices/DEVICES_FILE: where the devices run's workers
# ran ({'platform', 'kind', 'count'}); a run without it ran on
# CROSSCHECK_DEVICES forced CPU devices.
DEVICES_FILE = 'devices.json'
CPU_DEVICES = {'platform': 'cpu', 'kind': 'cpu', 'count': CROSSCHECK_DEVICES}


def devices_layout(backend: str, devices: list[tuple[str, str]],
                   num_workers: int) -> dict[str, Any]:
  """Where the devices cross-check splits its workers.

  On a machine with accelerators (`backend` not 'cpu') whose number divides
  the workers, over all of them (on one GPU: every worker on it, the
  sharded program over a mesh of one device, the case one device can
  express); else over CROSSCHECK_DEVICES forced CPU devices.

  Args:
    backend: `jax.default_backend()`.
    devices: (platform, device_kind) of each of `jax.devices()`.
    num_workers: the run's workers.

  Returns:
    {'platform', 'kind', 'count'}, as DEVICES_FILE records it.
  """
  if backend != 'cpu' and devices and num_workers % len(devices) == 0:
    return {'platform': devices[0][0], 'kind': devices[0][1],
            'count': len(devices)}
  return dict(CPU_DEVICES)


def devices_of(run_dir: pathlib.Path) -> dict[str, Any]:
  """The devices a devices cross-check in `run_dir` ran on (DEVICES_FILE;
  CPU_DEVICES when it has none)."""
  try:
    return json.loads((run_dir / DEVICES_FILE).read_text())
  except (OSError, ValueError):
    return dict(CPU_DEVICES)


def devices_words(layout: dict[str, Any]) -> str:
  """The report's words for a devices run on `layout`."""
  count, platform = layout['count'], layout['platform']
  if platform == 'cpu':
    return f'workers on {count} CPU devices (shard_map)'
  return (f'workers on {count} {platform.upper()} '
          f'device{"s" if count > 1 else ""} (shard_map, {layout["kind"]})')


def crosscheck_words(name: str, workdir: pathlib.Path) -> str:
  """The words of cross-check run `name` in `workdir` (the devices run's
  say which devices it ran on)."""
  if name == 'devices':
    return devices_words(devices_of(workdir / CROSSCHECK / name))
  return CROSSCHECK_RUNS[name][0]


def is_done(experiment: paper.Experiment, workdir: pathlib.Path) -> bool:
  """Whether `workdir/NAME` holds this experiment's finished results."""
  out = workdir / experiment.name
  if not all((out / f).is_file() for f in RESULT_FILES):
    return False
  wanted = outputs.as_json(config_lib.to_dict(
      paper.sweep_config(experiment)))
  return outputs.same_config(json.loads((out / 'config.json').read_text()),
                             wanted)


def load_results(experiment: paper.Experiment, workdir: pathlib.Path
                 ) -> dict[str, Any] | None:
  """The experiment's results, or None when not (completely) there or when
  they are another config's.

  Returns:
    {'rows': {algo: results.csv row (numbers parsed)}, 'curves': curves.npz
    arrays, 'config': config.json, 'sweep': sweep.json, 'info':
    reproduce.json}. Each row's `diverged` / `diverged_at` are recomputed
    from curves.npz by the one rule (`outputs.mark_divergence`: a logged
    loss NaN/inf or above 10x f(theta^0)), whatever results.csv says.
  """
  if not is_done(experiment, workdir):
    return None  # missing, incomplete, or another config's (stale) results
  out = workdir / experiment.name
  rows = outputs.mark_divergence(
      [{k: outputs.parse_cell(v) for k, v in row.items()}
       for row in outputs.read_results(out / 'results.csv')], out)
  with np.load(out / 'curves.npz') as npz:
    curves = {k: npz[k] for k in npz.files}
  return {'rows': {r['algo']: r for r in rows}, 'curves': curves,
          'config': json.loads((out / 'config.json').read_text()),
          'sweep': json.loads((out / 'sweep.json').read_text()),
          'info': json.loads((out / INFO).read_text())}


def curve(result: dict[str, Any], algo: str, quantity: str):
  """`laq_jax.metrics.Curve` of one algorithm from curves.npz.

  Args:
    result: from `load_results`.
    algo: the row.
    quantity: 'residual' (f - f*), 'paper_residual' (the average worker
      loss minus the smallest any algorithm reached), 'loss' or
      'grad_norm_sq'.
  """
  c = result['curves']
  g = list(c['algo']).index(algo)
  uploads = np.diff(c['cum_uploads'][g], prepend=0)
  bits = np.diff(c['cum_bits'][g], prepend=0)
  loss = np.append(c['loss'][g], c['final_loss'][g])
  if quantity == 'grad_norm_sq':
    value = c['grad_norm_sq'][g]
  elif quantity == 'residual':
    value = loss - result['rows'][algo]['fstar']
  elif quantity == 'paper_residual':
    value, _ = metrics.paper_residual(loss, result['sweep']['num_workers'],
                                      float(c['paper_reference'][g]))
  else:
    value = loss
  return metrics.value_curve(algo, value, uploads, bits, quantity)


def main_quantity(result: dict[str, Any]) -> str:
  """What the loss figures show: the exact residual when f* is known for
  every row, else the paper's residual."""
  if all(r['fstar'] is not None for r in result['rows'].values()):
    return 'residual'
  return 'paper_residual'


def crosscheck_config(experiment: paper.Experiment, name: str) -> dict:
  """The config of a cross-check run: the lazy row of `experiment`."""
  config = config_lib.to_dict(paper.run_config(experiment, experiment.lazy))
  config['workers_on'] = CROSSCHECK_RUNS[name][1]
  return outputs.as_json(config)


def crosscheck(experiment: paper.Experiment, result: dict[str, Any],
               workdir: pathlib.Path) -> list[dict[str, Any]] | None:
  """Compares the grid program's lazy row with the cross-check runs.

  Returns:
    One dict per run found: name, words, uploads, first step with other
    upload decisions (None: none), max relative loss difference, final loss;
    None when no run is there.
  """
  c = result['curves']
  g = list(c['algo']).index(experiment.lazy)
  if 'uploads' not in c:
    return None
  grid_sent, grid_loss = c['uploads'][g], c['loss'][g]
  out = []
  for name in CROSSCHECK_RUNS:
    words = crosscheck_words(name, workdir)
    run_dir = workdir / CROSSCHECK / name
    try:
      run = outputs.load_run(run_dir)
    except FileNotFoundError:
      continue
    if not outputs.same_config(run.config,
                               crosscheck_config(experiment, name)):
      continue
    sent, loss = run.sent_TxM, run.metrics['loss']
    if sent.shape != grid_sent.shape:
      continue
    differ = np.flatnonzero((sent != grid_sent).any(axis=1))
    check = {
        'name': name, 'words': words, 'uploads': int(sent.sum()),
        'first_other_upload': int(differ[0]) if differ.size else None,
        'max_relative_loss_difference': float(
            np.max(np.abs(loss - grid_loss) / np.abs(grid_loss))),
        'final_loss': run.summary['final_loss']}
    if out and out[0]['name'] == 'single':  # the same run, another shape
      alone = outputs.load_run(workdir / CROSSCHECK / 'single').sent_TxM
      vs = np.flatnonzero((sent != alone).any(axis=1))
      check['first_other_upload_vs_single'] = (int(vs[0]) if vs.size
                                               else None)
    out.append(check)
  return out or None


def grid_axis_of(result: dict[str, Any]) -> str:
  """How the points of an experiment's grid program ran: 'map' or 'vmap'
  (sweep.json's `grid_axes`; 'map' for runs from before it was recorded)."""
  axes = set(result['sweep'].get('grid_axes', {}).values())
  return 'vmap' if 'vmap' in axes else 'map'


def authors_config(experiment: paper.Experiment):
  """The run config of `experiment`'s lazy row with `authors_code` on."""
  config = paper.run_config(experiment, experiment.lazy)
  config.authors_code = True
  return config


def authors_run(experiment: paper.Experiment, workdir: pathlib.Path):
  """The finished authors_code run of `experiment` (outputs.RunResult), or
  None when it is not there or is another config's."""
  try:
    run = outputs.load_run(workdir / AUTHORS / experiment.name)
  except FileNotFoundError:
    return None
  wanted = outputs.as_json(config_lib.to_dict(authors_config(experiment)))
  return run if outputs.same_config(run.config, wanted) else None


def authors_diverged_at(run) -> int | None:
  """Where the authors_code run diverged by the one rule
  (`metrics.diverged_at`, from its metrics.csv: runs written before the rule
  marked NaN/inf only), None when it did not."""
  final = run.summary.get('final_loss')
  return metrics.diverged_at(
      run.metrics['loss'], math.nan if final is None else float(final),
      int(run.summary.get('loss_every') or 1))


def authors_reading(experiment: paper.Experiment, result: dict[str, Any],
                    run) -> dict[str, Any]:
  """`result` with its lazy row read as the authors' scripts run it: the
  authors_code run's totals, accuracy, final loss and uploads in place of
  Algorithm 1's (the other rows as they are), for the claims under that
  reading. The run starts from the same theta^0, so from the same loss.
  Whether it diverged, and where, is the run's own (`authors_diverged_at`),
  not Algorithm 1's."""
  lazy = experiment.lazy
  s = run.summary
  rows = dict(result['rows'])
  at = authors_diverged_at(run)
  rows[lazy] = {**rows[lazy], **{
      k: s[k] for k in ('total_uploads', 'total_bits', 'final_test_accuracy',
                        'final_loss') if k in s},
                'diverged': at is not None, 'diverged_at': at}
  curves = dict(result['curves'])
  g = list(curves['algo']).index(lazy)
  final = np.array(curves['final_loss'], copy=True)
  final[g] = s['final_loss']
  curves['final_loss'] = final
  if curves.get('uploads') is not None:
    uploads = np.array(curves['uploads'], copy=True)
    uploads[g] = run.sent_TxM
    curves['uploads'] = uploads
  return {**result, 'rows': rows, 'curves': curves}


# LASG and CADA beside the minibatch network's rows (configs/lasg.py's
# `network` sweep, the same settings for sgd and slaq): WORKDIR/LASG.
LASG = 'lasg_network'
LASG_EXPERIMENT = 'mlp_stochastic'


def lasg_variant(budget: str) -> str:
  """configs/lasg.py's variant at `budget`: network[,quick|,tiny]."""
  return 'network' if budget == 'full' else f'network,{budget}'


def lasg_config(budget: str):
  """The sweep config of the LASG/CADA comparison (configs/lasg.py)."""
  from configs import lasg  # pylint: disable=g-import-not-at-top
  return lasg.get_config(lasg_variant(budget))


def lasg_sweep(workdir: pathlib.Path, budget: str) -> dict[str, Any] | None:
  """The finished LASG/CADA sweep in WORKDIR/LASG (experiments.studies.lasg.
  report.load's dict, its rows marked by `outputs.mark_divergence`), or None
  when it is not there or another config's."""
  from experiments.studies.lasg import report as lasg_report  # pylint: disable=g-import-not-at-top
  out = workdir / LASG
  if not (out / 'sweep.json').is_file():
    return None
  wanted = outputs.as_json(config_lib.to_dict(lasg_config(budget)))
  try:
    if not outputs.same_config(
        json.loads((out / 'config.json').read_text()), wanted):
      return None
    sweep = lasg_report.load(out)
    # Its rows' divergence by the one rule, from curves.npz.
    outputs.mark_divergence(sweep['rows'], out)
    return sweep
  except (OSError, ValueError):
    return None
