"""Clients of unequal sizes (federated.md, "Clients"): the padded split,
f_m as the mean over a client's own samples, masked minibatches, per-client
compute time, and M = 1,000 clients in one program; each against a direct
computation on the unpadded clients."""

import json
import os

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import laq_jax as lj
from laq_jax import data as data_lib
from laq_jax import stages
from tests import common

_ENV = common.IsolatedEnv('laq_clients_test_')


def setUpModule():
  _ENV.enter()


def tearDownModule():
  _ENV.exit()
from laq_jax.objective import full_batch

D, C = 6, 3


def synthetic(n=601, seed=0):
  rng = np.random.default_rng(seed)
  # Row i's first feature is i + 1 (so a row names its source; 0 = padding).
  x = rng.normal(size=(n, D))
  x[:, 0] = np.arange(1, n + 1)
  return x, rng.integers(0, C, n).astype(np.int32)


def unpadded_objective(x_MxNxD, y_MxN, count_M, theta, l2):
  """Each client's f_m and gradient on its own rows only, in NumPy
  (logistic regression; flat parameters: the bias, then the weights)."""
  b, w = theta[:C], theta[C:].reshape(D, C)
  f, g = [], []
  for m, count in enumerate(count_M):
    x, y = x_MxNxD[m, :count], y_MxN[m, :count]
    z = x @ w + b
    z = z - z.max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    onehot = np.eye(C)[y]
    f.append(-np.mean(np.log(p[np.arange(count), y]))
             + 0.5 * l2 * theta @ theta)
    r = (p - onehot) / count
    g.append(np.concatenate([r.sum(0), (x.T @ r).ravel()]) + l2 * theta)
  return np.asarray(f), np.asarray(g)


class SplitTest(parameterized.TestCase):

  def test_every_sample_once_padding_zero_no_divisibility(self):
    x, y = synthetic()
    shards = data_lib.split_clients(x, y, 7, 'dirichlet_unequal', seed=3)
    count = shards.count_M
    self.assertEqual(count.sum(), 601)  # 7 does not divide 601
    self.assertGreaterEqual(count.min(), 1)
    self.assertEqual(shards.x_MxNxD.shape, (7, count.max(), D))
    rows = shards.x_MxNxD[..., 0].astype(int)
    mask = np.arange(count.max())[None] < count[:, None]
    np.testing.assert_array_equal(np.sort(rows[mask]), np.arange(1, 602))
    np.testing.assert_array_equal(shards.x_MxNxD[~mask], 0)
    np.testing.assert_array_equal(shards.y_MxN[~mask], 0)
    np.testing.assert_array_equal(shards.y_MxN[mask], y[rows[mask] - 1])
    # seeded
    again = data_lib.split_clients(x, y, 7, 'dirichlet_unequal', seed=3)
    np.testing.assert_array_equal(again.x_MxNxD, shards.x_MxNxD)
    other = data_lib.split_clients(x, y, 7, 'dirichlet_unequal', seed=4)
    self.assertFalse(np.array_equal(other.count_M, count))

  def test_size_alpha_sets_the_size_skew(self):
    x, y = synthetic(6000)
    spread = lambda a: np.std(data_lib.split_clients(
        x, y, 50, 'dirichlet_unequal', size_alpha=a).count_M) / 120
    # Dirichlet(a * 1) shares have coefficient of variation ~ 1 / sqrt(a)
    self.assertGreater(spread(0.2), 1.5)
    self.assertLess(spread(100.0), 0.2)
    one = spread(1.0)
    self.assertTrue(0.6 < one < 1.4, one)

  def test_a_client_per_sample(self):
    x, y = synthetic(40)
    shards = data_lib.split_clients(x, y, 40, 'dirichlet_unequal')
    np.testing.assert_array_equal(shards.count_M, 1)

  def test_equal_splits_come_back_without_counts(self):
    x, y = synthetic(600)
    shards = data_lib.split_clients(x, y, 6, 'iid', seed=1)
    self.assertIsNone(shards.count_M)
    np.testing.assert_array_equal(
        shards.x_MxNxD, data_lib.make_shards(x, y, 6, 'iid', seed=1)[0])

  def test_errors(self):
    x, y = synthetic(30)
    with self.assertRaisesRegex(data_lib.DataError,
                                'num_workers=31 is more than the 30'):
      data_lib.split_clients(x, y, 31, 'dirichlet_unequal')
    with self.assertRaisesRegex(data_lib.DataError,
                                'dirichlet_size_alpha=0.0 must be > 0'):
      data_lib.split_clients(x, y, 3, 'dirichlet_unequal', size_alpha=0.0)
    with self.assertRaisesRegex(data_lib.DataError, 'use split_clients'):
      data_lib.make_shards(x, y, 3, 'dirichlet_unequal')


def padded_data(seed=0, num_workers=5):
  x, y = synthetic(137, seed)
  shards = data_lib.split_clients(x, y, num_workers, 'dirichlet_unequal',
                                  seed=seed, size_alpha=0.7)
  return shards


class ObjectiveTest(parameterized.TestCase):

  @parameterized.parameters(False, True)
  def test_full_batch_value_and_grad_on_own_rows(self, fast):
    jax.config.update('jax_enable_x64', True)
    s = padded_data()
    self.assertGreater(s.count_M.max(), 2 * s.count_M.min())
    data = lj.Data(jnp.asarray(s.x_MxNxD), jnp.asarray(s.y_MxN),
                   count_M=jnp.asarray(s.count_M))
    if fast:
      data = lj.fast_layout(data)
    problem = lj.get_problem('logreg', D, C)
    theta = np.random.default_rng(1).normal(size=problem.num_params()) * 0.3
    value_and_grad, values = full_batch(problem, data, 0.05)
    f, g = value_and_grad(jnp.asarray(theta))
    f_ref, g_ref = unpadded_objective(s.x_MxNxD, s.y_MxN, s.count_M, theta,
                                      0.05)
    np.testing.assert_allclose(f, f_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(values(jnp.asarray(theta)), f_ref, rtol=1e-12)
    np.testing.assert_allclose(
        lj.objective(problem, jnp.asarray(theta), data, 0.05), f_ref.sum(),
        rtol=1e-12)

  @parameterized.parameters(False, True)
  def test_counts_of_n_are_the_unmasked_objective(self, fast):
    jax.config.update('jax_enable_x64', True)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(4, 30, D)))
    y = jnp.asarray(rng.integers(0, C, (4, 30)))
    problem = lj.get_problem('logreg', D, C)
    plain = lj.Data(x, y)
    masked = lj.Data(x, y, count_M=jnp.full((4,), 30, jnp.int32))
    if fast:
      plain, masked = lj.fast_layout(plain), lj.fast_layout(masked)
    theta = jnp.asarray(rng.normal(size=problem.num_params()))
    f, g = full_batch(problem, masked, 0.01)[0](theta)
    f_plain, g_plain = full_batch(problem, plain, 0.01)[0](theta)
    np.testing.assert_allclose(f, f_plain, rtol=1e-14)
    np.testing.assert_allclose(g, g_plain, rtol=1e-13, atol=1e-16)


class MinibatchTest(parameterized.TestCase):

  def test_rows_are_distinct_own_rows(self):
    draw = jax.jit(lambda k, c: stages.client_batch_rows(k, c, 40, 8),
                   static_argnums=())
    for count in (1, 5, 8, 9, 40):
      seen = np.zeros(40)
      for i in range(200):
        rows, used = draw(jax.random.key(i), count)
        rows, used = np.asarray(rows), int(used)
        self.assertEqual(used, min(8, count))
        batch = rows[:used]
        self.assertEqual(len(set(batch.tolist())), used)
        self.assertTrue((batch < count).all())
        seen[batch] += 1
      # without replacement from the client's own rows, uniformly
      expected = 200 * used / count
      np.testing.assert_array_equal(seen[count:], 0)
      self.assertLess(np.max(np.abs(seen[:count] - expected)),
                      5 * np.sqrt(expected) + 1e-9)

  def test_authors_blocks_stay_inside_the_client(self):
    for count in (3, 8, 17, 40):
      blocks = set()
      for i in range(100):
        rows, used = stages.client_batch_rows(jax.random.key(i), count, 40, 8,
                                            True)
        rows = np.asarray(rows)[:int(used)]
        self.assertTrue((rows < count).all())
        blocks.add(int(rows[0]))
        np.testing.assert_array_equal(rows, rows[0] + np.arange(len(rows)))
      self.assertEqual(blocks, {8 * b for b in range(max(count // 8, 1))})

  def test_batch_larger_than_every_client_is_the_full_gradient(self):
    # min(batch_size, count) = count: an sgd step-0 upload is the client's
    # full gradient on its own rows.
    jax.config.update('jax_enable_x64', True)
    s = padded_data(seed=2)
    data = lj.Data(jnp.asarray(s.x_MxNxD), jnp.asarray(s.y_MxN),
                   count_M=jnp.asarray(s.count_M))
    problem = lj.get_problem('logreg', D, C)
    batch = int(s.count_M.max()) + 3
    spec = lj.RunSpec(problem, 5, stochastic=True, batch_size=batch)
    state, _ = lj.run(spec, data, lj.make_hyper('sgd', dtype=jnp.float64,
                                                l2=0.05), 1)
    _, g_ref = unpadded_objective(s.x_MxNxD, s.y_MxN, s.count_M,
                                  np.zeros(problem.num_params()), 0.05)
    np.testing.assert_allclose(state.rule.last_upload_MxP, g_ref,
                               rtol=1e-10, atol=1e-14)

  def test_per_client_compute_sets_the_round_time(self):
    # A compute-only network: every round takes the slowest participant's
    # F_m / flops_per_s, F_m = flops per sample * min(batch, count).
    jax.config.update('jax_enable_x64', True)
    s = padded_data(seed=1)
    data = lj.Data(jnp.asarray(s.x_MxNxD), jnp.asarray(s.y_MxN),
                   count_M=jnp.asarray(s.count_M))
    problem = lj.get_problem('logreg', D, C)
    spec = lj.RunSpec(problem, 5, stochastic=True, batch_size=10,
                      participation=True)
    hyper = lj.make_hyper(
        'sgd', dtype=jnp.float64, network='datacenter', participation=0.6,
        **{'network.up_bps': float('inf'), 'network.down_bps': float('inf'),
           'network.up_latency_s': 0.0, 'network.down_latency_s': 0.0,
           'network.server_in_bps': float('inf'),
           'network.server_out_bps': float('inf'),
           'network.straggler': 'none', 'network.flops_per_s': 1e6})
    _, trace = lj.run(spec, data, hyper, 40)
    flops_M = problem.grad_flops_per_sample * np.minimum(10, s.count_M)
    np.testing.assert_allclose(
        lj.flops_per_worker_step(spec, s.count_M), flops_M)
    present = np.asarray(trace.participants_M)
    expected = np.where(present, flops_M / 1e6, 0).max(axis=1)
    self.assertTrue(present.any(axis=1).all())
    self.assertGreater(len(set(np.round(expected, 12))), 2)
    np.testing.assert_allclose(trace.time_s, expected, rtol=1e-12)


@pytest.mark.slow
class ThousandClientsTest(absltest.TestCase):

  def test_m1000_unequal_partial_participation_drop(self):
    jax.config.update('jax_enable_x64', True)
    x, y = synthetic(3000, seed=5)
    x[:, 0] = 0.01 * x[:, 1]  # (row ids would dominate the objective)
    s = data_lib.split_clients(x, y, 1000, 'dirichlet_unequal', seed=5)
    data = lj.Data(jnp.asarray(s.x_MxNxD), jnp.asarray(s.y_MxN),
                   count_M=jnp.asarray(s.count_M))
    problem = lj.get_problem('logreg', D, C)
    spec = lj.RunSpec(problem, 1000, stochastic=True, batch_size=4,
                      participation=True, loss_every=1)
    hyper = lj.make_hyper('slaq', dtype=jnp.float64, clients_per_round=50,
                          absent='drop', step_size=2e-4, l2=1e-4)
    _, trace = lj.run(spec, data, hyper, 30)
    present = np.asarray(trace.participants_M)
    np.testing.assert_array_equal(present.sum(axis=1), 50)
    sent = np.asarray(trace.sent_M)
    self.assertFalse((sent & ~present).any())  # absent clients send nothing
    np.testing.assert_array_equal(np.asarray(trace.bits_M)[~present], 0)
    loss = np.asarray(trace.loss)
    self.assertTrue(np.isfinite(loss).all())
    f0, _ = unpadded_objective(s.x_MxNxD, s.y_MxN, s.count_M,
                               np.zeros(problem.num_params()), 1e-4)
    np.testing.assert_allclose(loss[0], f0.sum(), rtol=1e-12)
    self.assertLess(loss[-1], loss[0])


@pytest.mark.slow
class LauncherTest(absltest.TestCase):

  def test_a_run_on_unequal_clients(self):
    from experiments.run import build  # pylint: disable=g-import-not-at-top
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    # 600 images among 7 clients (7 does not divide 600), minibatch SLAQ
    # with half the clients in each round on the mobile network.
    config = common.tiny_config(
        algo='slaq', num_workers=7, split='dirichlet_unequal',
        batch_size=40, dirichlet_size_alpha=0.8, participation=0.5,
        num_iters=20)
    config.network.profile = 'mobile'  # the network: a nested group
    built = build.build(config)
    count = np.asarray(built.host_data.count_M)
    self.assertEqual(count.sum(), 600)
    self.assertEqual(built.host_data.x_MxNxD.shape[1], count.max())
    where = os.path.join(_ENV.name, 'unequal')
    summary = train.train_and_evaluate(config, where)
    problem = lj.get_problem('logreg')
    np.testing.assert_allclose(
        summary['flops_per_worker_step'],
        problem.grad_flops_per_sample * np.minimum(40, count))
    with open(os.path.join(where, 'summary.json')) as f:
      self.assertEqual(json.load(f)['num_workers'], 7)
    present = np.load(os.path.join(where, 'participants.npy'))
    self.assertEqual(present.shape, (20, 7))
    self.assertTrue(np.isfinite(summary['final_loss']))
    # Replayed on the same network from its files (per-client F_m from
    # summary.json, the participants from participants.npy): the same
    # times as in the loop.
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    from experiments.run import replay  # pylint: disable=g-import-not-at-top
    replayed = replay.time_run(replay.load(where), 'mobile', {})
    m = outputs.read_metrics(os.path.join(where, 'metrics.csv'))
    np.testing.assert_allclose(replayed['time_s'], m['time_s'], rtol=1e-12)
    self.assertGreater(len(set(np.round(m['time_s'], 9))), 5)


if __name__ == '__main__':
  absltest.main()
