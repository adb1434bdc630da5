#!/usr/bin/env bash
# Creates .venv (if missing), installs the pinned requirements, and makes
# MNIST available: $LAQ_JAX_DATA if it holds the files, else the user cache
# (downloaded there on first use by `python -m experiments.fetch_data`).
# Source it: `source scripts/setup.sh`.
set -e
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/.venv"
fi
STAMP="$ROOT/.venv/.requirements.sha256"
WANT="$(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  "$ROOT/.venv/bin/python" -m pip install -q --upgrade pip
  "$ROOT/.venv/bin/python" -m pip install -q -r "$ROOT/requirements.txt"
  echo "$WANT" > "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! "$ROOT/.venv/bin/python" -c "from laq_jax import data; data.find_mnist_dir()" 2>/dev/null; then
  "$ROOT/.venv/bin/python" -m experiments.fetch_data
fi
cd "$ROOT"
set +e
