"""Subprocess for sharding_test: workers on N forced CPU devices vs vmap.

    python tests/_sharded_checks.py NUM_DEVICES

Sets XLA_FLAGS before importing jax, runs each case twice (the vmap path,
`laq_jax.run_chunk`, on one device; the devices path, `sharding.make_run_chunk`
on a mesh of NUM_DEVICES) in float64 on real MNIST, and prints one JSON line
per case: {"case", "ok", "problems": [...], ...}. Exit status 0 when every
case is ok.

Shards hold 60 images and minibatches 20, multiples of the 10 classes: some
shard holds exactly a tenth of a digit, so a bias gradient is zero in exact
arithmetic but a rounding residue (+-1e-17) in floats, which the two layouts
(different reduction orders in XLA) leave with different signs. The
quantizer's tie rule (|v_i| <= kappa R counts as zero) must make both layouts
upload at the same steps anyway.
"""

import dataclasses
import json
import os
import sys
import time

NUM_DEVICES = int(sys.argv[1])
# 'exact': the cases compared exactly (0 tolerance), at XLA's defaults;
# 'inexact': the others and the layout checks, compiled with XLA's older
# loop emitters (as ./test.sh's pytest processes compile, tests/conftest.py:
# ~40% faster), which round the two paths' last bits apart as the defaults
# do not, so never for an exact case; 'all' (the default): every case, at
# the defaults.
MODE = sys.argv[2] if len(sys.argv) > 2 else 'all'
if MODE not in ('all', 'exact', 'inexact'):
  raise SystemExit(f'mode {MODE!r}: one of all, exact, inexact')
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           f' --xla_force_host_platform_device_count='
                           f'{NUM_DEVICES}' + (
                               ' --xla_cpu_use_fusion_emitters=false'
                               if MODE == 'inexact' else ''))
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

import laq_jax as lj  # pylint: disable=g-import-not-at-top
from laq_jax import sharding  # pylint: disable=g-import-not-at-top
from tests import common  # pylint: disable=g-import-not-at-top

jax.config.update('jax_enable_x64', True)

PER_WORKER = 60
BATCH = 20
TOL = 1e-10
# Settings where the lazy rule both uploads and skips within a few steps:
# the spec's defaults for laq, the authors' SLAQ settings for slaq.
# Every case is timed on the mobile network (lognormal stragglers): the
# round times and straggler draws must not depend on the layout either.
BASE = {'laq': dict(step_size=0.02, bits=4, network='mobile'),
        'slaq': dict(step_size=0.008, bits=3, err_weight=1.5,
                     threshold_offset=0.2, network='mobile')}
BASE['ssgd'] = dict(BASE['slaq'], **{'rand_p.keep_prob': 0.25})
# LASG: a forced upload after 9 skips, a threshold that both fires and not.
BASE['lasg_wk2'] = dict(step_size=0.01, max_staleness=9, xi=0.2,
                        network='mobile', **{'lasg_ps.L': 40.0})
# Local work: K = 3 steps of client SGD (SCAFFOLD's too), the presets'
# server steps (fedavg's 1; the FedOpt servers' from their settings).
BASE['fedavg'] = dict(network='mobile', **{
    'local.steps': 3, 'local.lr': 0.05, 'scaffold.steps': 3,
    'scaffold.lr': 0.05})


def compare(ref, got, steps, tol=TOL):
  """Problems (strings) where the devices path's Trace differs from vmap's
  by more than `tol` (0: the same bits)."""
  problems = []
  sent_ref, sent_got = np.asarray(ref.sent_M), np.asarray(got.sent_M)
  if sent_ref.shape != sent_got.shape:
    return [f'sent_M shapes differ: vmap {sent_ref.shape}, devices '
            f'{sent_got.shape}']
  if not np.array_equal(sent_ref, sent_got):
    where = np.argwhere(sent_ref != sent_got)
    problems.append(f'uploads differ at {len(where)} (.., step, worker) '
                    f'entries, first {where[:5].tolist()}')
  # The round's simulated time: from the bits and the stragglers' keys
  # (seed, step, global worker), so the same bits in every layout.
  for field in ('bits_M', 'bits_down_M', 'time_s', 'slowest', 'slowdown_M',
                'participants_M', 'dropped_M', 'grads_M'):
    if not np.array_equal(getattr(ref, field), getattr(got, field)):
      problems.append(f'{field} differ')
  for field in ('loss', 'grad_norm_sq', 'innovation_M', 'threshold_M',
                'error_M'):
    a, b = np.asarray(getattr(ref, field)), np.asarray(getattr(got, field))
    if a.shape != b.shape:
      problems.append(f'{field}: shapes differ, vmap {a.shape} devices '
                      f'{b.shape}')
      continue
    # Losses to 1e-10 absolute; the rest relative to their size.
    scale = 1 if field == 'loss' else np.maximum(1, np.abs(a))
    # (a loss not logged, RunSpec.loss_every, is NaN on both paths)
    bad = ~((np.abs(a - b) <= tol * scale) | (np.isnan(a) & np.isnan(b)))
    if bad.any():
      first = tuple(int(i) for i in np.argwhere(bad)[0])
      axes = '(.., step)' if field == 'loss' else '(.., step, worker)'
      problems.append(f'{field}: {int(bad.sum())} entries differ by more '
                      f'than {tol}, max |diff| {np.abs(a - b).max():.3e}; '
                      f'first at {axes} {first}: vmap {float(a[first])!r} '
                      f'devices {float(b[first])!r}')
  if sent_ref.shape[-2] != steps:
    problems.append(f'expected {steps} steps, got {sent_ref.shape[-2]}')
  return problems


def is_exact(algo, layout) -> bool:
  """Whether a case compares exactly (below)."""
  return bool(layout) and not lj.ALGORITHMS[algo].stochastic


def case(name, algo, model, num_workers, steps, hidden=16, grid=None,
         chunk_size=None, overrides=None, algos=None, layout=False,
         unequal=False, round_size=0):
  """Runs one case on both paths and returns its JSON record.

  `algos` makes a grid over algorithms (with BASE[algo]'s settings), the
  random compressors among them drawing from (seed, step, worker).
  `layout`: the data carry `lj.fast_layout`'s transposed copy (the fast
  full-batch logistic-regression gradient), split over the mesh too.
  `unequal`: clients of unequal sizes (1 to PER_WORKER samples, some below
  BATCH), padded with zero rows and masked by count_M.
  `round_size`: the devices path computes each round on its participants'
  rows alone (RunSpec.round_size), the reference masks the absent ones.
  """
  # Full-batch logistic regression on the fast layout compares exactly (the
  # server gathers the uploads in worker order; per-worker sums have a fixed
  # order), at XLA's defaults, where alone both layouts round alike (-O0
  # moves last bits by 4e-16). Autodiff's gradients compare to TOL, compiled
  # at -O0 (`jax_disable_most_optimizations`, as the pytest processes
  # compile): their compiles take half the time.
  exact = is_exact(algo, layout)
  jax.config.update('jax_disable_most_optimizations', not exact)
  try:
    return _case(name, algo, model, num_workers, steps, hidden, grid,
                 chunk_size, overrides, algos, layout, unequal, round_size,
                 exact)
  finally:
    jax.config.update('jax_disable_most_optimizations', False)


def _case(name, algo, model, num_workers, steps, hidden, grid, chunk_size,
          overrides, algos, layout, unequal, round_size, exact):
  """`case` at its optimization level."""
  start = time.time()
  x, y = common.mnist_shards(num_workers, PER_WORKER)
  count_M = None
  if unequal:
    count_M = 1 + (np.arange(num_workers) * 23) % PER_WORKER
    pad = np.arange(PER_WORKER)[None, :] >= count_M[:, None]
    x, y = np.where(pad[..., None], 0, x), np.where(pad, 0, y)
    count_M = jnp.asarray(count_M, jnp.int32)
  data = lj.Data(jnp.asarray(x), jnp.asarray(y), count_M=count_M)
  if layout:
    data = lj.fast_layout(data)
  partial = bool(overrides) and ('participation' in overrides
                                 or 'clients_per_round' in overrides)
  # The default triggers, and the opt-in ones (LASG's) the points use.
  presets = [lj.ALGORITHMS[a] for a in (algos or (algo,))]
  used = {a.trigger for a in presets}
  spec = lj.RunSpec(lj.get_problem(model, hidden=hidden), num_workers,
                    stochastic=lj.ALGORITHMS[algo].stochastic,
                    batch_size=BATCH, participation=partial,
                    triggers=(*lj.trigger.REGISTRY.default_names, *used),
                    # local work: its clients, servers and weighted mean
                    servers=tuple({a.server: 0 for a in presets}),
                    clients=tuple({a.client: 0 for a in presets}),
                    weighting=any(a.weighting != 'sum' for a in presets))
  base = dict(BASE[algo], seed=3, **(overrides or {}))
  if algos:
    hyper = lj.stack_hypers([lj.make_hyper(a, dtype=jnp.float64, **base)
                             for a in algos])
    grid = algos
  elif grid:
    hyper = lj.stack_hypers([lj.make_hyper(algo, dtype=jnp.float64,
                                           **{**base, **point})
                             for point in grid])
  else:
    hyper = lj.make_hyper(algo, dtype=jnp.float64, **base)
  _, ref = lj.run(spec, data, hyper, steps)
  mesh = sharding.make_mesh(NUM_DEVICES)
  run_chunk = sharding.make_run_chunk(mesh)
  state, got = lj.run(dataclasses.replace(spec, round_size=round_size),
                      sharding.shard_data(data, mesh), hyper, steps,
                      chunk_size=chunk_size, run_chunk_fn=run_chunk)
  problems = compare(ref, got, steps, tol=0.0 if exact else TOL)
  split = state.rule.last_upload_MxP.sharding
  if len(split.device_set) != NUM_DEVICES or split.spec[-2] != 'workers':
    problems.append(f'worker state not split over the mesh: {split}')
  sent = np.asarray(ref.sent_M)
  if sent.all() or sent.sum() <= num_workers * (grid and len(grid) or 1):
    problems.append(f'{int(sent.sum())} uploads of {sent.size}: the rule '
                    'must both upload after step 0 and skip, or the '
                    'comparison is too easy')
  return dict(case=name, ok=not problems, problems=problems,
              uploads=int(sent.sum()), entries=int(sent.size),
              loss_last=np.asarray(ref.loss)[..., -1].tolist(),
              seconds=round(time.time() - start, 2))


def layout_case():
  """Placement, per-device shapes and compile-once of the devices path."""
  problems = []
  num_workers = 2 * NUM_DEVICES
  x, y = common.mnist_shards(num_workers, PER_WORKER)
  mesh = sharding.make_mesh(NUM_DEVICES)
  data = sharding.shard_data(lj.Data(x, y), mesh)
  shard_shapes = {s.data.shape for s in data.x_MxNxD.addressable_shards}
  if shard_shapes != {(2, PER_WORKER, 784)}:
    problems.append(f'per-device data shapes {shard_shapes}, expected '
                    f'{{(2, {PER_WORKER}, 784)}}')
  spec = lj.RunSpec(lj.get_problem('logreg'), num_workers)
  run_chunk = sharding.make_run_chunk(mesh)
  state = sharding.init_state(spec, lj.make_hyper('laq', dtype=jnp.float64),
                              mesh, jnp.float64)
  for step_size in (0.01, 0.02, 0.03):  # new values, same shapes: no retrace
    hyper = lj.make_hyper('laq', dtype=jnp.float64, step_size=step_size)
    state, trace = run_chunk(spec, state, data, hyper, 3)
  sizes = run_chunk.compiled._cache_size()  # pylint: disable=protected-access
  if sizes != 1:
    problems.append(f'compiled {sizes} times for one (spec, T, shapes)')
  if len(trace.sent_M.sharding.device_set) != NUM_DEVICES:
    problems.append(f'trace not on the mesh: {trace.sent_M.sharding}')
  if int(state.step) != 9:
    problems.append(f'step counter {int(state.step)} after 3 x 3 steps')
  if sharding.make_run_chunk(mesh) is not run_chunk:
    problems.append('make_run_chunk(mesh) is not cached per mesh')
  return dict(case='layout', ok=not problems, problems=problems)


# (name, algo, model, M, steps[, hidden, grid points, chunk size, overrides])
CASES = {
    # One worker a device, and two; slaq and the MLP on devices are the
    # 2-device cases' (the suite's time).
    8: [
        ('laq-logreg-M8', 'laq', 'logreg', 8, 30),
        ('laq-logreg-M16-grid', 'laq', 'logreg', 16, 20, 16,
         [dict(bits=3), dict(bits=4, step_size=0.01), dict(xi=0.2, seed=1)]),
    ],
    2: [
        # Partial participation: every device draws every client's flag.
        # (each device computes its participants' rows alone: at most 4)
        ('slaq-logreg-M10-4-per-round-drop-gathered', 'slaq', 'logreg', 10,
         30, 16, None, None, dict(clients_per_round=4, absent='drop'), None,
         False, False, 4),
        # Clients of unequal sizes: masked minibatches and per-client F_m.
        ('slaq-mlp16-M10-unequal-deadline', 'slaq', 'mlp', 10, 20, 16,
         None, None, dict(participation=0.7, deadline_s=0.4), None, False,
         True),
        # A long convex LAQ run on clients of unequal sizes: the same
        # uploads at every one of 400 steps.
        ('laq-logreg-M10-unequal-long-fast-layout', 'laq', 'logreg', 10, 400,
         16, None, 100, None, None, True, True),
        ('ssgd-qsgd-logreg-M10-grid', 'ssgd', 'logreg', 10, 20, 16, None,
         None, None, ('qsgd', 'ssgd', 'slaq', 'terngrad', 'topk_ef',
                      'ef_signsgd')),
        ('family-full-batch-M10-grid-fast-layout', 'laq', 'logreg', 10, 20,
         16, None, 10, None, ('gd', 'ef21', 'clag', 'two_laq', 'laq'), True),
        # hidden=200 (159,010 parameters): 8 bits, or the quantization error
        # term of the trigger keeps every worker silent in the first steps.
        ('laq-mlp200-M10-chunked', 'laq', 'mlp', 10, 12, 200, None, 4,
         dict(bits=8)),
        ('slaq-logreg-M10-grid', 'slaq', 'logreg', 10, 20, 16,
         [dict(seed=0), dict(seed=2, bits=4)]),
        # LASG's same-sample pairs and per-worker thetahat / snapshots, and
        # PS's idle workers, split over the devices.
        ('lasg-mlp16-M10-grid', 'lasg_wk2', 'mlp', 10, 25, 16, None, None,
         None, ('lasg_wk2', 'lasg_wk1', 'lasg_ps', 'lasg_wk2_laq')),
        # Local work on clients of unequal sizes (sample-weighted means),
        # SCAFFOLD's control variates split over the devices, FedAdam's
        # server state replicated, LAQ on the model changes, a deadline.
        # Gathered rounds of 3 rows per device: Bernoulli(0.6) of 5 draws
        # more in some rounds, which run masked.
        ('local-mlp16-M10-unequal-grid-gathered', 'fedavg', 'mlp', 10, 12,
         16, None, None, dict(participation=0.6, deadline_s=2.0),
         ('fedavg', 'scaffold', 'fedadam', 'fedlaq', 'fedprox'), False,
         True, 3),
    ],
}


def main():
  if jax.device_count() != NUM_DEVICES:
    print(json.dumps(dict(case='devices', ok=False, problems=[
        f'{jax.device_count()} devices, expected {NUM_DEVICES}'])))
    return 1
  cases = [args for args in CASES[NUM_DEVICES] if MODE == 'all' or (
      is_exact(args[1], args[10] if len(args) > 10 else False)
      == (MODE == 'exact'))]
  records = ([] if MODE == 'exact' else [layout_case()]) + [
      case(*args) for args in cases]
  for record in records:
    print(json.dumps(record), flush=True)
  return 0 if all(r['ok'] for r in records) else 1


if __name__ == '__main__':
  sys.exit(main())
