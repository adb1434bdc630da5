r"""The family on the workloads papers publish on, and its report.

    python -m experiments.workloads --workdir runs/workloads \
        --copy_to docs/workloads                # a CPU's budget (~1.5 h)
    python -m experiments.workloads --workdir runs/workloads_tiny --tiny

Per workload (Fashion-MNIST with the LASG code's CNN, configs/fmnist_cnn.py;
Shakespeare's speaking roles with the character LSTM,
configs/shakespeare_lstm.py), one sweep of configs/workloads.py's FAMILY
(FedSGD and the lazy family, LASG / CADA, FedAvg and friends) as one
compiled program, at the config's `:cpu` variant (the budget a 2-core CPU
affords: 30 rounds of 10 Fashion-MNIST clients, 15 rounds of Shakespeare's
10 largest roles) or `:tiny` (a smoke test). WORKDIR/NAME holds each
sweep's files (experiments.sweep) and WORKDIR/REPORT.md the tables: test
accuracy per evaluation, rounds and uplink bytes to a target accuracy,
uploads, gradients computed, simulated seconds, the wall time against the
prediction (`experiments.predict`), the full configs' H200 estimate and
Shakespeare's client statistics. A point that diverged (a logged loss
NaN/inf or above 10x f(theta^0), laq_jax.metrics.diverged_at) is named with
its iteration and left out of every comparison. Sweeps already finished
with the same config are kept. The study's code is
experiments/studies/workloads/.
"""

import pathlib
import sys

from absl import app
from absl import flags

from experiments.run import cli
from experiments.run import progress as progress_lib
from experiments.studies.workloads import report as report_lib

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the sweeps and REPORT.md.')
flags.DEFINE_bool('tiny', False, 'The configs\' :tiny variants (minutes).')
flags.DEFINE_list('workloads', list(report_lib.WORKLOADS),
                  'Which workloads to run.')
flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md.')
flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md here (e.g. '
                    'docs/workloads).')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  unknown = [w for w in FLAGS.workloads if w not in report_lib.WORKLOADS]
  if unknown or not FLAGS.workloads:
    raise app.UsageError(f'--workloads={",".join(FLAGS.workloads)}: each '
                         f'must be one of {", ".join(report_lib.WORKLOADS)}')
  progress_lib.quiet_start()
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  budget = 'tiny' if FLAGS.tiny else 'cpu'
  from experiments.run import outputs as outputs_lib  # pylint: disable=g-import-not-at-top
  try:
    workdir = outputs_lib.usable_workdir(FLAGS.workdir)
  except outputs_lib.WorkdirError as e:
    sys.exit(f'error: {e}')
  failed = [] if FLAGS.report_only else report_lib.run(
      workdir, FLAGS.workloads, budget)
  command = (f'python -m experiments.workloads --workdir {workdir}'
             + (' --tiny' if FLAGS.tiny else '')
             + (f' --workloads={",".join(FLAGS.workloads)}'
                if list(FLAGS.workloads) != list(report_lib.WORKLOADS)
                else ''))
  path = report_lib.write_report(workdir, FLAGS.workloads, budget, command)
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  results_data.publish(workdir, 'workloads', command)
  print(f'report: {path}')
  if FLAGS.copy_to:
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    outputs.copy_report(workdir, pathlib.Path(FLAGS.copy_to))
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  cli.run(main)
