#!/bin/sh
# The small-scale vision reproductions of docs/RESULTS.md (issue 5). Run both side by side, one thread
# each (about 1.5 hours each on 2 cores); every run resumes where it stopped, finished runs are skipped.
#   scripts/reproduce.sh fashion    Fashion-MNIST, ViT, all 7 methods, 3 seeds, full preset
#   scripts/reproduce.sh cifar      CIFAR-10 (offline test-set split), 5 timm families, baseline vs spectral
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
# SPECCOND_SRC: run from a frozen checkout (e.g. a git worktree) while the working tree changes
[ -n "$SPECCOND_SRC" ] && export PYTHONPATH="$SPECCOND_SRC"
if [ "$1" = fashion ]; then
  .venv/bin/speccond compare --task fashion-mnist --preset full --seeds 3 --out runs/fashion-mnist-full \
    --methods baseline,spectral,spectral-svd,shifted-init,sigma-reparam,spectral-norm,qk-norm --set track_every=100
else
  for family in vit deit xcit davit swin; do
    patch=4; [ $family = swin ] && patch=8
    .venv/bin/speccond compare --task cifar10 --model $family --preset full --seeds 3 --out runs/cifar10-$family \
      --methods baseline,spectral --set patch_size=$patch --set track_every=50
  done
fi
