#!/bin/sh
# The long-budget comparison, as pre-registered in docs/RESULTS.md: Fashion-MNIST, full preset, 20
# epochs (8,440 steps a run), a 6,000-image validation split, subnormals flushed, one thread per job.
# Two chains side by side (about 30 minutes a run each on one core); every run resumes where it stopped,
# and seeds advance together (all arms at seed 0, then seed 1, ...), so a cut leaves a balanced set.
#   scripts/long_budget.sh            both chains in the background, logs in runs/long-budget/*.log
#   scripts/long_budget.sh report     the report of what has finished
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
. scripts/python_env.sh
out=runs/long-budget
if [ "$1" = report ]; then
  exec speccond report "$out"
fi
mkdir -p "$out"
run() {  # seeds, then compare arguments
  seeds=$1; shift
  speccond compare --task fashion-mnist --preset full --seeds "$seeds" --out "$out" \
    --set epochs=20 --set val_size=6000 --set flush_denormal=1 --set track_every=211 "$@"
}
chain_a() { for seeds in 1 2 3; do run "$seeds" --methods baseline,spectral || return 1; done; }
chain_b() { for seeds in 1 2 3; do run "$seeds" --methods spectral --sweep corrected=q &&
                                   run "$seeds" --methods spectral --sweep lam=auto || return 1; done; }
export SPECCOND_PARALLEL_JOBS=2  # recorded in each config.json ("arithmetic")
chain_a > "$out/chain-a.log" 2>&1 &
chain_b > "$out/chain-b.log" 2>&1 &
echo "started; progress in $out/chain-a.log and $out/chain-b.log; report: scripts/long_budget.sh report"
