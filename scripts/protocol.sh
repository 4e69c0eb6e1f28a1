#!/bin/sh
# Issue 17's tier-1 runs, as pre-registered in docs/RESULTS.md, in two resumable chains (one thread each).
# Every command resumes where it stopped and skips finished runs, so rerunning this continues the protocol.
#   scripts/protocol.sh             both chains in the background, logs in runs/protocol-*.log
# Order: the full-protocol tuning first (Fashion-MNIST and CIFAR-10 with the ViT), then the reduced
# protocol (ListOps, detection with the XCiT trunk) with the best peer of the full protocol (BEST_PEER,
# default qk-norm: set it from runs/tune-*/final/holm.md once those finish). The long budget is
# scripts/long_budget.sh.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
[ -n "$SPECCOND_SRC" ] && export PYTHONPATH="$SPECCOND_SRC"
full_arms=baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,spectral-svd,qk-norm,sigma-reparam,sigma-reparam-all,spectral-norm
reduced_arms="baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,${BEST_PEER:-qk-norm}"
tune() { .venv/bin/speccond tune "$@"; }
chain_a() {
  tune --task fashion-mnist --val-size 6000 --arms "$full_arms" --out runs/tune-fashion-mnist &&
    tune --task lra-listops --val-size 800 --tuning-seeds 1 --arms "$reduced_arms" --out runs/tune-lra-listops
}
chain_b() {
  tune --task cifar10 --val-size 800 --arms "$full_arms" --out runs/tune-cifar10 &&
    tune --task fashion-scenes --model xcit-maskrcnn --val-size 200 --tuning-seeds 1 --arms "$reduced_arms" \
      --out runs/tune-detection
}
chain_a > runs/protocol-a.log 2>&1 &
chain_b > runs/protocol-b.log 2>&1 &
echo "started; progress in runs/protocol-a.log and runs/protocol-b.log"
