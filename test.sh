#!/usr/bin/env bash
# Runs the test suite (sets up .venv, requirements and MNIST first).
# Usage: ./test.sh [extra pytest args]        e.g. ./test.sh -m "not slow"
#        ./test.sh tests/loop_test.py ...     named tests: one pytest process
#
# The whole suite runs as several pytest processes over groups of test files
# balanced by their recorded times (tests/timings.json), two at a time on two
# cores (scripts/run_tests.py; LAQ_JAX_TEST_JOBS sets how many), never as one
# process: one that compiled every test's programs in turn grew until XLA's
# compiler crashed (SIGSEGV). Every process the tests start shares JAX's
# persistent compilation cache in .cache/jax/ (tests/conftest.py), so a
# program is compiled once per run of the suite. At the end: each group's
# time, the 30 slowest tests, the time spent tracing, lowering and compiling
# per module, and the budgets of tests/BUDGETS.md ("BUDGET EXCEEDED" is a
# note, not a failure). The exit status is 1 when any group failed.
set -eo pipefail
source "$(dirname "$0")/scripts/setup.sh"
set -eo pipefail
for arg in "$@"; do
  case "$arg" in
    tests/*|./tests/*) exec python -m pytest -q -ra --durations=30 "$@" ;;
  esac
done
exec python scripts/run_tests.py "$@"
