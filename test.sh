#!/usr/bin/env bash
# Runs the test suite (sets up .venv, requirements and MNIST first).
# Usage: ./test.sh [extra pytest args]
set -eo pipefail
source "$(dirname "$0")/scripts/setup.sh"
set -eo pipefail
python -m pytest tests -q -ra --durations=30 "$@"
