"""The successors study's runs and report (what `python -m
experiments.successors` does; see experiments/successors.py).

    failed = run(workdir, ['scaffnew', 'fednova'], size='cpu')

A section's sweep already finished in WORKDIR with the same config is kept.
"""

from __future__ import annotations

import pathlib
from typing import Sequence

from absl import logging

from experiments.studies.successors import report as report_lib
from experiments.studies.successors import sections as sections_lib


RUN_FILE = 'run.json'


def _now() -> str:
  import datetime  # pylint: disable=g-import-not-at-top
  return datetime.datetime.now(datetime.timezone.utc).strftime(
      '%Y-%m-%d %H:%M UTC')


def _started() -> dict:
  """The commit the process starts at (and whether the study's sources
  differ from it: what the process runs is what it loaded then) and when;
  taken once per process, so a later sweep of the same process names the
  code it runs, not a commit made since (`run`)."""
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  head, dirty = results_data.commit(
      results_data.ROOT, results_data.study_sources('successors'))
  return {'commit': head, 'uncommitted_changes': dirty, 'started': _now()}


def _record(folder: pathlib.Path, started: dict) -> None:
  """FOLDER/run.json: where and when the sweep ran (`_started`, and when
  it finished), for the report's provenance."""
  import json  # pylint: disable=g-import-not-at-top
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  outputs.atomic_write(folder / RUN_FILE, json.dumps(
      {**started, 'finished': _now()}))


def run(workdir: pathlib.Path, sections: Sequence[str], *, size: str = 'cpu',
        report_only: bool = False, copy_to: str | None = None) -> list[str]:
  """Runs the sections' sweeps not yet done in `workdir` (WORKDIR/SECTION),
  then writes WORKDIR/REPORT.md (and copies it to `copy_to`); returns the
  sections that failed."""
  from experiments.run import grid  # pylint: disable=g-import-not-at-top
  from experiments.run import outputs  # pylint: disable=g-import-not-at-top
  failed = []
  loaded = None if report_only else _started()  # (the code this process runs)
  if not report_only:
    for section in sections:
      try:
        todo = sections_lib.sweep_configs(section, size)
      except Exception:  # pylint: disable=broad-except
        logging.exception('%s: its config failed', section)
        failed.append(section)
        continue
      for sub, config in todo:
        name = f'{section}/{sub}' if sub else section
        folder = workdir / name
        if outputs.sweep_done(config, folder):
          logging.info('%s: results already there, not run again', name)
          continue
        logging.info('%s (%s size)', name, size)
        started = {**loaded, 'started': _now()}
        try:
          grid.sweep_and_evaluate(config, folder, overwrite=True)
        except Exception:  # pylint: disable=broad-except
          logging.exception('%s failed', name)
          failed.append(name)
          continue
        _record(folder, started)
  command = (f'python -m experiments.successors --workdir {workdir}'
             + (f' --size={size}' if size != 'cpu' else ''))
  text = report_lib.report(workdir, size, command)
  outputs.atomic_write(workdir / report_lib.REPORT, text)
  from experiments.run import results_data  # pylint: disable=g-import-not-at-top
  results_data.publish(workdir, 'successors', command)
  logging.info('report: %s', workdir / report_lib.REPORT)
  if copy_to:
    outputs.copy_report(workdir, pathlib.Path(copy_to))
  return failed
