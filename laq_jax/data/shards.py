"""Splitting a data set among M workers.

`make_shards` splits the way the LAQ paper does (Sun et al., NeurIPS 2019:
worker m holds the m-th contiguous block of the training set), plus
shuffled, label-sorted and Dirichlet label-skewed alternatives, all of
equal size. `split_clients` adds the federated split with unequal client
sizes ('dirichlet_unequal'), padded to the largest client with a count of
each client's own samples.
"""

from __future__ import annotations

import numpy as np

from typing import NamedTuple

from laq_jax.data.base import DataError

# Equal-size splits (M divides n) and the unequal-size one (padded).
EQUAL_SPLITS = ('contiguous', 'iid', 'label_sorted', 'dirichlet', 'shards')
UNEQUAL_SPLITS = ('dirichlet_unequal', 'natural')
SPLITS = EQUAL_SPLITS + UNEQUAL_SPLITS


class Shards(NamedTuple):
  """Every client's samples, padded to the largest client.

  Attributes:
    x_MxNxD: features; client m's rows 0..count_M[m]-1 are its own, the
      rest zeros.
    y_MxN: labels; padding rows hold 0.
    count_M: each client's own samples (int32); None when every client
      holds N (the equal splits: nothing is padded).
  """
  x_MxNxD: np.ndarray
  y_MxN: np.ndarray
  count_M: np.ndarray | None = None


def _divisors(n: int, limit: int) -> list[int]:
  return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _dirichlet_class_counts(
    class_sizes_C: np.ndarray, num_workers: int, shard_size,
    alpha: float, rng: np.random.Generator) -> np.ndarray:
  """Returns counts_MxC: how many samples of each class each worker gets
  (`shard_size` an int, or each worker's size [M])."""
  remaining_C = class_sizes_C.copy()
  counts_MxC = np.zeros((num_workers, len(class_sizes_C)), np.int64)
  concentration_C = alpha * len(class_sizes_C) * (
      class_sizes_C / class_sizes_C.sum())
  sizes_M = np.broadcast_to(np.asarray(shard_size, np.int64), (num_workers,))
  for m in range(num_workers):
    mixture_C = rng.dirichlet(concentration_C)
    need = int(sizes_M[m])
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


def _checked(x, y, num_workers) -> tuple[np.ndarray, np.ndarray]:
  """(x, y) as arrays, after checking M >= 1 and one label per row."""
  if isinstance(num_workers, bool) or not isinstance(
      num_workers, (int, np.integer)) or num_workers < 1:
    raise DataError(
        f'num_workers={num_workers!r} must be an integer >= 1.')
  x, y = np.asarray(x), np.asarray(y)
  if len(y) != len(x) or y.ndim != 1:
    raise DataError(
        f'x has {len(x)} rows but y has shape {y.shape}; expected y of '
        f'shape [{len(x)}].')
  return x, y


def _check_alpha(name: str, value) -> None:
  if not value > 0:  # Also rejects NaN.
    raise DataError(
        f'{name}={value!r} must be > 0 (small values, e.g. 0.1, give '
        f'strongly skewed clients; large ones, e.g. 100, nearly even ones).')


def _dirichlet_rows(y: np.ndarray, num_workers: int, sizes, alpha: float,
                    rng: np.random.Generator) -> list[np.ndarray]:
  """Each worker's row indices (sorted) for label mixtures ~ Dirichlet."""
  labels, y_index = np.unique(y, return_inverse=True)
  class_sizes_C = np.bincount(y_index, minlength=len(labels))
  counts_MxC = _dirichlet_class_counts(class_sizes_C, num_workers, sizes,
                                       alpha, rng)
  pools = [rng.permutation(np.flatnonzero(y_index == c))
           for c in range(len(labels))]
  starts_MxC = np.cumsum(counts_MxC, axis=0) - counts_MxC
  return [np.sort(np.concatenate([
      pools[c][starts_MxC[m, c]:starts_MxC[m, c] + counts_MxC[m, c]]
      for c in range(len(labels))])) for m in range(num_workers)]


def make_shards(
    x: np.ndarray, y: np.ndarray, num_workers: int,
    split: str = 'contiguous', *, seed: int = 0,
    dirichlet_alpha: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
  """Splits (x, y) into `num_workers` equal shards.

  Splits, each returning every sample exactly once:

  - 'contiguous': file order; worker m gets rows m*N:(m+1)*N. This is the
    LAQ paper's split.
  - 'iid': a seeded random permutation, then contiguous blocks.
  - 'label_sorted': a stable sort by label, then contiguous blocks, so each
    worker sees one or a few labels.
  - 'shards': McMahan et al. 2017's pathological non-IID split: a stable
    sort by label, 2 M shards of n / (2 M) consecutive samples, and each
    worker two shards drawn at random (most workers see two labels).
    Needs 2 M to divide n.
  - 'dirichlet': label-skewed shards of equal size. Workers are filled in
    turn: worker m draws a label mixture `p_m ~ Dirichlet(alpha * C * q)`
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
    split: one of EQUAL_SPLITS.
    seed: seeds 'iid', 'dirichlet' and 'shards'.
    dirichlet_alpha: concentration for 'dirichlet'; must be > 0.

  Returns:
    x_MxN... and y_MxN with N = n // M.

  Raises:
    DataError: an unknown (or unequal) split, M < 1, M not dividing n,
      mismatched lengths, or dirichlet_alpha <= 0.
  """
  if split in UNEQUAL_SPLITS:
    raise DataError(
        f'split={split!r} gives clients of unequal sizes: use '
        'split_clients, which pads them and returns their counts.')
  if split not in SPLITS:
    raise DataError(f'split={split!r} is unknown; choose one of {SPLITS}.')
  x, y = _checked(x, y, num_workers)
  n = len(x)
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
  elif split == 'shards':
    if n % (2 * num_workers):
      raise DataError(f'split=\'shards\' cuts {n} samples into 2 x '
                      f'num_workers={2 * num_workers} shards: it needs 2 M '
                      f'to divide {n}')
    pieces = np.argsort(y, kind='stable').reshape(2 * num_workers, -1)
    order = pieces[rng.permutation(2 * num_workers)].reshape(-1)
  else:
    _check_alpha('dirichlet_alpha', dirichlet_alpha)
    order = np.concatenate(_dirichlet_rows(y, num_workers, shard_size,
                                           float(dirichlet_alpha), rng))
  x_shards = x[order].reshape(num_workers, shard_size, *x.shape[1:])
  y_shards = y[order].reshape(num_workers, shard_size)
  return x_shards, y_shards


def client_sizes(n: int, num_workers: int, size_alpha: float,
                 rng: np.random.Generator) -> np.ndarray:
  """Unequal client sizes [M] summing to n, each >= 1: 1 + a multinomial
  draw of the other n - M samples over shares ~ Dirichlet(size_alpha * 1_M)
  (quantity skew as in Li et al., 2022, "Federated Learning on Non-IID Data
  Silos"; the +1 keeps every client non-empty)."""
  shares_M = rng.dirichlet(np.full(num_workers, float(size_alpha)))
  return 1 + rng.multinomial(n - num_workers, shares_M)


def split_clients(
    x: np.ndarray, y: np.ndarray, num_workers: int,
    split: str = 'contiguous', *, seed: int = 0,
    dirichlet_alpha: float = 0.5, size_alpha: float = 1.0,
    owner: np.ndarray | None = None) -> Shards:
  """Splits (x, y) among `num_workers` clients, equal or unequal.

  The equal splits are `make_shards`'s (count_M None). 'dirichlet_unequal'
  draws the client sizes with `client_sizes` (Dirichlet(size_alpha) shares,
  every client at least one sample, no divisibility rule), then each
  client's labels as 'dirichlet' does (a mixture ~ Dirichlet(alpha * C * q),
  multinomial draws clipped to the supply); every sample is used exactly
  once. Clients are padded with zero rows (label 0) to the largest size,
  and count_M says how many rows are each client's own: the loop's f_m is
  the mean over those rows only, and a minibatch draws min(batch_size,
  count) of them without replacement.

  'natural' keeps the data's own clients (`owner`: each sample's client,
  0..K-1, from the dataset kind, e.g. Shakespeare's roles): client m holds
  its samples in order; M must be K.

  Raises:
    DataError: as `make_shards`; for 'dirichlet_unequal', M > n or an
      alpha <= 0; for 'natural', no owners or M != K.
  """
  if split == 'natural':
    if owner is None:
      raise DataError("split='natural' needs a dataset with its own clients "
                      "(e.g. 'shakespeare'); this one has none: use another "
                      f'split ({", ".join(s for s in SPLITS if s != "natural")})')
    owner = np.asarray(owner)
    if (owner.shape != (len(x),) or not np.issubdtype(owner.dtype, np.integer)
        or (len(owner) and owner.min() < 0)):
      raise DataError(f"split='natural': the owners must be {len(x)} "
                      f'integers >= 0, one per sample (got shape '
                      f'{owner.shape}, {owner.dtype})')
    k = int(owner.max()) + 1 if len(owner) else 0
    if num_workers != k:
      raise DataError(f'num_workers={num_workers} is not allowed with '
                      f"split='natural': it must be the data's {k} clients")
    sizes_M = np.bincount(owner, minlength=k)
    if sizes_M.min() < 1:
      raise DataError(f"split='natural': client {int(np.argmin(sizes_M))} "
                      'has no training sample')
    width = int(sizes_M.max())
    x_MxNxD = np.zeros((k, width) + x.shape[1:], x.dtype)
    y_MxN = np.zeros((k, width), y.dtype)
    for m in range(k):
      rows = np.flatnonzero(owner == m)
      x_MxNxD[m, :len(rows)] = x[rows]
      y_MxN[m, :len(rows)] = y[rows]
    return Shards(x_MxNxD, y_MxN, sizes_M.astype(np.int32))
  if split not in UNEQUAL_SPLITS:
    return Shards(*make_shards(x, y, num_workers, split, seed=seed,
                               dirichlet_alpha=dirichlet_alpha))
  x, y = _checked(x, y, num_workers)
  n = len(x)
  if num_workers > n:
    raise DataError(
        f'num_workers={num_workers} is more than the {n} samples: every '
        f'client of split={split!r} holds at least one.')
  _check_alpha('dirichlet_alpha', dirichlet_alpha)
  _check_alpha('dirichlet_size_alpha', size_alpha)
  rng = np.random.default_rng(seed)
  sizes_M = client_sizes(n, num_workers, size_alpha, rng)
  rows = _dirichlet_rows(y, num_workers, sizes_M, float(dirichlet_alpha),
                         rng)
  width = int(sizes_M.max())
  x_MxNxD = np.zeros((num_workers, width) + x.shape[1:], x.dtype)
  y_MxN = np.zeros((num_workers, width), y.dtype)
  for m, r in enumerate(rows):
    x_MxNxD[m, :len(r)] = x[r]
    y_MxN[m, :len(r)] = y[r]
  return Shards(x_MxNxD, y_MxN, sizes_M.astype(np.int32))
