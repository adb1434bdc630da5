"""The federated experiment (configs/federated.py, experiments/federated.py,
experiments/studies/federated/):
its settings, the deadline it derives, its report's numbers against the
sweeps' own files."""

import pathlib
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from experiments.run import config as config_lib
from experiments.studies.federated import mcmahan
from experiments.studies.federated import report
from experiments.studies.federated import sweeps
from tests import common

_ENV = common.IsolatedEnv('laq_federated_test_')


def setUpModule():
  _ENV.enter()


def tearDownModule():
  _ENV.exit()


class ConfigTest(absltest.TestCase):

  def test_the_settings_of_federated_md(self):
    from configs import federated as cfg  # pylint: disable=g-import-not-at-top
    for arg in (None, 'mlp', 'quick', 'mlp,quick', 'tiny', 'stale'):
      with self.subTest(arg=arg):
        config = cfg.get_config(arg)
        points = config_lib.points_from_config(config)
        self.assertEqual([p['algo'] for p in points], list(cfg.PRESETS))
        m = config.num_workers
        for p in points:  # lam = 0.1 / M, alpha = 0.2 / M, q = 0.1, mobile
          self.assertAlmostEqual(p['l2'], 0.1 / m)
          self.assertAlmostEqual(p['step_size'], 0.2 / m)
          self.assertEqual(p['participation'], 0.1)
          self.assertEqual(p['network.profile'], 'mobile')
          self.assertEqual(p['absent'], 'stale' if arg == 'stale' else 'drop')
    config = cfg.get_config()
    self.assertEqual((config.num_workers, config.split,
                      config.dirichlet_alpha, config.num_iters),
                     (100, 'dirichlet', 0.5, 1500))
    # lam and alpha given on the command line win
    self.assertEqual(cfg.get_config('step_size=0.5').step_size, 0.5)
    laziness = sweeps.sweep_config('logreg', 'laziness', 'full')
    points = config_lib.points_from_config(laziness)
    self.assertLen(points, 12)
    self.assertEqual({(p['algo'], p['participation'], p['absent'])
                      for p in points},
                     {(a, q, s) for a in ('sgd', 'slaq')
                      for q in (1.0, 0.5, 0.1) for s in ('stale', 'drop')})
    deadline = sweeps.sweep_config('mlp', 'deadline', 'quick', 0.25)
    self.assertEqual(deadline.deadline_s, 0.25)

  def test_mcmahans_comparison_settings(self):
    # McMahan et al. 2017: 100 clients of 600, 10 per round, IID and 2
    # label shards per client; FedSGD = one step on the whole shard, FedAvg
    # E = 1 with B = 50 (u = 12) and B = 10 (u = 60); each rate of the
    # grid a point of one program.
    configs = dict(mcmahan.setting_configs('logreg', 'full'))
    self.assertEqual(sorted(configs), sorted(
        f'{s}_{n}' for s in ('iid', 'shards')
        for n in ('fedsgd', 'e1_b50', 'e1_b10')))
    for name, config in configs.items():
      with self.subTest(name=name):
        split, setting = name.split('_', 1)
        want_k, want_b = {'fedsgd': (1, 600), 'e1_b50': (12, 50),
                          'e1_b10': (60, 10)}[setting]
        self.assertEqual((config.split, config.num_workers,
                          config.clients_per_round, config.participation,
                          config.batch_size, config.params.local.steps),
                         (split, 100, 10, 1.0, want_b, want_k))
        points = config_lib.points_from_config(config)
        self.assertEqual({p['algo'] for p in points}, {'fedavg'})
        lrs = next(s[3] for s in mcmahan.SETTINGS if s[0] == setting)
        self.assertEqual([p['local.lr'] for p in points], list(lrs))
        self.assertEqual({p['local.steps'] for p in points}, {want_k})
        self.assertEqual({p['absent'] for p in points}, {'drop'})
    # The best rate: fewest rounds to the target, then final accuracy.
    loaded = {'rows': [{'algo': 'fedavg', 'local.lr': lr}
                       for lr in (0.1, 0.3, 1.0)]}
    summaries = [{'target_iteration': k, 'final_accuracy': a,
                  'profile_time_s': {}}
                 for k, a in ((4, 0.95), (2, 0.94), (None, 0.3))]
    with mock.patch.object(report, 'local_summary',
                           lambda l, g, t: dict(summaries[g])):
      picked = mcmahan.best(loaded, 0.9)
    self.assertEqual(picked['best']['lr'], 0.3)
    self.assertEqual([s['lr'] for s in picked['all']], [0.1, 0.3, 1.0])
    summaries[1]['target_iteration'] = None  # nobody but lr 0.1 reaches it
    with mock.patch.object(report, 'local_summary',
                           lambda l, g, t: dict(summaries[g])):
      self.assertEqual(mcmahan.best(loaded, 0.9)['best']['lr'], 0.1)


@pytest.mark.slow
class PipelineTest(absltest.TestCase):

  def test_tiny_pipeline_and_its_numbers(self):
    workdir = pathlib.Path(_ENV.name, 'fed')
    for sweep in sweeps.SWEEPS:
      self.assertFalse((workdir / 'logreg' / sweep).exists())
    failed = sweeps.run_problem('logreg', workdir, 'tiny')
    self.assertEqual(failed, [])
    main = sweeps.load_sweep(workdir / 'logreg' / 'main')
    c = main['curves']
    # the deadline: SGD's 90th-percentile arrival, recomputed here from the
    # mobile profile's numbers
    sgd = [r['algo'] for r in main['rows']].index('sgd')
    present = c['participants'][sgd]
    flops = 4 * 784 * 10 * 10  # logreg, minibatch of 10 (tiny)
    arrive = (c['slowdown'][sgd] * flops / 22.5e9 + 0.055
              + c['bits'][sgd] / 6.3e6)[present]
    deadline = float(np.percentile(arrive, 90))
    self.assertAlmostEqual(sweeps.deadline_from(main), deadline,
                           places=12)
    cut = sweeps.load_sweep(workdir / 'logreg' / 'deadline')
    self.assertEqual(float(cut['rows'][0]['deadline_s']), deadline)
    dropped = cut['curves']['dropped'][sgd]
    self.assertGreater(dropped.sum(), 0)
    # a cut client never counts as uploading
    self.assertFalse((dropped & cut['curves']['uploads'][sgd]).any())
    # The summary of a point against its curves, by hand.
    s = report.point_summary(main, sgd, 0.3)
    acc = c['test_accuracy'][sgd]
    steps = c['test_accuracy_steps']
    hit = steps[np.argmax(acc >= 0.3)]
    self.assertEqual(s['target_iteration'], int(hit))
    self.assertAlmostEqual(s['target_time_s'],
                           float(c['time_s'][sgd][:hit].sum()), places=9)
    self.assertEqual(s['target_bits'], int(c['bits'][sgd][:hit].sum()))
    self.assertEqual(s['upload_rate'], 1.0)  # sgd uploads when present
    self.assertEqual(s['participations'], int(present.sum()))
    # The report: rerun of run_problem does nothing new; report writes.
    self.assertEqual(sweeps.run_problem('logreg', workdir, 'tiny'), [])
    text = report.report(workdir, ['logreg'], 'tiny', 'cmd')
    self.assertIn(f'With a deadline of {deadline:.4g} s', text)
    self.assertIn('| slaq | 0.1 | drop |', text)
    self.assertTrue((workdir / 'logreg_accuracy.png').is_file())
    rates = report.rates_by_absence(main, sgd)
    self.assertEqual(sum(n for _, n, _ in rates), int(present.sum()))
    self.assertEqual({r for _, n, r in rates if n}, {1.0})
    # Local work: the replay on the run's own profile is its time; FedAvg's
    # K sweep computed K gradients per participant; the winners are the
    # fastest to the target (a target every point reaches here).
    local = sweeps.load_sweep(workdir / 'logreg' / 'local')
    self.assertEqual([r['algo'] for r in local['rows']],
                     list(sweeps.LOCAL_PRESETS))
    for g in range(len(local['rows'])):
      np.testing.assert_allclose(
          report.profile_times(local, g)['mobile'],
          np.cumsum(local['curves']['time_s'][g]), rtol=1e-9)
    ks = sweeps.load_sweep(workdir / 'logreg' / 'local_k')
    for g, k in enumerate(sweeps.LOCAL_K):
      np.testing.assert_array_equal(
          ks['curves']['grads'][g], k * ks['curves']['participants'][g])
    low = 0.15
    summaries = [report.local_summary(d, g, low) for d in (main, local, ks)
                 for g in range(len(d['rows']))]
    win = report.winners(summaries)
    for p in report.PROFILES:
      best = min(s['profile_time_s'][p] for s in summaries)
      tied = [s['label'] for s in summaries if s['profile_time_s'][p] == best]
      self.assertEqual(win[p], (' = '.join(tied), best))
    self.assertIn('fedavg K=20', text)
    self.assertIn('First to the target on each profile', text)
    # McMahan's comparison: at the tiny budget a client holds 30 images,
    # so B = 50 is the whole shard with u = 1 local step: FedAvg E=1 B=50
    # is then FedSGD, the same rounds bit for bit at each learning rate the
    # two grids share; B = 10 is 3 steps.
    found = mcmahan.load(workdir / 'logreg' / 'mcmahan')
    self.assertLen(found, 6)
    for split in mcmahan.SPLITS:
      sgd, b50 = found[(split, 'fedsgd')], found[(split, 'e1_b50')]
      rate = lambda d: {float(r['local.lr']): g
                        for g, r in enumerate(d['rows'])}
      shared = sorted(set(rate(sgd)) & set(rate(b50)))
      self.assertLen(shared, 3)
      for lr in shared:
        np.testing.assert_array_equal(
            sgd['curves']['test_accuracy'][rate(sgd)[lr]],
            b50['curves']['test_accuracy'][rate(b50)[lr]])
      np.testing.assert_array_equal(
          found[(split, 'e1_b10')]['curves']['grads'],
          3 * found[(split, 'e1_b10')]['curves']['participants'])
      # two of the 20 clients each round (C = 0.1)
      np.testing.assert_array_equal(
          sgd['curves']['participants'].sum(-1), 2)
    self.assertIn('McMahan et al.\'s comparison', text)


if __name__ == '__main__':
  absltest.main()
