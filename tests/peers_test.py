"""benchmarks/peers.py's laq-jax side end to end (Flower's and pfl's need
venvs of their own, which the suite does not install): its table and JSON;
and the draws it hands pfl (`fedavg_draws`) against laq-jax's FedAvg, by an
independent NumPy FedAvg on those draws."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax
from benchmarks import peers
from laq_jax import sweep as sweep_lib
from tests import common

ROOT = pathlib.Path(__file__).resolve().parent.parent


class DrawsTest(absltest.TestCase):

  def test_numpy_fedavg_on_the_draws_is_laq_jaxs(self):
    # pfl's side replays fedavg_draws: each round's clients and each one's
    # K minibatches in order. NumPy's FedAvg of softmax regression on them
    # (K SGD steps from theta^k on the mean cross-entropy, the uniform mean
    # of the deltas, the server's step 1) must be laq-jax's run.
    clients, n, per_round, batch, steps, rounds, lr = 12, 20, 4, 5, 3, 3, 0.1
    dim, classes = 6, 3
    rng = np.random.default_rng(0)
    x = rng.normal(size=(clients, n, dim))
    y = rng.integers(0, classes, (clients, n)).astype(np.int32)
    problem = laq_jax.get_problem('logreg', dim, classes)
    spec = laq_jax.RunSpec(problem, clients, stochastic=True,
                           batch_size=batch, round_size=per_round,
                           **sweep_lib.parts_of([{
                               'algo': 'fedavg',
                               'clients_per_round': per_round}]))
    hyper = laq_jax.make_hyper('fedavg', dtype=jnp.float64,
                               clients_per_round=per_round, l2=0.0,
                               weighting='uniform', server_lr=1.0,
                               **{'local.steps': steps, 'local.lr': lr})
    state, _ = laq_jax.run(spec, laq_jax.Data(jnp.asarray(x),
                                              jnp.asarray(y)), hyper, rounds)
    chosen, rows = peers.fedavg_draws(hyper, clients, per_round, n, batch,
                                      steps, rounds)
    self.assertEqual(chosen.shape, (rounds, per_round))
    self.assertEqual(rows.shape, (rounds, per_round, steps * batch))
    for k in range(rounds):  # distinct clients; each minibatch distinct rows
      self.assertLen(set(chosen[k]), per_round)
      for i in range(per_round):
        for j in range(steps):
          self.assertLen(set(rows[k, i, j * batch:(j + 1) * batch]), batch)

    def grad(w, b, xb, yb):
      z = xb @ w + b
      p = np.exp(z - z.max(1, keepdims=True))
      p /= p.sum(1, keepdims=True)
      p[np.arange(len(yb)), yb] -= 1
      return xb.T @ p / len(yb), p.mean(0)

    w, b = np.zeros((dim, classes)), np.zeros(classes)
    for k in range(rounds):
      deltas = []
      for m, r in zip(chosen[k], rows[k]):
        wm, bm = w.copy(), b.copy()
        for j in range(steps):
          idx = r[j * batch:(j + 1) * batch]
          gw, gb = grad(wm, bm, x[m, idx], y[m, idx])
          wm, bm = wm - lr * gw, bm - lr * gb
        deltas.append((w - wm, b - bm))
      w = w - np.mean([d[0] for d in deltas], 0)
      b = b - np.mean([d[1] for d in deltas], 0)
    want = np.concatenate([b, w.ravel()])  # the flat order: b, then w
    np.testing.assert_allclose(np.asarray(state.theta_P), want, rtol=1e-9,
                               atol=1e-12)


@pytest.mark.slow
class PeersTest(absltest.TestCase):

  def test_the_laq_jax_side_runs_and_learns(self):
    out = os.path.join(tempfile.mkdtemp(), 'peers.json')
    env = dict(os.environ, LAQ_JAX_DATA=str(common.mnist_dir()))
    env.pop('FLOWER_PYTHON', None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'benchmarks' / 'peers.py'),
         '--rounds', '3', '--target', '0.5', '--models', 'logreg', '--out',
         out], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=900, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    self.assertIn('| laq-jax fedavg logreg |', proc.stdout)
    self.assertNotIn('Flower', proc.stdout)
    results = json.loads(pathlib.Path(out).read_text())['results']
    fedavg = results['laq-jax fedavg logreg']
    self.assertLen(fedavg['accuracy'], 3)
    # FedAvg from zeros: past chance after a round, better after three
    self.assertGreater(fedavg['accuracy'][0], 0.2)
    self.assertGreater(fedavg['accuracy'][-1], fedavg['accuracy'][0])
    self.assertGreater(fedavg['rounds_per_s'], 0)
    # both sides start logistic regression from zeros: chance, 9.8%
    self.assertAlmostEqual(fedavg['initial_accuracy'], 0.098, places=3)
    # the timed call runs the same rounds as the one-round calls
    self.assertLess(fedavg['call_against_rounds_max_difference'], 1e-5)

  def test_an_unknown_model_is_refused(self):
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'benchmarks' / 'peers.py'), '--models',
         'logreg,resnet'], cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=False)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('--models: unknown resnet; allowed: logreg, cnn',
                  proc.stderr)
    proc = subprocess.run(
        [sys.executable, str(ROOT / 'benchmarks' / 'peers.py'), '--tasks',
         'cifar', '--pfl_clients', '10'], cwd=ROOT, capture_output=True,
        text=True, timeout=300, check=False)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('--pfl_clients=10: between 50 and 1,000', proc.stderr)


if __name__ == '__main__':
  absltest.main()
