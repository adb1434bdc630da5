#!/usr/bin/env bash
# Builds the API reference (Sphinx: autodoc, autosummary, napoleon, MyST for
# the Markdown pages of docs/) into docs/_build/html. Every warning is an
# error: the script exits non-zero on any.
# Usage: scripts/docs.sh [extra sphinx-build args]     e.g. scripts/docs.sh -E
#        scripts/docs.sh --examples   the HTML, then every example of the
#                                     API pages run (sphinx's doctest
#                                     builder; a few minutes on 2 cores)
# Python: the active virtualenv's, else the checkout's .venv, else python3;
# requirements-docs.txt is installed into it when Sphinx is missing
# (requirements.txt too when laq_jax's dependencies are).
set -eo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then PY="$VIRTUAL_ENV/bin/python"
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
examples=0
args=()
for arg in "$@"; do
  if [ "$arg" = --examples ]; then examples=1; else args+=("$arg"); fi
done
if ! "$PY" -c 'import jax, flax, optax, ml_collections' 2>/dev/null; then
  "$PY" -m pip install -q -r requirements.txt
fi
if ! "$PY" -c 'import sphinx, myst_parser, furo' 2>/dev/null; then
  "$PY" -m pip install -q -r requirements-docs.txt
fi
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
start=$(date +%s.%N)
"$PY" -m sphinx -W --keep-going -b html docs docs/_build/html "${args[@]}"
end=$(date +%s.%N)
echo "docs: HTML built in $(awk "BEGIN {printf \"%.1f\", $end - $start}") s: docs/_build/html/index.html"
if [ "$examples" = 1 ]; then
  # The data page's examples read MNIST as the library finds it; CI's copy
  # lies beside the checkout.
  if [ -z "${LAQ_JAX_DATA:-}" ] && [ -d ../shared/data/mnist ]; then
    export LAQ_JAX_DATA="$(cd ../shared/data/mnist && pwd)"
  fi
  # The suite's persistent compilation cache (tests/common.py,
  # .cache/jax/): the examples' programs compile once per CI run, and not
  # again where the tests compiled them.
  cache="$("$PY" -c 'from tests import common; print(common.compile_cache_dir() or "")' 2>/dev/null || true)"
  if [ -n "$cache" ]; then
    mkdir -p "$cache"
    export JAX_COMPILATION_CACHE_DIR="$cache" \
      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1
  fi
  start=$(date +%s.%N)
  "$PY" -m sphinx -W --keep-going -b doctest docs docs/_build/doctest "${args[@]}"
  end=$(date +%s.%N)
  echo "docs: examples ran in $(awk "BEGIN {printf \"%.1f\", $end - $start}") s"
fi
