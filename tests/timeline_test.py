"""experiments.run.replay (what experiments.timeline runs): finished runs
replayed on networks, post hoc, against the NumPy transcription of the round
time."""

import pathlib
import tempfile

from absl.testing import absltest
import numpy as np
import pytest

from configs import default
from experiments.run import outputs
from experiments.run import replay
from laq_jax import network as net_lib
from laq_jax.record import Record
from tests import network_test

M, T, P = 2, 4, 7850  # logistic regression on MNIST: P parameters


def write_run(where: pathlib.Path, algo: str, sent, fstar=None,
              target_iteration=None):
  """A finished run's files (no training): config, summary, metrics.csv,
  uploads.npy, bits.npy."""
  sent = np.asarray(sent, bool)
  bits = np.where(sent, 32 * P if algo == 'gd' else 4 * P + 32, 0)
  down = np.full(sent.shape, 32 * P)
  config = default.get_config()
  config.update(algo=algo, num_workers=M, train_subset=600)
  outputs.write_json(where / 'config.json', config.to_dict())
  outputs.write_json(where / 'summary.json', {
      'algo': algo, 'fstar': fstar, 'target_iteration': target_iteration,
      'final_loss': 1.0, 'paper_target_iteration': None})
  loss = np.linspace(4.0, 3.0, len(sent))
  outputs.atomic_write(where / 'metrics.csv', outputs.metrics_csv(
      Record.from_arrays(loss=loss, grad_norm_sq=np.ones(len(sent)),
                         sent_M=sent, bits_M=bits, bits_down_M=down),
      fstar, {}, 1.0))
  outputs.write_npy(where / 'uploads.npy', sent)
  outputs.write_npy(where / 'bits.npy', bits.astype(np.int64))
  return bits, down


class TimelineTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = pathlib.Path(tempfile.mkdtemp(prefix='laq_timeline_test_'))

  def test_times_match_the_transcription(self):
    sent = [[1, 1], [0, 1], [0, 0], [1, 0]]
    bits, down = write_run(self.dir / 'laq', 'laq', sent, fstar=2.0,
                           target_iteration=3)
    write_run(self.dir / 'gd', 'gd', np.ones((T, M)))
    rows = replay.timeline([str(self.dir / 'laq'), str(self.dir / 'gd')],
                           ['mobile', 'cross_silo'], {'up_bps': 2e6})
    self.assertEqual([(r['network'], r['algo']) for r in rows],
                     [('mobile', 'laq'), ('mobile', 'gd'),
                      ('mobile', 'gd (ring)'), ('cross_silo', 'laq'),
                      ('cross_silo', 'gd'), ('cross_silo', 'gd (ring)')])
    laq = rows[0]
    # F_m: 300 samples per worker (600 / M) at 4 D C FLOPs each.
    flops = 300 * 4 * 784 * 10
    self.assertEqual(laq['flops_per_worker_step'], flops)
    net = net_lib.make_network('mobile', num_workers=M, up_bps=2e6)
    s = net_lib.slowdowns(net, 0, T, M)
    want = [network_test.reference_round(net, [flops] * M, bits[k], down[k],
                                         s[k]) for k in range(T)]
    np.testing.assert_allclose(laq['time_s'], want, rtol=1e-12)
    self.assertAlmostEqual(laq['total_time_s'], sum(want), delta=1e-9)
    # The target at k = 3: the rounds 0, 1, 2 before it.
    self.assertAlmostEqual(laq['target_time_s'], sum(want[:3]), delta=1e-9)
    ring = rows[2]
    self.assertEqual(ring['topology'], 'ring')
    self.assertGreater(ring['total_time_s'], 0)
    text = replay.table(rows)
    self.assertIn('| mobile | laq |', text)
    replay.write(rows, self.dir / 'out')
    for name in ('timeline.csv', 'timeline.md', 'loss_vs_time_mobile.png',
                 'loss_vs_time_cross_silo.png'):
      self.assertTrue((self.dir / 'out' / name).is_file(), name)

  def test_refusals(self):
    write_run(self.dir / 'laq', 'laq', np.ones((T, M)))
    (self.dir / 'laq' / 'bits.npy').unlink()
    with self.assertRaisesRegex(replay.TimelineError, 'no bits.npy'):
      replay.timeline([str(self.dir / 'laq')], ['mobile'], {})
    with self.assertRaisesRegex(replay.TimelineError,
                                "unknown network profile 'lan'"):
      replay.timeline([str(self.dir / 'laq')], ['lan'], {})
    with self.assertRaisesRegex(replay.TimelineError, 'FIELD=VALUE'):
      replay.parse_overrides(['up=1'])
    with self.assertRaisesRegex(ValueError, 'network.up_bps=-1.0'):
      replay.timeline([str(self.dir / 'laq')], ['mobile'],
                      replay.parse_overrides(['up_bps=-1']))


class InTheRunTest(absltest.TestCase):
  """A real (tiny) run's own times: the files agree with each other, with
  the replay of its saved bits and with the transcription."""

  @pytest.mark.slow
  def test_a_runs_files_carry_its_times(self):
    import jax  # pylint: disable=g-import-not-at-top
    import configs  # pylint: disable=g-import-not-at-top
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    self.assertTrue(jax.config.jax_enable_x64)
    where = pathlib.Path(tempfile.mkdtemp(prefix='laq_timed_run_'))
    config = configs.load('mnist_logreg', 'tiny,network.profile=mobile,'
                          'network.up_bps=2e6,seed=3')
    summary = train.train_and_evaluate(config, where)
    m = outputs.read_metrics(where / 'metrics.csv')
    bits = np.load(where / 'bits.npy')
    slow = np.load(where / 'slowdown.npy')
    net = net_lib.make_network('mobile', num_workers=10, up_bps=2e6)
    np.testing.assert_array_equal(slow, net_lib.slowdowns(net, 3, 30, 10))
    flops = summary['flops_per_worker_step']
    self.assertEqual(flops, [4 * 784 * 10 * 60.0] * 10)
    down = np.repeat(m['bits_down'][:, None] / 10, 10, 1)
    for k in range(30):
      want = network_test.reference_round(net, flops, bits[k], down[k],
                                          slow[k])
      self.assertAlmostEqual(m['time_s'][k] / want, 1.0, delta=1e-12)
    np.testing.assert_allclose(m['cum_time_s'], np.cumsum(m['time_s']),
                               rtol=1e-12)
    self.assertEqual(summary['total_time_s'], m['cum_time_s'][-1])
    k = summary['paper_target_iteration']
    self.assertIsNotNone(k)
    self.assertEqual(summary['paper_target_time_s'],
                     0.0 if k == 0 else m['cum_time_s'][k - 1])
    self.assertEqual(summary['network']['profile'], 'mobile')
    self.assertEqual(summary['network']['up_bps'], 2e6)
    self.assertEqual(summary['network']['server_in_bps'], 'inf')
    replayed = replay.time_run(replay.load(where), 'mobile',
                               {'up_bps': 2e6})
    np.testing.assert_array_equal(replayed['time_s'], m['time_s'])
    self.assertTrue((where / 'loss_vs_time.png').is_file())

  @pytest.mark.slow
  def test_lasg_runs_replay_with_their_gradients_and_downloads(self):
    # WK2 computes two gradients a step (one when forced); PS's server
    # selects who computes, and only they download theta^k: the run keeps
    # grads.npy and bits_down.npy, and the replay on the run's own network
    # gives its times exactly (on another, what that network would take).
    import configs  # pylint: disable=g-import-not-at-top
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    # (xi: PS's server must skip someone in 30 steps: at 0.2 it selects
    # every worker on the minibatch draw's rows, at 0.5 it skips 40%.)
    for algo, xi in (('lasg_wk2', 0.2), ('lasg_ps', 0.5)):
      where = pathlib.Path(tempfile.mkdtemp(prefix=f'laq_{algo}_'))
      config = configs.load('mnist_logreg', f'tiny,algo={algo},batch_size=10,'
                            f'network.profile=mobile,max_staleness=9,xi={xi}')
      train.train_and_evaluate(config, where)
      m = outputs.read_metrics(where / 'metrics.csv')
      grads = np.load(where / outputs.GRADS_FILE)
      down = np.load(where / outputs.BITS_DOWN_FILE)
      np.testing.assert_array_equal(grads.sum(1), m['grads'])
      np.testing.assert_array_equal(down.sum(1), m['bits_down'])
      if algo == 'lasg_wk2':
        self.assertTrue(set(np.unique(grads)) == {1, 2})
      else:
        self.assertTrue((grads == 0).any() and (grads == 1).any())
        np.testing.assert_array_equal(down, np.where(grads > 0, 32 * P, 0))
      replayed = replay.time_run(replay.load(where), 'mobile', {})
      np.testing.assert_allclose(replayed['time_s'], m['time_s'],
                                 rtol=1e-12)


  @pytest.mark.slow
  def test_local_work_replays_with_its_k_steps(self):
    # SCAFFOLD with K = 3 on half the clients: each participant computes 3
    # gradients and uploads Delta and Delta c (64 P bits), receives theta
    # and c (64 P); the replay on the run's network gives its times.
    import configs  # pylint: disable=g-import-not-at-top
    from experiments.run import train  # pylint: disable=g-import-not-at-top
    where = pathlib.Path(tempfile.mkdtemp(prefix='laq_scaffold_'))
    config = configs.load('mnist_logreg', 'tiny,algo=scaffold,batch_size=10,'
                          'network.profile=mobile,participation=0.5,'
                          'params.scaffold.steps=3')
    summary = train.train_and_evaluate(config, where)
    m = outputs.read_metrics(where / 'metrics.csv')
    grads = np.load(where / outputs.GRADS_FILE)
    down = np.load(where / outputs.BITS_DOWN_FILE)
    bits = np.load(where / 'bits.npy')
    present = grads > 0
    self.assertTrue(present.any() and not present.all())
    np.testing.assert_array_equal(grads, 3 * present)
    np.testing.assert_array_equal(bits, np.where(present, 64 * P, 0))
    np.testing.assert_array_equal(down, np.where(present, 64 * P, 0))
    self.assertEqual(summary['flops_per_worker_step'],
                     [4 * 784 * 10 * 10.0] * 10)
    replayed = replay.time_run(replay.load(where), 'mobile', {})
    np.testing.assert_allclose(replayed['time_s'], m['time_s'], rtol=1e-12)


if __name__ == '__main__':
  absltest.main()
