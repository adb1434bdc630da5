"""The federated experiment (configs/federated.py, experiments/federated.py,
experiments/studies/federated/):
its settings, the deadline it derives, its report's numbers against the
sweeps' own files."""

import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np
import pytest

from experiments.run import config as config_lib
from experiments.studies.federated import mcmahan
from experiments.studies.federated import report
from experiments.studies.federated import study
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


def _write_sweep(folder: pathlib.Path, points, *, num_iters: int = 20,
                 eval_every: int = 5, workers: int = 4, **config) -> None:
  """A finished sweep's files, made by hand (no program compiled): each
  point {'row': results.csv fields, 'acc': [E] test accuracy at
  eval_every, 2 eval_every, ..., 'time': seconds a step, 'bits': uplink
  bits a step, 'diverge': the k from which its logged loss is 50x the
  initial (None: it falls), 'dropped': whether a deadline cut clients}.
  results.csv says diverged=False everywhere, as results from before the
  rule: the report must find the divergence in curves.npz."""
  import csv  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  folder.mkdir(parents=True)
  t, m = num_iters, workers
  steps = np.arange(eval_every, t + 1, eval_every)
  curves = {k: [] for k in (
      'test_accuracy', 'participants', 'uploads', 'bits', 'time_s',
      'cum_bits', 'cum_uploads', 'dropped', 'loss', 'final_loss',
      'loss_every')}
  for pt in points:
    bits = np.full((t, m), pt.get('bits', 1e6) / m)
    loss = 2.0 * 0.99 ** np.arange(t + 1)
    if pt.get('diverge') is not None:
      loss[pt['diverge']:] = 100.0
    dropped = np.zeros((t, m), bool)
    if pt.get('dropped'):
      dropped[::2, 0] = True
    curves['test_accuracy'].append(np.asarray(pt['acc'], np.float64))
    curves['participants'].append(~dropped)
    curves['uploads'].append(~dropped)
    curves['bits'].append(bits)
    curves['time_s'].append(np.full(t, float(pt.get('time', 1.0))))
    curves['cum_bits'].append(np.cumsum(bits.sum(1)))
    curves['cum_uploads'].append(np.cumsum((~dropped).sum(1)))
    curves['dropped'].append(dropped)
    curves['loss'].append(loss[:t])
    curves['final_loss'].append(loss[t])
    curves['loss_every'].append(1)
  arrays = {k: np.asarray(v) for k, v in curves.items()}
  arrays['test_accuracy_steps'] = steps
  np.savez(folder / 'curves.npz', **arrays)
  rows = [dict({'seed': 0, 'flops_per_worker_step': 1e6,
                'network.profile': 'mobile', 'diverged': 'False'},
               **pt['row']) for pt in points]
  with open(folder / 'results.csv', 'w', newline='') as f:
    writer = csv.DictWriter(f, list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  (folder / 'config.json').write_text(json.dumps(dict(
      num_iters=num_iters, eval_every=eval_every, num_workers=workers,
      participation=0.1, clients_per_round=1, batch_size=10,
      params={'local': {'steps': 1}}, **config)))
  (folder / 'sweep.json').write_text(json.dumps(dict(
      wall_time_s=1.0, run_time_s=1.0, num_params=7850, num_train=400,
      test_set='a test set')))


def _replayed(loaded, g):
  """`report.profile_times` without the replay (which compiles the
  stragglers' draws): the run's own seconds, scaled per profile."""
  time = np.cumsum(loaded['curves']['time_s'][g])
  return {p: time * f for p, f in zip(report.PROFILES, (0.01, 0.5, 1.0))}


ACC = (0.5, 0.7, 0.8, 0.85)   # never at 90%
HIT_AT_10 = (0.6, 0.92, 0.93, 0.94)  # at 90% from k = 10
HIT_AT_15 = (0.6, 0.8, 0.91, 0.93)  # ... from k = 15


class DivergedPointsTest(absltest.TestCase):
  """A study with diverged points (hand-made sweep files, nothing
  compiled): its report is written, names each diverged point with its
  iteration, ranks nothing with it, and its figure keeps the axes of the
  points that did not diverge."""

  def setUp(self):
    super().setUp()
    tmp = tempfile.TemporaryDirectory(prefix='diverged_', dir=_ENV.name)
    self.addCleanup(tmp.cleanup)
    self.workdir = pathlib.Path(tmp.name)
    mcm = self.workdir / 'logreg' / 'mcmahan'
    # main: slaq reached 90% first and cheapest, then diverged at k = 12;
    # qsgd is first of the rest, but topk_ef's run ended (4 s) before
    # qsgd's time to the target (7.5 s) without reaching it: not decided.
    # (Its bits run out past qsgd's, so "fewest bits" is decided.)
    _write_sweep(self.workdir / 'logreg' / 'main', [
        dict(row={'algo': 'sgd'}, acc=HIT_AT_10, time=1.0, bits=1e6),
        dict(row={'algo': 'slaq'}, acc=(0.95, 0.96, 0.089, 0.089),
             time=0.1, bits=1e12, diverge=12),
        dict(row={'algo': 'qsgd'}, acc=HIT_AT_15, time=0.5, bits=1e5),
        dict(row={'algo': 'topk_ef'}, acc=ACC, time=0.2, bits=1e6)])
    # deadline: the baseline sgd diverged
    _write_sweep(self.workdir / 'logreg' / 'deadline', [
        dict(row={'algo': 'sgd', 'deadline_s': 0.5}, acc=ACC, diverge=3,
             dropped=True),
        dict(row={'algo': 'slaq', 'deadline_s': 0.5}, acc=HIT_AT_10,
             dropped=True),
        dict(row={'algo': 'qsgd', 'deadline_s': 0.5}, acc=HIT_AT_15,
             dropped=True)])
    # local: fedprox would be first everywhere but diverged at k = 18
    _write_sweep(self.workdir / 'logreg' / 'local', [
        dict(row={'algo': 'fedavg'}, acc=HIT_AT_10, time=0.3),
        dict(row={'algo': 'fedprox'}, acc=(0.95,) * 4, time=0.01,
             diverge=18)])
    # laziness: one slaq point diverged
    _write_sweep(self.workdir / 'logreg' / 'laziness', [
        dict(row={'algo': 'slaq', 'participation': q, 'absent': 'drop'},
             acc=HIT_AT_10, diverge=7 if q == 0.5 else None)
        for q in (1.0, 0.5, 0.1)])
    # McMahan's: IID FedSGD diverged at every rate; non-IID FedAvg (100
    # rounds) ended before FedSGD's time to the target (200 rounds).
    lrs = (0.1, 1.0)
    _write_sweep(mcm / 'iid_fedsgd', [
        dict(row={'algo': 'fedavg', 'local.lr': lr}, acc=HIT_AT_10,
             diverge=4) for lr in lrs])
    _write_sweep(mcm / 'iid_e1_b50', [
        dict(row={'algo': 'fedavg', 'local.lr': lr}, acc=HIT_AT_10)
        for lr in lrs])
    _write_sweep(mcm / 'shards_fedsgd', [
        dict(row={'algo': 'fedavg', 'local.lr': lr}, acc=HIT_AT_15,
             diverge=5 if lr == 1.0 else None) for lr in lrs])
    _write_sweep(mcm / 'shards_e1_b50', [
        dict(row={'algo': 'fedavg', 'local.lr': lr}, acc=ACC[:2], time=0.5)
        for lr in lrs], num_iters=10)

  def _report(self):
    with mock.patch.object(report, 'profile_times', _replayed):
      return report.report(self.workdir, ['logreg'], 'tiny', 'cmd',
                           mcmahan_section=mcmahan.section)

  def test_report_names_and_ranks_no_diverged_point(self):
    text = self._report()
    self.assertEqual((self.workdir / report.REPORT).read_text(), text)
    lines = text.splitlines()
    line = lambda start: next(l for l in lines if l.startswith(start))
    # the tables name each diverged point with its iteration
    self.assertIn('| slaq | diverged at k=12 | diverged | diverged | '
                  'diverged |', text)
    self.assertIn('| sgd | diverged at k=3 | diverged |', text)
    self.assertIn('| fedprox | diverged at k=18 | diverged |', text)
    self.assertIn('slaq diverged at k=12 (loss NaN/inf or above 10x '
                  'f(theta^0))', text)
    # main: slaq is neither fastest nor fewest (though it reached 90%
    # first, on fewer... seconds); topk_ef's short run leaves "fastest"
    # open; no savings of slaq against sgd
    fastest = line('- Fastest to 90%')
    self.assertNotIn('slaq', fastest)
    self.assertIn('not decided: **qsgd** (7.5 s)', fastest)
    self.assertIn("topk_ef's budget ended at 4 s", fastest)
    self.assertIn('fewest uplink bits to it: **qsgd** (1.5e+06 bits).',
                  fastest)
    self.assertIn('- Diverged (a logged loss NaN/inf or above 10x '
                  'f(theta^0); in no ranking, saving or comparison): slaq '
                  'at k=12.', text)
    self.assertIn('- slaq diverged at k=12: no savings claimed.', text)
    self.assertNotRegex(text, r'- slaq: .* of sgd')
    self.assertIn('- sgd with the deadline diverged at k=3: not compared.',
                  text)
    self.assertIn('- slaq without the deadline diverged at k=12: not '
                  'compared.', text)
    # no bold (fastest) time in main's table, the claim being open
    table = lines[lines.index('### All presets, no deadline'):]
    table = table[:table.index('')]
    self.assertNotIn('**', '\n'.join(table))
    # local: fedprox first nowhere; fedavg is, and its bold times
    first = line('**First to the target on each profile**')
    self.assertNotIn('fedprox', first)
    self.assertIn('datacenter: fedavg (0.03 s)', first)
    self.assertIn('| fedavg | 94.00% | 10 | **0.03 s** | **1.5 s** | '
                  '**3 s** |', text)
    # laziness: the diverged q = 0.5 point is named and left out
    self.assertIn('| slaq | 0.5 | drop | diverged at k=7 |', text)
    self.assertIn('- SLAQ with absent = drop: 1.000 at q = 1, 1.000 at '
                  'q = 0.1 uploads per participation', text)
    self.assertIn('(q = 0.5 diverged at k=7: left out)', text)
    # McMahan's: every IID FedSGD rate diverged; FedSGD's lr 1 is never
    # its best; non-IID "fastest" open (FedAvg's budget ended first)
    self.assertIn('| IID | FedSGD | 1 | ∞ | 1 | every rate diverged |',
                  text)
    self.assertIn('lr 0.1: diverged at k=4', text)
    self.assertIn('| non-IID | FedSGD | 1 | ∞ | 1 | 0.1 (grid edge) | 15 |',
                  text)
    computed = line('**Computed:** fastest')
    self.assertIn('IID on mobile: e1_b50 (10.0 s)', computed)
    self.assertIn("non-IID on mobile: not decided: fedsgd (15.0 s) first of "
                  "those that reached it, but e1_b50's budget ended at 5 s "
                  'without reaching it', computed)
    self.assertTrue((self.workdir / 'logreg_accuracy.png').is_file())

  def test_every_point_diverged(self):
    for sweep in ('main', 'deadline', 'local', 'laziness', 'mcmahan'):
      for npz in (self.workdir / 'logreg' / sweep).rglob('curves.npz'):
        with np.load(npz) as c:
          arrays = {k: c[k] for k in c.files}
        arrays['loss'][:, 2:] = np.nan
        np.savez(npz, **arrays)
    text = self._report()
    self.assertNotIn('Fastest to', text)
    self.assertNotIn('of sgd\'s', text)
    self.assertNotRegex(text, r'\*\*[\d.,]+ s\*\*')  # no fastest time
    self.assertNotRegex(text, r'\*\*(sgd|slaq|qsgd|topk_ef|fed\w+)\*\*')
    self.assertIn('- sgd, the baseline of the savings, diverged at k=2: no '
                  'savings against it.', text)
    self.assertIn('datacenter: nobody (that did not diverge)', text)
    self.assertIn('- SLAQ with absent = drop: every point diverged', text)
    for algo in ('sgd', 'slaq', 'qsgd', 'topk_ef'):
      self.assertIn(f'| {algo} | diverged at k=2 |', text)

  def test_the_accuracy_axis_holds_every_converged_points_best(self):
    # A tiny run where nothing reaches target - 25 points drew an empty
    # figure: the axis goes down to the lowest best (to 5%), never for a
    # diverged point.
    def results(*points):
      return {'main': {'curves': {'test_accuracy': [p[0] for p in points]},
                       'rows': [{'diverged_at': p[1]} for p in points]}}
    self.assertEqual(report.accuracy_floor(results(([0.7, 0.95], None)), 0.9),
                     0.65)
    self.assertAlmostEqual(report.accuracy_floor(
        results(([0.1, 0.33], None), ([0.5, 0.9], None)), 0.9), 0.25)
    self.assertEqual(report.accuracy_floor(
        results(([0.05, 0.1], 3), ([0.8, 0.9], None)), 0.9), 0.65)
    self.assertEqual(report.accuracy_floor(
        results(([0.02, 0.04], None)), 0.9), 0.0)

  def test_figure_marks_a_diverged_point_and_keeps_the_axes(self):
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
    results = {s: sweeps.load_sweep(self.workdir / 'logreg' / s)
               for s in ('main', 'deadline')}
    fig = report.accuracy_figure(results, 'logreg', 0.9)
    FigureCanvasAgg(fig).draw()
    time_ax, bits_ax = fig.axes[:2]
    # slaq's bits (1e12 a step) would stretch the bits axis to ~1e13; it
    # diverged, so the axis spans the others' (at most 2e7 bits)
    self.assertLess(bits_ax.get_xlim()[1], 2e7 * 1.2)
    self.assertGreater(bits_ax.get_xlim()[0], 1e5 / 2)
    # ... and slaq's cheap seconds (0.1 a step) do not set the time axis
    self.assertGreater(time_ax.get_xlim()[0], 0.2 * 5 / 1.2)
    labels = fig.legends[0].get_texts()
    self.assertIn('slaq (diverged at k=12: drawn to it)',
                  [t.get_text() for t in labels])
    self.assertIn('sgd (deadline) (diverged at k=3: drawn to it)',
                  [t.get_text() for t in labels])
    # every point that did not diverge has its best on the accuracy axis
    low = time_ax.get_ylim()[0]
    for s in ('main', 'deadline'):
      c, rows = results[s]['curves'], results[s]['rows']
      for g, row in enumerate(rows):
        if report.diverged_at(row) is None:
          self.assertGreaterEqual(np.nanmax(c['test_accuracy'][g]), low,
                                  row['algo'])
    # the legend inside the figure; no two tick labels overlap
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    legend = fig.legends[0].get_window_extent(renderer)
    self.assertTrue(box.x0 <= legend.x0 and legend.x1 <= box.x1
                    and box.y0 <= legend.y0 and legend.y1 <= box.y1)
    for ax in (time_ax, bits_ax):
      shown = [t.get_window_extent(renderer) for t in ax.get_xticklabels()
               + ax.xaxis.get_minorticklabels()
               if t.get_visible() and t.get_text()
               and ax.get_xlim()[0] <= t.get_position()[0]
               <= ax.get_xlim()[1]]
      self.assertGreaterEqual(len(shown), 2)
      for a, b in zip(shown, shown[1:]):
        self.assertFalse(a.overlaps(b), (a, b))


@pytest.mark.slow
class PipelineTest(absltest.TestCase):

  def test_tiny_pipeline_and_its_numbers(self):
    workdir = pathlib.Path(_ENV.name, 'fed')
    for sweep in sweeps.SWEEPS:
      self.assertFalse((workdir / 'logreg' / sweep).exists())
    failed = study.run_problem('logreg', workdir, 'tiny')
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
    self.assertEqual(study.run_problem('logreg', workdir, 'tiny'), [])
    text = report.report(workdir, ['logreg'], 'tiny', 'cmd',
                         mcmahan_section=mcmahan.section)
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
    for p in report.PROFILES:  # (a diverged point reaches no target)
      best = min(s['profile_time_s'][p] for s in summaries
                 if s['profile_time_s'][p] is not None)
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
