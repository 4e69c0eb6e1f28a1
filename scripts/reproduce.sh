#!/bin/sh
# The small-scale vision reproductions of docs/RESULTS.md. Run both side by side, one thread
# each (about 1.5 hours each on 2 cores); every run resumes where it stopped, finished runs are skipped.
#   scripts/reproduce.sh fashion    Fashion-MNIST, ViT, all 7 methods, 3 seeds, full preset
#   scripts/reproduce.sh cifar      CIFAR-10 (offline test-set split), 5 timm families, baseline vs spectral
#   scripts/reproduce.sh lra        LRA, Nystromformer: the five tasks' quick comparisons (about an hour), then
#                                   ListOps full (1,250 steps a run, 20 to 40 min): baseline, spectral, the
#                                   peers and lam = auto, 3 seeds each
#   scripts/reproduce.sh language   Crammed BERT -> GLUE at small scale: MLM pre-training per method (1 seed,
#                                   about 15 min each), then the four glue-* tasks fine-tuned from it (3 seeds,
#                                   about 10 min per method and seed), then the GLUE-like table
#                                   (runs/language-full/glue.md). PRESET=quick: minutes in all; SEEDS=5 the paper's count; METHODS=... adds
#                                   peers (any of speccond.harness.methods.METHODS).
#   scripts/reproduce.sh language-peers  the same with baseline, lam = 10, lam = auto and the three peers, each
#                                   pre-trained on its own (PRESET=quick by default: about 50 min in all)
#   scripts/reproduce.sh detection  Mask R-CNN on fashion-scenes, baseline vs lam = 10, 3 seeds: the XCiT trunk
#                                   (about an hour), then the ViT trunk (about an hour)
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
. scripts/python_env.sh
if [ "$1" = fashion ]; then
  speccond compare --task fashion-mnist --preset full --seeds 3 --out runs/fashion-mnist-full \
    --methods baseline,spectral,spectral-svd,shifted-init,sigma-reparam,spectral-norm,qk-norm --set track_every=100
elif [ "$1" = lra ]; then
  for task in listops retrieval pathfinder image text; do
    speccond compare --task lra-$task --preset quick --seeds 3 --out runs/lra-$task-quick \
      --methods baseline,spectral || exit 1
  done
  full() { speccond compare --task lra-listops --preset full --seeds 3 --out runs/lra-listops-full "$@"; }
  full --methods baseline,spectral && full --methods spectral-svd,qk-norm,sigma-reparam,spectral-norm &&
    full --methods spectral --sweep lam=auto
elif [ "$1" = language ]; then
  preset=${PRESET:-full}
  methods=${METHODS:-baseline,spectral}
  speccond compare --task mlm --preset "$preset" --seeds 1 --out "runs/language-mlm-$preset" \
    --methods "$methods" || exit 1
  for task in sst2 cola mrpc rte; do
    speccond compare --task "glue-$task" --preset "$preset" --seeds "${SEEDS:-3}" --out "runs/glue-$task-$preset" \
      --methods "$methods" --set "init_from=runs/language-mlm-$preset/{method}/seed-0" || exit 1
  done
  speccond report --glue "runs/glue-sst2-$preset" "runs/glue-cola-$preset" "runs/glue-mrpc-$preset" \
    "runs/glue-rte-$preset" "runs/language-mlm-$preset" --out "runs/language-$preset"
elif [ "$1" = language-peers ]; then
  preset=${PRESET:-quick}
  peers=baseline,spectral,qk-norm,sigma-reparam,spectral-norm
  speccond compare --task mlm --preset "$preset" --seeds 1 --out "runs/language-mlm-$preset" --methods $peers &&
    speccond compare --task mlm --preset "$preset" --seeds 1 --out "runs/language-mlm-$preset" --methods spectral \
      --sweep lam=auto || exit 1
  for task in sst2 cola mrpc rte; do
    speccond compare --task "glue-$task" --preset "$preset" --seeds 3 --out "runs/glue-$task-$preset" \
      --methods $peers --set "init_from=runs/language-mlm-$preset/{method}/seed-0" || exit 1
    speccond compare --task "glue-$task" --preset "$preset" --seeds 3 --out "runs/glue-$task-$preset" \
      --methods spectral --sweep lam=auto \
      --set "init_from=runs/language-mlm-$preset/spectral-target_kappa=2/seed-0" || exit 1
  done
  speccond report --glue "runs/glue-sst2-$preset" "runs/glue-cola-$preset" "runs/glue-mrpc-$preset" \
    "runs/glue-rte-$preset" "runs/language-mlm-$preset" --out "runs/language-$preset"
elif [ "$1" = detection ]; then
  speccond compare --task fashion-scenes --model xcit-maskrcnn --preset full --seeds 3 --out runs/detection &&
    speccond compare --task fashion-scenes --model vit-maskrcnn --preset full --seeds 3 --out runs/detection-vit
else
  for family in vit deit xcit davit swin; do
    patch=4; [ $family = swin ] && patch=8
    speccond compare --task cifar10 --model $family --preset full --seeds 3 --out runs/cifar10-$family \
      --methods baseline,spectral --set patch_size=$patch --set track_every=50
  done
fi
