#!/usr/bin/env bash
# Runs the test suite (sets up .venv, requirements and MNIST first).
# Usage: ./test.sh [extra pytest args]        e.g. ./test.sh -m "not slow"
#        ./test.sh tests/loop_test.py ...     named tests: one pytest process
#
# The whole suite runs as a few pytest processes over consecutive groups of
# test files (LAQ_JAX_TEST_GROUPS, default 3), not one: a single process that
# compiles every test's programs in turn grew until XLA's compiler crashed
# (SIGSEGV) near the end of the suite. Each group reports its own summary
# and slowest tests; the script fails if any group fails.
set -eo pipefail
source "$(dirname "$0")/scripts/setup.sh"
set -eo pipefail
for arg in "$@"; do
  case "$arg" in
    tests/*|./tests/*) exec python -m pytest -q -ra --durations=30 "$@" ;;
  esac
done
mapfile -t files < <(ls tests/*_test.py | sort)
groups="${LAQ_JAX_TEST_GROUPS:-3}"
n=${#files[@]}
status=0
for ((g = 0; g < groups; g++)); do
  start=$((g * n / groups))
  stop=$(((g + 1) * n / groups))
  chunk=("${files[@]:start:stop-start}")
  echo "== test group $((g + 1))/$groups: ${chunk[0]} .. ${chunk[-1]} (${#chunk[@]} files)"
  rc=0
  python -m pytest "${chunk[@]}" -q -ra --durations=15 "$@" || rc=$?
  # 5: no test of the group was selected (e.g. -m "not slow"): not a failure
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    echo "== test group $((g + 1))/$groups FAILED (exit $rc)"
    status=1
  fi
done
if [ "$status" -ne 0 ]; then
  echo "== some test group failed"
fi
exit "$status"
