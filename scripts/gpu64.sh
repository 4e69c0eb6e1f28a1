#!/bin/sh
# The width-64 protocol's GPU instance, in one call on one GPU (docs/RESULTS.md, "The GPU instance",
# registered before its runs): what is finished within SECONDS is kept, the rest resumes on the next call.
#   scripts/gpu64.sh PACK OUT [SECONDS]
# PACK: the folder `speccond data pack fashion-mnist cifar10 --to PACK` wrote (49 MB: the GPU machine
# has no network), or - when both are prepared in $SPECCOND_DATA already; OUT: where the records land (OUT/gpu64-records.tar.xz: every finished run without its
# checkpoints, the tables and the kept archives; OUT/gpu64.log); SECONDS: the wall-clock budget (default 540).
# In order: the plateau pilots (baseline, lr 1e-3, 10 and 30 epochs) beside Fashion-MNIST's tuning, edge
# extensions and final runs (5 epochs, as registered); then, by the registered plateau rule, Fashion-MNIST
# at 10 epochs if the 10-epoch pilot is more than 1 point above the 5-epoch baseline at lr 1e-3, else CIFAR-10.
# Expected run time on one H200: the whole budget (docs/GPU.md has what one call finished).
# SMOKE=1 runs the same sequence on the CPU with tiny runs (tests/test_gpu64.py).
set -u
cd "$(dirname "$0")/.." || exit 1
if [ "${SMOKE:-0}" = 1 ]; then
  export PROTOCOL64_DEVICE=cpu JOBS=${JOBS:-2} SMOKE64=1  # harness/protocol/experiments/width64.py, smoke=True
  pilots="1 2"
else
  export PROTOCOL64_DEVICE=cuda JOBS=${JOBS:-12}
  pilots="10 30"
fi
runs=${RUNS64:-runs}; kept=${KEPT64:-docs/results}
call=gpu64 device=$PROTOCOL64_DEVICE
. scripts/gpu_call.sh  # start, py, log, left, say, unpack_data, pack_records: the budget shared with gpu_scale.sh
# stop_all ends the pilots still running as timeout ends a phase (gpu_call.sh), and nothing else on the machine.
stop_all() { for pid in $pilot_pids; do kill -TERM "$pid" 2>/dev/null; done; sleep 2; }

unpack_data || exit 2
say "data unpacked; budget $budget s"
inst=""; [ "$PROTOCOL64_DEVICE" = cuda ] && inst="gpu-"
pilot_of() { [ "$1" = 10 ] && echo "${inst}pilot" || echo "${inst}pilot${1}ep"; }  # a pilot's folder name
pilot_pids=""
for epochs in $pilots; do
  if [ -f "$kept/protocol64-$(pilot_of "$epochs")/baseline/seed-0/metrics.jsonl" ]; then
    say "the $epochs-epoch pilot is kept in $kept: not trained again"; continue
  fi
  PILOT_EPOCHS=$epochs timeout "$(left)" scripts/protocol64.sh pilot >>"$log" 2>&1 &
  pilot_pids="$pilot_pids $!"
done
say "Fashion-MNIST, 5 epochs: tuning, edges, finals"
timeout "$(left)" scripts/protocol64.sh fashion-mnist >>"$log" 2>&1; status=$?
say "Fashion-MNIST ended with status $status"
if [ "$status" = 0 ]; then
  first=${pilots%% *}
  pilot_dir="$kept/protocol64-$(pilot_of "$first")/baseline/seed-0"  # kept by an earlier call, or trained now
  if [ ! -f "$pilot_dir/metrics.jsonl" ]; then
    first_pid=${pilot_pids# }; wait "${first_pid%% *}"  # the shorter pilot decides what comes next
    pilot_dir="$runs/tune64-$(pilot_of "$first")/baseline/seed-0"
  fi
  tuned="$runs/tune64-${inst}fashion-mnist"
  gap=$("$py" -c "
from pathlib import Path; from speccond.harness import outcome
pilot, base = outcome(Path('$pilot_dir'), 'val'), outcome(Path('$tuned/tune/baseline-lr=0.001/seed-0'), 'val')
print('none' if pilot is None or base is None else f'{100 * (pilot - base):.2f} {int(pilot - base > 0.01)}')")
  say "plateau rule: the $first-epoch pilot minus the 5-epoch baseline at lr 1e-3 = ${gap% *} points"
  if [ "${gap#* }" = 1 ]; then
    say "the rule's 10-epoch branch: Fashion-MNIST again at 10 epochs"
    EPOCHS64=10 timeout "$(left)" scripts/protocol64.sh fashion-mnist >>"$log" 2>&1; say "ended with status $?"
  else
    say "CIFAR-10 (JPEG), 10 epochs"
    timeout "$(left)" scripts/protocol64.sh cifar10 >>"$log" 2>&1; say "ended with status $?"
  fi
fi
stop_all
wait
for epochs in 5 10; do EPOCHS64=$epochs scripts/protocol64.sh publish >>"$log" 2>&1; done
pack_records "$runs" "$runs" "$kept"/protocol64-*
