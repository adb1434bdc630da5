"""scripts/check_docs.py: numbers in the docs are the data's (issue 50).

On the repository as it is (every marker, link and report's staleness), and
on small documentation trees built here, one fault each, that it must
find.
"""

import json
import pathlib
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from experiments.run import results_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'scripts'))
import check_docs  # pylint: disable=g-import-not-at-top,wrong-import-position


class RepositoryTest(absltest.TestCase):

  def test_the_documentation_holds(self):
    run = subprocess.run([sys.executable, 'scripts/check_docs.py'], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)


class FaultsTest(absltest.TestCase):
  """A tree with a library file, one study's report and its results.json."""

  def setUp(self):
    super().setUp()
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    self.root = pathlib.Path(tmp.name)
    (self.root / 'lib').mkdir()
    (self.root / 'lib' / 'algo.py').write_text('STEP = 0.1\n')
    self.report = self.root / 'docs' / 'study' / 'REPORT.md'
    self.report.parent.mkdir(parents=True)
    (self.report.parent / 'fig.png').write_bytes(b'png')
    results_data.write(self.report.parent, 'study', {
        'mnist/laq/uploads': 632, 'mnist/laq/bits': 1.99e7,
        'mnist/laq/diverged': False, 'mnist/sgd/uploads': 4000,
        'mnist/slaq/uploads': 12, 'mnist/slaq/diverged': True,
        'mnist/laq/gap_points': 1.11}, command='python -m x',
        sources=['lib'], root=self.root)

  def problems(self, text: str, write: bool = False) -> list[str]:
    self.report.write_text(text)
    return check_docs.check(self.root, write)

  def test_markers_equal_their_data_and_write_fixes_them(self):
    good = ('LAQ uploads <!-- r:study/mnist/laq/uploads -->632<!-- /r --> '
            'times, <!-- r:study/mnist/laq/bits:sci -->1.990e+07<!-- /r --> '
            'bits. ![a figure](fig.png)\n')
    self.assertEqual(self.problems(good), [])
    wrong = good.replace('-->632<', '-->576<')
    [problem] = self.problems(wrong)
    self.assertIn("says '576', the data '632'", problem)
    self.assertEqual(self.problems(wrong, write=True), [])
    self.assertEqual(self.report.read_text(), good)

  def test_a_marker_in_code_is_an_example(self):
    self.assertEqual(self.problems(
        'Write `<!-- r:study/mnist/qgd/uploads -->1<!-- /r -->` or\n\n'
        '```\n<!-- r:other/a/b -->2<!-- /r -->\n```\n'), [])

  def test_a_key_not_in_the_data_or_a_study_without_data(self):
    [p] = self.problems('<!-- r:study/mnist/qgd/uploads -->1<!-- /r -->\n')
    self.assertIn('has no such key', p)
    problems = self.problems('<!-- r:other/a/b -->1<!-- /r -->\n')
    self.assertIn('docs/other/results.json does not exist', problems[0])

  def test_a_claim_on_a_diverged_point(self):
    [p] = self.problems(
        'SLAQ is the fastest: <!-- r:study/mnist/slaq/uploads -->12<!-- /r -->'
        ' uploads.\n')
    self.assertIn('study/mnist/slaq/uploads, a point that diverged', p)
    # the same number without a claim word is a fact about the point
    self.assertEqual(self.problems(
        'SLAQ uploaded <!-- r:study/mnist/slaq/uploads -->12<!-- /r --> '
        'times before it diverged.\n'), [])

  def test_within_n_must_hold_for_the_numbers_it_quotes(self):
    [p] = self.problems(
        'LAQ is within 1 point of SGD '
        '(<!-- r:study/mnist/laq/gap_points -->1.11<!-- /r --> points).\n')
    self.assertIn('"within 1" but study/mnist/laq/gap_points is 1.11', p)
    self.assertEqual(self.problems(
        'LAQ is within 2 points of SGD '
        '(<!-- r:study/mnist/laq/gap_points -->1.11<!-- /r --> points).\n'),
                     [])

  def test_a_missing_figure_or_file(self):
    [p] = self.problems('![loss](gone.png) and [code](../../lib/algo.py)\n'
                        '`[not a link](nowhere.md)`\n')
    self.assertIn('links to gone.png, which does not exist', p)

  def test_a_report_whose_source_changed_must_say_so(self):
    self.assertEqual(self.problems('# Report\n'), [])
    (self.root / 'lib' / 'algo.py').write_text('STEP = 0.2\n')
    [p] = self.problems('# Report\n')
    self.assertIn('its source (lib) changed since it was generated', p)
    for said in ('> Stale since 0123abc: the step size changed.\n',
                 'Verified unchanged by same_results at 0123abcd.\n'):
      self.assertEqual(self.problems('# Report\n\n' + said), [])
    (self.report.parent / 'results.json').unlink()
    [p] = self.problems('# Report\n')
    self.assertIn('no results.json beside it', p)

  def test_the_at_a_glance_table_is_generated_from_the_data(self):
    readme = self.root / 'README.md'
    readme.write_text('# x\n\n<!-- at-a-glance: generated -->\n\nAfter.\n')
    self.report.write_text('# Report\n')
    spec = [('MNIST', 'study', 'mnist', [('LAQ', 'laq'), ('SLAQ', 'slaq')],
             [('uploads', 'uploads', 'int')]),
            ('elsewhere', 'other', 'x', [('A', 'a')], [('u', 'u', 'int')])]
    with mock.patch.object(check_docs, 'AT_A_GLANCE', spec):
      [p] = check_docs.check(self.root)
      self.assertIn('the at-a-glance table is not the data', p)
      self.assertEqual(check_docs.check(self.root, write=True), [])
      self.assertEqual(check_docs.check(self.root), [])
      text = readme.read_text()
      self.assertIn('| LAQ | <!-- r:study/mnist/laq/uploads:int -->632'
                    '<!-- /r --> |', text)
      self.assertIn('| SLAQ | diverged |', text)
      self.assertIn('Not in this table yet: other', text)
      self.assertTrue(text.endswith('<!-- /at-a-glance -->\n\nAfter.\n'))
      # a number typed over the data's is found by the marker check
      readme.write_text(text.replace('-->632<', '-->600<'))
      self.assertIn("says '600', the data '632'",
                    ' '.join(check_docs.check(self.root)))

  def test_results_json_records_how_it_was_made(self):
    data = json.loads((self.report.parent / 'results.json').read_text())
    self.assertEqual(data['command'], 'python -m x')
    self.assertEqual(data['sources'], ['lib'])
    self.assertEqual(data['source_hash'],
                     results_data.source_hash(['lib'], self.root))
    self.assertIn('cores', data['machine'])
    self.assertIn('every number it quotes is in [results.json]',
                  results_data.header_line(data))


class PublishTest(absltest.TestCase):

  def test_a_study_folder_gets_its_data_and_provenance_line(self):
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    work = pathlib.Path(tmp.name)
    sweep = work / 'logreg'
    sweep.mkdir()
    (sweep / 'results.csv').write_text(
        'point,algo,total_uploads,final_loss,diverged\n'
        '0,gd,40,0.5,False\n1,laq,12,1e9,False\n')
    np.savez(sweep / 'curves.npz', loss=np.array([[5.0, 1.0], [5.0, 1e9]]),
             final_loss=np.array([0.5, 1e9]))
    (work / 'REPORT.md').write_text('# Title\n\nText.\n')
    for _ in range(2):  # publishing again replaces the line
      data = results_data.publish(work, 'paper', 'python -m x')
    self.assertEqual(data['values'], {
        'logreg/gd/total_uploads': 40, 'logreg/gd/final_loss': 0.5,
        'logreg/gd/diverged': False, 'logreg/gd/diverged_at': None,
        'logreg/laq/total_uploads': 12, 'logreg/laq/final_loss': 1e9,
        'logreg/laq/diverged': True, 'logreg/laq/diverged_at': 1})
    text = (work / 'REPORT.md').read_text().split('\n')
    self.assertEqual(text[0], '# Title')
    self.assertEqual(text[1], '')
    self.assertTrue(text[2].startswith('Generated on '), text[2])
    self.assertEqual(text[3:], ['', 'Text.', ''])
    self.assertEqual(json.loads((work / 'results.json').read_text())['study'],
                     'paper')

class SameResultsTest(absltest.TestCase):
  """scripts/same_results.py's comparison of a run with its summary."""

  def test_exact_on_the_same_cpu_a_stated_tolerance_elsewhere(self):
    import same_results  # pylint: disable=g-import-not-at-top
    committed = {'cpu': 'A (avx2)', 'jax': '1', 'values': {
        'x/laq/total_uploads': 100, 'x/laq/final_loss': 0.5,
        'x/laq/diverged': False}}
    now = json.loads(json.dumps(committed))
    self.assertEqual(same_results.compare(now, committed), [])
    now['values']['x/laq/final_loss'] = 0.5 * (1 + 1e-12)
    now['values']['x/laq/total_uploads'] = 101
    self.assertLen(same_results.compare(now, committed), 2)
    now['cpu'] = 'B (avx512f)'  # another instruction set: within 1e-4, 2%
    self.assertEqual(same_results.compare(now, committed), [])
    now['values']['x/laq/total_uploads'] = 103
    now['values']['x/laq/diverged'] = True
    now['values']['x/new/total_uploads'] = 1
    problems = same_results.compare(now, committed)
    self.assertIn('x/laq/total_uploads: 103 here, 100 committed', problems)
    self.assertIn('x/laq/diverged: True here, False committed', problems)
    self.assertIn('x/new/total_uploads: new in this run (1)', problems)
    self.assertIn('counts 0.02', problems[-1])

if __name__ == '__main__':
  absltest.main()
