#!/usr/bin/env bash
# Creates .venv (if missing), installs the pinned requirements, and makes
# MNIST available: $LAQ_JAX_DATA if it holds the files, else the user cache
# (downloaded there on first use by `python -m experiments.fetch_data`).
# Source it: `source scripts/setup.sh`.
# Another interpreter and pin set (scripts/ci_newest.sh): PYTHON,
# LAQ_JAX_VENV (default .venv) and LAQ_JAX_REQUIREMENTS (default
# requirements.txt).
set -e
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
VENV="${LAQ_JAX_VENV:-$ROOT/.venv}"
REQUIREMENTS="${LAQ_JAX_REQUIREMENTS:-$ROOT/requirements.txt}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.requirements.sha256"
WANT="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$REQUIREMENTS"
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$VENV/bin/python" -c "from laq_jax import data; data.find_mnist_dir()" 2>/dev/null; then
  "$VENV/bin/python" -m experiments.fetch_data
fi
cd "$ROOT"
set +e
