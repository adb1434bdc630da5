"""Finished runs replayed on modeled networks: simulated seconds, post hoc.

    rows = timeline(workdirs, networks, parse_overrides(['up_bps=5e6']))
    write(rows, out)      # timeline.csv, timeline.md, loss_vs_time_*.png

Each run's bits.npy, metrics.csv (the broadcast's bits) and config, every
round timed with `laq_jax.network.replay` on each network: no training
again (what `python -m experiments.timeline` writes; see
experiments/timeline.py).
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any, Sequence

import numpy as np

from experiments.run import markdown
from experiments.run import outputs


class TimelineError(ValueError):
  """A run that cannot be replayed, or a bad network argument."""


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
  """['up_bps=5e6', 'straggler=exp'] -> {'up_bps': 5e6, 'straggler': 'exp'};
  each checked by `network.make_network` later."""
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  out = {}
  for item in items:
    name, sep, text = item.partition('=')
    name = name.strip()
    if not sep or name not in network.FIELDS:
      raise TimelineError(f'--set {item!r}: expected FIELD=VALUE with FIELD '
                          f'one of {", ".join(network.FIELDS)}')
    if name in ('straggler', 'topology'):
      out[name] = text.strip()
    else:
      try:
        out[name] = float(text)
      except ValueError:
        raise TimelineError(f'--set {item!r}: {text!r} is not a number'
                            ) from None
  return out


@functools.cache
def _dataset_shape(dataset: str, data_dir: str) -> tuple[int, int, int]:
  """(features, classes, training samples) of a dataset, loaded once."""
  from laq_jax import data as data_lib  # pylint: disable=g-import-not-at-top
  loaded = data_lib.kinds.load(dataset, data_dir=data_dir or None)
  classes = loaded.num_classes or int(max(loaded.y_train.max(),
                                          loaded.y_test.max())) + 1
  return loaded.x_train.shape[1], classes, len(loaded.y_train)


def flops_per_worker_step(config: dict, num_train: int | None = None
                          ) -> tuple[float, int]:
  """(F_m, p): the gradient FLOPs of one worker's step (its shard, or its
  minibatch), from the run's problem (`Problem.grad_flops_per_sample`), and
  the number of parameters.

  Args:
    config: the run's (or a sweep point's) config: dataset, data_dir,
      model, hidden, algo, batch_size, train_subset, num_workers.
    num_train: the training images the run used (a sweep's sweep.json
      `num_train`), or None to take `train_subset` or the dataset's size.
  """
  from laq_jax import hyper  # pylint: disable=g-import-not-at-top
  from laq_jax import problems  # pylint: disable=g-import-not-at-top
  dim, classes, dataset_size = _dataset_shape(config['dataset'],
                                              config.get('data_dir', ''))
  problem = problems.get_problem(config['model'], dim, classes,
                                 hidden=config.get('hidden', 200))
  if problem.grad_flops_per_sample is None:
    raise TimelineError(f'model {config["model"]!r} does not state its '
                        'grad_flops_per_sample: its compute time is unknown')
  samples = (config['batch_size']
             if hyper.get_algorithm(config['algo']).stochastic
             else (num_train or config.get('train_subset') or dataset_size)
             // config['num_workers'])
  return float(problem.grad_flops_per_sample * samples), problem.num_params()


def point_grads(curves: dict, g: int) -> np.ndarray:
  """[T, M] the gradients each worker of sweep point g computed per round
  (a full-batch sweep's curves keep none: one each a round)."""
  if 'grads' in curves:
    return curves['grads'][g]
  return np.ones(curves['bits'].shape[1:])


def point_bits_down(curves: dict, g: int) -> np.ndarray:
  """[T, M] each worker's downloaded bits per round at sweep point g (a
  full-batch sweep's curves keep their sum per round: the same to each)."""
  if 'bits_down' in curves:
    return curves['bits_down'][g]
  per_step = np.diff(curves['cum_bits_down'][g], prepend=0)
  workers = curves['bits'].shape[-1]
  return np.repeat(per_step[:, None] / workers, workers, 1)


def sweep_point_seconds(sweep: dict, g: int, profiles: Sequence[str]
                        ) -> dict[str, np.ndarray]:
  """Sweep point g's seconds per round on each of `profiles`: its
  per-worker bits, downloads and gradients replayed (`point_bits_down`,
  `point_grads`).

  Args:
    sweep: a finished sweep as the study reports load it: `config` (its
      config.json), `info` (sweep.json), `rows` (results.csv) and `curves`
      (curves.npz: bits [G, T, M], cum_bits_down [G, T], and grads /
      bits_down [G, T, M] where the sweep kept them).
    g: the point's index.
    profiles: network profile names (`laq_jax.network`).
  """
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  config, curves, row = sweep['config'], sweep['curves'], sweep['rows'][g]
  bits = curves['bits'][g]
  workers = bits.shape[1]
  flops, num_params = flops_per_worker_step(
      dict(config, algo=row['algo']), sweep['info'].get('num_train'))
  return {p: np.asarray(network.replay(
      network.make_network(p, num_workers=workers), np.full(workers, flops),
      bits, point_bits_down(curves, g), seed=int(row['seed']),
      grads_TxM=point_grads(curves, g), num_params=num_params).time_s)
          for p in profiles}


def load(workdir) -> dict[str, Any]:
  """A finished run's config, summary, per-step loss and per-worker bits."""
  run = outputs.load_run(workdir)
  path = pathlib.Path(workdir) / 'bits.npy'
  if not path.is_file():
    raise TimelineError(f'{workdir} has no bits.npy (a run older than the '
                        'network model): run it again to replay it')
  if float(run.config.get('deadline_s') or 0) > 0:
    raise TimelineError(f'{workdir} ran with a deadline (deadline_s='
                        f'{run.config["deadline_s"]}): who took part '
                        'depended on its network, so it cannot be replayed '
                        'on another one; run it again there')
  bits = np.load(path)
  workers = bits.shape[1]
  down = np.repeat(run.metrics['bits_down'][:, None] / workers, workers, 1)
  # Partial participation (no deadline): who took part does not depend on
  # the network, so the replay times the same participants.
  present = pathlib.Path(workdir) / 'participants.npy'
  participants = np.load(present) if present.is_file() else None
  if participants is not None:  # the broadcast went to the participants
    down = np.asarray(run.metrics['bits_down'], np.float64)[:, None] * (
        participants / np.maximum(participants.sum(1, keepdims=True), 1))
  # The gradients each worker took, and what each downloaded, where they
  # were not one and the broadcast (LASG, CADA, LASG-PS).
  grads = pathlib.Path(workdir) / outputs.GRADS_FILE
  grads = np.load(grads) if grads.is_file() else None
  if grads is not None:
    down = np.load(pathlib.Path(workdir) / outputs.BITS_DOWN_FILE)
  return {'run': run, 'bits': bits, 'bits_down': down,
          'participants': participants, 'grads': grads}


def time_run(loaded: dict, network_name: str, overrides: dict,
             topology: str = 'star') -> dict[str, Any]:
  """One run on one network: per-step times and the summary figures."""
  from laq_jax import hyper  # pylint: disable=g-import-not-at-top
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  run = loaded['run']
  config, summary = run.config, run.summary
  workers = loaded['bits'].shape[1]
  net = network.make_network(network_name, num_workers=workers,
                             **{**overrides, 'topology': topology})
  network.check_topology(net, hyper.get_algorithm(config['algo']))
  flops, num_params = flops_per_worker_step(config)
  flops_M = np.full(workers, flops)
  saved = summary.get('flops_per_worker_step')
  if isinstance(saved, list) and len(saved) == workers:
    flops_M = np.asarray(saved, np.float64)  # the run's own (per client)
    flops = float(np.mean(flops_M))
  times = network.replay(net, flops_M, loaded['bits'],
                         loaded['bits_down'], seed=int(config['seed']),
                         participants_TxM=loaded.get('participants'),
                         grads_TxM=loaded.get('grads'),
                         num_params=num_params).time_s
  cum = np.cumsum(times)
  target = summary.get('target_iteration')
  which = 'target_iteration'
  if target is None and summary.get('fstar') is None:
    target, which = summary.get('paper_target_iteration'), 'paper'
  before = lambda k: float(cum[k - 1]) if k else 0.0
  return {
      'algo': config['algo'] + (' (ring)' if topology == 'ring' else ''),
      'workdir': str(run.workdir), 'network': network_name,
      'topology': topology, 'total_time_s': float(cum[-1]),
      'target_time_s': None if target is None else before(int(target)),
      'target_kind': which, 'flops_per_worker_step': flops,
      'time_s': times, 'cum_time_s': cum,
      'loss': run.metrics['loss'], 'fstar': summary.get('fstar')}


def timeline(workdirs: Sequence[str], networks: Sequence[str],
             overrides: dict) -> list[dict[str, Any]]:
  """Every run on every network (and gd/sgd on the ring too)."""
  from laq_jax import hyper  # pylint: disable=g-import-not-at-top
  from laq_jax import network  # pylint: disable=g-import-not-at-top
  for name in networks:
    if name not in network.PROFILES:
      raise TimelineError(f'unknown network profile {name!r}; allowed: '
                          f'{", ".join(network.PROFILES)}')
  network.make_network(networks[0], **overrides)  # checks the overrides
  loaded = [load(w) for w in workdirs]
  rows = []
  for name in networks:
    for item in loaded:
      rows.append(time_run(item, name, overrides))
      algorithm = hyper.get_algorithm(item['run'].config['algo'])
      if network.can_ring(algorithm):
        rows.append(time_run(item, name, overrides, 'ring'))
  return rows


def table(rows: Sequence[dict]) -> str:
  """Markdown: one line per run and network, the fastest to target bold."""
  lines = []
  for name in dict.fromkeys(r['network'] for r in rows):
    group = [r for r in rows if r['network'] == name]
    reached = [r['target_time_s'] for r in group
               if r['target_time_s'] is not None]
    best = min(reached) if reached else None
    for r in group:
      target = (markdown.fmt(r['target_time_s'], 'sci')
                if r['target_time_s'] is not None else '—')
      if best is not None and r['target_time_s'] == best:
        target = f'**{target}**'
      lines.append([name, r['algo'], markdown.fmt(r['total_time_s'], 'sci'),
                    target])
  return markdown.table(['network', 'run', 'total time (s)',
                         'time to target (s)'], lines)


def write(rows: Sequence[dict], out: pathlib.Path) -> None:
  from laq_jax import metrics  # pylint: disable=g-import-not-at-top
  from laq_jax import plotting  # pylint: disable=g-import-not-at-top
  out.mkdir(parents=True, exist_ok=True)
  keep = ('network', 'algo', 'topology', 'workdir', 'total_time_s',
          'target_time_s', 'target_kind', 'flops_per_worker_step')
  outputs.atomic_write(out / 'timeline.csv', outputs.results_csv(
      [{k: r[k] for k in keep} for r in rows]))
  outputs.atomic_write(out / 'timeline.md', table(rows) + '\n')
  for name in dict.fromkeys(r['network'] for r in rows):
    curves = []
    group = [r for r in rows if r['network'] == name]
    # Residuals when every run knows f*, else the losses (as compare does).
    residual = all(r['fstar'] is not None for r in group)
    for r in group:
      loss = np.asarray(r['loss'], np.float64)
      quantity = 'residual' if residual else 'loss'
      value = loss - r['fstar'] if residual else loss
      size = len(value)
      curve = metrics.value_curve(r['algo'], value, np.zeros(size),
                                  np.zeros(size), quantity)
      curves.append(curve._replace(time_s=np.concatenate(
          [[0.0], r['cum_time_s'][:-1]])))
    outputs.save_figure(plotting.loss_figure(curves, 'time', title=name),
                        out / f'loss_vs_time_{name}.png')

