"""How long `benchmarks/gpu.sh` takes on one H200-class GPU, from FLOP counts.

    python benchmarks/gpu_estimate.py [--out estimate.md]

Every program gpu.sh runs (the paper's four experiments at the authors'
budgets, the network at its 8,000 full-batch iterations, the cross-check and
authors_code runs, and the family's four sweeps at full budget): its
iterations x (the larger of its matrix-product FLOPs at a fraction of the
GPU's peak and its passes over the features at a fraction of its memory
bandwidth, `experiments.run.roofline.cost`) + a cost per iteration and per
kernel (a small model's iteration is launch-bound on a GPU), fitted once to
one H200's measured iterations against their kernels counted on a CPU
(`benchmarks/kernels.py --fit`, docs/gpu/kernel_fit.json), with each
program's kernels from `predict.KERNELS`. With --measured JSON it prints
the tables of a run measured on a GPU instead (docs/gpu/*.json).
On an accelerator `grid_axis='auto'` vmaps every grid,
so a grid's points share each pass and each kernel launch.

Then the steps with programs of their own: the workloads' sweeps
(experiments.workloads at its CPU budget, `experiments.predict` of each
config: it loads the workload's data, and a workload whose data are not
here is listed as not estimated), and the benchmarks' programs
(benchmarks/floors.py, participants.py and the laq-jax side of peers.py):
their rounds the same way, plus COMPILE_S for each program they compile.

The assumptions are printed with the estimate; they are the estimate's
error bars, not measurements.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from configs import paper  # pylint: disable=g-import-not-at-top
from experiments.run import config as config_lib
from experiments.run import predict
from experiments.run import roofline
from experiments.studies.family import study as family_study
from laq_jax import hyper as hyper_lib

# NVIDIA H200 SXM (datasheet: FP64 and FP64 tensor 34 / 67 TFLOP/s, FP32
# 67 TFLOP/s (TF32 tensor 495), HBM3e 4.8 TB/s, 141 GB) and what these
# programs reach of it, shared with `python -m experiments.predict`.
H200 = predict.H200
MATMUL_EFFICIENCY = H200['matmul_efficiency']  # of peak, for these shapes
#                   (C = 10 columns, or hidden 200: far from large products)
BANDWIDTH_EFFICIENCY = H200['bandwidth_efficiency']
# beyond the floor, an iteration costs SECONDS_PER_ITERATION + its kernels
# (predict.KERNELS) x SECONDS_PER_KERNEL, fitted to one H200's iterations
SECONDS_PER_ITERATION = H200['seconds_per_iteration']
SECONDS_PER_KERNEL = H200['seconds_per_kernel']
NETWORK_FULL_ITERS = 8000
OVERHEAD_S = 120             # start-up, compiling, loading, f*, accuracy
COMPILE_S = 10               # a benchmark's compile of one program


def programs():
  """(label, config, points) of every sweep or run gpu.sh launches."""
  out = []
  for e in paper.experiments('full', mlp_iters=NETWORK_FULL_ITERS):
    config = paper.sweep_config(e)
    out.append((f'paper {e.name}', config,
                config_lib.points_from_config(config)))
    if e.name == 'logreg':  # the cross-check: the lazy row alone, twice
      run = paper.run_config(e, e.lazy)
      out += [(f'paper cross-check ({w})', run, [{'algo': e.lazy}])
              for w in ('alone', 'devices')]
    if e.stochastic:  # the lazy row with authors_code
      out.append((f'paper {e.name} authors_code', paper.run_config(e, e.lazy),
                  [{'algo': e.lazy}]))
  for study in family_study.studies('full', NETWORK_FULL_ITERS, 0):
    for kind, (arg, _) in study.sweeps.items():
      config = importlib.import_module(
          'configs.sweep_compressors').get_config(arg)
      out.append((f'family {study.name} {kind}', config,
                  config_lib.points_from_config(config)))
  return out


def estimate(device=H200):
  rows = []
  for label, config, points in programs():
    groups = {}
    for p in points:
      stochastic = hyper_lib.get_algorithm(p['algo']).stochastic
      groups[stochastic] = groups.get(stochastic, 0) + 1
    n = config.train_subset or config_lib.MNIST_TRAIN_SIZE
    precision = config.precision
    seconds = flops = 0.0
    for stochastic, g in groups.items():
      cost = roofline.cost(
          config.model, n, g, stochastic=stochastic,
          batch_samples=config.batch_size * config.num_workers,
          feature_bytes=8 if precision == 'float64' else 4, passes=1,
          hidden=config.hidden,
          loss_every=config.get('loss_every') or (10 if stochastic else 1))
      per_iter = predict.device_seconds(
          cost, device, precision, gradients=1,
          kernels=predict.kernels_per_iteration(config.model, stochastic,
                                                device))
      seconds += config.num_iters * per_iter
      flops += config.num_iters * cost.flops
    rows.append({'program': label, 'points': len(points),
                 'iterations': config.num_iters, 'precision': precision,
                 'model': config.model, 'tflop': flops / 1e12,
                 'seconds': seconds})
  return rows


def _round_seconds(model, precision, computing, samples, device,
                   gradients, num_train=0, loss_every=0):
  """One round (iteration) of `computing` workers' `samples` minibatch
  samples each (K local steps: samples K B, gradients K), with the full
  objective over num_train samples every loss_every rounds."""
  cost = roofline.cost(model, num_train, 1, stochastic=True,
                       batch_samples=computing * samples,
                       feature_bytes=8 if precision == 'float64' else 4,
                       loss_every=max(loss_every, 1))
  return predict.device_seconds(
      cost, device, precision, gradients,
      predict.kernels_per_iteration(model, True, device))


def benchmark_rows(device=H200):
  """The benchmarks' programs gpu.sh runs: (label, programs, rounds run,
  seconds), each program's rounds at `_round_seconds` plus COMPILE_S."""
  from benchmarks import floors, participants, peers  # pylint: disable=g-import-not-at-top
  rows = []
  # floors.py: per experiment, 4 programs of 100 iterations, called a
  # warm-up, 3 repeats and a profile: M = 10 x 500, the loss every 10.
  for name, module in floors.EXPERIMENTS.items():
    config = module.get_config()
    calls, iters = 5, 100
    per = _round_seconds(config.model, config.precision, config.num_workers,
                         config.batch_size, device, 1,
                         num_train=config_lib.MNIST_TRAIN_SIZE, loss_every=10)
    n = len(floors.ALGOS)
    rows.append((f'floors {name}', n, n * calls * iters,
                 n * (calls * iters * per + COMPILE_S)))
  # participants.py: per problem and S, 5 programs (masked: all M clients
  # compute; the others S clients) of K = 5 steps of B = 10: masked,
  # gathered and S in all of 20 rounds, gathered and S in all of 20 x
  # ROUND_FACTOR; each called a warm-up and 3 repeats, the M = 1,000 two
  # of 20 rounds once more.
  k, b = participants.LOCAL_STEPS, participants.BATCH
  long = 20 * participants.ROUND_FACTOR
  for problem, dtype in participants.PROBLEMS.items():
    precision = np.dtype(dtype).name
    for s_ in participants.ROUND_SIZES:
      seconds = rounds = 0
      for computing, calls, length in (
          (participants.NUM_CLIENTS, 5, 20), (s_, 5, 20), (s_, 4, 20),
          (s_, 4, long), (s_, 4, long)):
        rounds += calls * length
        seconds += calls * length * _round_seconds(
            problem, precision, computing, k * b, device, k) + COMPILE_S
      rows.append((f'participants {problem} S = {s_}', 5, rounds, seconds))
  # peers.py, laq-jax's side, per model: fedavg (S = 10 clients x K steps
  # of B) and slaq (S gradients of B), each a program of 1 round called
  # 31 times (the accuracy after each, the check) and one of 30 rounds
  # called twice.
  for model in ('logreg', 'cnn'):
    for algo, samples, gradients in (('fedavg', peers.K * peers.B, peers.K),
                                     ('slaq', peers.B, 1)):
      per = _round_seconds(model, 'float32', peers.S, samples, device,
                           gradients)
      rows.append((f'peers laq-jax {algo} {model}', 2, 91,
                   91 * per + 2 * COMPILE_S))
  return rows


def workload_rows(device_name='h200'):
  """(label, seconds or None, note) of experiments.workloads' sweeps at
  the budget gpu.sh runs (its CPU budget)."""
  from experiments.run import predict as predict_lib  # pylint: disable=g-import-not-at-top
  from experiments.studies.workloads import report as workloads_report  # pylint: disable=g-import-not-at-top
  rows = []
  for name in workloads_report.WORKLOADS:
    try:
      config = workloads_report.config_for(name, 'cpu')
      (_, seconds, words), = predict_lib.predictions(config, (device_name,))
      rows.append((f'workloads {name} (:cpu)', seconds, words))
    except Exception as e:  # pylint: disable=broad-except
      rows.append((f'workloads {name} (:cpu)', None,
                   f'not estimated: {str(e).splitlines()[0][:160]}'))
  return rows


def markdown(rows, device=H200, workloads=(), benchmarks=()) -> str:
  total = (sum(r['seconds'] for r in rows) + OVERHEAD_S
           + sum(w[1] or 0.0 for w in workloads)
           + sum(b[3] for b in benchmarks))
  lines = [f'# gpu.sh on one {device["name"]}: the estimate from FLOP counts',
           '',
           f'Assumptions: matmul at {MATMUL_EFFICIENCY:.0%} of '
           f'{device["float32_flops"] / 1e12:.0f} TFLOP/s (float32) and '
           f'{device["float64_flops"] / 1e12:.0f} TFLOP/s (float64), '
           f'{BANDWIDTH_EFFICIENCY:.0%} of {device["bandwidth"] / 1e12:.1f} '
           f'TB/s, and beyond that {SECONDS_PER_ITERATION * 1e6:.0f} us an '
           f'iteration + its kernels x {SECONDS_PER_KERNEL * 1e6:.2f} us '
           '(kernels counted on a CPU, `predict.KERNELS`; the two costs '
           'fitted to one H200\'s iterations, docs/gpu/kernel_fit.json), '
           f'{OVERHEAD_S} s of start-up, compiling, loading, f* and '
           'test accuracy; every grid vmapped (`grid_axis=\'auto\'`).', '',
           '| program | points | iterations | model | precision | TFLOP | '
           'estimate (s) |', '|---|---:|---:|---|---|---:|---:|']
  for r in rows:
    lines.append(f"| {r['program']} | {r['points']} | {r['iterations']:,} | "
                 f"{r['model']} | {r['precision']} | {r['tflop']:,.1f} | "
                 f"{r['seconds']:,.1f} |")
  if workloads:
    lines += ['', '| workload sweep | estimate (s) | experiments.predict |',
              '|---|---:|---|']
    lines += [f'| {label} | '
              + (f'{seconds:,.1f}' if seconds is not None else '-')
              + f' | {words} |' for label, seconds, words in workloads]
  if benchmarks:
    lines += ['', f'| benchmark | programs | rounds | estimate (s, with '
              f'{COMPILE_S} s of compiling a program) |', '|---|---:|---:|---:|']
    lines += [f'| {label} | {n} | {rounds:,} | {seconds:,.1f} |'
              for label, n, rounds, seconds in benchmarks]
  programs_s = sum(r['seconds'] for r in rows) + OVERHEAD_S
  lines += ['', f'**Total: {total:,.0f} s ({total / 60:.1f} min).** The '
            f'paper\'s and the family\'s programs alone: {programs_s:,.0f} s '
            'against the target of 8 minutes (benchmarks/run.py and '
            'benchmarks/cost.py add about a minute); `--skip` leaves steps '
            'out where a session has less.', '']
  return '\n'.join(lines)


# a measured paper row's program in `estimate()`
MEASURED_AS = {
    'logreg': 'paper logreg', 'logreg_stochastic': 'paper logreg_stochastic',
    'mlp_stochastic': 'paper mlp_stochastic', 'mlp': 'paper mlp',
    'logreg cross-check: run alone': 'paper cross-check (alone)',
    'logreg cross-check: workers on 2 CPU devices':
        'paper cross-check (devices)',
    'logreg_stochastic: slaq with authors_code':
        'paper logreg_stochastic authors_code',
    'mlp_stochastic: slaq with authors_code':
        'paper mlp_stochastic authors_code'}


def measured_markdown(record: dict, estimates: dict | None = None) -> str:
  """The tables of a run measured on a GPU (docs/gpu/*.json: gpu.sh's steps
  as that run printed them), with the estimate of each paper row's
  iterations beside its wall (`estimates`: program -> seconds)."""
  m, paper_run = record['machine'], record['paper']
  r = record['roofline']
  ratio = lambda row: (f"{row['over_floor']:g}x" if 'over_floor' in row
                       else '-')
  lines = [f"{m['device'][:1].upper()}{m['device'][1:]}, {m['cpu_cores']} "
           f"CPU cores, Python "
           f"{m['python']}, JAX {m['jax']} with CUDA {m['cuda']}; the project "
           f"at {record['commit']}. Measured rates: float32 matmul "
           f"{r['float32_matmul_tflops']} TFLOP/s, float64 "
           f"{r['float64_matmul_tflops']}, read {r['read_gb_s']:,} GB/s, "
           f"minibatch draw {r['minibatch_draw_m_rows_s']} M rows/s.", '',
           f"The paper at full budget: {paper_run['experiments_s']} s of "
           f"experiments ({paper_run['in_compiled_programs_s']} s in compiled "
           f"programs; floor {paper_run['floor_s']} s):", '',
           '| experiment | wall (s) | wall / floor | estimate of its '
           'iterations now (s) |', '|---|---:|---:|---:|']
  for row in paper_run['rows']:
    guess = (estimates or {}).get(MEASURED_AS.get(row['experiment']))
    lines.append(f"| {row['experiment']} | {row['wall_s']} | {ratio(row)} | "
                 + (f'{guess:.1f}' if guess is not None else '-') + ' |')
  models = record['models']
  lines += ['', f"An iteration of each workload's model (benchmarks/models.py; "
            f"matmul {models['matmul_tflops']} TFLOP/s and convolution "
            f"{models['conv_tflops']} measured there):", '',
            '| model | ms / iteration | / floor |', '|---|---:|---:|']
  lines += [f"| {row['model']} | {row['ms']} | {ratio(row)} |"
            for row in models['rows']]
  lines += ['', "The compressor family's sweeps at full budget:", '',
            '| sweep | points | iterations | wall (s) |', '|---|---:|---:|---:|']
  lines += [f"| {row['sweep']} | {row['points']} | {row['iterations']:,} | "
            f"{row['s']} |" for row in record['family']['rows']]
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', default=None)
  parser.add_argument('--measured', default=None, metavar='JSON',
                      help='print the tables of a run measured on a GPU '
                      '(docs/gpu/*.json) instead of the estimate')
  args = parser.parse_args(argv)
  if args.measured:
    with open(args.measured) as f:
      print(measured_markdown(json.load(f), {
          r['program']: r['seconds'] for r in estimate()}))
    return 0
  text = markdown(estimate(), workloads=workload_rows(),
                  benchmarks=benchmark_rows())
  print(text)
  if args.out:
    with open(args.out, 'w') as f:
      f.write(text)
  return 0


if __name__ == '__main__':
  sys.exit(main())
