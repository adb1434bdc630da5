"""The deployed run on Flower: a SuperLink and 3 SuperNodes as processes on
localhost (no Ray), experiments/flower_app run on them with `flwr run`; the
deployed run must be the simulated one, and a misbehaving client is refused
without harm. Needs the `flower` extra (skipped without flwr)."""

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import numpy as np
import pytest

from laq_jax import loop
from tests import common
from tests import deploy_test

HAVE_FLWR = importlib.util.find_spec('flwr') is not None

APP = os.path.join(common.ROOT, 'experiments', 'flower_app')
BIN = os.path.dirname(sys.executable)


def _wait_port(port, timeout=60):
  import socket  # pylint: disable=g-import-not-at-top
  end = time.monotonic() + timeout
  while time.monotonic() < end:
    with socket.socket() as s:
      if s.connect_ex(('127.0.0.1', port)) == 0:
        return
    time.sleep(0.3)
  raise RuntimeError(f'nothing listens on port {port}')


@pytest.mark.slow
@absltest.skipUnless(HAVE_FLWR, 'flwr not installed: pip install .[flower]')
@absltest.skipUnless(common.mnist_dir(), 'MNIST not found')
class FlowerDeploymentTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp(prefix='laq_flower_')
    link = common.free_port()
    with open(os.path.join(cls.tmp, 'config.toml'), 'w') as f:
      f.write(f'[superlink]\ndefault = "local"\n[superlink.local]\n'
              f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    cls.env = dict(
        os.environ, FLWR_HOME=cls.tmp, PATH=BIN + os.pathsep + os.environ[
            'PATH'],
        PYTHONPATH=common.ROOT, LAQ_JAX_DATA=common.mnist_dir(),
        JAX_PLATFORMS='cpu',
        # each round's ClientApp is a process of its own: compile once
        JAX_COMPILATION_CACHE_DIR=os.path.join(cls.tmp, 'jax_cache'),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
    cls.env.pop('JAX_ENABLE_X64', None)
    cls.procs = []

    def start(args, log):
      cls.procs.append(subprocess.Popen(
          args, env=cls.env, cwd=cls.tmp, stdin=subprocess.DEVNULL,
          stdout=open(os.path.join(cls.tmp, log), 'w'),
          stderr=subprocess.STDOUT))

    start([os.path.join(BIN, 'flower-superlink'), '--insecure', '--port',
           str(link), '--database', os.path.join(cls.tmp, 'state.db')],
          'superlink.log')
    _wait_port(link)
    for i in range(3):
      start([os.path.join(BIN, 'flower-supernode'), '--insecure',
             '--superlink', f'127.0.0.1:{link}', '--port',
             str(common.free_port()), '--node-config',
             f'partition-id={i} num-partitions=3'], f'supernode{i}.log')

  @classmethod
  def tearDownClass(cls):
    for p in cls.procs:
      p.terminate()
    for p in cls.procs:
      try:
        p.wait(10)
      except subprocess.TimeoutExpired:
        p.kill()
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def deploy(self, algo, rounds=deploy_test.ROUNDS, **config):
    out = os.path.join(self.tmp, f'{len(os.listdir(self.tmp))}.json')
    items = dict(algo=algo, rounds=rounds, out=out, **config)
    run_config = ' '.join(f'{k}={json.dumps(v)}' for k, v in items.items())
    done = subprocess.run(
        [os.path.join(BIN, 'flwr'), 'run', APP, 'local', '--stream',
         '--run-config', run_config], env=self.env, cwd=self.tmp,
        capture_output=True, text=True, timeout=1200, check=False)
    self.assertTrue(os.path.exists(out), done.stdout[-3000:]
                    + done.stderr[-3000:])
    with open(out) as f:
      return json.load(f), done.stdout + done.stderr

  def test_deployed_runs_are_the_simulated_ones(self):
    # four presets side by side in one deployment: each round one message
    # per client carries all four
    runs = (('laq', dict(step_size=0.5)), ('lag', {}), ('fedpaq', {}),
            ('fedavg', {}))
    record, _ = self.deploy(','.join(
        ':'.join([algo] + [f'{k}={v}' for k, v in o.items()])
        for algo, o in runs))
    for algo, overrides in runs:
      with self.subTest(algo):
        spec, data, hyper = deploy_test.built(algo, **overrides)
        state, trace = loop.run(spec, data, hyper, deploy_test.ROUNDS)
        run = record[algo]
        self.assertEqual(run['refusals'], [])
        rounds = run['rounds']
        sent = [[rounds[k]['clients'][str(m)]['sent'] for m in range(3)]
                for k in range(len(rounds))]
        bits = [[rounds[k]['clients'][str(m)]['bits'] for m in range(3)]
                for k in range(len(rounds))]
        np.testing.assert_array_equal(sent, np.asarray(trace.sent_M))
        np.testing.assert_array_equal(bits, np.asarray(trace.bits_M))
        for r in rounds:
          for c in r['clients'].values():
            # the payload is the counted bits, rounded up to bytes; the
            # message around it (Flower's framing, the notice) is reported
            self.assertEqual(c['payload_bytes'], math.ceil(c['bits'] / 8))
            self.assertGreater(c['message_bytes'], c['payload_bytes'])
        np.testing.assert_allclose(run['theta'], np.asarray(state.theta_P),
                                   rtol=1e-5, atol=1e-7)

  def test_misbehaving_client_is_refused(self):
    # a byte short, b = 40, a NaN radius, answering as client 0, the
    # ClientApp raising, its process dying mid-round
    how = {1: 'length', 2: 'width', 3: 'nan', 4: 'twice', 5: 'crash',
           6: 'exit'}
    record, output = self.deploy(
        'laq:step_size=0.5', rounds=8, misbehave=','.join(
            f'2:{h}@{k}' for k, h in how.items()), **{'round-timeout-s': 60})
    run = record['laq']
    refused = [(r['round'], r['client']) for r in run['refusals']]
    self.assertEqual(refused, [(k, 2) for k in how])
    reasons = [r['reason'] for r in run['refusals']]
    for pattern, reason in zip(('bytes: the format takes', 'bit width 40',
                                'non-finite', 'answered as client 0',
                                'error reply', ''), reasons):
      self.assertIn(pattern, reason)
    for k in how:  # one log line each, naming the client
      self.assertEqual(
          output.count(f'round {k}: refused client 2 (laq):')
          + output.count(f'round {k}: client 2 absent'), 1, output[-3000:])
    # nothing reached the aggregate: the run where the server refused those
    # uploads in process
    spec, data, hyper = deploy_test.built('laq', step_size=0.5)
    server, *_ = deploy_test.deployed(spec, data, hyper, rounds=8,
                                      refuse={(k, 2) for k in how})
    np.testing.assert_allclose(run['theta'], np.asarray(server.theta_P),
                               rtol=1e-5, atol=1e-7)
    self.assertEqual([r['taken'] for r in run['rounds']][1:7],
                     [[True, True, False]] * 6)


if __name__ == '__main__':
  absltest.main()
