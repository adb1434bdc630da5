"""A sweep's wall time, predicted before it starts.

    seconds, words = predict(built, points, num_iters, grid_axis)
    seconds, words = predict(..., device=H200)    # on a GPU, from FLOPs

`python -m experiments.predict --config=...` prints both for any config.

The floor of each kind of program the sweep compiles (full-batch or
minibatch; `experiments.run.roofline`: the matrix products at this machine's
dense-matmul rate, or the passes over the features at its read bandwidth,
both measured now in about a second) times the wall / floor measured for
that kind of program on a CPU (`WALL_OVER_FLOOR`, from `benchmarks/cost.py`
and the paper report's timing table, docs/benchmarks.md "Cost as work
grows"). Compiling and loading are not in it. On an accelerator no such
ratio is measured yet: the prediction is the floor alone, a lower bound,
and says so.

Each point's gradient work is its gradients per worker and step
(`gradients_per_step`: K for rounds of local work, two for LASG's and
CADA's same-sample pair); with `num_evals` the test accuracy's forward
passes are counted too (the heavy models' evaluations are no small part).
`device` (e.g. `H200`) predicts for an accelerator from its datasheet
instead (`benchmarks/gpu_estimate.py`'s assumptions: a fraction of its
peak, a fixed cost per kernel), not from a measured rate.
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
# G (docs/benchmarks.md, "Cost as work grows"). The minibatch ones are the
# report's two minibatch experiments rerun after the Feistel draw, with the
# draw and the minibatch rows in the floor (2-core AMD EPYC, 2026-12-03;
# docs/benchmarks.md, "The minibatch experiments against their floors").
WALL_OVER_FLOOR = {
    ('logreg', 'full', 'vmap'): 2.23,
    ('logreg', 'full', 'map'): 3.63,
    ('logreg', 'minibatch', 'map'): 5.7,
    ('mlp', 'full', 'map'): 1.42,
    ('mlp', 'minibatch', 'map'): 1.94,
    # The workloads' models (docs/benchmarks.md "Models", benchmarks/
    # models.py: M = 10 vmapped workers' minibatch gradients, quiet CPU);
    # the CNNs as measured with their convolutions as patch products
    # (PatchConv, 2026-12-04; they were 25.5, 30 and 50 before it).
    ('char_lstm', 'minibatch', 'map'): 2.8,
    ('lasg_cnn', 'minibatch', 'map'): 3.41,
    ('cnn', 'minibatch', 'map'): 2.06,
    ('resnet20', 'minibatch', 'map'): 2.98,
}
DEFAULT_RATIO = 3.0  # a kind not measured: a rough middle of the above
# Triggers that compute a second gradient on the same sample each step.
SAME_SAMPLE_TRIGGERS = ('lasg_wk1', 'lasg_wk2', 'lasg_ps', 'cada_wk1',
                        'cada_wk2')
# An accelerator's datasheet (NVIDIA H200 SXM: FP64 and FP64 tensor 34 /
# 67 TFLOP/s, FP32 67 TFLOP/s, HBM3e 4.8 TB/s), what a program reaches of
# it (a fraction of peak for these shapes), and what an iteration costs
# beyond its floor: seconds_per_iteration + its kernels x
# seconds_per_kernel, fitted once (issue 53) to the six workloads' model
# iterations measured on one H200 at 4e7d038 (docs/gpu/h200_4e7d038.json)
# against their kernels as benchmarks/kernels.py counts them on a CPU
# (docs/gpu/kernel_fit.json: `python benchmarks/kernels.py --fit`; the
# kernels of an iteration that does not log the objective, as the measured
# ones did not; within 33% of every row, under the measured time for the
# CNNs). kernels_per_iteration: a program not in KERNELS.
H200 = {'name': 'NVIDIA H200 SXM', 'float64_flops': 67e12,
        'float32_flops': 67e12, 'bandwidth': 4.8e12,
        'matmul_efficiency': 0.4, 'bandwidth_efficiency': 0.6,
        'seconds_per_iteration': 3.3222e-5, 'seconds_per_kernel': 2.3360e-6,
        'kernels_per_iteration': 400}
DEVICES = {'h200': H200}
# Kernels per iteration of a program by (model, minibatch), counted on a CPU
# by benchmarks/kernels.py as the launchers compile them for a GPU (its
# default --form grouped: the fixed-order sums as a GPU's program has them)
# without the stragglers' draws where no point has any
# (`RunSpec.stragglers`), in an iteration that does not log the objective:
# full batch its LAQ programs (docs/gpu/kernels_cpu.json), minibatch
# benchmarks/models.py's SGD programs (`kernels.py --models`,
# docs/gpu/kernels_models_cpu.json, 10 workers; char_lstm with flax's LSTM,
# the default).
KERNELS = {('logreg', False): 56, ('mlp', False): 68,
           ('logreg', True): 116, ('mlp', True): 128,
           ('lasg_cnn', True): 220, ('cnn', True): 221,
           ('resnet20', True): 686, ('char_lstm', True): 9653}


def kernels_per_iteration(model: str, stochastic: bool, device: dict) -> int:
  """KERNELS' count for this program, else the device's default."""
  return KERNELS.get((model, stochastic), device['kernels_per_iteration'])


def gradients_per_step(point: dict[str, Any]) -> int:
  """A worker's gradients per step at this grid point: K (`<client>.steps`)
  for a round of local work, 2 for a same-sample trigger, else 1."""
  algorithm = hyper_lib.get_algorithm(point['algo'])
  count = 1
  if algorithm.local:
    key = f'{algorithm.client}.steps'
    count = int(point.get(key, dict(algorithm.params).get(key, 1)))
  if algorithm.trigger in SAME_SAMPLE_TRIGGERS:
    count += 1
  return count


def _layout_bytes(data, precision: str) -> int:
  if precision == 'float64':
    return 8
  return 2 if getattr(data, 'xq_MxNxD', None) is not None else 4


def device_seconds(cost, device: dict, precision: str, gradients: int,
                   kernels: int | None = None) -> float:
  """One iteration on `device` from its datasheet: the larger of its
  products' and its reads' time, plus the fitted cost per iteration and per
  kernel (`kernels` per gradient, None: the device's default)."""
  if kernels is None:
    kernels = device['kernels_per_iteration']
  return (max(cost.flops / (device['matmul_efficiency']
                            * device[f'{precision}_flops']),
              cost.bytes / (device['bandwidth_efficiency']
                            * device['bandwidth']))
          + device['seconds_per_iteration']
          + gradients * kernels * device['seconds_per_kernel'])


_RATES: dict[bool, dict[str, Any]] = {}


def measured_rates() -> dict[str, Any]:
  """This machine's rates (`roofline.measure`, the report's probes: about
  2 s), measured once per process and float64 mode: a study's sweeps, each
  predicted, share them."""
  x64 = bool(jax.config.jax_enable_x64)
  if x64 not in _RATES:
    _RATES[x64] = roofline.measure(repeats=2)
  return _RATES[x64]


def predict(built, points: Sequence[dict[str, Any]], num_iters: int,
            grid_axis: str, rates: dict[str, Any] | None = None, *,
            num_evals: int = 0, device: dict | None = None
            ) -> tuple[float | None, str]:
  """(predicted seconds or None, one line for the log).

  Args:
    built: the sweep's first point built (`experiments.run.build`).
    points: its grid points.
    num_iters: iterations of every point.
    grid_axis: the config's (`experiments.run.config.grid_axis`).
    rates: this machine's (`roofline.measure`; measured when None, once
      per process: `measured_rates`).
    num_evals: test-accuracy evaluations of every point (their forward
      passes over the test set are added).
    device: an accelerator's datasheet (`DEVICES`): predict for it (every
      grid vmapped) rather than for this machine.
  """
  spec = built.spec
  if rates is None and device is None:
    rates = measured_rates()
  model = 'mlp' if 'mlp' in spec.problem.name else spec.problem.name
  precision = str(built.data.x_MxNxD.dtype)
  num_train = int(built.host_data.sample_counts().sum())
  kinds: dict[tuple[bool, int], int] = {}
  for p in points:
    key = (hyper_lib.get_algorithm(p['algo']).stochastic,
           gradients_per_step(p))
    kinds[key] = kinds.get(key, 0) + 1
  accelerator = device is None and jax.default_backend() != 'cpu'
  floor = total = 0.0
  parts = []
  for (stochastic, gradients), g in sorted(kinds.items()):
    kind_spec = dataclasses.replace(spec, stochastic=stochastic,
                                    grid_axis=grid_axis)
    axis = ('vmap' if device is not None else
            spec_lib.resolve_grid_axis(kind_spec) if g > 1 else 'map')
    cost = roofline.cost(
        spec.problem, num_train, g, stochastic=stochastic,
        batch_samples=spec.batch_size * spec.num_workers * gradients,
        feature_bytes=_layout_bytes(built.data, precision),
        passes=1 if axis == 'vmap' else g,
        loss_every=kind_spec.log_every)
    if not stochastic:  # (a minibatch's count is in batch_samples)
      cost = cost._replace(flops=cost.flops * gradients)
    if device is not None:
      kernels = kernels_per_iteration(model, stochastic, device)
      seconds = num_iters * device_seconds(cost, device, precision,
                                            gradients, kernels)
    else:
      seconds = num_iters * roofline.floor_seconds(cost, rates, precision)
    kind = 'minibatch' if stochastic else 'full'
    ratio = (1.0 if device is not None else
             WALL_OVER_FLOOR.get((model, kind, axis)))
    floor += seconds
    total += seconds * (ratio or DEFAULT_RATIO)
    label = 'minibatch' if stochastic else 'full-batch'
    label += f', {gradients} gradients a step' if gradients > 1 else ''
    parts.append(f'{g} {label} point(s), {axis}: '
                 + (f'{seconds:,.3g} s ({kernels:,} kernels a step)'
                    if device is not None else
                    f'floor {seconds:,.3g} s')
                 + ('' if accelerator or device is not None else
                    f' x {ratio:g}' if ratio else
                    f' x {DEFAULT_RATIO:g} (no measured ratio for this '
                    'kind)'))
  if num_evals and built.test_x is not None:
    test = roofline.Cost(
        len(points) * int(built.test_x.shape[0])
        * float(spec.problem.loss_flops_per_sample or 0.0), 0.0)
    seconds = num_evals * (
        device_seconds(test, device, precision, 1) if device is not None
        else roofline.floor_seconds(test, rates, precision))
    ratio = (1.0 if device is not None else
             WALL_OVER_FLOOR.get((model, 'minibatch', 'map'), DEFAULT_RATIO))
    floor += seconds
    total += seconds * ratio
    parts.append(f'{num_evals} test evaluation(s) of {len(points)} point(s): '
                 f'{"" if device is not None else "floor "}{seconds:,.3g} s'
                 + ('' if device is not None else f' x {ratio:g}'))
  if device is not None:
    return total, (f'predicted on one {device["name"]}: about {total:,.3g} s '
                   f'({total / 60:,.2g} min) of iterations, from its '
                   f'datasheet ({device["matmul_efficiency"]:.0%} of peak, '
                   f'{device["seconds_per_iteration"] * 1e6:.0f} us a step + '
                   f'{device["seconds_per_kernel"] * 1e6:.2f} us a '
                   'kernel): '
                   + '; '.join(parts))
  if accelerator:
    return None, (f'predicted: at least {floor:,.0f} s (the floor; no '
                  'wall/floor measured on this backend yet): '
                  + '; '.join(parts))
  return total, (f'predicted: about {total:,.3g} s ({total / 60:,.2g} min) '
                 'of iterations on this machine: ' + '; '.join(parts)
                 + ' (the measured wall/floor of such programs, '
                 'docs/benchmarks.md)')


def predictions(config, devices=('here', 'h200')) -> list[tuple[str, float
                                                                 | None,
                                                                 str]]:
  """[(device, seconds or None, one line)] for a run or sweep config
  (`python -m experiments.predict`'s): its first point built (the data
  loaded, nothing compiled), its grid predicted on each device ('here' or a
  key of DEVICES)."""
  from experiments.run import build as build_lib  # pylint: disable=g-import-not-at-top
  from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
  if 'sweep' in config:
    points = config_lib.points_from_config(config)
    first = config_lib.point_config(config, points[0])
  else:
    config_lib.validate_config(config)
    first = config
    points = [{'algo': config.algo}]
  built = build_lib.build(first, validated=True)
  num_evals = -(-config.num_iters // config.eval_every)
  out = []
  for device in devices:
    seconds, words = predict(
        built, points, config.num_iters, config_lib.grid_axis(config),
        num_evals=num_evals,
        device=None if device == 'here' else DEVICES[device])
    out.append((device, seconds, words))
  return out
