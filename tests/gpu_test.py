"""benchmarks/gpu.sh end to end on this CPU with --tiny, and its estimate."""
import json
import os
import pathlib
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
         '--work', work, '--skip',
         'floors,participants,peers,paper,family,workloads'], env=env,
        capture_output=True, text=True, timeout=1500, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
    files = sorted(p.name for p in pathlib.Path(out).iterdir())
    self.assertEqual(files, ['bench.json', 'cost.json', 'env.txt',
                             'estimate.md', 'gpu.log', 'models.json'])
    log = (pathlib.Path(out) / 'gpu.log').read_text()
    for step in ('estimate', 'bench', 'cost', 'models'):
      self.assertIn(f'done {step} in', log)
    models = json.loads((pathlib.Path(out) / 'models.json').read_text())
    self.assertEqual([r['model'] for r in models['rows']],
                     ['logreg', 'lasg_cnn'])
    self.assertTrue(all(r['ratio'] > 0.5 for r in models['rows']))
    for step in ('floors', 'participants', 'peers', 'paper', 'family',
                 'workloads'):
      self.assertIn(f'skipped {step}', log)
    bench = json.loads((pathlib.Path(out) / 'bench.json').read_text())
    self.assertEqual({r['chosen'] for r in bench['layouts']}, {'transposed'})
    cost = json.loads((pathlib.Path(out) / 'cost.json').read_text())
    self.assertEqual({(r['problem'], r['G']) for r in cost['cost']},
                     {(p, g) for p in ('logreg', 'mlp') for g in (1, 4, 16)})
    self.assertTrue(all(r['wall_over_floor'] > 0.5 for r in cost['cost']))
    self.assertIn('Total:', (pathlib.Path(out) / 'estimate.md').read_text())
    self.assertIn('backend cpu', (pathlib.Path(out) / 'env.txt').read_text())

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
    self.assertIn('--skip famly: no such step (steps: estimate bench cost '
                  'models floors participants peers paper family workloads)',
                  proc.stderr)


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
    mlp = rows['paper mlp']
    self.assertEqual((mlp['points'], mlp['iterations']), (4, 8000))
    # 4 points x 8,000 iterations x (4 N D H + 6 N H C) on all 60,000 images
    n, d, h, c = 60000, 784, 200, 10
    self.assertAlmostEqual(mlp['tflop'],
                           4 * 8000 * (4 * n * d * h + 6 * n * h * c) / 1e12)
    per_iter = (4 * (4 * n * d * h + 6 * n * h * c)
                / (gpu_estimate.MATMUL_EFFICIENCY * 67e12)
                + gpu_estimate.KERNELS_PER_ITERATION
                * gpu_estimate.SECONDS_PER_KERNEL)
    self.assertAlmostEqual(mlp['seconds'], 8000 * per_iter)
    self.assertIn('family mlp full', rows)
    self.assertIn('paper cross-check (devices)', rows)
    total = sum(r['seconds'] for r in rows.values()) + gpu_estimate.OVERHEAD_S
    self.assertLess(total, 8 * 60)  # the target the estimate is held to

  def test_benchmark_programs_by_hand(self):
    rows = {r[0]: r[1:] for r in self.estimate_json('benchmark_rows()')}
    sys.path.insert(0, str(ROOT))
    from benchmarks import gpu_estimate  # pylint: disable=g-import-not-at-top
    # floors.py's logistic regression: 4 programs, 5 calls of 100
    # iterations of 10 x 500 float32 images (4DC FLOPs each) and the loss
    # on all 60,000 every 10th (2DC), bound by the rows and pixels read.
    n, d, c, h200 = 60000, 784, 10, gpu_estimate.H200
    flops = 5000 * 4 * d * c + n * 2 * d * c / 10
    read = (n / 10 + 5000) * d * 4
    per = (max(flops / (h200['matmul_efficiency'] * 67e12),
               read / (h200['bandwidth_efficiency'] * 4.8e12))
           + gpu_estimate.KERNELS_PER_ITERATION
           * gpu_estimate.SECONDS_PER_KERNEL)
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
