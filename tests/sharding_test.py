"""Workers on devices (`laq_jax.sharding`) against the vmap path.

The equality checks run in subprocesses (tests/_sharded_checks.py), because
the number of CPU devices is fixed by XLA_FLAGS before jax is imported: 8
devices (M = 8 and 16), and 2 devices for M = 10 (with partial participation,
deadlines and clients of unequal sizes). In float64 on real
MNIST, for laq and slaq, logistic regression and the MLP (hidden 16 and 200),
single runs, chunked runs and grids (one over the paper's QSGD and SSGD,
whose random draws come from (seed, step, worker)), LASG's presets (the
same-sample pairs, per-worker state, PS's idle workers), the devices path
must upload exactly when the vmap path (`laq_jax.run_chunk`) does and give
the same losses and trigger statistics to 1e-10, and on the fast layout of
full-batch logistic regression (a 400-step convex LAQ run on shards with
quantizer ties, a grid of the full-batch family) the same bits in every
field (slow tier).
The layout rules run in-process.
"""

import json
import os
import subprocess
import sys

from typing import NamedTuple

from absl.testing import absltest
from absl.testing import parameterized
import jax
import pytest

import laq_jax as lj
from laq_jax import sharding
from tests import common

SCRIPT = os.path.join(common.ROOT, 'tests', '_sharded_checks.py')
TIMEOUT_S = 420


def run_checks(num_devices, mode='all'):
  """Runs the checks script (`mode`: all, exact or inexact cases, the
  latter compiled with XLA's older emitters: tests/_sharded_checks.py);
  returns (records, returncode, output)."""
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  env['JAX_PLATFORMS'] = 'cpu'
  env['PYTHONPATH'] = common.ROOT + os.pathsep + env.get('PYTHONPATH', '')
  if common.mnist_dir():
    env['LAQ_JAX_DATA'] = common.mnist_dir()
  try:
    proc = subprocess.run([sys.executable, SCRIPT, str(num_devices), mode],
                          env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired as e:  # run() kills the child on timeout
    raise AssertionError(f'{num_devices}-device checks took over '
                         f'{TIMEOUT_S} s; output so far:\n{e.stdout}\n'
                         f'{e.stderr}') from None
  records = []
  for line in proc.stdout.splitlines():
    if line.startswith('{'):
      records.append(json.loads(line))
  return records, proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow
class DevicesMatchVmapTest(parameterized.TestCase):

  @parameterized.named_parameters(('8_devices', 8), ('2_devices', 2))
  def test_devices_path_equals_vmap_path(self, num_devices):
    # two processes: the cases compared to a tolerance with XLA's older,
    # faster emitters, the exactly compared ones at the defaults
    records = []
    for mode in ('inexact', 'exact'):
      got, returncode, output = run_checks(num_devices, mode)
      failed = [r for r in got if not r['ok']]
      self.assertEqual(failed, [], '\n'.join(
          f"{r['case']}: {'; '.join(r['problems'])}" for r in failed))
      self.assertEqual(returncode, 0, output[-4000:])
      records += got
    self.assertTrue(records, f'no results; output:\n{output[-4000:]}')
    cases = {r['case'] for r in records}
    self.assertIn('layout', cases)
    self.assertGreaterEqual(len(cases), 3)  # layout + at least two runs


class LayoutTest(absltest.TestCase):

  def test_workers_must_divide_evenly(self):
    with self.assertRaises(ValueError) as cm:
      sharding.check_layout(10, 3)
    message = str(cm.exception)
    self.assertIn('num_workers=10', message)
    self.assertIn('num_devices=3', message)
    self.assertIn('1, 2, 5, 10', message)  # the device counts that work

  def test_raises_exactly_when_the_devices_do_not_divide_the_workers(self):
    for num_workers in range(1, 17):
      for num_devices in range(1, 17):
        with self.subTest(num_workers=num_workers, num_devices=num_devices):
          if num_workers % num_devices:
            with self.assertRaises(ValueError):
              sharding.check_layout(num_workers, num_devices)
          else:
            sharding.check_layout(num_workers, num_devices)

  def test_per_worker_fields_are_stated_by_their_types(self):
    # The rule state and the stats state their fields with a leading worker
    # axis (PER_WORKER); those are split over the mesh, the rest replicated.
    # A renamed field keeps its sharding, and a type that states nothing is
    # refused rather than guessed from its names.
    self.assertEqual(sharding.per_worker_fields(lj.RuleState),
                     ('last_upload_MxP', 'last_error_M', 'clock_M',
                      'error_MxP', 'parts_M'))
    self.assertEqual(sharding.per_worker_fields(lj.Trace),
                     ('sent_M', 'bits_M', 'bits_down_M', 'innovation_M',
                      'threshold_M', 'error_M', 'dropped_M', 'grads_M',
                      'slowdown_M', 'participants_M'))
    # Every field whose leading axis is the workers' is in PER_WORKER.
    # (With a stateful server: the parts' state fields are not empty.)
    spec = lj.RunSpec(lj.get_problem('logreg', 4, 3), 5,
                      servers=('sgd', 'momentum'))
    state = lj.init_state(spec, lj.make_hyper('laq'))
    for name, value in zip(state.rule._fields, state.rule):
      for leaf in jax.tree.leaves(value):
        self.assertEqual(name in lj.RuleState.PER_WORKER,
                         leaf.ndim >= 1 and leaf.shape[0] == 5, name)

    class Unstated(NamedTuple):
      a_M: object
    with self.assertRaisesRegex(TypeError, 'Unstated.*PER_WORKER'):
      sharding.per_worker_fields(Unstated)

  def test_more_devices_than_workers_is_an_error(self):
    with self.assertRaisesRegex(ValueError, r'num_workers=4.*num_devices=8'):
      sharding.check_layout(4, 8)

  def test_workers_on_option(self):
    self.assertIs(sharding.run_chunk_fn('vmap'), lj.run_chunk)
    self.assertIs(sharding.run_chunk_fn('devices'),
                  sharding.make_run_chunk(sharding.make_mesh()))
    with self.assertRaisesRegex(ValueError, "workers_on='gpus'.*'devices'"):
      sharding.run_chunk_fn('gpus')

  def test_mesh_has_one_workers_axis(self):
    mesh = sharding.make_mesh()
    self.assertEqual(mesh.axis_names, ('workers',))
    self.assertEqual(mesh.shape['workers'], jax.device_count())

  def test_a_mesh_of_one_device_runs_chunk_after_chunk(self):
    # One GPU's case (experiments.reproduce's cross-check there): every
    # worker on one device. Arrays already on it have an equivalent but
    # other sharding, which shard_map refused until they were relabelled;
    # the second chunk takes the first one's output. Equal to the vmap path.
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    x, y = common.mnist_shards(common.SMALL_M, common.SMALL_N,
                               dtype=np.float64)
    data = lj.Data(jnp.asarray(x), jnp.asarray(y))
    spec = lj.RunSpec(lj.get_problem('logreg'), common.SMALL_M,
                      loss_every=1)
    h = lj.make_hyper('laq', dtype=jnp.float64)
    ran = [lj.run(spec, data, h, 8, chunk_size=4, run_chunk_fn=fn)
           for fn in (sharding.run_chunk_fn('devices', 1), lj.run_chunk)]
    (state_d, trace_d), (state_v, trace_v) = ran
    np.testing.assert_array_equal(trace_d.sent_M, trace_v.sent_M)
    np.testing.assert_allclose(trace_d.loss, trace_v.loss, rtol=1e-12)
    np.testing.assert_allclose(state_d.theta_P, state_v.theta_P, rtol=1e-12,
                               atol=1e-15)

  def test_mesh_larger_than_device_count_is_an_error(self):
    with self.assertRaisesRegex(ValueError, 'num_devices=.*not allowed'):
      sharding.make_mesh(jax.device_count() + 1)


if __name__ == '__main__':
  absltest.main()
