#!/usr/bin/env bash
# The fast tier (-m "not slow") on Python 3.12 with the newest JAX the
# registry serves (requirements-newest.txt), in .venv312, beside the pinned
# Python 3.11 / JAX 0.10.2 suite (requirements.txt, .venv). CI runs it after
# the main suite. Python 3.12: pyenv's newest 3.12.x, else python3.12 on
# PATH; none: skipped (exit 0). Exit status: the fast tier's (as ./test.sh).
# Usage: scripts/ci_newest.sh [extra pytest args]
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY312="$(ls -d /root/.pyenv/versions/3.12*/bin/python 2>/dev/null \
         | sort -V | tail -n 1 || true)"
if [ -z "$PY312" ]; then PY312="$(command -v python3.12 || true)"; fi
if [ -z "$PY312" ]; then
  echo "ci_newest: skipped: no Python 3.12 (/root/.pyenv/versions/3.12*," \
       "python3.12 on PATH)"
  exit 0
fi
# MNIST: as .ci/run, the copy beside the checkout when there is one.
if [ -z "${LAQ_JAX_DATA:-}" ] && [ -d ../shared/data/mnist ]; then
  export LAQ_JAX_DATA="$(cd ../shared/data/mnist && pwd)"
fi
echo "== ci_newest: the fast tier on $("$PY312" --version) ($PY312)" \
     "with requirements-newest.txt in .venv312"
start=$(date +%s)
# A .venv312 of another interpreter (a 3.12.x since removed): made anew.
want="$("$PY312" -c 'import sys; print(sys.version_info[:2])')"
if [ -x .venv312/bin/python ] && [ "$(.venv312/bin/python -c \
    'import sys; print(sys.version_info[:2])' 2>/dev/null)" != "$want" ]; then
  rm -rf .venv312
fi
rc=0
# scripts/setup.sh (sourced by ./test.sh) makes the venv with $PYTHON and
# installs the pins named by LAQ_JAX_REQUIREMENTS into LAQ_JAX_VENV: once
# here, timed apart, then a no-op in ./test.sh. The fast tier's programs go
# to a compilation cache of their own (tests/conftest.py: the folder names
# the JAX version).
export PYTHON="$PY312" LAQ_JAX_VENV="$ROOT/.venv312" \
  LAQ_JAX_REQUIREMENTS="$ROOT/requirements-newest.txt"
(source scripts/setup.sh) || rc=$?
echo "== ci_newest: install $(( $(date +%s) - start )) s, exit $rc"
# At XLA's default optimization level (LAQ_JAX_TEST_OPTIMIZE=1): the 3.11
# suite compiles its in-process programs at -O0 (tests/conftest.py), so the
# fast tests' programs compiled as a user's are, on the newest JAX, here.
if [ "$rc" = 0 ]; then
  LAQ_JAX_TEST_OPTIMIZE=1 ./test.sh -m "not slow" "$@" || rc=$?
fi
echo "== ci_newest: $(( $(date +%s) - start )) s, exit $rc"
exit "$rc"
