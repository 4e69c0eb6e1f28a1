#!/bin/sh
# The head-width-64 protocol (docs/RESULTS.md, "Pre-registered protocol at head width 64") is the config
# function harness/protocol/experiments/width64.py, run by `speccond protocol ... width64[-INSTANCE]`; this
# wrapper keeps the documented commands working with their environment:
#   scripts/protocol64.sh pilot|fashion-mnist|cifar10|publish|plan (default plan)
# PROTOCOL64_DEVICE=cuda: the GPU instance (width64-gpu); EPOCHS64=10: Fashion-MNIST at 10 epochs (-10ep);
# CHOICE64=gpu: the CPU final runs at the GPU instance's committed choice (width64-gpuchoice);
# PILOT_EPOCHS (10 or 30): which pilot; JOBS (--jobs, default 2); SMOKE64=1 (--smoke), RUNS64 (--runs) and
# KEPT64 (--results): a smoke test's tiny runs and scratch folders (scripts/gpu64.sh SMOKE=1).
# publish leaves a kept archive's manifest beside it, so the folder travels whole; before committing it, fold
# the manifest into the index: python -m speccond.harness.protocol.kept_runs fold docs/results
# (docs/RESULTS_LAYOUT.md).
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
. scripts/python_env.sh  # py: the interpreter (SPECCOND_PYTHON, else python3 on PATH)
for gone in ARMS64 EXTRA64 PILOT_EXTRA64; do
  eval "value=\${$gone:-}"
  [ -z "$value" ] || { echo "$gone is gone: SMOKE64=1 runs the protocol's smoke config (width64.py, smoke=True)" >&2; exit 2; }
done
case ${PROTOCOL64_DEVICE:-cpu} in
  cpu) name=width64 ;;
  cuda) name=width64-gpu ;;
  *) echo "PROTOCOL64_DEVICE must be cpu or cuda, got $PROTOCOL64_DEVICE" >&2; exit 2 ;;
esac
case ${CHOICE64:-own} in
  own) ;;
  gpu) [ "$name" = width64 ] && [ "${EPOCHS64:-5}" = 5 ] || { echo "CHOICE64=gpu runs on the CPU at 5 epochs only (PROTOCOL64_DEVICE=cpu, no EPOCHS64)" >&2; exit 2; }
       name=width64-gpuchoice ;;
  *) echo "CHOICE64 must be own or gpu, got $CHOICE64" >&2; exit 2 ;;
esac
case ${EPOCHS64:-5} in
  5) ;;
  10) name=$name-10ep ;;
  *) echo "EPOCHS64 must be 5 or 10 (the registered epochs), got $EPOCHS64" >&2; exit 2 ;;
esac
action=${1:-plan}
set -- --jobs "${JOBS:-2}" --runs "${RUNS64:-runs}" --results "${KEPT64:-docs/results}"
[ "${SMOKE64:-0}" = 0 ] || set -- "$@" --smoke
case $action in
  pilot) pilot=pilot; [ "${PILOT_EPOCHS:-10}" = 10 ] || pilot="pilot${PILOT_EPOCHS}ep"
         exec "$py" -m speccond protocol run "$name" "$pilot" "$@" ;;
  fashion-mnist|cifar10) exec "$py" -m speccond protocol run "$name" "$action" "$@" ;;
  publish|plan) exec "$py" -m speccond protocol "$action" "$name" "$@" ;;
  *) echo "usage: scripts/protocol64.sh pilot|fashion-mnist|cifar10|publish|plan" >&2; exit 2 ;;
esac
