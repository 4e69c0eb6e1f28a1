#!/bin/sh
# The fair comparison (docs/RESULTS.md, "Pre-registered protocol of the fair comparison") is the config
# function harness/protocol/experiments/fair.py, run by `speccond protocol ... fair`; this wrapper keeps the
# documented commands working, with BEST_PEER (--peer), XCA_PEER (--xca-peer) and JOBS (--jobs, default 2).
#   scripts/protocol.sh [tier1|tier2|language]  the stage in the background, progress in runs/protocol-STAGE.log
#   scripts/protocol.sh plan|list STAGE          speccond protocol plan|list fair STAGE (tier1, full, reduced, tier2, language)
#   scripts/protocol.sh report|publish           speccond protocol report|publish fair
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
. scripts/python_env.sh  # py: the interpreter (SPECCOND_PYTHON, else python3 on PATH)
action=${1:-tier1}
set -- "$action" "$2" --jobs "${JOBS:-2}" ${BEST_PEER:+--peer "$BEST_PEER"} ${XCA_PEER:+--xca-peer "$XCA_PEER"}
case $action in
  tier1|tier2|language) mkdir -p runs
    shift 2; "$py" -m speccond protocol run fair "$action" "$@" > "runs/protocol-$action.log" 2>&1 &
    echo "started; progress in runs/protocol-$action.log; tables so far: scripts/protocol.sh report" ;;
  list|plan) [ -n "$2" ] || { echo "usage: scripts/protocol.sh $action tier1|full|reduced|tier2|language" >&2; exit 2; }
    stage=$2; shift 2; exec "$py" -m speccond protocol "$action" fair "$stage" "$@" ;;
  report|publish) shift 2; exec "$py" -m speccond protocol "$action" fair "$@" ;;
  *) echo "usage: scripts/protocol.sh [tier1|tier2|language|list TIER|plan TIER|report|publish]" >&2; exit 2 ;;
esac
