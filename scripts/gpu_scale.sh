#!/bin/sh
# The quick comparison on one GPU (docs/GPU.md, "The experiment to run when a GPU is available"): the width-64
# protocol's six arms at ViT-S's head layout (6 heads of 64), each at the lr the GPU instance chose on
# Fashion-MNIST validation (no tuning), 2 seeds, Fashion-MNIST for 5 epochs then the offline CIFAR-10 split
# for 30 (harness/protocol/experiments/scale.py, `speccond protocol run scale-gpu TASK`), in one call:
#   scripts/gpu_scale.sh PACK OUT [SECONDS]
# PACK: the folder `speccond data pack fashion-mnist cifar10 --to PACK` wrote (49.7 MB: the GPU machine has no
# network), or - when both are prepared in $SPECCOND_DATA already; OUT: where the records land
# (OUT/gpu-scale-records.tar.xz: every finished run without its checkpoints, the tables and the kept archives;
# OUT/gpu-scale.log, which ends with the final tables); SECONDS: the wall-clock budget (default 540): what has
# not finished 45 s before it is stopped, what finished is published and packed, and a second call resumes.
# Needs docs/results/protocol64-gpu-fashion-mnist/choice.json (committed): the lrs the arms train at.
# Expected run time on one H200: about 5.5 minutes of training and the start and publishing (scale.py's
# arithmetic at the width-64 call's speed; not measured at this model's shape).
# JOBS: runs side by side (default 12: a task's 12 runs at once); TASKS: which tasks, in order (default
# "fashion-mnist cifar10"); SMOKE=1 runs the same sequence on the CPU with tiny runs (tests/test_gpu_scale.py),
# RUNS_SCALE and KEPT_SCALE its scratch folders (--runs, --results of speccond protocol).
set -u
cd "$(dirname "$0")/.." || exit 1
if [ "${SMOKE:-0}" = 1 ]; then
  device=cpu jobs=${JOBS:-2} smoke=--smoke  # scale.py's smoke config
else
  device=cuda jobs=${JOBS:-12} smoke=
fi
runs=${RUNS_SCALE:-runs}; kept=${KEPT_SCALE:-docs/results}
call=gpu-scale
. scripts/gpu_call.sh  # start, py, log, left, say, unpack_data, pack_records: the budget shared with gpu64.sh
unpack_data || exit 2
say "data unpacked; budget $budget s"
failed=0  # the first status of a task that failed (not the budget's stop): the call's exit status
for task in ${TASKS:-fashion-mnist cifar10}; do
  [ "$(left)" -gt 1 ] || { say "$task: no time left in the budget (a second call runs it)"; continue; }
  say "$task: 12 final runs at the committed lrs"
  timeout "$(left)" "$py" -m speccond protocol run scale-gpu "$task" --jobs "$jobs" --runs "$runs" --results "$kept" \
    $smoke >>"$log" 2>&1
  status=$?
  if [ "$status" = 124 ]; then
    say "$task stopped by the budget (a second call resumes it)"
  else
    say "$task ended with status $status"
    [ "$status" = 0 ] || [ "$failed" != 0 ] || failed=$status
  fi
done
"$py" -m speccond protocol publish scale-gpu --runs "$runs" --results "$kept" $smoke >>"$log" 2>&1
say "published with status $?"
pack_records "$runs" "$runs"/scale-gpu-* "$kept"/scale-gpu-*
for table in "$runs"/scale-gpu-*/final/holm.md; do
  [ -f "$table" ] && { echo "== $table"; cat "$table"; } | tee -a "$log"
done
exit "$failed"
