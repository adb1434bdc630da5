#!/usr/bin/env bash
# The fast tier on Python 3.12 with the newest JAX the registry serves
# (requirements-newest.txt), in .venv312, beside the pinned 3.11 suite.
# Python 3.12: pyenv's, else python3.12 on PATH; none: skipped (exit 0).
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY312="$(ls -d /root/.pyenv/versions/3.12*/bin/python 2>/dev/null | tail -n 1 || true)"
if [ -z "$PY312" ]; then PY312="$(command -v python3.12 || true)"; fi
if [ -z "$PY312" ]; then
  echo "ci_newest: skipped: no Python 3.12 (pyenv or python3.12 on PATH)"
  exit 0
fi
echo "== the fast tier on $("$PY312" --version) with requirements-newest.txt"
start=$(date +%s)
rc=0
PYTHON="$PY312" LAQ_JAX_VENV="$ROOT/.venv312" \
  LAQ_JAX_REQUIREMENTS="$ROOT/requirements-newest.txt" \
  ./test.sh -m "not slow" "$@" || rc=$?
echo "== ci_newest: $(( $(date +%s) - start )) s, exit $rc"
exit "$rc"
