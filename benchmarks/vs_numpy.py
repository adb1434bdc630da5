"""laq-jax against the NumPy oracle (tests/reference.py): speed and agreement.

The oracle is the tests' independent transcription of docs/algorithm.md: no
laq_jax code, hand-written gradients, a Python loop over workers, every
array in the data's dtype. `bench_jax_vs_numpy` times it against laq-jax per
iteration; `self_check` runs both from the same theta^0 and compares every
upload, bit count and loss.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import laq_jax
from laq_jax import sweep as sweep_lib
from benchmarks.timing import aot_run_chunk, paired_ratio, time_interleaved
from benchmarks.workloads import NUM_WORKERS, to_data
from tests import reference


def oracle_run(x, y, algo: str, num_steps: int, theta0, model='logreg',
               hidden=200) -> dict:
  """`num_steps` of `algo` through the oracle with laq_jax's default
  hyperparameters (and D = 10, RunSpec's default), in x's dtype."""
  d = laq_jax.hyper.DEFAULTS
  return reference.run(
      x, y, steps=num_steps, alpha=d['step_size'], bits=d['bits'],
      lam=d['l2'], xi=d['xi'], c_e=d['err_weight'],
      c_0=d['threshold_offset'], tbar=d['max_staleness'], memory=10,
      model=model, hidden=hidden if model == 'mlp' else None, theta0=theta0,
      **reference.preset(algo))


def bench_jax_vs_numpy(x, y, dtype, jax_steps: int, numpy_steps: int,
                       repeats: int) -> dict:
  """laq on logistic regression: laq-jax vs the NumPy oracle, per iteration.

  laq-jax runs on the data layouts the launchers give it
  (`laq_jax.fast_layout`); the oracle on the same features in `dtype`.
  """
  problem = laq_jax.get_problem('logreg')
  data = to_data(x, y, dtype, layout=True)  # as the launchers run it
  spec = laq_jax.RunSpec(problem, NUM_WORKERS,  # laq's parts, as launched
                         **sweep_lib.parts_of([{'algo': 'laq'}]))
  hyper = laq_jax.make_hyper('laq', dtype=dtype)
  state = laq_jax.init_state(spec, hyper, dtype)
  compiled, compile_s = aot_run_chunk(spec, state, data, hyper, jax_steps)
  x_np = np.asarray(x, dtype)
  y_np = np.asarray(y)
  theta0 = np.asarray(state.theta_P)

  times = time_interleaved({
      'jax': lambda: compiled(state, data, hyper),
      'numpy': lambda: oracle_run(x_np, y_np, 'laq', numpy_steps, theta0),
  }, repeats)
  jax_s = min(times['jax']) / jax_steps
  numpy_s = min(times['numpy']) / numpy_steps
  ratio = paired_ratio(times, 'jax', 'numpy')
  ratio = {k: v * numpy_steps / jax_steps for k, v in ratio.items()}
  return {'dtype': jnp.dtype(dtype).name, 'jax_per_iter_s': jax_s,
          'numpy_per_iter_s': numpy_s, 'jax_over_numpy': ratio['median'],
          'ratio': ratio,
          'jax_steps': jax_steps, 'numpy_steps': numpy_steps,
          'compile_s': compile_s, 'all_times_s': times}


SELF_CHECK_CASES = (
    ('logreg', 'laq', jnp.float64), ('logreg', 'lag', jnp.float64),
    ('logreg', 'qgd', jnp.float64), ('mlp', 'laq', jnp.float64),
    ('mlp', 'qgd', jnp.float64), ('mlp', 'lag', jnp.float64),
    ('logreg', 'laq', jnp.float32), ('mlp', 'laq', jnp.float32))


def self_check(x, y, per_worker: int, num_steps: int) -> list[dict]:
  """The NumPy oracle vs laq-jax on a subset: uploads, bits, losses, theta.

  float64 must agree exactly on every upload decision and to ~1e-9 on the
  losses; float32 is reported only. Both apply the quantizer's tie rule
  (docs/algorithm.md, "The compressors"), so a coordinate that is zero only
  up to rounding (a bias gradient 0.1 - n_c / N when class c is exactly a
  tenth of a shard) rounds alike in both. 128 samples per worker, as before
  the rule existed: no class can be exactly a tenth.
  tests/reference_test.py makes the same comparison a test.
  """
  results = []
  xs = np.ascontiguousarray(x[:, :per_worker])
  ys = np.ascontiguousarray(y[:, :per_worker])
  for problem_name, algo, dtype in SELF_CHECK_CASES:
    problem = laq_jax.get_problem(problem_name)
    data = to_data(xs, ys, dtype)
    spec = laq_jax.RunSpec(problem, NUM_WORKERS)
    hyper = laq_jax.make_hyper(algo, dtype=dtype)
    state0 = laq_jax.init_state(spec, hyper, dtype)
    state, trace = laq_jax.run(spec, data, hyper, num_steps, state=state0)
    ref = oracle_run(np.asarray(xs, dtype), ys, algo, num_steps,
                     np.asarray(state0.theta_P), model=problem_name)
    sent_mismatch = int(np.sum(np.asarray(trace.sent_M) != ref['sent']))
    bits_mismatch = int(np.sum(np.asarray(trace.bits_M) != ref['bits']))
    loss_rel = float(np.max(np.abs(np.asarray(trace.loss) - ref['loss'])
                            / np.abs(ref['loss'])))
    theta_diff = float(np.max(np.abs(np.asarray(state.theta_P)
                                     - ref['theta'])))
    strict = jnp.dtype(dtype) == jnp.float64
    ok = sent_mismatch == 0 and bits_mismatch == 0 and loss_rel < (
        1e-9 if strict else 1e-3)
    results.append({
        'problem': problem_name, 'algo': algo, 'dtype': jnp.dtype(dtype).name,
        'steps': num_steps, 'samples_per_worker': per_worker,
        'uploads_jax': int(np.sum(trace.sent_M)),
        'uploads_numpy': int(np.sum(ref['sent'])),
        'sent_mismatches': sent_mismatch, 'bits_mismatches': bits_mismatch,
        'loss_max_rel_diff': loss_rel, 'theta_max_abs_diff': theta_diff,
        'strict': bool(strict), 'ok': bool(ok),
    })
  return results
