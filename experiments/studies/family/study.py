"""The family study's runs: every preset of the family on the paper's two
problems, four sweeps (`configs/sweep_compressors.py`), and the report (what
`python -m experiments.family` does; see experiments/family.py).

    failed = run(workdir, budget='quick')   # the sweeps missing, REPORT.md

Sweeps already finished in WORKDIR with the same config are kept.
"""

from __future__ import annotations

import json
import pathlib

from absl import logging

from experiments.run import progress as progress_lib

NETWORK_MINIBATCH_ITERS = 1500  # the paper's SLAQ budget
CPU_NETWORK_ITERS = 500
CPU_NETWORK_IMAGES = 0  # all 60,000 (6,000 made SLAQ's batch a full shard)


def studies(budget: str, network_iters: int, network_images: int):
  """The two problems, each with its full-batch and minibatch sweep.

  Args:
    budget: 'full' (the paper's budgets on logistic regression; the network
      at `network_iters` full-batch iterations on `network_images`), 'quick'
      (6,000 images, short runs) or 'tiny' (seconds).
    network_iters: the network's full-batch iterations at the full budget.
    network_images: the network's training images at the full budget.
  """
  from experiments.studies.family.family_report import Study  # pylint: disable=g-import-not-at-top
  if budget == 'full':
    subset = f',train_subset={network_images}' if network_images else ''
    args = ('full', 'minibatch', f'full,mlp,num_iters={network_iters}{subset}',
            f'minibatch,mlp,num_iters={NETWORK_MINIBATCH_ITERS}{subset}')
  elif budget == 'quick':
    args = ('full,quick,num_iters=1000', 'minibatch,quick', 'full,mlp,quick',
            'minibatch,mlp,quick')
  else:
    args = ('full,tiny', 'minibatch,tiny', 'full,mlp,tiny',
            'minibatch,mlp,tiny')
  return (
      Study('logreg', 'Logistic regression (convex)',
            {'full': (args[0], 'full'), 'minibatch': (args[1], 'minibatch')},
            convex=True),
      Study('mlp', 'The 200-ReLU network (nonconvex)',
            {'full': (args[2], 'full'), 'minibatch': (args[3], 'minibatch')},
            convex=False),
  )


# Every sweep of a study saves its state this often (iterations), so that a
# study stopped mid-sweep (hours on a CPU) resumes where it was, bit for bit.
CHECKPOINT_EVERY = 500


def run_study(study, workdir: pathlib.Path) -> list[str]:
  """Runs the study's sweeps not yet done; returns those that failed."""
  from configs import sweep_compressors  # pylint: disable=g-import-not-at-top
  from experiments.run import config as config_lib  # pylint: disable=g-import-not-at-top
  from experiments.run import grid  # pylint: disable=g-import-not-at-top
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  failed = []
  for arg, folder in study.sweeps.values():
    config = sweep_compressors.get_config(arg)
    if not config.checkpoint_every:  # a study stopped mid-sweep resumes
      every = min(CHECKPOINT_EVERY, config.num_iters)
      # (a multiple of eval_every, as the config asks: checkpoints fall
      # between chunks)
      config.checkpoint_every = (max(every // config.eval_every, 1)
                                 * config.eval_every)
    out = workdir / study.name / folder
    wanted = outputs.as_json(config_lib.to_dict(config))
    try:
      same = outputs.same_config(
          json.loads((out / 'config.json').read_text()), wanted)
    except (OSError, ValueError):
      same = False
    if same and (out / 'sweep.json').is_file():
      logging.info('%s/%s: results already there, not run again',
                   study.name, folder)
      continue
    logging.info('%s/%s: configs/sweep_compressors.py:%s%s', study.name,
                 folder, arg, ' (resuming from its checkpoint)' if same
                 else '')
    try:
      # The same config resumes from its last checkpoint; another one
      # (an older study's) is replaced.
      grid.sweep_and_evaluate(config, out, overwrite=not same)
    except Exception:  # pylint: disable=broad-except
      logging.exception('%s/%s failed', study.name, folder)
      failed.append(f'{study.name}/{folder}')
  return failed



def run(workdir: pathlib.Path, *, budget: str = 'full',
        network_iters: int | None = None, network_images: int | None = None,
        report_only: bool = False, copy_to: str | None = None) -> list[str]:
  """Runs the sweeps not yet done in `workdir`, then writes REPORT.md (and
  copies it to `copy_to`); returns the sweeps that failed. The arguments are
  the launcher's flags (experiments/family.py); `budget` is 'full', 'quick'
  or 'tiny', and the network's budget defaults by the machine (8,000
  iterations on all images with a GPU/TPU, CPU_NETWORK_ITERS on
  CPU_NETWORK_IMAGES on a CPU)."""
  import jax  # pylint: disable=g-import-not-at-top
  from experiments.studies.family import family_report  # pylint: disable=g-import-not-at-top
  accelerator = jax.default_backend() != 'cpu'
  network_iters = network_iters or (8000 if accelerator
                                    else CPU_NETWORK_ITERS)
  network_images = (network_images if network_images is not None
                    else 0 if accelerator else CPU_NETWORK_IMAGES)
  selected = studies(budget, network_iters, network_images)
  failed = []
  if not report_only:
    with progress_lib.Progress('problems', len(selected),
                               unit='problem') as progress:
      for done, study in enumerate(selected, start=1):
        failed += run_study(study, workdir)
        progress.update(done, f'{study.name} done')
  command = (f'python -m experiments.family --workdir {workdir}'
             + (f' --{budget}' if budget != 'full' else
                f' --network_iters={network_iters} '
                f'--network_images={network_images}'))
  notes = []
  if budget == 'full' and (network_iters < 8000 or network_images):
    notes.append(
        f'**The network at a reduced budget**: '
        f'{network_iters:,} iterations'
        + (f' on the first {network_images:,} training images'
           if network_images else '')
        + ' (the paper: 8,000 iterations on all 60,000), what a CPU '
        'affords for 17 presets; logistic regression at the paper\'s '
        'budgets. `--network_iters` and `--network_images` set it.')
  times = {}
  family_report.report(selected, workdir, budget != 'full', command, notes,
                       values=times)
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  results_data.publish(workdir, 'compressors', command, extra=times)
  logging.info('report: %s', workdir / family_report.REPORT)
  if copy_to:
    from experiments.run import outputs  # pylint: disable=g-import-not-at-top
    outputs.copy_report(workdir, pathlib.Path(copy_to))
  return failed
