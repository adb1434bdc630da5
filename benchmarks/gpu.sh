#!/usr/bin/env bash
# The whole GPU run in one script, for a machine without network access that
# has JAX with CUDA preinstalled (e.g. JAX 0.11, CUDA 13, Python 3.12, with
# flax, optax, orbax, absl-py, matplotlib, scikit-learn and rich).
#
#   benchmarks/gpu.sh OUTDIR [--tiny] [--budget SECONDS] [--wheels DIR]
#                    [--pfl-wheels DIR] [--data DIR] [--work DIR]
#                    [--skip STEP,...]
#   benchmarks/gpu.sh --download-wheels DIR    # on a machine with a registry
#
# It uses the machine's own JAX (never installs one), installs the few
# pure-Python packages such a machine lacks (ml_collections, tensorboardX)
# from the wheel folder --wheels names into a private folder, and runs, each
# timed, into OUTDIR (11 files):
#   env.txt          python, jax and device description
#   estimate.md      the FLOP-count estimate of this run (gpu_estimate.py)
#   bench.json       benchmarks/run.py (its table is in gpu.log)
#   cost.json        benchmarks/cost.py: layouts, cost against N, G, P
#   models.json      benchmarks/models.py: each workload's model (CNNs,
#                    ResNet-20, the LSTM) per iteration against its floor
#   floors.json      benchmarks/floors.py: the minibatch experiments against
#                    their floors, with a profile by part
#   participants.json benchmarks/participants.py: a round of S of 1,000
#                    clients against S clients in all
#   peers.json       benchmarks/peers.py: laq-jax's FedAvg runs (logistic
#                    regression, the CNN) of the comparison with Flower
#                    (Flower's with FLOWER_PYTHON)
#   pfl.json         benchmarks/peers.py --tasks cifar: pfl-research's
#                    CIFAR-10 FedAvg benchmark side by side (1,000 clients,
#                    PFL_ROUNDS rounds, default 20), pfl run by the
#                    machine's own PyTorch with pfl's wheels from
#                    --pfl-wheels DIR (--download-wheels puts them in
#                    DIR/pfl), or by PFL_PYTHON; without either the step is
#                    skipped (said, not a failure), and --tiny skips it
#   paper_REPORT.md  experiments.reproduce at full budget, the network at
#                    its 8,000 full-batch iterations
#   family_REPORT.md experiments.family at full budget (network: 8,000)
#   workloads_REPORT.md experiments.workloads at its CPU budget (Fashion-
#                    MNIST's and Shakespeare's files must be in the user
#                    cache or LAQ_JAX_DATA's folder: docs/algorithm.md,
#                    "Datasets"; without them the step fails, logged)
#   gpu.log          everything printed, with each step's wall time
# Figures and the runs' files stay in --work (default: a temporary folder).
# The steps run in this order: estimate, paper, family, models, floors,
# bench, cost, participants, peers, pfl, workloads; what each prints goes to the
# console (stderr) as well as gpu.log. --budget SECONDS runs a step only
# when its expected seconds (EXPECT_FULL / EXPECT_TINY below) fit the time
# left, skipping the rest with a line that says so, and cuts a step that
# overruns at the budget (logged as CUT; e.g. --budget 540 in a 10-minute
# call). --tiny runs the same steps at the smallest budgets (minutes on a
# CPU; the test suite runs it, skipping floors, participants, peers, pfl, paper,
# family and workloads). --skip leaves steps out, e.g. those a first try
# finished. MNIST: --data, or LAQ_JAX_DATA, or the user cache. A failed
# step is logged and the next one runs; the exit status is 1 if any failed
# or was cut (a step skipped for the budget is not a failure).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
PACKAGES=(ml_collections tensorboardX)
PINS=(ml_collections==1.1.0 tensorboardX==2.6.5)  # as requirements.txt
# pfl-research (benchmarks/peers.py's venv: pfl 0.6.0) and its dependencies
# a JAX image may lack, as distribution:module
PFL_PINS=(pfl==0.6.0 dp-accounting==0.5.1 prv-accountant==0.2.0
          multiprocess==0.70.19 dill==0.4.1 attrs==23.2.0 packaging==25.0)
PFL_MODULES=(pfl:pfl dp-accounting:dp_accounting prv-accountant:prv_accountant
             multiprocess:multiprocess dill:dill attrs:attr packaging:packaging)

usage() { sed -n '2,55p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

if [ "${1:-}" = "--download-wheels" ]; then
  [ -n "${2:-}" ] || usage
  mkdir -p "$2"
  "$PYTHON" -m pip download --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform any \
    --platform manylinux2014_x86_64 -d "$2" "${PINS[@]}" || exit 1
  # pfl and what it needs beyond the image's numpy, scipy and PyTorch
  exec "$PYTHON" -m pip download --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform any \
    --platform manylinux2014_x86_64 -d "$2/pfl" "${PFL_PINS[@]}"
fi

OUT="" TINY=0 WHEELS="" DATA="${LAQ_JAX_DATA:-}" WORK="" SKIP="" BUDGET=""
PFL_WHEELS=""
STEPS=(estimate paper family models floors bench cost participants peers pfl
       workloads)
while [ $# -gt 0 ]; do
  case "$1" in
    --tiny) TINY=1 ;;
    --skip) SKIP=",${2:?--skip needs steps, e.g. paper,family},"; shift
       for s in ${SKIP//,/ }; do
         [[ " ${STEPS[*]} " == *" $s "* ]] || {
           echo "error: --skip $s: no such step (steps: ${STEPS[*]})" >&2; exit 2; }
       done ;;
    --budget) BUDGET="${2:?--budget needs seconds}"; shift
       [[ "$BUDGET" =~ ^[0-9]+$ ]] && [ "$BUDGET" -ge 1 ] || {
         echo "error: --budget $BUDGET: not allowed (a whole number of seconds, at least 1)" >&2; exit 2; } ;;
    --wheels) WHEELS="${2:?--wheels needs a folder}"; shift ;;
    --pfl-wheels) PFL_WHEELS="${2:?--pfl-wheels needs a folder}"; shift ;;
    --data) DATA="${2:?--data needs a folder}"; shift ;;
    --work) WORK="${2:?--work needs a folder}"; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "error: unknown option $1 (allowed: --tiny, --budget SECONDS, --wheels DIR, --pfl-wheels DIR, --data DIR, --work DIR, --skip STEPS, --download-wheels DIR)" >&2; exit 2 ;;
    *) [ -z "$OUT" ] || { echo "error: one OUTDIR only (got $OUT and $1)" >&2; exit 2; }
       OUT="$1" ;;
  esac
  shift
done
[ -n "$OUT" ] || usage
mkdir -p "$OUT" || exit 1
OUT="$(cd "$OUT" && pwd)"
WORK="${WORK:-$(mktemp -d)}"
mkdir -p "$WORK" || exit 1
WORK="$(cd "$WORK" && pwd)"  # (the pfl wrapper runs from another folder)
LOG="$OUT/gpu.log"
: > "$LOG"
say() { echo "[gpu.sh $(date -u +%H:%M:%S)] $*" | tee -a "$LOG" >&2; }

# The packages this JAX machine lacks, from the wheel folder.
missing=()
for p in "${PACKAGES[@]}"; do
  "$PYTHON" -c "import $p" 2>/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ -z "$WHEELS" ]; then
    say "error: missing ${missing[*]} and no --wheels DIR; make one on a machine with a registry: benchmarks/gpu.sh --download-wheels DIR"
    exit 1
  fi
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --target "$WORK/site" "$WHEELS"/*.whl >>"$LOG" 2>&1 \
    || { say "error: installing the wheels in $WHEELS failed (see $LOG)"; exit 1; }
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  for p in "${missing[@]}"; do
    "$PYTHON" -c "import $p" 2>>"$LOG" \
      || { say "error: $p still missing after installing $WHEELS"; exit 1; }
  done
  say "installed from $WHEELS: ${missing[*]}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
[ -n "$DATA" ] && export LAQ_JAX_DATA="$DATA"
export PYTHONUNBUFFERED=1
cd "$ROOT" || exit 1

"$PYTHON" - >"$OUT/env.txt" 2>>"$LOG" <<'EOF'
import platform, jax, jaxlib
print('python', platform.python_version(), platform.platform())
print('jax', jax.__version__, 'jaxlib', jaxlib.__version__,
      'backend', jax.default_backend())
for d in jax.devices():
  print('device', d.platform, getattr(d, 'device_kind', ''))
from laq_jax import data
print('mnist', data.find_mnist_dir())
EOF
if [ $? -ne 0 ]; then
  say "error: JAX or MNIST not usable (see $LOG); MNIST: --data DIR or LAQ_JAX_DATA"
  exit 1
fi
cat "$OUT/env.txt" | tee -a "$LOG" >&2

# Each step's expected seconds. Full budget, on one H200: the paper as
# measured there at 4e7d038 (204 s of experiments, issue 53), the family
# from its sweeps measured there (134 s) with start-up, floors, participants
# and peers from estimate.md's rows, the rest rough guesses. --tiny: rough,
# on a 2-core CPU. --budget runs a step only when its expectation fits the
# seconds left, and cuts it at them.
declare -A EXPECT_FULL=([estimate]=15 [paper]=260 [family]=200 [models]=90
  [floors]=100 [bench]=60 [cost]=90 [participants]=250 [peers]=90
  [pfl]=240 [workloads]=300)
declare -A EXPECT_TINY=([estimate]=15 [paper]=150 [family]=150 [models]=90
  [floors]=60 [bench]=60 [cost]=90 [participants]=60 [peers]=60 [pfl]=0
  [workloads]=150)
START=$SECONDS
failed=() ran=()
fits() {  # fits NAME: true when its expected seconds (EXPECT) fit the
  # seconds left of --budget (LEFT); always without a budget
  [ -n "$BUDGET" ] || return 0
  if [ $TINY = 1 ]; then EXPECT=${EXPECT_TINY[$1]}; else EXPECT=${EXPECT_FULL[$1]}; fi
  LEFT=$((BUDGET - (SECONDS - START)))
  [ "$EXPECT" -le "$LEFT" ]
}
step() {  # step NAME COMMAND...
  local name="$1" start=$SECONDS rc; shift
  if [[ "$SKIP" == *",$name,"* ]]; then say "skipped $name"; return; fi
  if [ -n "$BUDGET" ]; then
    if ! fits "$name"; then
      say "skipped $name: expects ~$EXPECT s, $LEFT s of --budget $BUDGET left"
      return
    fi
    say "start $name (expects ~$EXPECT s, $LEFT s left): $*"
    # the step's output to the console as well as the log; cut at the budget
    timeout --kill-after=20 "$LEFT" "$@" 2>&1 | tee -a "$LOG" >&2
    rc=${PIPESTATUS[0]}
  else
    say "start $name: $*"
    "$@" 2>&1 | tee -a "$LOG" >&2
    rc=${PIPESTATUS[0]}
  fi
  if [ "$rc" = 0 ]; then
    say "done $name in $((SECONDS - start)) s"
    ran+=("$name")
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "CUT $name at the --budget after $((SECONDS - start)) s (what it finished stays in $WORK)"
    failed+=("$name")
  else
    say "FAILED $name (exit $rc) after $((SECONDS - start)) s"
    failed+=("$name")
  fi
}

# The Python that runs pfl's side: PFL_PYTHON, else the machine's own with
# pfl's wheels (the distributions it lacks) from --pfl-wheels in a folder of
# their own on its path; empty when neither is given; fails (said) when
# pfl or PyTorch will not import.
pfl_python() {
  if [ -n "${PFL_PYTHON:-}" ]; then echo "$PFL_PYTHON"; return; fi
  [ -n "$PFL_WHEELS" ] || return 0
  local site="$WORK/pfl_site" need=() entry
  for entry in "${PFL_MODULES[@]}"; do
    "$PYTHON" -c "import ${entry#*:}" 2>/dev/null || need+=("${entry%%:*}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --find-links "$PFL_WHEELS" --target "$site" "${need[@]}" >>"$LOG" 2>&1 \
      || { say "FAILED pfl: installing ${need[*]} from $PFL_WHEELS (see $LOG)"; return 1; }
  fi
  printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' \
    "$site" "$(command -v "$PYTHON")" > "$WORK/pfl_python"
  chmod +x "$WORK/pfl_python"
  "$WORK/pfl_python" -c "import pfl, torch" >>"$LOG" 2>&1 \
    || { say "FAILED pfl: pfl or PyTorch will not import with $PFL_WHEELS (see $LOG)"; return 1; }
  echo "$WORK/pfl_python"
}

# The steps in ORDER: the estimate (seconds), then the paper, then the rest.
step_command() {  # step_command NAME: runs `step NAME ...` at this budget
  local t=$TINY
  case "$1" in
    estimate) step estimate "$PYTHON" benchmarks/gpu_estimate.py --out "$OUT/estimate.md" ;;
    paper) if [ $t = 1 ]; then
        step paper "$PYTHON" -m experiments.reproduce --workdir "$WORK/paper" --tiny \
          --only logreg --nocrosscheck --noauthors_code
      else
        step paper "$PYTHON" -m experiments.reproduce --workdir "$WORK/paper" \
          --mlp_iters 8000
      fi ;;
    family) if [ $t = 1 ]; then
        step family "$PYTHON" -m experiments.family --workdir "$WORK/family" --tiny
      else
        step family "$PYTHON" -m experiments.family --workdir "$WORK/family" \
          --network_iters 8000
      fi ;;
    bench) if [ $t = 1 ]; then
        step bench "$PYTHON" benchmarks/cost.py --quick --only layouts --out "$OUT/bench.json"
      else
        step bench "$PYTHON" benchmarks/run.py --out "$OUT/bench.json"
      fi ;;
    cost) if [ $t = 1 ]; then
        step cost "$PYTHON" benchmarks/cost.py --quick --only cost --out "$OUT/cost.json"
      else
        step cost "$PYTHON" benchmarks/cost.py --out "$OUT/cost.json"
      fi ;;
    models) if [ $t = 1 ]; then
        step models "$PYTHON" benchmarks/models.py --quick --only logreg,lasg_cnn \
          --out "$OUT/models.json"
      else
        step models "$PYTHON" benchmarks/models.py --out "$OUT/models.json"
      fi ;;
    floors) if [ $t = 1 ]; then
        step floors "$PYTHON" benchmarks/floors.py --iters 10 --repeats 1 \
          --only logreg_stochastic --out "$OUT/floors.json"
      else
        step floors "$PYTHON" benchmarks/floors.py --out "$OUT/floors.json"
      fi ;;
    participants) if [ $t = 1 ]; then
        step participants "$PYTHON" benchmarks/participants.py --quick --rounds 2 \
          --out "$OUT/participants.json"
      else
        step participants "$PYTHON" benchmarks/participants.py \
          --out "$OUT/participants.json"
      fi ;;
    peers) if [ $t = 1 ]; then
        step peers "$PYTHON" benchmarks/peers.py --rounds 2 --models logreg --out "$OUT/peers.json"
      else
        # laq-jax's side of the comparison with Flower (FLOWER_PYTHON: add its)
        step peers "$PYTHON" benchmarks/peers.py --out "$OUT/peers.json"
      fi ;;
    pfl) local py
      if [[ "$SKIP" == *",pfl,"* ]]; then say "skipped pfl"; return; fi
      if [ $t = 1 ]; then say "skipped pfl: --tiny (pfl-research's comparison runs at full budget only)"; return; fi
      # (the budget first: a step that does not fit installs nothing)
      if ! fits pfl; then step pfl true; return; fi
      py="$(pfl_python)" || { failed+=(pfl); return; }
      if [ -z "$py" ]; then
        say "skipped pfl: no --pfl-wheels DIR and no PFL_PYTHON (pfl-research is no dependency of laq-jax)"
        return
      fi
      step pfl "$PYTHON" benchmarks/peers.py --tasks cifar --pfl_python "$py" \
        --pfl_clients 1000 --pfl_rounds "${PFL_ROUNDS:-20}" --out "$OUT/pfl.json" ;;
    workloads) if [ $t = 1 ]; then
        step workloads "$PYTHON" -m experiments.workloads --workdir "$WORK/workloads" \
          --tiny
      else
        step workloads "$PYTHON" -m experiments.workloads --workdir "$WORK/workloads"
      fi ;;
  esac
}
ORDER=(estimate paper family models floors bench cost participants peers pfl
       workloads)
for name in "${ORDER[@]}"; do step_command "$name"; done
for name in paper family workloads; do
  [[ " ${ran[*]} " == *" $name "* ]] || continue
  cp "$WORK/$name/REPORT.md" "$OUT/${name}_REPORT.md" 2>>"$LOG" \
    || failed+=("${name}_report")
done
say "total ${SECONDS} s; results in $OUT; runs and figures in $WORK"
if [ ${#failed[@]} -gt 0 ]; then
  say "failed steps: ${failed[*]}"
  exit 1
fi
