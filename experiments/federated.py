r"""The federated experiment and its report (configs/federated.py).

    python -m experiments.federated --workdir runs/federated \
        --copy_to docs/federated                       # the report
    python -m experiments.federated --workdir runs/federated_quick --quick

Per problem (logistic regression, the 200-ReLU network), these sweeps,
each one compiled program:
  main       the seven presets at 10% participation, absent clients
             dropped, on the mobile network, no deadline;
  deadline   the same with `deadline_s` at the 90th percentile of SGD's
             participants' arrival times (compute + upload) in `main`, so
             that the deadline cuts SGD's slowest tenth;
  laziness   sgd and slaq over participation q in {1, 0.5, 0.1} and absent
             in {stale, drop}: what partial participation does to LAQ's
             skipping;
  slaq_bits  (the network) SLAQ's b = 3 against 6, stale and drop;
  local      rounds with local work: fedavg, fedavgm, fedadam, fedyogi,
             fedprox, scaffold, fedpaq, fedlaq at their papers' settings;
  local_k    FedAvg with K in {1, 5, 20} local steps;
  mcmahan    McMahan et al. 2017's comparison: FedSGD against FedAvg (E = 1,
             B = 50 and B = 10) with 10 of 100 clients a round, IID and two
             label shards per client, a learning-rate grid each, their
             published rounds beside ours (one sweep per split and setting;
             experiments/studies/federated/mcmahan.py).
WORKDIR/PROBLEM/SWEEP holds each sweep's files (experiments.sweep), and
WORKDIR/REPORT.md the tables: test accuracy, and iterations, simulated
seconds and uplink bits to the target accuracy (the first evaluation at
or above it, every `eval_every` iterations); uploads per participation;
the clients the deadline cut; upload rates against the rounds a client was
away. A point that diverged (a logged loss NaN/inf or above 10x f(theta^0),
laq_jax.metrics.diverged_at) is named with its iteration and left out of
every ranking, "fastest" and savings claim. Sweeps already finished with
the same config are kept. The study's
code is experiments/studies/federated/ (sweeps.py, report.py, study.py).
"""

import sys

from absl import app
from absl import flags

from experiments.run import cli
from experiments.run import progress as progress_lib
from experiments.studies.federated import study as federated_study
from experiments.studies.federated.sweeps import SWEEPS, TITLES

FLAGS = flags.FLAGS
flags.DEFINE_string('workdir', None, 'Folder for the sweeps and REPORT.md.')
flags.DEFINE_bool('quick', False, '6,000 images, 300 iterations: minutes.')
flags.DEFINE_bool('tiny', False, '600 images, M = 20, 20 iterations: a '
                  'smoke test of the pipeline (seconds).')
flags.DEFINE_list('problems', ['logreg', 'mlp'], 'Which problems to run.')
flags.DEFINE_list('sweeps', list(SWEEPS),
                  'Which sweeps to run (main, deadline, laziness, '
                  'slaq_bits: the network only; local, local_k: rounds '
                  'with local work; mcmahan: FedSGD against FedAvg).')
flags.DEFINE_integer('mlp_iters', None, 'Iterations of the network\'s sweeps '
                     '(default: 1,500 with a GPU/TPU, 500 on a CPU; logistic '
                     'regression runs 1,500).', lower_bound=1)
flags.DEFINE_bool('report_only', False, 'Run nothing; rewrite REPORT.md.')
flags.DEFINE_string('copy_to', None, 'Also copy REPORT.md and its figures '
                    'here (e.g. docs/federated).')
flags.mark_flags_as_required(['workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  progress_lib.quiet_start()
  import jax  # pylint: disable=g-import-not-at-top
  from experiments.run import startup  # pylint: disable=g-import-not-at-top
  startup.setup_jax()  # float64 on, the persistent compilation cache
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  unknown = [p for p in FLAGS.problems if p not in TITLES]
  if unknown or not FLAGS.problems:
    raise app.UsageError(f'--problems={",".join(FLAGS.problems)}: each must '
                         f'be one of {", ".join(TITLES)}')
  budget = 'tiny' if FLAGS.tiny else 'quick' if FLAGS.quick else 'full'
  unknown = [s for s in FLAGS.sweeps if s not in SWEEPS]
  if unknown:
    raise app.UsageError(f'--sweeps={",".join(FLAGS.sweeps)}: each must be '
                         f'one of {", ".join(SWEEPS)}')
  from experiments.run import outputs as outputs_lib  # pylint: disable=g-import-not-at-top
  try:
    workdir = outputs_lib.usable_workdir(FLAGS.workdir)
  except outputs_lib.WorkdirError as e:
    sys.exit(f'error: {e}')
  failed = federated_study.run(
      workdir, FLAGS.problems, FLAGS.sweeps,
      budget=budget, mlp_iters=FLAGS.mlp_iters,
      report_only=FLAGS.report_only, copy_to=FLAGS.copy_to)
  if failed:
    sys.exit(f'error: {", ".join(failed)} failed; the report lists them as '
             'missing')


if __name__ == '__main__':
  cli.run(main)
