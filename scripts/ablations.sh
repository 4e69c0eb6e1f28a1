#!/bin/sh
# The ablations of docs/RESULTS.md: Fashion-MNIST, timm ViT, the quick preset (400 steps), 3 seeds.
# One job per argument; run jobs side by side, one thread each. Every run resumes where it stopped and
# finished runs are skipped, so an interrupted job continues when started again.
#   scripts/ablations.sh lam           lam = 0, 1, 2, 5, 10, 20, 50 (and the baseline)      24 runs
#   scripts/ablations.sh projections   the correction on q, k, v, q and k only                12 runs
#   scripts/ablations.sh init          fixed correction vs shifted init, weight decay 0 and 0.05 12 runs
#   scripts/ablations.sh norm          no LayerNorm before attention, baseline and lam = 10   6 runs
#   scripts/ablations.sh auto          lam = "auto" (kappa <= 2) and lam = "auto" refreshed every 50 steps  6 runs
#   scripts/ablations.sh svd           svd per head / per projection, refresh never / every 50   12 runs
#     (identity per projection, once run here, gave the per-head runs bit for bit; a fixed lam * I does not read
#     granularity, so speccond now refuses --set granularity=projection for it: docs/RESULTS.md)
# Each writes runs/ablate-<job>/results.md; the tables in docs/RESULTS.md join them with `speccond report`.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
. scripts/python_env.sh
compare() { speccond compare --task fashion-mnist --preset quick --seeds 3 --out "runs/ablate-$job" "$@"; }
for job in "$@"; do
  case $job in
    lam) compare --methods baseline,spectral --sweep lam=0,1,2,5,10,20,50 --set track_every=25 ;;
    projections) compare --methods spectral --sweep corrected=q,k,v,qk ;;
    init) compare --methods spectral,shifted-init --sweep weight_decay=0,0.05 ;;
    norm) compare --methods baseline,spectral --set attention_norm=none ;;
    auto) compare --methods spectral --set lam=auto --sweep refresh_every=0,50 ;;
    svd) compare --methods spectral-svd --sweep granularity=head,projection --sweep refresh_every=0,50 ;;
    *) echo "unknown job $job: lam, projections, init, norm, auto or svd" >&2; exit 2 ;;
  esac || exit 1
done
