#!/bin/sh
# Issue 17's tier-1 runs, as pre-registered in docs/RESULTS.md: one task at a time, two runs side by side
# (speccond tune --jobs 2, one thread each), so each task's protocol finishes before the next starts.
# Every command resumes where it stopped and skips finished runs, so rerunning this continues the protocol.
#   scripts/protocol.sh             in the background, progress in runs/protocol.log
#   scripts/protocol.sh report      tables of what has finished (runs/tune-*/tuning.md, final/holm.md); trains nothing
# Order: the full-protocol tuning (Fashion-MNIST, then CIFAR-10, with the ViT), then the reduced protocol
# (ListOps, detection with the XCiT trunk) with the best peer of the full protocol (BEST_PEER, default
# qk-norm: set it from runs/tune-*/final/holm.md once those finish). The long budget is scripts/long_budget.sh.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
[ -n "$SPECCOND_SRC" ] && export PYTHONPATH="$SPECCOND_SRC"
full_arms=baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,spectral-svd,qk-norm,sigma-reparam,sigma-reparam-all,spectral-norm
reduced_arms="baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,${BEST_PEER:-qk-norm}"
fashion="--task fashion-mnist --val-size 6000 --arms $full_arms --out runs/tune-fashion-mnist"
cifar="--task cifar10 --val-size 800 --arms $full_arms --out runs/tune-cifar10"
listops="--task lra-listops --val-size 800 --tuning-seeds 1 --arms $reduced_arms --out runs/tune-lra-listops"
detection="--task fashion-scenes --model xcit-maskrcnn --val-size 200 --tuning-seeds 1 --arms $reduced_arms --out runs/tune-detection"
if [ "$1" = report ]; then
  for task in "$fashion" "$cifar" "$listops" "$detection"; do
    out=${task##* }
    # shellcheck disable=SC2086  # the task's arguments are words
    [ -d "$out" ] && .venv/bin/speccond tune $task --stage report
  done
  exit 0
fi
protocol() {
  for task in "$fashion" "$cifar" "$listops" "$detection"; do
    # shellcheck disable=SC2086
    .venv/bin/speccond tune --jobs "${JOBS:-2}" $task || return 1
  done
}
mkdir -p runs
protocol > runs/protocol.log 2>&1 &
echo "started; progress in runs/protocol.log; tables so far: scripts/protocol.sh report"
