"""experiments.studies.paper.claims: the report's verdicts, from numbers worked
by hand."""

from types import SimpleNamespace

from absl.testing import absltest
import numpy as np

from configs import paper
from experiments.studies.lasg import report as lasg_report
from experiments.studies.paper import claims
from experiments.studies.paper import paper_results


def result(rows, uploads_TxM=None):
  """A minimal experiment result: rows by algorithm (results.csv fields)."""
  curves = {'algo': np.array(list(rows)),
            'loss': np.full((len(rows), 3), 5.0),
            'final_loss': np.full(len(rows), 4.0)}
  if uploads_TxM is not None:
    curves['uploads'] = np.stack([uploads_TxM] * len(rows))
  return {'rows': rows, 'curves': curves,
          'config': {'max_staleness': 100}, 'sweep': {'num_workers': 2}}


def row(uploads, bits, accuracy, **extra):
  values = dict(total_uploads=uploads, total_bits=bits, iterations=100,
                final_test_accuracy=accuracy, target_residual=1e-6,
                final_residual=None, target_uploads=None, target_bits=None)
  values.update(extra)
  return values


class ClaimsTest(absltest.TestCase):

  def test_linear_fit_of_a_geometric_sequence(self):
    residual = 3.0 * 0.9 ** np.arange(50)
    fit = claims.linear_fit(residual, target=1e-300)
    self.assertAlmostEqual(fit['rate'], 0.9, places=12)
    self.assertAlmostEqual(fit['r2'], 1.0, places=12)
    # Only up to the first iterate at the target.
    fit = claims.linear_fit(residual, target=3.0 * 0.9 ** 10)
    self.assertEqual(fit['last_k'], 10)

  def test_far_fewer_threshold(self):
    self.assertTrue(claims._fewer(50, 'laq', 100, 'gd', 100)[0])
    self.assertFalse(claims._fewer(51, 'laq', 100, 'gd', 100)[0])
    # The other never reached the target: its whole-run total bounds it.
    self.assertTrue(claims._fewer(50, 'laq', None, 'gd', 100)[0])
    self.assertIsNone(claims._fewer(60, 'laq', None, 'gd', 100)[0])

  def test_stochastic_claims(self):
    experiment = next(e for e in paper.experiments('quick')
                      if e.name == 'logreg_stochastic')
    rows = {'sgd': row(1000, 10**9, 0.90), 'qsgd': row(1000, 10**8, 0.90),
            'ssgd': row(1000, 5 * 10**8, 0.899),
            'slaq': row(100, 10**6, 0.895)}
    verdicts = [c['holds'] for c in claims.claims(experiment, result(rows))]
    self.assertEqual(verdicts, [True, True, True])
    # 499 of 1000 uploads is far fewer; 501 is not.
    rows['slaq'] = row(501, 10**6, 0.895)
    verdicts = [c['holds'] for c in claims.claims(experiment, result(rows))]
    self.assertEqual(verdicts, [False, True, True])
    # More than a point below SGD: no claim holds at similar accuracy.
    rows['slaq'] = row(100, 10**6, 0.885)
    verdicts = [c['holds'] for c in claims.claims(experiment, result(rows))]
    self.assertEqual(verdicts, [False, False, False])

  def test_convex_claims_at_the_target(self):
    experiment = paper.experiments('quick')[0]
    residual = 10.0 * 0.5 ** np.arange(40)
    loss = residual[:-1] + 1.0
    def convex_row(uploads, bits):
      return row(uploads * 4, bits * 4, 0.9, target_uploads=uploads,
                 target_bits=bits, final_residual=residual[-1], fstar=1.0)
    rows = {'gd': convex_row(400, 10**9), 'qgd': convex_row(400, 10**8),
            'lag': convex_row(50, 10**7), 'laq': convex_row(40, 10**6)}
    res = result(rows)
    res['curves'].update(
        loss=np.stack([loss] * 4), final_loss=np.full(4, residual[-1] + 1.0),
        grad_norm_sq=np.ones((4, 39)), cum_uploads=np.ones((4, 39), int),
        cum_bits=np.ones((4, 39), int), paper_reference=np.ones(4))
    got = {c['claim'].split(' (')[0]: c['holds']
           for c in claims.claims(experiment, res)}
    self.assertEqual(list(got.values()), [True, True, True, True, True])
    rows['laq'] = convex_row(40, 6 * 10**6)  # 0.6 x LAG's bits
    verdicts = [c['holds'] for c in claims.claims(experiment, res)]
    self.assertEqual(verdicts[:2], [True, False])

  def test_the_authors_reading_swaps_only_the_lazy_row(self):
    experiment = next(e for e in paper.experiments('quick')
                      if e.name == 'mlp_stochastic')
    rows = {'sgd': row(1000, 10**9, 0.93), 'qsgd': row(1000, 10**8, 0.93),
            'ssgd': row(1000, 5 * 10**8, 0.93),
            'slaq': row(60, 10**6, 0.11, final_loss=1e7)}
    sent = np.ones((3, 2), bool)
    base = result(rows, sent)
    base['curves']['final_loss'][3] = 1e7
    run = SimpleNamespace(summary={'total_uploads': 190, 'total_bits': 2e6,
                                   'final_test_accuracy': 0.925,
                                   'final_loss': 4.5},
                          metrics={'loss': np.array([5.0, 4.9, 4.7])},
                          sent_TxM=np.zeros((3, 2), bool))
    reading = paper_results.authors_reading(experiment, base, run)
    # Algorithm 1 ran away; the authors' scripts' run: 0.19x, -0.5 pp.
    self.assertEqual([c['holds'] for c in claims.claims(experiment, base)],
                     [False, False, False])
    got = claims.claims(experiment, reading)
    self.assertEqual([c['holds'] for c in got], [True, True, True])
    self.assertIn('slaq 190 = 0.190x sgd\'s 1,000, at -0.50 pp',
                  got[0]['brief'])
    self.assertEqual(reading['rows']['sgd'], rows['sgd'])
    self.assertEqual(base['rows']['slaq']['total_uploads'], 60)  # a copy
    self.assertEqual(float(base['curves']['final_loss'][3]), 1e7)
    self.assertFalse(reading['curves']['uploads'][3].any())
    self.assertTrue(reading['curves']['uploads'][0].all())
    # Whether the reading's row diverged is the run's own (the one rule on
    # its metrics.csv): above 10x f(theta^0) at k = 1, accuracy kept.
    run.metrics['loss'] = np.array([5.0, 51.0, 4.7])
    reading = paper_results.authors_reading(experiment, base, run)
    self.assertEqual(reading['rows']['slaq']['diverged_at'], 1)
    got = claims.claims(experiment, reading)
    self.assertEqual([c['holds'] for c in got], [False, False, False])
    self.assertEqual(got[0]['brief'], 'slaq diverged at k=1')

  def test_lasg_claims(self):
    def lasg_row(algo, uploads, accuracy, final=5.0):
      return dict(algo=algo, total_uploads=uploads, iterations=1500,
                  final_test_accuracy=accuracy, final_loss=final,
                  initial_loss=33.6)
    sweep = {'rows': [
        lasg_row('sgd', 15000, 0.9345), lasg_row('slaq', 865, 0.1141, 1e7),
        lasg_row('lasg_wk2', 7500, 0.9253),  # 0.5x, -0.92 pp: holds
        lasg_row('lasg_wk1', 7501, 0.94),  # 0.50007x: not far fewer
        lasg_row('lasg_ps', 100, 0.9344),
        lasg_row('lasg_wk1_laq', 1000, 0.935, 40.0),  # ended above its start
        lasg_row('cada_adam', 15000, 0.94), lasg_row('cada2', 7000, 0.94)]}
    got = {c['claim'].split(' ')[0]: c for c in claims.lasg_claims(sweep)}
    survive = got['LASG']
    self.assertIn('where SLAQ (Algorithm 1) runs away', survive['claim'])
    self.assertTrue(survive['holds'])  # the plain three: all within a point
    self.assertEqual({k: got[k]['holds'] for k in got if k != 'LASG'}, {
        'LASG_WK2': True, 'LASG_WK1': False, 'LASG_PS': True,
        'LASG_WK1_LAQ': False, 'CADA2': True})
    self.assertIn('ran away', got['LASG_WK1_LAQ']['brief'])
    self.assertIn('CADA_ADAM', got['CADA2']['claim'])
    # One of the plain three more than a point behind: LASG does not hold.
    sweep['rows'][4] = lasg_row('lasg_ps', 100, 0.92)
    self.assertFalse(claims.lasg_claims(sweep)[0]['holds'])

  def test_a_diverged_run_is_named_not_compared(self):
    # A run that reached NaN is evaluated to no accuracy (None): the
    # report names it and every claim that needs its accuracy fails,
    # instead of the report dying (lasg_wk1_laq on a GPU at 1,500 steps).
    def lasg_row(algo, uploads, accuracy, final=5.0):
      return dict(algo=algo, total_uploads=uploads, iterations=1500,
                  final_test_accuracy=accuracy, final_loss=final,
                  initial_loss=33.6)
    nan = float('nan')
    sweep = {'rows': [
        lasg_row('sgd', 15000, 0.9345), lasg_row('slaq', 865, 0.90),
        lasg_row('lasg_wk2', 7500, 0.9253),
        lasg_row('lasg_wk1_laq', 100, None, nan),
        lasg_row('cada_adam', 15000, None, nan), lasg_row('cada2', 70, 0.9)]}
    got = {c['claim'].split(' ')[0]: c for c in claims.lasg_claims(sweep)}
    # A diverged preset does not hold its claim; against a diverged
    # baseline (cada_adam) nothing is tested. Neither is compared.
    self.assertEqual({k: c['holds'] for k, c in got.items()}, {
        'LASG': True, 'LASG_WK2': True, 'LASG_WK1_LAQ': False,
        'CADA2': None})
    self.assertEqual(got['LASG_WK1_LAQ']['brief'],
                     'lasg_wk1_laq diverged (loss NaN/inf or above 10x '
                     'f(theta^0)): not compared')
    self.assertEqual(got['CADA2']['brief'],
                     'cada_adam diverged (loss NaN/inf or above 10x '
                     'f(theta^0)): not compared')
    # The LASG report's own sentence names it with the others.
    verdict = lasg_report.verdict({r['algo']: r for r in sweep['rows']})
    self.assertIn('lasg_wk1_laq', verdict)
    self.assertIn('lasg_wk2', verdict)
    # The paper's claims: the lazy row diverged, and then the baseline.
    experiment = next(e for e in paper.experiments('quick')
                      if e.name == 'logreg_stochastic')
    rows = {'sgd': row(1000, 10**9, 0.90), 'qsgd': row(1000, 10**8, 0.90),
            'ssgd': row(1000, 5 * 10**8, 0.899),
            'slaq': row(100, 10**6, None)}
    got = claims.claims(experiment, result(rows))
    self.assertEqual([c['holds'] for c in got], [False, False, False])
    self.assertIn('with no test accuracy (diverged) to compare',
                  got[0]['brief'])
    self.assertEqual(got[2]['brief'],
                     'largest gap: slaq no test accuracy (diverged)')
    rows['slaq'] = row(100, 10**6, 0.895)
    rows['sgd'] = row(1000, 10**9, None)
    got = claims.claims(experiment, result(rows))
    self.assertEqual([c['holds'] for c in got], [False, False, False])
    self.assertIn('sgd —', got[2]['evidence'])


  def test_a_point_diverged_by_the_rule_is_left_out(self):
    # Marked by the one rule (`outputs.mark_divergence`): results from
    # before it kept a finite final loss, an accuracy and targets reached
    # before the run ran away; none of them is compared.
    experiment = paper.experiments('quick')[0]
    residual = 10.0 * 0.5 ** np.arange(40)
    def convex_row(uploads, bits, **extra):
      return row(uploads * 4, bits * 4, 0.9, target_uploads=uploads,
                 target_bits=bits, final_residual=residual[-1], fstar=1.0,
                 **extra)
    away = dict(diverged=True, diverged_at=1011)
    rows = {'gd': convex_row(400, 10**9), 'qgd': convex_row(10, 10, **away),
            'lag': convex_row(50, 10**7), 'laq': convex_row(40, 10**6)}
    res = result(rows)
    res['curves'].update(
        loss=np.stack([residual[:-1] + 1.0] * 4),
        final_loss=np.full(4, residual[-1] + 1.0),
        grad_norm_sq=np.ones((4, 39)), cum_uploads=np.ones((4, 39), int),
        cum_bits=np.ones((4, 39), int), paper_reference=np.ones(4))
    got = claims.claims(experiment, res)
    # qgd's 10 uploads at the target would beat laq's 40: not compared.
    self.assertEqual([c['holds'] for c in got], [None, None, True, True,
                                                 False])
    self.assertEqual(got[0]['brief'], "laq 40 = 0.100x gd's 400; qgd "
                     'diverged at k=1011, not compared')
    self.assertIn('qgd diverged at k=1011 (loss NaN/inf or above 10x '
                  'f(theta^0)): not compared', got[0]['evidence'])
    self.assertNotIn("qgd's", got[1]['brief'])
    self.assertEqual(got[4]['brief'],
                     'largest gap: lag +0.00 pp; qgd diverged at k=1011')
    # The lazy algorithm diverged: none of its claims holds, a target it
    # reached before included; the baseline diverged: accuracy not tested.
    rows['qgd'] = convex_row(400, 10**8)
    rows['laq'] = convex_row(40, 10**6, **away)
    got = claims.claims(experiment, res)
    self.assertEqual([c['holds'] for c in got], [False, False, False, True,
                                                 False])
    self.assertEqual(got[0]['brief'], 'laq diverged at k=1011')
    self.assertEqual(got[2]['brief'], 'laq diverged at k=1011')
    rows['laq'] = convex_row(40, 10**6)
    rows['gd'] = convex_row(400, 10**9, **away)
    got = claims.claims(experiment, res)
    self.assertEqual([c['holds'] for c in got], [None, None, True, False,
                                                 None])
    self.assertEqual(got[4]['brief'], 'gd diverged at k=1011: no baseline')
    # Fixed budgets: a diverged other is not compared, a diverged lazy row
    # holds nothing, a diverged baseline leaves accuracy untested.
    experiment = next(e for e in paper.experiments('quick')
                      if e.name == 'logreg_stochastic')
    rows = {'sgd': row(1000, 10**9, 0.90), 'qsgd': row(10, 10, 0.90, **away),
            'ssgd': row(1000, 5 * 10**8, 0.899),
            'slaq': row(100, 10**6, 0.895)}
    got = claims.claims(experiment, result(rows))
    self.assertEqual([c['holds'] for c in got], [None, None, False])
    self.assertEqual(got[0]['brief'], "slaq 100 = 0.100x sgd's 1,000, at "
                     "-0.50 pp of sgd's accuracy; qsgd diverged at k=1011, "
                     'not compared')
    rows['qsgd'] = row(1000, 10**8, 0.90)
    rows['slaq'] = row(100, 10**6, 0.895, **away)
    got = claims.claims(experiment, result(rows))
    self.assertEqual([c['holds'] for c in got], [False, False, False])
    self.assertIn('slaq diverged at k=1011', got[2]['evidence'])
    rows['slaq'] = row(100, 10**6, 0.895)
    rows['sgd'] = row(1000, 10**9, 0.90, **away)
    got = claims.claims(experiment, result(rows))
    self.assertEqual([c['holds'] for c in got], [None, None, None])
    self.assertIn('similar accuracy not tested: sgd diverged at k=1011',
                  got[0]['evidence'])
    # LASG: a preset, then SGD, diverged (their accuracies kept).
    def lasg_row(algo, uploads, accuracy, **extra):
      return dict(algo=algo, total_uploads=uploads, iterations=1500,
                  final_test_accuracy=accuracy, final_loss=5.0,
                  initial_loss=33.6, **extra)
    sweep = {'rows': [lasg_row('sgd', 15000, 0.93),
                      lasg_row('slaq', 865, 0.93),
                      lasg_row('lasg_wk2', 10, 0.93, **away),
                      lasg_row('lasg_ps', 100, 0.93)]}
    got = {c['claim'].split(' ')[0]: c for c in claims.lasg_claims(sweep)}
    self.assertEqual({k: c['holds'] for k, c in got.items()},
                     {'LASG': False, 'LASG_WK2': False, 'LASG_PS': True})
    self.assertIn('lasg_wk2 diverged at k=1011 (not)', got['LASG']['brief'])
    self.assertTrue(got['LASG_WK2']['brief'].startswith(
        'lasg_wk2 diverged at k=1011 (loss NaN/inf'))
    sweep['rows'][0] = lasg_row('sgd', 15000, 0.93, **away)
    got = claims.lasg_claims(sweep)
    self.assertEqual([c['holds'] for c in got], [None, False, None])
    self.assertNotIn('x sgd', ' '.join(c['brief'] for c in got))


if __name__ == '__main__':
  absltest.main()
