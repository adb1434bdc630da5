"""Two processes on 127.0.0.1 (jax.distributed, gloo) equal one process.

Two processes with 4 forced CPU devices each form one 8-device mesh; a small
float64 LAQ run (M = 8, real MNIST) on it must upload at the same steps and
reach the same losses (1e-10) and parameters as a single-process vmap run
computed in a third process. Only process 0 writes its result. How the
settings are read is tested without processes in distributed_test.py.
"""

import os
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import numpy as np
import pytest

from laq_jax import distributed
from tests import common

pytestmark = pytest.mark.slow

SCRIPT = os.path.join(common.ROOT, 'tests', '_multiprocess_worker.py')
TIMEOUT_S = 240


class TwoProcessTest(absltest.TestCase):

  def test_two_processes_equal_one(self):
    tmp = tempfile.TemporaryDirectory(prefix='laq_jax_multiprocess_')
    self.addCleanup(tmp.cleanup)
    out_dir = tmp.name
    env = dict(os.environ)
    env.pop('XLA_FLAGS', None)
    env['PYTHONPATH'] = common.ROOT + os.pathsep + env.get('PYTHONPATH', '')
    if common.mnist_dir():
      env['LAQ_JAX_DATA'] = common.mnist_dir()
    for name in (distributed.ENV_COORDINATOR, distributed.ENV_NUM_PROCESSES,
                 distributed.ENV_PROCESS_ID):
      env.pop(name, None)
    port = common.free_port()
    commands = [('reference', env)]
    for process_id in (0, 1):
      commands.append(('distributed', {
          **env, distributed.ENV_COORDINATOR: f'127.0.0.1:{port}',
          distributed.ENV_NUM_PROCESSES: '2',
          distributed.ENV_PROCESS_ID: str(process_id)}))
    procs, logs = [], []
    try:
      for i, (mode, proc_env) in enumerate(commands):
        log = open(os.path.join(out_dir, f'log{i}.txt'), 'w+')
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, SCRIPT, mode, out_dir],
                                      env=proc_env, stdout=log,
                                      stderr=subprocess.STDOUT))
      deadline = time.monotonic() + TIMEOUT_S
      while (any(p.poll() is None for p in procs)
             and time.monotonic() < deadline):
        # A process that failed leaves its peer waiting on a collective.
        if any(p.poll() not in (None, 0) for p in procs):
          break
        time.sleep(0.2)
    finally:
      for p in procs:
        if p.poll() is None:
          p.kill()
        p.wait()
    output = ''
    for i, log in enumerate(logs):
      log.seek(0)
      output += (f'--- process {i} ({commands[i][0]}) ---\n'
                 f'{log.read()[-3000:]}\n')
      log.close()
    codes = [p.returncode for p in procs]
    self.assertEqual(codes, [0, 0, 0], f'exit codes {codes} (negative: '
                     f'killed after {TIMEOUT_S} s or by a failing peer)\n'
                     f'{output}')

    written = sorted(f for f in os.listdir(out_dir) if f.endswith('.npz'))
    self.assertEqual(written, ['reference.npz', 'result-0.npz'])
    ref = np.load(os.path.join(out_dir, 'reference.npz'))
    got = np.load(os.path.join(out_dir, 'result-0.npz'))
    self.assertEqual(int(got['process_count']), 2)
    self.assertEqual(int(ref['process_count']), 1)
    self.assertEqual(ref['sent'].shape, (24, 8))
    self.assertTrue(0 < ref['sent'].sum() < ref['sent'].size,
                    'the rule must both upload and skip')
    np.testing.assert_array_equal(got['sent'], ref['sent'])
    np.testing.assert_array_equal(got['bits'], ref['bits'])
    # b = 4 bits a coordinate and a 32-bit radius per upload, P = 7850.
    np.testing.assert_array_equal(ref['bits'],
                                  ref['sent'] * (4 * 7850 + 32))
    np.testing.assert_allclose(got['loss'], ref['loss'], rtol=0, atol=1e-10)
    np.testing.assert_allclose(got['theta'], ref['theta'], rtol=0, atol=1e-10)


if __name__ == '__main__':
  absltest.main()
