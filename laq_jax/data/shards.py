"""Splitting a data set among M workers.

`make_shards` splits the way the LAQ paper does (Sun et al., NeurIPS 2019:
worker m holds the m-th contiguous block of the training set), plus
shuffled, label-sorted and Dirichlet label-skewed alternatives.
"""

from __future__ import annotations

import numpy as np

from laq_jax.data.base import DataError

SPLITS = ('contiguous', 'iid', 'label_sorted', 'dirichlet')


def _divisors(n: int, limit: int) -> list[int]:
  return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _dirichlet_class_counts(
    class_sizes_C: np.ndarray, num_workers: int, shard_size: int,
    alpha: float, rng: np.random.Generator) -> np.ndarray:
  """Returns counts_MxC: how many samples of each class each worker gets."""
  remaining_C = class_sizes_C.copy()
  counts_MxC = np.zeros((num_workers, len(class_sizes_C)), np.int64)
  concentration_C = alpha * len(class_sizes_C) * (
      class_sizes_C / class_sizes_C.sum())
  for m in range(num_workers):
    mixture_C = rng.dirichlet(concentration_C)
    need = shard_size
    # Each pass fills the shard or exhausts a class, so it ends in <= C + 1.
    while need > 0:
      weights_C = np.where(remaining_C > 0, mixture_C, 0.0)
      if not np.isfinite(weights_C).all() or weights_C.sum() <= 0:
        weights_C = remaining_C.astype(np.float64)
      draw_C = rng.multinomial(need, weights_C / weights_C.sum())
      take_C = np.minimum(draw_C, remaining_C)
      counts_MxC[m] += take_C
      remaining_C -= take_C
      need -= int(take_C.sum())
  return counts_MxC


def make_shards(
    x: np.ndarray, y: np.ndarray, num_workers: int,
    split: str = 'contiguous', *, seed: int = 0,
    dirichlet_alpha: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
  """Splits (x, y) into `num_workers` equal shards.

  Splits, each returning every sample exactly once:
    'contiguous': file order; worker m gets rows m*N:(m+1)*N. This is the
      LAQ paper's split.
    'iid': a seeded random permutation, then contiguous blocks.
    'label_sorted': a stable sort by label, then contiguous blocks, so each
      worker sees one or a few labels.
    'dirichlet': label-skewed shards of equal size. Workers are filled in
      turn: worker m draws a label mixture p_m ~ Dirichlet(alpha * C * q)
      over the C labels, q being the overall label distribution (so the
      symmetric Dirichlet(alpha) when labels are balanced), then draws its N
      labels from p_m restricted to labels with samples left (multinomial
      draws, clipped to the supply and repeated for the shortfall; if p_m has
      no mass on any label left, the leftover supply's proportions are
      used). The samples of each label are taken in a seeded random order,
      and a shard keeps file order inside. Since the supply runs out, the
      last workers' mixtures follow their p_m less closely; small alpha gives
      strong skew, large alpha approaches 'iid'.

  Args:
    x: samples, [n, ...].
    y: integer labels, [n].
    num_workers: M, which must divide n.
    split: one of SPLITS.
    seed: seeds 'iid' and 'dirichlet'.
    dirichlet_alpha: concentration for 'dirichlet'; must be > 0.

  Returns:
    x_MxN... and y_MxN with N = n // M.

  Raises:
    DataError: an unknown split, M < 1, M not dividing n, mismatched
      lengths, or dirichlet_alpha <= 0.
  """
  if split not in SPLITS:
    raise DataError(f'split={split!r} is unknown; choose one of {SPLITS}.')
  if isinstance(num_workers, bool) or not isinstance(
      num_workers, (int, np.integer)) or num_workers < 1:
    raise DataError(
        f'num_workers={num_workers!r} must be an integer >= 1.')
  x, y = np.asarray(x), np.asarray(y)
  n = len(x)
  if len(y) != n or y.ndim != 1:
    raise DataError(
        f'x has {n} rows but y has shape {y.shape}; expected y of shape '
        f'[{n}].')
  if n % num_workers:
    raise DataError(
        f'{n} samples do not split evenly among num_workers={num_workers}. '
        f'Worker counts that divide {n} (up to 100): '
        f'{", ".join(map(str, _divisors(n, 100)))}; or trim the data to a '
        f'multiple of {num_workers} first.')
  shard_size = n // num_workers
  rng = np.random.default_rng(seed)
  if split == 'contiguous':
    order = np.arange(n)
  elif split == 'iid':
    order = rng.permutation(n)
  elif split == 'label_sorted':
    order = np.argsort(y, kind='stable')
  else:
    if not dirichlet_alpha > 0:  # Also rejects NaN.
      raise DataError(
          f'dirichlet_alpha={dirichlet_alpha!r} must be > 0 (small values, '
          f'e.g. 0.1, give strongly label-skewed shards; large ones, e.g. '
          f'100, nearly iid shards).')
    labels, y_index = np.unique(y, return_inverse=True)
    class_sizes_C = np.bincount(y_index, minlength=len(labels))
    counts_MxC = _dirichlet_class_counts(
        class_sizes_C, num_workers, shard_size, float(dirichlet_alpha), rng)
    pools = [rng.permutation(np.flatnonzero(y_index == c))
             for c in range(len(labels))]
    starts_MxC = np.cumsum(counts_MxC, axis=0) - counts_MxC
    order = np.concatenate([
        np.sort(np.concatenate([
            pools[c][starts_MxC[m, c]:starts_MxC[m, c] + counts_MxC[m, c]]
            for c in range(len(labels))]))
        for m in range(num_workers)])
  x_shards = x[order].reshape(num_workers, shard_size, *x.shape[1:])
  y_shards = y[order].reshape(num_workers, shard_size)
  return x_shards, y_shards
