#!/usr/bin/env bash
# The main job: the paper's LAQ-vs-baselines comparison on MNIST, quick budget
# by default (a few minutes on a 2-core CPU). Sets up .venv, requirements and
# MNIST first. Results: runs/quick/REPORT.md and its figures.
#   ./run.sh            quick comparison into runs/quick
#   ./run.sh --full     the full reproduction into runs/paper (one to a few hours on 2 cores)
set -eo pipefail
source "$(dirname "$0")/scripts/setup.sh"
set -eo pipefail
if [ "${1:-}" = "--full" ]; then
  shift
  python -m experiments.reproduce --workdir runs/paper "$@"
  echo "Report: runs/paper/REPORT.md"
else
  python -m experiments.reproduce --quick --workdir runs/quick "$@"
  echo "Report: runs/quick/REPORT.md"
fi
