"""experiments.studies.paper.paper_results: the cross-check's step-by-step
comparison."""

import json
import pathlib
import tempfile

from absl.testing import absltest
import numpy as np

from configs import paper
from experiments.run import outputs
from experiments.studies.paper import paper_results


class LasgSweepTest(absltest.TestCase):

  def test_lasg_sweep_runs_the_minibatch_networks_settings(self):
    # The report sets the LASG/CADA sweep's rows beside mlp_stochastic's:
    # at every budget its sgd and slaq run that experiment's settings.
    for budget in paper.BUDGETS:
      with self.subTest(budget):
        experiment = next(e for e in paper.experiments(budget)
                          if e.name == paper_results.LASG_EXPERIMENT)
        ours = paper.sweep_config(experiment).to_dict()
        lasg = paper_results.lasg_config(budget).to_dict()
        self.assertEqual(
            sorted(k for k in set(ours) | set(lasg)
                   if ours.get(k) != lasg.get(k)),
            ['algo', 'algo_settings', 'sweep', 'sweep_grid_axis'])
        self.assertIn('sgd', lasg['sweep']['algo'])
        self.assertIn('slaq', lasg['sweep']['algo'])
        self.assertNotIn('sgd', lasg['algo_settings'])
        self.assertNotIn('slaq', lasg['algo_settings'])


def _write_sweep(folder: pathlib.Path, config: dict, algos, loss, final,
                 every) -> None:
  """A finished sweep's files as results written before the divergence
  rule: results.csv marks no point diverged."""
  folder.mkdir(parents=True)
  (folder / 'config.json').write_text(json.dumps(config))
  for name in ('sweep.json', paper_results.INFO):
    (folder / name).write_text('{}')
  (folder / 'results.csv').write_text(
      'point,algo,final_loss,final_test_accuracy,diverged\n' + ''.join(
          f'{g},{a},{f!r},0.9,False\n' for g, (a, f) in enumerate(
              zip(algos, final))))
  np.savez(folder / 'curves.npz', algo=np.array(algos), loss=loss,
           final_loss=np.array(final), loss_every=np.array(every))


class DivergenceTest(absltest.TestCase):

  def test_results_are_marked_by_the_one_rule(self):
    # A loss above 10x f(theta^0) (finite, accuracy kept) or NaN diverges,
    # at the first logged iterate; results.csv's marks are not trusted.
    experiment = paper.experiments('quick')[0]
    nan = float('nan')
    loss = np.array([[5.0, 4.0, 3.0, 2.0], [5.0, 4.0, 3.0, 51.0],
                     [5.0, 4.0, nan, nan], [5.0, nan, 60.0, nan]])
    with tempfile.TemporaryDirectory() as tmp:
      workdir = pathlib.Path(tmp)
      _write_sweep(workdir / experiment.name, outputs.as_json(
          paper.sweep_config(experiment).to_dict()), list(experiment.algos),
                   loss, [1.0, 1.0, nan, 1.0], [1, 1, 1, 2])
      rows = paper_results.load_results(experiment, workdir)['rows']
      self.assertEqual({a: (r['diverged'], r['diverged_at'])
                        for a, r in rows.items()},
                       {'gd': (False, None), 'qgd': (True, 3),
                        'lag': (True, 2), 'laq': (True, 2)})
      # The LASG/CADA sweep's rows too.
      _write_sweep(workdir / paper_results.LASG, outputs.as_json(
          paper_results.lasg_config('quick').to_dict()), ['sgd', 'lasg_wk1'],
                   loss[:2], [1.0, 1.0], [1, 1])
      rows = paper_results.lasg_sweep(workdir, 'quick')['rows']
      self.assertEqual([r['diverged_at'] for r in rows], [None, 3])


class CrosscheckTest(absltest.TestCase):

  def test_crosscheck_finds_the_first_other_upload(self):
    experiment = paper.experiments('quick')[0]
    loss_T = np.array([3.0, 2.0, 1.5, 1.2])
    sent_TxM = np.array([[1, 1], [0, 1], [1, 0], [0, 0]], bool)
    result = {'curves': {
        'algo': np.array(experiment.algos),
        'loss': np.stack([loss_T] * len(experiment.algos)),
        'uploads': np.stack([sent_TxM] * len(experiment.algos))}}
    with tempfile.TemporaryDirectory() as tmp:
      for name, change in (('single', None), ('devices', (2, 0))):
        run = pathlib.Path(tmp, paper_results.CROSSCHECK, name)
        run.mkdir(parents=True)
        (run / 'config.json').write_text(json.dumps(
            paper_results.crosscheck_config(experiment, name)))
        (run / 'summary.json').write_text(json.dumps({'final_loss': 1.0}))
        other = sent_TxM.copy()
        if change:
          other[change] = False
        np.save(run / 'uploads.npy', other)
        (run / 'metrics.csv').write_text(
            'step,loss\n0,3.0\n1,2.0\n2,1.5\n3,1.32\n')
      checks = paper_results.crosscheck(experiment, result, pathlib.Path(tmp))
    self.assertEqual([c['first_other_upload'] for c in checks], [None, 2])
    self.assertEqual([c['uploads'] for c in checks], [4, 3])
    self.assertAlmostEqual(checks[0]['max_relative_loss_difference'], 0.1)


class SameConfigTest(absltest.TestCase):

  def test_older_results_stand_when_new_fields_keep_their_defaults(self):
    wanted = outputs.as_json(paper.sweep_config(
        paper.experiments('quick')[0]).to_dict())
    self.assertTrue(outputs.same_config(dict(wanted), wanted))
    older = {k: v for k, v in wanted.items() if k != 'downlink_bits'}
    self.assertTrue(outputs.same_config(older, wanted))  # a default
    self.assertFalse(outputs.same_config(older, dict(
        wanted, downlink_bits=wanted['downlink_bits'] + 1)))  # not the default
    self.assertFalse(outputs.same_config(
        dict(wanted, bits=wanted['bits'] + 1), wanted))
    self.assertFalse(outputs.same_config(dict(wanted, extra=1), wanted))

  def test_parts_registered_since_and_absent_auto(self):
    # Results written before the local-work parts (their parameter groups)
    # and `weighting` / absent='auto' existed still stand; a part group
    # that differs, or a written absent that 'auto' does not mean, does not.
    wanted = outputs.as_json(paper.sweep_config(
        paper.experiments('quick')[0]).to_dict())
    self.assertEqual((wanted['absent'], wanted['weighting']), ('auto', 'auto'))
    params = {k: v for k, v in wanted['params'].items()
              if k not in ('local', 'scaffold', 'fedadam')}
    older = {k: v for k, v in wanted.items() if k != 'weighting'}
    older.update(absent='stale', params=params)
    self.assertTrue(outputs.same_config(older, wanted))
    self.assertFalse(outputs.same_config(dict(older, absent='drop'), wanted))
    self.assertFalse(outputs.same_config(
        dict(older, weighting='auto'), wanted))  # 'stale' is not 'auto' now
    changed = dict(wanted, params=dict(
        wanted['params'], local=dict(wanted['params']['local'], steps=5)))
    self.assertFalse(outputs.same_config(older, changed))


if __name__ == '__main__':
  absltest.main()
