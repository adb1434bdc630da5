r"""The LASG/CADA report from finished sweeps of configs/lasg.py.

    python -m experiments.sweep --config=configs/lasg.py:network \
        --workdir=runs/lasg/network
    python -m experiments.lasg --sweeps=runs/lasg/network \
        --out=docs/lasg/REPORT.md

CADA at its authors' MNIST setting has a report of its own (docs/cada):

    python -m experiments.sweep --config=configs/lasg.py:cada_mnist \
        --workdir=runs/lasg/cada_mnist
    python -m experiments.sweep --config=configs/lasg.py:cada_mnist,typo \
        --workdir=runs/lasg/cada_mnist_typo   # the authors' AMSGrad typo
    python -m experiments.lasg \
        --sweeps=runs/lasg/cada_mnist,runs/lasg/cada_mnist_typo \
        --out=docs/cada/REPORT.md

A sweep of CADA's MNIST presets without Adam (the typo's) takes Adam's
uploads from another listed sweep at the same steps and workers; the
report ends with the presets' running counts beside the authors' saved
runs'.

`--sweeps` lists finished sweep folders (each one compiled program); the
report (experiments/studies/lasg/report.py) tabulates each: uploads, bits,
gradients computed, final loss against the initial one, test accuracy, the
simulated seconds on the three network profiles, and where a point diverged
(`laq_jax.metrics.diverged_at`: a logged loss NaN/inf or above 10x
f(theta^0)); a diverged point is compared with nothing.
"""

import pathlib
import sys

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_list('sweeps', None, 'Finished sweep folders of configs/lasg.py.')
flags.DEFINE_string('out', None, 'Where REPORT.md goes.')
flags.mark_flags_as_required(['sweeps', 'out'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  from experiments.studies.lasg import report  # pylint: disable=g-import-not-at-top
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  try:
    command = 'python -m experiments.lasg ' + ' '.join(sys.argv[1:])
    text = report.report(FLAGS.sweeps, command)
  except (FileNotFoundError, ValueError) as e:  # (laq_jax.data.DataError)
    sys.exit(f'error: {e}')
  out = pathlib.Path(FLAGS.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  # the sweeps' quoted values as data beside the report (results.json)
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  values = {}
  for sweep in FLAGS.sweeps:
    values.update({f'{pathlib.Path(sweep).name}/{k}': v for k, v in
                   results_data.sweep_values(sweep).items()})
  # the study is the report folder's name where it is one (docs/cada: CADA's
  # MNIST sweep alone), else lasg
  study = (out.parent.name if out.parent.name in results_data.STUDY_SOURCES
           else 'lasg')
  data = results_data.write(out.parent, study, values, command=command)
  outputs.atomic_write(out, results_data.stamp(text, data))
  print(out)


if __name__ == '__main__':
  app.run(main)
