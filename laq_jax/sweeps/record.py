"""The one trace record: what a run keeps per step, from the rule to the files.

    record = Record.of(trace)                 # a chunk's Trace (NumPy)
    record = Record.join([record, Record.of(next_trace)])
    record.uploads, record.bits, record.cum_bits   # per-step totals, once

The rule's per-step stats (`rules.StepStats`) flow unchanged into the
loop's `Trace` (its fields plus the loss and the gradient norm); a `Record`
keeps the RECORDED fields of it, joined along time, and computes the
per-step totals over the workers once. metrics.csv, TensorBoard, summaries,
checkpoints, sweeps and figures all read a Record. Adding a traced quantity
is one field in the rule's StepStats (or the loop's Trace); adding it to
RECORDED keeps it in every run's files: a per-step column of metrics.csv
(summed over the workers for a per-worker field) and a TensorBoard scalar,
`trace/NAME`.

Arrays are NumPy with time on the last axis of a scalar field and the one
before the last of a per-worker field (`_M`): [T] and [T, M] for one run,
[G, T] and [G, T, M] for a sweep.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Sequence

import numpy as np

# What a run keeps of its Trace, in this order (checkpoints, sweeps, files).
# The first ten are the accounting every consumer reads (the bits, the
# round's simulated time, `laq_jax.network`, who took part and who a
# deadline cut off, `laq_jax.participation`); any field added after them is
# written generically.
RECORDED = ('loss', 'grad_norm_sq', 'sent_M', 'bits_M', 'bits_down_M',
            'time_s', 'slowest', 'slowdown_M', 'participants_M', 'dropped_M',
            'grads_M')
STANDARD = RECORDED[:10]
# Fields a record may lack (then the files leave their columns out or
# empty): records of code older than the network model have no times.
OPTIONAL = ('grad_norm_sq', 'bits_down_M', 'time_s', 'slowest',
            'slowdown_M', 'participants_M', 'dropped_M', 'grads_M')
_DTYPES = {'loss': np.float64, 'grad_norm_sq': np.float64, 'sent_M': bool,
           'bits_M': np.int32, 'bits_down_M': np.int32,
           'time_s': np.float64, 'slowest': np.int32,
           'slowdown_M': np.float64, 'participants_M': bool,
           'dropped_M': bool, 'grads_M': np.int32}


def per_worker(name: str) -> bool:
  """Whether a recorded field has a worker axis (its name ends in _M)."""
  return name.endswith('_M')


def extras() -> tuple[str, ...]:
  """The RECORDED fields past the STANDARD ones (written generically)."""
  return RECORDED[len(STANDARD):]


@dataclasses.dataclass(frozen=True)
class Record:
  """Per-step arrays of a run or a sweep (see the module docstring).

  Attributes:
    fields: {name: array} for the RECORDED names (an OPTIONAL one may be
      None).
  """
  fields: Mapping[str, np.ndarray | None]

  @classmethod
  def of(cls, trace) -> Record:
    """The RECORDED fields of a Trace (any object with those attributes)."""
    return cls.from_arrays(**{n: getattr(trace, n, None) for n in RECORDED})

  @classmethod
  def from_arrays(cls, **arrays) -> Record:
    """From keyword arrays (loss=..., sent_M=..., bits_M=...); the OPTIONAL
    ones may be left out. Unknown names are refused."""
    unknown = sorted(set(arrays) - set(RECORDED))
    if unknown:
      raise ValueError(f'unknown recorded field(s) {unknown}; allowed: '
                       f'{", ".join(RECORDED)}')
    fields = {}
    for name in RECORDED:
      value = arrays.get(name)
      if value is None:
        if name not in OPTIONAL:
          raise ValueError(f'a Record needs {name!r}')
        fields[name] = None
        continue
      value = np.asarray(value)
      if name in ('sent_M', 'participants_M', 'dropped_M') and (
          value.dtype != bool):
        value = value.astype(bool)
      fields[name] = value
    return cls(fields)

  @classmethod
  def empty(cls, num_workers: int) -> Record:
    """No steps yet, for `num_workers` workers."""
    return cls.from_arrays(**{
        n: np.zeros((0, num_workers) if per_worker(n) else (0,),
                    _DTYPES.get(n, np.float64)) for n in RECORDED})

  @classmethod
  def join(cls, records: Sequence[Record]) -> Record:
    """The records one after another in time."""
    return cls._concat(records, lambda name, a: a.ndim - (
        2 if per_worker(name) else 1))

  @classmethod
  def concat_points(cls, records: Sequence[Record]) -> Record:
    """Sweep records one after another along the grid axis G."""
    return cls._concat(records, lambda name, a: 0)

  @classmethod
  def _concat(cls, records, axis_of) -> Record:
    """The fields every record has, concatenated on axis_of(name, array)."""
    out = {}
    for name in RECORDED:
      parts = [r.fields[name] for r in records]
      if all(p is not None for p in parts):
        out[name] = np.concatenate(parts, axis=axis_of(name, parts[0]))
    return cls.from_arrays(**out)

  def arrays(self) -> dict[str, np.ndarray]:
    """{name: array} of the present fields (what a checkpoint stores)."""
    return {n: v for n, v in self.fields.items() if v is not None}

  def __getattr__(self, name: str) -> Any:
    fields = object.__getattribute__(self, 'fields')
    if name in fields:
      return fields[name]
    raise AttributeError(name)

  def _map(self, fn) -> Record:
    return Record.from_arrays(**{n: fn(n, v) for n, v in self.arrays().items()})

  def head(self, num_steps: int) -> Record:
    """Steps 0..num_steps-1."""
    return self._map(lambda n, v: (v[..., :num_steps, :] if per_worker(n)
                                   else v[..., :num_steps]))

  def point(self, g) -> Record:
    """Grid point g (or the points of an index array) of a sweep's record."""
    return self._map(lambda n, v: v[g])

  @property
  def num_steps(self) -> int:
    return int(self.loss.shape[-1])

  @property
  def num_workers(self) -> int:
    return int(self.sent_M.shape[-1])

  # Per-step totals over the workers (int64), computed once.
  @functools.cached_property
  def uploads(self) -> np.ndarray:
    return self.sent_M.sum(axis=-1, dtype=np.int64)

  @functools.cached_property
  def bits(self) -> np.ndarray:
    return self.bits_M.sum(axis=-1, dtype=np.int64)

  @functools.cached_property
  def bits_down(self) -> np.ndarray | None:
    if self.bits_down_M is None:
      return None
    return self.bits_down_M.sum(axis=-1, dtype=np.int64)

  @functools.cached_property
  def cum_uploads(self) -> np.ndarray:
    return np.cumsum(self.uploads, axis=-1, dtype=np.int64)

  @functools.cached_property
  def cum_bits(self) -> np.ndarray:
    return np.cumsum(self.bits, axis=-1, dtype=np.int64)

  @functools.cached_property
  def cum_bits_down(self) -> np.ndarray | None:
    if self.bits_down is None:
      return None
    return np.cumsum(self.bits_down, axis=-1, dtype=np.int64)

  @functools.cached_property
  def cum_time_s(self) -> np.ndarray | None:
    """Simulated seconds through step k (float64), or None."""
    if self.time_s is None:
      return None
    return np.cumsum(np.asarray(self.time_s, np.float64), axis=-1)

  def per_step(self, name: str) -> np.ndarray:
    """A recorded field per step: summed over the workers if per-worker
    (None for an OPTIONAL field the record lacks)."""
    value = self.fields[name]
    if value is None:
      return None
    return value.sum(axis=-1) if per_worker(name) else value
