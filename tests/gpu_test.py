"""benchmarks/gpu.sh end to end on this CPU with --tiny, and its estimate."""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from absl.testing import absltest
import pytest

from tests import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


class GpuScriptTest(absltest.TestCase):

  def test_tiny_run_writes_its_files(self):
    # paper and family are `experiments.reproduce --tiny` and
    # `experiments.family --tiny`, which reproduce_test and
    # family_report_test run, participants compiles six FedAvg programs
    # at M = 1,000 (round_size_test holds its property), peers_test runs
    # peers.py, floors.py times eight programs of the full data and
    # workloads is `experiments.workloads --tiny`, which
    # workload_configs_test runs: skipped here (the suite's time).
    out, work = tempfile.mkdtemp(), tempfile.mkdtemp()
    env = dict(os.environ, PYTHON=sys.executable, LAQ_JAX_DATA=str(
        common.mnist_dir()))
    proc = subprocess.run(
        ['bash', str(ROOT / 'benchmarks' / 'gpu.sh'), out, '--tiny',
         '--budget', '1200', '--work', work, '--skip',
         'floors,participants,peers,paper,family,workloads'], env=env,
        capture_output=True, text=True, timeout=1500, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    files = sorted(p.name for p in pathlib.Path(out).iterdir())
    self.assertEqual(files, ['bench.json', 'cost.json', 'env.txt',
                             'estimate.md', 'gpu.log', 'models.json'])
    log = (pathlib.Path(out) / 'gpu.log').read_text()
    for step in ('estimate', 'bench', 'cost', 'models'):
      self.assertIn(f'done {step} in', log)
    # in ORDER (the paper's place after the estimate, skipped here), each
    # with its expectation against the budget left
    self.assertEqual(re.findall(r'\] (?:start|skipped) (\w+)', log),
                     ['estimate', 'paper', 'family', 'models', 'floors',
                      'bench', 'cost', 'participants', 'peers', 'pfl',
                      'workloads'])
    self.assertRegex(log, r'start models \(expects ~90 s, [0-9]+ s left\)')
    # what the steps print reaches the console too, not only the log
    self.assertIn('Total:', proc.stderr)  # the estimate's own output
    models = json.loads((pathlib.Path(out) / 'models.json').read_text())
    self.assertEqual([r['model'] for r in models['rows']],
                     ['logreg', 'lasg_cnn'])
    self.assertTrue(all(r['ratio'] > 0.5 for r in models['rows']))
    for step in ('floors', 'participants', 'peers', 'paper', 'family',
                 'workloads'):
      self.assertIn(f'skipped {step}', log)
    # pfl-research's comparison: full budget only (CI and --tiny skip it)
    self.assertIn("skipped pfl: --tiny (pfl-research's comparison runs at "
                  'full budget only)', log)
    bench = json.loads((pathlib.Path(out) / 'bench.json').read_text())
    self.assertEqual({r['chosen'] for r in bench['layouts']}, {'transposed'})
    cost = json.loads((pathlib.Path(out) / 'cost.json').read_text())
    self.assertEqual({(r['problem'], r['G']) for r in cost['cost']},
                     {(p, g) for p in ('logreg', 'mlp') for g in (1, 4, 16)})
    self.assertTrue(all(r['wall_over_floor'] > 0.5 for r in cost['cost']))
    self.assertIn('Total:', (pathlib.Path(out) / 'estimate.md').read_text())
    self.assertIn('backend cpu', (pathlib.Path(out) / 'env.txt').read_text())

  def test_budget_runs_the_steps_that_fit(self):
    out = tempfile.mkdtemp()
    env = dict(os.environ, PYTHON=sys.executable, LAQ_JAX_DATA=str(
        common.mnist_dir()))
    proc = subprocess.run(
        ['bash', str(ROOT / 'benchmarks' / 'gpu.sh'), out, '--tiny',
         '--budget', '25', '--work', tempfile.mkdtemp()], env=env,
        capture_output=True, text=True, timeout=300, check=False)
    # skipped for the budget is not a failure
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    log = (pathlib.Path(out) / 'gpu.log').read_text()
    self.assertIn('start estimate (expects ~15 s, 25 s left)', log)
    self.assertIn('done estimate in', log)
    for step, expect in (('paper', 150), ('family', 150), ('models', 90),
                         ('workloads', 150)):
      self.assertRegex(log, rf'skipped {step}: expects ~{expect} s, '
                       r'[0-9]+ s of --budget 25 left')
    self.assertEqual(sorted(p.name for p in pathlib.Path(out).iterdir()),
                     ['env.txt', 'estimate.md', 'gpu.log'])
    self.assertIn('Total:', proc.stderr)  # the estimate's own output
    proc = subprocess.run(
        ['bash', str(ROOT / 'benchmarks' / 'gpu.sh'), out, '--budget', '0'],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('--budget 0: not allowed (a whole number of seconds, at '
                  'least 1)', proc.stderr)

  def test_missing_package_without_wheels_is_one_clear_error(self):
    out = tempfile.mkdtemp()
    # a python whose ml_collections import fails: a shadowing module
    shadow = tempfile.mkdtemp()
    pathlib.Path(shadow, 'ml_collections.py').write_text(
        'raise ImportError("not here")\n')
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=shadow)
    proc = subprocess.run(['bash', str(ROOT / 'benchmarks' / 'gpu.sh'), out,
                           '--tiny'], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    self.assertEqual(proc.returncode, 1)
    self.assertIn('missing ml_collections and no --wheels DIR', proc.stderr)
    self.assertIn('--download-wheels', proc.stderr)
    proc = subprocess.run(['bash', str(ROOT / 'benchmarks' / 'gpu.sh'), out,
                           '--fast'], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('unknown option --fast', proc.stderr)
    proc = subprocess.run(['bash', str(ROOT / 'benchmarks' / 'gpu.sh'), out,
                           '--skip', 'paper,famly'], env=env,
                          capture_output=True, text=True, timeout=60,
                          check=False)
    self.assertEqual(proc.returncode, 2)
    self.assertIn('--skip famly: no such step (steps: estimate paper family '
                  'models floors bench cost participants peers pfl '
                  'workloads)', proc.stderr)

  def test_pfl_step_without_pfl_is_skipped_and_with_bad_wheels_fails(self):
    # pfl-research is no dependency: at full budget, with neither
    # --pfl-wheels nor PFL_PYTHON, the step says it is skipped and the run
    # succeeds; a wheel folder without pfl's wheels is a failed step, said.
    env = dict(os.environ, PYTHON=sys.executable, LAQ_JAX_DATA=str(
        common.mnist_dir()))
    env.pop('PFL_PYTHON', None)
    others = 'estimate,paper,family,models,floors,bench,cost,participants,' \
        'peers,workloads'
    for extra, code, said in (
        ([], 0, 'skipped pfl: no --pfl-wheels DIR and no PFL_PYTHON'),
        (['--pfl-wheels', tempfile.mkdtemp()], 1, 'FAILED pfl: installing '),
        # a step that does not fit the budget installs nothing
        (['--pfl-wheels', tempfile.mkdtemp(), '--budget', '60'], 0,
         'skipped pfl: expects ~240 s')):
      out = tempfile.mkdtemp()
      proc = subprocess.run(
          ['bash', str(ROOT / 'benchmarks' / 'gpu.sh'), out, '--work',
           tempfile.mkdtemp(), '--skip', others] + extra, env=env,
          capture_output=True, text=True, timeout=300, check=False)
      self.assertEqual(proc.returncode, code, proc.stderr[-3000:])
      self.assertIn(said, (pathlib.Path(out) / 'gpu.log').read_text())
      self.assertFalse((pathlib.Path(out) / 'pfl.json').exists())


class EstimateTest(absltest.TestCase):

  def estimate_json(self, call):
    """`call` of benchmarks.gpu_estimate as JSON, run in a fresh process:
    gpu_estimate imports the launchers' modules, whose absl flags must not
    meet other tests' (a flag defined twice)."""
    proc = common.run_script(
        'import json; from benchmarks import gpu_estimate as g; '
        f'print(json.dumps(g.{call}))')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])

  def test_estimate_counts_every_program_from_its_flops(self):
    rows = {r['program']: r for r in self.estimate_json('estimate()')}
    sys.path.insert(0, str(ROOT))
    from benchmarks import gpu_estimate  # pylint: disable=g-import-not-at-top
    from experiments.run import predict  # pylint: disable=g-import-not-at-top
    mlp = rows['paper mlp']
    self.assertEqual((mlp['points'], mlp['iterations']), (4, 8000))
    # 4 points x 8,000 iterations x (4 N D H + 6 N H C) on all 60,000 images
    n, d, h, c = 60000, 784, 200, 10
    self.assertAlmostEqual(mlp['tflop'],
                           4 * 8000 * (4 * n * d * h + 6 * n * h * c) / 1e12)
    per_iter = (4 * (4 * n * d * h + 6 * n * h * c)
                / (gpu_estimate.MATMUL_EFFICIENCY * 67e12)
                + gpu_estimate.SECONDS_PER_ITERATION
                + predict.KERNELS[('mlp', False)]
                * gpu_estimate.SECONDS_PER_KERNEL)  # full-batch MLP
    self.assertAlmostEqual(mlp['seconds'], 8000 * per_iter)
    self.assertIn('family mlp full', rows)
    self.assertIn('paper cross-check (devices)', rows)
    total = sum(r['seconds'] for r in rows.values()) + gpu_estimate.OVERHEAD_S
    self.assertLess(total, 8 * 60)  # the target the estimate is held to

  def test_the_docs_show_this_estimate_and_the_measured_run(self):
    # docs/benchmarks.md's GPU tables are gpu_estimate.py's output as the
    # code stands (regenerate them with the change that moves them)
    proc = common.run_script(
        'import json; from benchmarks import gpu_estimate as g; '
        'rows = g.estimate(); '
        'print(json.dumps([g.markdown(rows, workloads=g.workload_rows(), '
        'benchmarks=g.benchmark_rows()), g.measured_markdown(json.load(open('
        '"docs/gpu/h200_4e7d038.json")), {r["program"]: r["seconds"] '
        'for r in rows})]))')
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    estimate, measured = json.loads(proc.stdout.strip().splitlines()[-1])
    docs = (ROOT / 'docs' / 'benchmarks.md').read_text()
    self.assertIn(estimate.split('\n', 2)[2].strip(), docs)
    self.assertIn(measured.strip(), docs)

  def test_the_kernel_cost_is_the_committed_fit(self):
    # docs/gpu/kernel_fit.json (benchmarks/kernels.py --fit: the H200's
    # measured model iterations against kernels counted here), refitted by
    # hand: two unknowns, least squares in relative error, solved by the
    # normal equations; and the constants the estimate uses are its.
    sys.path.insert(0, str(ROOT))
    from benchmarks import kernels  # pylint: disable=g-import-not-at-top
    from experiments.run import predict  # pylint: disable=g-import-not-at-top
    fitted = json.loads((ROOT / 'docs' / 'gpu' / 'kernel_fit.json')
                        .read_text())
    measured = json.loads((ROOT / 'docs' / 'gpu' / 'h200_4e7d038.json')
                          .read_text())
    rows = fitted['rows']
    self.assertEqual([(r['model'], r['ms']) for r in rows],
                     [(r['model'], r['ms']) for r in measured['models']['rows']])
    s11 = s1k = skk = b1 = bk = 0.0
    for r in rows:
      t = r['ms'] / 1e3
      rest = t - t / r['over_floor']
      s11 += 1 / t**2
      s1k += r['kernels'] / t**2
      skk += r['kernels']**2 / t**2
      b1 += rest / t**2
      bk += r['kernels'] * rest / t**2
    det = s11 * skk - s1k**2
    per_iteration, per_kernel = ((b1 * skk - bk * s1k) / det,
                                 (s11 * bk - s1k * b1) / det)
    again = kernels.fit([{k: r[k] for k in ('model', 'ms', 'over_floor',
                                            'kernels')} for r in rows])
    for result in (fitted, again):
      self.assertAlmostEqual(result['seconds_per_iteration'] / per_iteration,
                             1, places=9)
      self.assertAlmostEqual(result['seconds_per_kernel'] / per_kernel, 1,
                             places=9)
    # the fit is within 35% of every measured row (the kernels of an
    # iteration that does not log: the CNNs' rows are under it by 25-33%)
    for r in again['rows']:
      self.assertLess(abs(r['fitted_ms'] / r['ms'] - 1), 0.35, r['model'])
    self.assertAlmostEqual(predict.H200['seconds_per_iteration'],
                           per_iteration, delta=1e-3 * per_iteration)
    self.assertAlmostEqual(predict.H200['seconds_per_kernel'], per_kernel,
                           delta=1e-3 * per_kernel)
    # the estimate's programs are counted as the launchers compile them for
    # a GPU now (the committed counts, kernels.py's default form), the fit's
    # as they ran at 4e7d038 (one level of the fixed-order sums at a time)
    self.assertEqual(fitted['counted_with'].get('fixed_sum_form',
                                                'halving'), 'halving')
    minibatch = json.loads((ROOT / 'docs' / 'gpu' /
                            'kernels_models_cpu.json').read_text())
    full = json.loads((ROOT / 'docs' / 'gpu' / 'kernels_cpu.json')
                      .read_text())
    self.assertEqual(minibatch['fixed_sum_form'], 'grouped')
    self.assertEqual(full['fixed_sum_form'], 'grouped')
    counted = {(r['program'].split()[0], True): r['kernels']
               for r in minibatch['rows'] if r['program'].split()[0] in
               {m for m, _ in predict.KERNELS}}
    counted.update({(r['program'], False): r['kernels'] for r in full['rows']
                    if r['program'] in ('logreg', 'mlp')})
    self.assertEqual(predict.KERNELS, counted)

  def test_benchmark_programs_by_hand(self):
    rows = {r[0]: r[1:] for r in self.estimate_json('benchmark_rows()')}
    sys.path.insert(0, str(ROOT))
    from benchmarks import gpu_estimate  # pylint: disable=g-import-not-at-top
    from experiments.run import predict  # pylint: disable=g-import-not-at-top
    # floors.py's logistic regression: 4 programs, 5 calls of 100
    # iterations of 10 x 500 float32 images (4DC FLOPs each) and the loss
    # on all 60,000 every 10th (2DC), bound by the rows and pixels read.
    n, d, c, h200 = 60000, 784, 10, gpu_estimate.H200
    flops = 5000 * 4 * d * c + n * 2 * d * c / 10
    read = (n / 10 + 5000) * d * 4
    per = (max(flops / (h200['matmul_efficiency'] * 67e12),
               read / (h200['bandwidth_efficiency'] * 4.8e12))
           + gpu_estimate.SECONDS_PER_ITERATION
           + predict.KERNELS[('logreg', True)]
           * gpu_estimate.SECONDS_PER_KERNEL)  # minibatch logreg
    programs, rounds, seconds = rows['floors logreg_stochastic']
    self.assertEqual((programs, rounds), (4, 2000))
    self.assertAlmostEqual(seconds, 2000 * per
                           + 4 * gpu_estimate.COMPILE_S)
    self.assertEqual(
        sorted(rows), sorted(
            ['floors logreg_stochastic', 'floors mlp_stochastic',
             'peers laq-jax fedavg logreg', 'peers laq-jax slaq logreg',
             'peers laq-jax fedavg cnn', 'peers laq-jax slaq cnn']
            + [f'participants {p} S = {s}' for p in ('logreg', 'mlp')
               for s in (10, 100)]))


if __name__ == '__main__':
  absltest.main()
