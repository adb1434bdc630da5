"""experiments.studies.paper.report: the wall-time floor of an experiment, by
hand; the tables' mark of a diverged row."""

from absl.testing import absltest

from configs import paper
from experiments.studies.paper import report

RATES = {'matmul_flops_per_s': {'float32': 2e11, 'float64': 1e11},
         'read_bytes_per_s': 1e10}


def result(**config):
  base = {'model': 'logreg', 'precision': 'float64', 'dataset': 'mnist',
          'algo': 'gd', 'sweep': {'algo': ['gd', 'qgd', 'lag', 'laq']},
          'train_subset': 0, 'batch_size': 500, 'num_workers': 10,
          'hidden': 200}
  return {'config': base | config,
          'sweep': {'num_points': 4, 'num_iters': 4000, 'num_train': 60000}}


class FloorTest(absltest.TestCase):

  def test_full_batch_logreg(self):
    # 4 points x 4NDC FLOPs at 1e11/s = 75.264 ms per iteration. A pass over
    # float64 pixels, 60000 x 784 x 8 bytes at 1e10 B/s, is 37.632 ms: one
    # per point when the points are mapped (the default), 150.528 ms, which
    # binds; one for all when vmapped, and the FLOPs bind.
    self.assertAlmostEqual(report.floor_seconds(result(), RATES),
                           4000 * 4 * 60000 * 784 * 8 / 1e10)
    self.assertAlmostEqual(
        report.floor_seconds(result(sweep_grid_axis='vmap'), RATES),
        4000 * 4 * 4 * 60000 * 784 * 10 / 1e11)

  def test_minibatch_mlp_counts_the_full_loss(self):
    got = report.floor_seconds(
        result(model='mlp', precision='float32', algo='sgd',
               sweep={'algo': ['sgd', 'qsgd', 'ssgd', 'slaq']}), RATES)
    grad = 4 * 5000 * 784 * 200 + 6 * 5000 * 200 * 10  # 10 x 500 images
    loss = 2 * 60000 * 784 * 200 + 2 * 60000 * 200 * 10  # every image
    self.assertAlmostEqual(got, 4000 * 4 * (grad + loss) / 2e11)

  def test_minibatch_rows_are_read_and_their_draws_timed(self):
    # Float32 logistic regression, 4 points mapped, 10 x 500 images a step:
    # at 1e9 B/s the reads bind: per point the pixels as bfloat16 integers
    # (2 bytes) once and its minibatch rows once (loss_every 1 here); and
    # 4 x 5,000 rows drawn at 1e6 rows/s add 20 ms an iteration.
    config = dict(precision='float32', algo='sgd',
                  sweep={'algo': ['sgd', 'qsgd', 'ssgd', 'slaq']})
    slow = dict(RATES, read_bytes_per_s=1e9)
    read = 4 * (60000 + 5000) * 784 * 2 / 1e9
    self.assertAlmostEqual(report.floor_seconds(result(**config), slow),
                           4000 * read)
    timed = dict(slow, draw_rows_per_s=1e6)
    self.assertAlmostEqual(report.floor_seconds(result(**config), timed),
                           4000 * (read + 4 * 5000 / 1e6))
    self.assertEqual(report.fmt_rate(timed),
                     'dense matmul 200 GFLOP/s in float32, 100 GFLOP/s in '
                     'float64; read bandwidth 1.0 GB/s; minibatch draw 1.0 '
                     'M rows/s')

  def test_bandwidth_bound_when_few_flops(self):
    # One point on float32 logistic regression: MNIST pixels read as
    # bfloat16 integers (2 bytes), 94.08 MB at 1e10 B/s = 9.408 ms, against
    # 1.88 GFLOP at 2e11/s = 9.408 ms; at half the bandwidth the read wins.
    slow = dict(RATES, read_bytes_per_s=5e9)
    one = result(precision='float32')
    one['sweep']['num_points'] = 1
    self.assertAlmostEqual(report.floor_seconds(one, slow),
                           4000 * 60000 * 784 * 2 / 5e9)

  def test_subset_and_rate_line(self):
    quick = result(train_subset=6000)
    del quick['sweep']['num_train']  # results written before it existed
    self.assertAlmostEqual(report.floor_seconds(quick, RATES),
                           4000 * 4 * 6000 * 784 * 8 / 1e10)
    self.assertEqual(report.fmt_rate(RATES),
                     'dense matmul 200 GFLOP/s in float32, 100 GFLOP/s in '
                     'float64; read bandwidth 10.0 GB/s')


class TimingTest(absltest.TestCase):

  def test_a_wall_below_its_floor_is_named(self):
    # The rates behind a floor measured on a busy machine are too low: a
    # wall under its floor says so instead of standing as a ratio.
    from unittest import mock  # pylint: disable=g-import-not-at-top
    from experiments.studies.paper import report_sections  # pylint: disable=g-import-not-at-top
    e = next(e for e in paper.experiments('quick') if e.name == 'logreg')
    hardware = dict(cpu='cpu', cores_available=2, jax='x', jaxlib='x',
                    backend='cpu', python='3', platform='p',
                    load_average_at_start=[3.2])
    result = {'info': {'roofline': {'r': 1}, 'wall_time_s': 100.0,
                       'hardware': hardware, 'started_utc': 't'},
              'sweep': {'run_time_s': 90.0}}
    for floor, named in ((250.0, True), (50.0, False)):
      with mock.patch.object(report_sections, 'floor_seconds',
                             return_value=floor), \
           mock.patch.object(report_sections, 'fmt_rate', return_value='r'):
        text = '\n'.join(report_sections.timing_section(
            [e], {'logreg': result}))
      self.assertEqual('A wall time below its floor (logreg)' in text,
                       named, text)

  def test_compiling_is_not_in_the_program(self):
    # The program's time is the run's less its compiling; program / floor
    # is that over the floor; runs that predate the compile time keep it in
    # and are named.
    from unittest import mock  # pylint: disable=g-import-not-at-top
    from experiments.studies.paper import report_sections  # pylint: disable=g-import-not-at-top
    e = next(e for e in paper.experiments('quick') if e.name == 'logreg')
    hardware = dict(cpu='cpu', cores_available=2, jax='x', jaxlib='x',
                    backend='cpu', python='3', platform='p',
                    load_average_at_start=[0.1])
    info = {'roofline': {'r': 1}, 'wall_time_s': 100.0,
            'hardware': hardware, 'started_utc': 't'}
    for sweep, cells, named in (
        ({'run_time_s': 90.0, 'compile_time_s': 12.0}, ['12', '78', '3.12'],
         False),
        ({'run_time_s': 90.0}, ['—', '90', '3.60'], True)):
      with mock.patch.object(report_sections, 'floor_seconds',
                             return_value=25.0), \
           mock.patch.object(report_sections, 'fmt_rate', return_value='r'):
        text = '\n'.join(report_sections.timing_section(
            [e], {'logreg': {'info': info, 'sweep': sweep}}))
      row = next(line for line in text.splitlines()
                 if line.startswith('| logreg |'))
      self.assertEqual(row.split(' | ')[2:6], [cells[0], cells[1], '25',
                                               cells[2]], row)
      self.assertEqual('Runs made before the compile time was measured '
                       '(logreg)' in text, named, text)
    self.assertEqual(report_sections.program_seconds(
        {'run_time_s': 9.5, 'compile_time_s': 2.0}), 7.5)


class DivergenceTest(absltest.TestCase):

  def test_tables_name_a_diverged_row(self):
    experiment = paper.experiments('quick')[0]
    keys = [k for _, k, _ in report.TABLE_COLUMNS + report.RESIDUAL_COLUMNS]
    keys += [f'{p}target_{w}' for p in ('', 'paper_')
             for w in ('iteration', 'uploads', 'bits')]
    rows = {a: dict(dict.fromkeys(keys, 1), algo=a, fstar=1.0,
                    diverged=False, diverged_at=None)
            for a in experiment.algos}
    result = {'rows': rows}
    self.assertNotIn('diverged', report.markdown_table(experiment, result))
    self.assertEqual(report.divergence_lines(rows, experiment.algos), [])
    rows['qgd'].update(diverged=True, diverged_at=1011)
    for text in (report.markdown_table(experiment, result),
                 report.target_table(experiment, result)):
      lines = text.splitlines()
      self.assertTrue(lines[0].endswith('| diverged |'))
      self.assertTrue(lines[3].startswith('| qgd |'))
      self.assertTrue(lines[3].endswith('| at k=1011 |'))
      self.assertTrue(lines[2].endswith('|  |'))
    sentence = report.divergence_lines(rows, experiment.algos)[0]
    self.assertTrue(sentence.startswith(
        '**Diverged**: qgd diverged at k=1011 (loss NaN/inf or above 10x '
        'f(theta^0)). Its row is shown as run, but left out of every '
        'comparison and claim'), sentence)


if __name__ == '__main__':
  absltest.main()
