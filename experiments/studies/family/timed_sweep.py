"""A finished sweep read for timing, and what reaching its target means.

    timed = load_sweep(workdir / 'logreg' / 'full')
    target = choose_target(timed, residual=True)

From a finished sweep's curves.npz, results.csv, sweep.json and config.json:
no training again. Older sweeps' curves.npz lack the per-worker bits (`bits`
[G,T,M]); they are rebuilt from the uploads and each step's bits only where
that is exact (`per_worker_bits`), and the other presets are left out with a
note. The family's time to target (experiments.studies.family.family_time)
starts here.
"""

from __future__ import annotations

import json
import pathlib
from typing import Callable, NamedTuple

import numpy as np

from experiments.run import outputs
from laq_jax import metrics

# Compressors whose upload size depends on the data: their per-worker bits
# cannot be rebuilt from a step's total, whatever the totals look like.
VARIABLE_SIZE = ('qsgd', 'rand_p')
STALE = 'curves.npz predates per-worker bits; rerun the sweep'


class TimedSweep(NamedTuple):
  """What timing a finished sweep needs, one entry per grid point g.

  Attributes:
    path: the sweep's folder.
    algos: [G] preset names.
    loss: [G, T] f(theta^k) (NaN where not logged).
    final_loss: [G] f(theta^T).
    loss_every: [G] the logging interval (`metrics.logged`).
    diverged: [G] bool: the one rule (`metrics.diverged_at`: a logged loss
      NaN/inf or above 10x f(theta^0)), from curves.npz
      (`outputs.sweep_divergence`), not results.csv's older marks.
    bits_up: [G] per-worker uplink bits [T, M] (float64), None where they
      are unknown (see `notes`).
    bits_down: [G, T, M] what each worker received after each step.
    notes: {algo: why its bits are unknown}.
    flops: [G] FLOPs of one worker's gradient per step.
    seeds: [G] the points' seeds (the stragglers' draws).
    num_params: p (the ring's messages).
    target_residual: the sweep's residual target or None.
    target_iteration: [G] results.csv `target_iteration` (None: not
      reached).
    diverged_at: [G] where each diverged point did (None: it did not, or
      not known); empty when not known for any.
  """
  path: pathlib.Path
  algos: tuple[str, ...]
  loss: np.ndarray
  final_loss: np.ndarray
  loss_every: np.ndarray
  diverged: np.ndarray
  bits_up: tuple[np.ndarray | None, ...]
  bits_down: np.ndarray
  notes: dict[str, str]
  flops: np.ndarray
  seeds: np.ndarray
  num_params: int
  target_residual: float | None
  target_iteration: tuple[int | None, ...]
  diverged_at: tuple[int | None, ...] = ()

  @property
  def num_workers(self) -> int:
    return self.bits_down.shape[-1]


class Target(NamedTuple):
  """What reaching the target means for one sweep.

  Attributes:
    kind: 'residual' (f(theta^k) - f* <= level) or 'loss' (f <= level).
    level: the residual or the loss level.
    iteration: [G] k*, the first logged iterate at or below it (0..T, T
      the final parameters); -1 where not reached or diverged.
    rule: a sentence for the report: the level and how it was chosen.
  """
  kind: str
  level: float
  iteration: np.ndarray
  rule: str


# ----------------------------------------------------------------------------
# Per-worker bits of older sweeps.


def per_worker_bits(uploads_TxM, cum_bits_T, compressor: str | None = None
                    ) -> tuple[np.ndarray | None, str | None]:
  """bits[t, m] = uploads[t, m] * (bits of step t / uploads of step t),
  only when that is exact: every upload of the point has the same size.

  Exact when every step's bits divide evenly by its uploads, a step without
  uploads has no bits, and the size per upload is one number over all the
  point's steps: true of the deterministic-size compressors (identity,
  uniform, top_k, sign, terngrad), never assumed of the data-dependent ones
  (VARIABLE_SIZE: qsgd's Elias codes, rand_p's kept values), where equal
  totals could hide unequal uploads.

  Args:
    uploads_TxM: bool, who uploaded at each step.
    cum_bits_T: the uplink bits through each step, summed over workers.
    compressor: the preset's compressor (`Algorithm.compressor`), or None.

  Returns:
    (bits int64 [T, M], None), or (None, why it is not exact).
  """
  if compressor in VARIABLE_SIZE:
    return None, (f'its compressor {compressor} sends uploads of '
                  'data-dependent size')
  uploads = np.asarray(uploads_TxM, bool)
  cum = np.asarray(cum_bits_T, np.int64)
  if cum.shape != uploads.shape[:1]:
    raise ValueError(f'cum_bits has shape {cum.shape}: it must be '
                     f'[T] = {uploads.shape[:1]} like uploads [T, M]')
  step_bits = np.diff(cum, prepend=np.int64(0))
  step_uploads = uploads.sum(axis=1, dtype=np.int64)
  some = step_uploads > 0
  if np.any(step_bits[~some] != 0):
    return None, 'a step without uploads has bits'
  if np.any(step_bits[some] % step_uploads[some]):
    return None, 'a step\'s bits do not divide evenly by its uploads'
  sizes = np.unique(step_bits[some] // step_uploads[some])
  if sizes.size > 1:
    return None, (f'its uploads have {sizes.size} different sizes '
                  f'({sizes.min():,} to {sizes.max():,} bits)')
  size = sizes[0] if sizes.size else np.int64(0)
  return uploads.astype(np.int64) * size, None


def downlink_per_worker(cum_bits_down_T, num_workers: int) -> np.ndarray:
  """[T, M] what each worker received after each step: every participant
  receives the same broadcast, so a step's total over M."""
  step = np.diff(np.asarray(cum_bits_down_T, np.int64), prepend=np.int64(0))
  return np.repeat((step / num_workers)[:, None], num_workers, axis=1)


def _sweep_flops(config: dict, info: dict) -> Callable[[str], float]:
  from experiments.run import replay  # pylint: disable=g-import-not-at-top
  return lambda algo: replay.flops_per_worker_step(
      {**config, 'algo': algo}, num_train=info.get('num_train'))[0]


def load_sweep(folder, flops: Callable[[str], float] | None = None
               ) -> TimedSweep:
  """A finished sweep's curves.npz, results.csv, sweep.json and config.json
  as a TimedSweep.

  The per-worker uplink bits are curves.npz `bits` when it is [G, T, M]
  (a [G] `bits` is the quantizer's b of each point); else they are rebuilt
  by `per_worker_bits` where exact, and the others noted (STALE, and why).

  Args:
    folder: the sweep's folder.
    flops: algo -> FLOPs of one worker's step; default: from the sweep's
      problem (`replay.flops_per_worker_step`, its minibatch or its shard
      of sweep.json `num_train` images).

  Raises:
    FileNotFoundError: a file is missing.
    ValueError: curves.npz has no per-worker uploads.
  """
  from laq_jax import hyper  # pylint: disable=g-import-not-at-top
  folder = pathlib.Path(folder)
  info = json.loads((folder / 'sweep.json').read_text())
  config = json.loads((folder / 'config.json').read_text())
  rows = [{k: outputs.parse_cell(v) for k, v in r.items()}
          for r in outputs.read_results(folder / 'results.csv')]
  rows.sort(key=lambda r: r['point'])
  with np.load(folder / 'curves.npz') as z:
    curves = {k: z[k] for k in z.files}
  if 'uploads' not in curves:
    raise ValueError(f'{folder}/curves.npz holds no per-worker uploads (the '
                     'sweep was too large to save them): it cannot be timed')
  algos = tuple(str(a) for a in curves['algo'])
  workers = curves['uploads'].shape[-1]
  saved = curves.get('bits')
  saved = saved if saved is not None and saved.ndim == 3 else None
  bits_up, notes = [], {}
  for g, algo in enumerate(algos):
    row = rows[g]
    if ((row.get('deadline_s') or 0) > 0 or (row.get('participation') or 1)
        < 1 or (row.get('clients_per_round') or 0) > 0):
      # who took part depended on the run (and, with a deadline, on its
      # network): the replay over every worker would be another run
      bits_up.append(None)
      notes[algo] = ('ran with partial participation or a deadline: not '
                     'replayed on other networks')
      continue
    if saved is not None:
      bits_up.append(np.asarray(saved[g], np.float64))
      continue
    bits, why = per_worker_bits(curves['uploads'][g], curves['cum_bits'][g],
                                hyper.get_algorithm(algo).compressor)
    bits_up.append(None if bits is None else bits.astype(np.float64))
    if why:
      notes[algo] = f'{STALE}: {why}'
  flops = flops or _sweep_flops(config, info)
  diverged_at = tuple(outputs.sweep_divergence(folder))
  return TimedSweep(
      path=folder, algos=algos,
      loss=np.asarray(curves['loss'], np.float64),
      final_loss=np.asarray(curves['final_loss'], np.float64),
      loss_every=np.asarray(curves['loss_every'], np.int64),
      diverged=np.asarray([at is not None for at in diverged_at], bool),
      bits_up=tuple(bits_up),
      bits_down=np.stack([downlink_per_worker(c, workers)
                          for c in curves['cum_bits_down']]),
      notes=notes, flops=np.asarray([flops(a) for a in algos], np.float64),
      seeds=np.asarray(curves['seed'], np.int64),
      num_params=int(info['num_params']),
      target_residual=info.get('target_residual'),
      target_iteration=tuple(r.get('target_iteration') for r in rows),
      diverged_at=diverged_at)


# ----------------------------------------------------------------------------
# The target.


def first_logged_at_or_below(loss_T, final_loss: float, loss_every: int,
                             level: float) -> int | None:
  """k* in 0..T: the first logged iterate with f(theta^k) <= level
  (f(theta^T) counts as logged), or None."""
  loss = np.asarray(loss_T, np.float64)
  loss = np.where(metrics.logged(len(loss), loss_every), loss, np.nan)
  return metrics.first_at_or_below(np.append(loss, final_loss), level)


def choose_target(sweep: TimedSweep, residual: bool) -> Target:
  """The one rule of what reaching the target means in a sweep.

  A convex full-batch sweep (`residual`) with a residual target that some
  preset reached: the target residual f - f* <= sweep.json
  `target_residual`, k* each point's results.csv `target_iteration`
  (presets that did not reach it are not timed). Otherwise (the minibatch
  sweeps, the network, or a budget too short for the residual target): the
  loss level f <= L, L the highest final loss f(theta^T) among the presets
  that did not diverge and ended below their initial loss f(theta^0), so
  every one of them reaches it (at the latest at theta^T); a preset that
  ended above where it started (less than 10x: it did not diverge) does not
  set the level and is timed only if it passed it on the way. k* is the first logged iterate at
  or below L. Diverged presets (`TimedSweep.diverged`, the one rule) are
  never timed, also where they reached the target before diverging. "Ended
  below its initial loss" is not a second divergence rule: it only decides
  who may set the level (a run that went up, but less than 10x, would put
  the level above where every preset started).

  Raises:
    ValueError: every point diverged, or none ended below its initial loss
      (no level to choose; `family_time.section` reports the sweep as not
      timed).
  """
  ok = ~np.asarray(sweep.diverged, bool)
  prefix = ''
  if residual and sweep.target_residual is not None:
    level = float(sweep.target_residual)
    k = np.asarray([-1 if (it is None or not good) else int(it)
                    for it, good in zip(sweep.target_iteration, ok)])
    if np.any(k >= 0):
      return Target('residual', level, k, (
          f'the residual target f(θ^k) − f* ≤ {level:g} (sweep.json '
          '`target_residual`; k* is results.csv `target_iteration`); '
          f'{int(np.sum(k >= 0))} of {len(k)} presets reach it'))
    prefix = (f'no preset reached the residual target {level:g} in this '
              'budget, so ')
  if not ok.any():
    raise ValueError(f'every point of {sweep.path} diverged: there is no '
                     'loss level to time to')
  # The level: among the presets that made progress (f(theta^T) below
  # f(theta^0); one that ran away, finite but far above where it started,
  # would make every preset reach the level at k = 0).
  start = np.asarray(sweep.loss, np.float64)[:, 0]  # k = 0 always logs
  progressed = ok & (np.asarray(sweep.final_loss) < start)
  if not progressed.any():
    raise ValueError(f'no point of {sweep.path} ended below its initial '
                     'loss: there is no loss level to time to')
  finals = np.where(progressed, sweep.final_loss, -np.inf)
  worst = int(np.argmax(finals))
  level = float(finals[worst])
  k = []
  for g in range(len(sweep.algos)):
    hit = (first_logged_at_or_below(sweep.loss[g], sweep.final_loss[g],
                                    sweep.loss_every[g], level)
           if ok[g] else None)
    k.append(-1 if hit is None else hit)
  return Target('loss', level, np.asarray(k), (
      f'{prefix}the loss level f(θ^k) ≤ {level:.6g}: the highest final '
      f'loss f(θ^T) among the {int(progressed.sum())} presets that ended '
      f'below their initial loss (that of {sweep.algos[worst]}), so every '
      'one of them reaches it'
      + (f' ({", ".join(sweep.algos[g] for g in np.flatnonzero(ok & ~progressed))}'
         ' ended above where it started and is timed only if it passed the '
         'level on the way)' if np.any(ok & ~progressed) else '')
      + '; k* is the first logged iterate at or below it'))


def diverged_at(sweep: TimedSweep, g: int) -> int | None:
  """Where point g diverged, None where it did not or is not known."""
  return sweep.diverged_at[g] if g < len(sweep.diverged_at) else None


def divergence(sweep: TimedSweep, g: int) -> str:
  """'diverged at k=12' (or 'diverged'), '' for a point that did not."""
  if not sweep.diverged[g]:
    return ''
  at = diverged_at(sweep, g)
  return 'diverged' if at is None else f'diverged at k={at}'


def untimed(sweep: TimedSweep, target: Target, g: int) -> str | None:
  """Why point g has no time to target (None: it has one)."""
  if sweep.diverged[g]:
    return divergence(sweep, g)
  if sweep.bits_up[g] is None:
    return 'no per-worker bits'
  if target.iteration[g] < 0:
    return 'target not reached'
  return None
