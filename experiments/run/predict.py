"""A sweep's wall time, predicted before it starts.

    seconds, words = predict(built, points, num_iters, grid_axis)

The floor of each kind of program the sweep compiles (full-batch or
minibatch; `experiments.run.roofline`: the matrix products at this machine's
dense-matmul rate, or the passes over the features at its read bandwidth,
both measured now in about a second) times the wall / floor measured for
that kind of program on a CPU (`WALL_OVER_FLOOR`, from `benchmarks/cost.py`
and the paper report's timing table, docs/benchmarks.md "Cost as work
grows"). Compiling, loading and the test accuracy are not in it. On an
accelerator no such ratio is measured yet: the prediction is the floor
alone, a lower bound, and says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax

from experiments.run import roofline
from laq_jax import hyper as hyper_lib
from laq_jax import spec as spec_lib

# The compiled program's wall / floor on a 2-core Intel Xeon (KVM), in the
# full paper report of 2026-12-02 (docs/paper/REPORT.md, "Hardware and wall
# time": run time over floor, at the paper's sizes; 'map' of logreg full
# batch is its cross-check run alone); keys: (model, 'full' or 'minibatch',
# grid axis). benchmarks/cost.py measures the full-batch ones against N and
# G (docs/benchmarks.md, "Cost as work grows").
WALL_OVER_FLOOR = {
    ('logreg', 'full', 'vmap'): 2.23,
    ('logreg', 'full', 'map'): 3.63,
    ('logreg', 'minibatch', 'map'): 16.0,
    ('mlp', 'full', 'map'): 1.42,
    ('mlp', 'minibatch', 'map'): 3.55,
}
DEFAULT_RATIO = 3.0  # a kind not measured: a rough middle of the above


def _layout_bytes(data, precision: str) -> int:
  if precision == 'float64':
    return 8
  return 2 if getattr(data, 'xq_MxNxD', None) is not None else 4


def predict(built, points: Sequence[dict[str, Any]], num_iters: int,
            grid_axis: str, rates: dict[str, Any] | None = None
            ) -> tuple[float | None, str]:
  """(predicted seconds or None, one line for the log)."""
  if rates is None:
    rates = roofline.measure(repeats=2)  # the report's probes, about 2 s
  spec = built.spec
  model = 'mlp' if 'mlp' in spec.problem.name else spec.problem.name
  precision = str(built.data.x_MxNxD.dtype)
  num_train = int(built.host_data.sample_counts().sum())
  kinds: dict[bool, int] = {}
  for p in points:
    stochastic = hyper_lib.get_algorithm(p['algo']).stochastic
    kinds[stochastic] = kinds.get(stochastic, 0) + 1
  accelerator = jax.default_backend() != 'cpu'
  floor = total = 0.0
  parts = []
  for stochastic, g in sorted(kinds.items()):
    kind_spec = dataclasses.replace(spec, stochastic=stochastic,
                                    grid_axis=grid_axis)
    axis = spec_lib.resolve_grid_axis(kind_spec) if g > 1 else 'map'
    cost = roofline.cost(
        spec.problem, num_train, g, stochastic=stochastic,
        batch_samples=spec.batch_size * spec.num_workers,
        feature_bytes=_layout_bytes(built.data, precision),
        passes=1 if axis == 'vmap' else g,
        loss_every=kind_spec.log_every)
    seconds = num_iters * roofline.floor_seconds(cost, rates, precision)
    kind = 'minibatch' if stochastic else 'full'
    ratio = WALL_OVER_FLOOR.get((model, kind, axis))
    floor += seconds
    total += seconds * (ratio or DEFAULT_RATIO)
    label = 'minibatch' if stochastic else 'full-batch'
    parts.append(f'{g} {label} point(s), {axis}: floor {seconds:,.3g} s'
                 + ('' if accelerator else f' x {ratio:g}' if ratio else
                    f' x {DEFAULT_RATIO:g} (no measured ratio for this '
                    'kind)'))
  if accelerator:
    return None, (f'predicted: at least {floor:,.0f} s (the floor; no '
                  'wall/floor measured on this backend yet): '
                  + '; '.join(parts))
  return total, (f'predicted: about {total:,.3g} s ({total / 60:,.2g} min) '
                 'of iterations on this machine: ' + '; '.join(parts)
                 + ' (the measured wall/floor of such programs, '
                 'docs/benchmarks.md)')
