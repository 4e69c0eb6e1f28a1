#!/bin/sh
# Issue 17's runs, as pre-registered in docs/RESULTS.md: one task at a time, two runs side by side
# (speccond tune --jobs 2, one thread each), so each task's protocol finishes before the next starts.
# Every command resumes where it stopped and skips finished runs, so rerunning this continues the protocol.
#   scripts/protocol.sh [tier1]     tier 1 in the background, progress in runs/protocol.log
#   scripts/protocol.sh tier2       tier 2 (the other CIFAR-10 families, detection with the ViT trunk)
#   scripts/protocol.sh report      tables of what has finished (runs/tune-*/tuning.md, final/holm.md); trains nothing
#   scripts/protocol.sh publish     report, then copy the tables and plots of runs/tune-* into docs/results/protocol-*
# Tier 1: the full-protocol tuning (Fashion-MNIST, then CIFAR-10, with the ViT), then the reduced protocol
# (ListOps, detection with the XCiT trunk) with the best peer of the full protocol (BEST_PEER, default
# qk-norm: set it from runs/tune-*/final/holm.md once those finish). The long budget is scripts/long_budget.sh.
# The language task (2 pre-training seeds per method) is not here yet: docs/RESULTS.md lists it as owed.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
[ -n "$SPECCOND_SRC" ] && export PYTHONPATH="$SPECCOND_SRC"
full_arms=baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,spectral-svd,qk-norm,sigma-reparam,sigma-reparam-all,spectral-norm
reduced_arms="baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,${BEST_PEER:-qk-norm}"
reduced="--tuning-seeds 1 --arms $reduced_arms"
# One line per task: its name (runs/tune-NAME, docs/results/protocol-NAME), then its speccond tune arguments.
tier1="fashion-mnist --task fashion-mnist --val-size 6000 --arms $full_arms
cifar10 --task cifar10 --val-size 800 --arms $full_arms
lra-listops --task lra-listops --val-size 800 $reduced
detection --task fashion-scenes --model xcit-maskrcnn --val-size 200 $reduced"
tier2="cifar10-swin --task cifar10 --model swin --val-size 800 $reduced
cifar10-xcit --task cifar10 --model xcit --val-size 800 $reduced
cifar10-xcit-noca --task cifar10 --model xcit-noca --val-size 800 $reduced
cifar10-davit --task cifar10 --model davit --val-size 800 $reduced
cifar10-deit --task cifar10 --model deit --val-size 800 $reduced
detection-vit --task fashion-scenes --model vit-maskrcnn --val-size 200 $reduced"

each() {  # each TASKS COMMAND...: COMMAND name arguments..., one task at a time, stopping at the first failure
  tasks=$1; shift
  echo "$tasks" | while read -r name arguments; do
    # shellcheck disable=SC2086  # the task's arguments are words
    "$@" "$name" $arguments || exit 1
  done
}
tune() { name=$1; shift; .venv/bin/speccond tune --jobs "${JOBS:-2}" --out "runs/tune-$name" "$@"; }
report() { name=$1; shift; [ ! -d "runs/tune-$name" ] || .venv/bin/speccond tune --out "runs/tune-$name" "$@" --stage report; }
publish() {
  name=$1; shift
  report "$name" "$@" || return 1
  [ -f "runs/tune-$name/tuning.md" ] || return 0
  target="docs/results/protocol-$name"
  mkdir -p "$target/final"
  cp runs/tune-"$name"/tuning.md runs/tune-"$name"/tuning.png "$target/"
  [ ! -f "runs/tune-$name/choice.json" ] || cp "runs/tune-$name/choice.json" "$target/"
  for file in holm.md holm.json results.md results.json comparison.png kappa.png; do
    [ ! -f "runs/tune-$name/final/$file" ] || cp "runs/tune-$name/final/$file" "$target/final/"
  done
  echo "published $target"
}
case "${1:-tier1}" in
  tier1) tasks=$tier1 ;;
  tier2) tasks=$tier2 ;;
  report) each "$tier1
$tier2" report; exit $? ;;
  publish) each "$tier1
$tier2" publish; exit $? ;;
  *) echo "usage: scripts/protocol.sh [tier1|tier2|report|publish]" >&2; exit 2 ;;
esac
mkdir -p runs
each "$tasks" tune > "runs/protocol-${1:-tier1}.log" 2>&1 &
echo "started; progress in runs/protocol-${1:-tier1}.log; tables so far: scripts/protocol.sh report"
