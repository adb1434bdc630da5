r"""The successors of lazy aggregation against their papers: the report.

    python -m experiments.successors --workdir runs/successors \
        --copy_to docs/successors                        # the report
    python -m experiments.successors --workdir runs/successors_tiny --size=tiny

One sweep per section of docs/algorithm.md's "After LAQ" contract
(configs/successors.py says each section's setting and where it comes from):
Scaffnew against FedAvg and GD, FedNova against FedAvg with the same work,
FedDyn against FedAvg, FedProx and SCAFFOLD, EF21-P + DIANA against GD and
EF21. WORKDIR/SECTION holds each sweep's files (experiments.sweep) and
WORKDIR/REPORT.md the paper's setting, its expectation, our numbers and the
verdict (holds / does not, with the numbers), each also in simulated
seconds on the three network profiles. A diverged point is named with its
iteration and ranked with nothing. Sweeps already finished with the same
config are kept (a run cut short resumes at its first unfinished section).
"""

import sys

from absl import app
from absl import flags

from experiments.run import cli
from experiments.run import progress as progress_lib

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the sweeps and REPORT.md.')
flags.DEFINE_enum('size', 'cpu', ['full', 'cpu', 'quick', 'tiny'],
                  'full: the contract\'s sizes (a GPU\'s job); cpu: what a '
                  '2-core CPU affords (the first 6,000 images where a '
                  'section needs full gradients, fewer rounds); quick: '
                  'minutes; tiny: seconds.')
flags.DEFINE_list('sections', None, 'Which sections to run (default: all '
                  'of configs/successors.py SECTIONS).')
flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md.')
flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md, its figures and '
                    'results.json here (e.g. docs/successors).')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  progress_lib.quiet_start()
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()  # float64 on, the persistent compilation cache
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from configs import successors  # pylint: disable=g-import-not-at-top
  sections = FLAGS.sections or list(successors.SECTIONS)
  unknown = [s for s in sections if s not in successors.SECTIONS]
  if unknown or not sections:
    raise app.UsageError(f'--sections={",".join(sections)}: each must be one '
                         f'of {", ".join(successors.SECTIONS)}')
  from experiments.run import outputs as outputs_lib  # pylint: disable=g-import-not-at-top
  try:
    workdir = outputs_lib.usable_workdir(FLAGS.workdir)
  except outputs_lib.WorkdirError as e:
    sys.exit(f'error: {e}')
  from experiments.studies.successors import study  # pylint: disable=g-import-not-at-top
  failed = study.run(workdir, sections, size=FLAGS.size,
                     report_only=FLAGS.report_only, copy_to=FLAGS.copy_to)
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  cli.run(main)
