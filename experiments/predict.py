"""A sweep's wall time, predicted before it starts.

    seconds, words = predict(built, points, num_iters, grid_axis)

The floor of each kind of program the sweep compiles (full-batch or
minibatch; `experiments.roofline`: the matrix products at this machine's
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

from experiments import roofline
from laq_jax import hyper as hyper_lib
from laq_jax import spec as spec_lib

# wall / floor per iteration on a 2-core Intel Xeon (KVM), measured with
# benchmarks/cost.py (full batch) and the full paper report (minibatch);
# keys: (model, 'full' or 'minibatch', grid axis). docs/benchmarks.md.
WALL_OVER_FLOOR = {
    ('logreg', 'full', 'vmap'): 2.9,
    ('logreg', 'full', 'map'): 4.5,
    ('logreg', 'minibatch', 'map'): 20.0,
    ('mlp', 'full', 'map'): 1.6,
    ('mlp', 'full', 'vmap'): 1.9,
    ('mlp', 'minibatch', 'map'): 5.0,
}
DEFAULT_RATIO = 5.0


def _layout_bytes(data, precision: str) -> int:
  if precision == 'float64':
    return 8
  return 2 if getattr(data, 'xq_MxNxD', None) is not None else 4


def predict(built, points: Sequence[dict[str, Any]], num_iters: int,
            grid_axis: str, rates: dict[str, Any] | None = None
            ) -> tuple[float | None, str]:
  """(predicted seconds or None, one line for the log)."""
  if rates is None:
    rates = roofline.measure(repeats=2, matmul_n=1024, read_bytes=2**26)
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
    ratio = WALL_OVER_FLOOR.get((model, kind, axis), DEFAULT_RATIO)
    floor += seconds
    total += seconds * ratio
    label = 'minibatch' if stochastic else 'full-batch'
    parts.append(f'{g} {label} point(s), {axis}: floor {seconds:,.3g} s'
                 + ('' if accelerator else f' x {ratio:g}'))
  if accelerator:
    return None, (f'predicted: at least {floor:,.0f} s (the floor; no '
                  'wall/floor measured on this backend yet): '
                  + '; '.join(parts))
  return total, (f'predicted: about {total:,.3g} s ({total / 60:,.2g} min) '
                 'of iterations on this machine: ' + '; '.join(parts)
                 + ' (the measured wall/floor of such programs, '
                 'docs/benchmarks.md)')
