#!/bin/sh
# Issue 17's runs, as pre-registered in docs/RESULTS.md: one task at a time, two runs side by side
# (speccond tune --jobs 2, one thread each), so each task's protocol finishes before the next starts.
# Every command resumes where it stopped and skips finished runs, so rerunning this continues the protocol. A
# fresh clone has no runs/: a task whose choice.json is committed (docs/results/protocol-NAME/) resumes at its
# final runs from that choice (speccond tune --choice), and one whose committed final table is complete is skipped;
# `publish` commits the records of finished runs, tuning and final (docs/results/protocol-NAME/kept), which tune
# restores, so a task cut short on one machine resumes on the next without training them again.
#   scripts/protocol.sh [tier1]     tier 1 in the background, progress in runs/protocol-tier1.log
#   scripts/protocol.sh tier2       tier 2: the other CIFAR-10 families, detection with the ViT trunk
#   scripts/protocol.sh language    tier 2's language task: MLM pre-training, 2 seeds per arm, then each
#                                   glue-* task tuned from pre-training seed 0 and scored from each seed
#   scripts/protocol.sh plan TIER   what running a tier would do with each task here: skip it, resume it, or tune it
#   scripts/protocol.sh list TIER   the tasks of a tier (tier1 = full + reduced), one per line: its name, then its speccond tune
#                                   arguments, after --choice-of OTHER for a task that takes task OTHER's choice instead of tuning
#   scripts/protocol.sh report      tables of what has finished (runs/tune-*/tuning.md, final/holm.md); trains nothing
#   scripts/protocol.sh publish     report, then copy the tables and plots of runs/tune-* into docs/results/protocol-*,
#                                   and keep the finished pre-training runs with their encoders (docs/results/protocol-mlm/kept)
# Tier 1: the full-protocol tuning (Fashion-MNIST, then CIFAR-10, with the ViT), then the reduced protocol
# (ListOps, detection with the XCiT trunk) with the best peer of the full protocol: BEST_PEER if set, else
# scripts/best_peer.py over the two choice.json (validation only). The long budget is scripts/long_budget.sh.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
. scripts/python_env.sh  # py: the interpreter (SPECCOND_PYTHON, else python3 on PATH)
full_arms=baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,spectral-svd,qk-norm,sigma-reparam,sigma-reparam-all,spectral-norm
peers() {  # sets peer (BEST_PEER, else docs/RESULTS.md's rule over the full-protocol choices) and the reduced arms
  peer=${BEST_PEER:-$("$py" scripts/best_peer.py "$(choice_of fashion-mnist)" "$(choice_of cifar10)" 2>/dev/null)}
  peer=${peer:-undecided}  # before both full-protocol tasks have chosen; speccond tune refuses this arm
  # XCiT's XCA normalises q and k already, so qk-norm has nothing to do there (speccond refuses it): XCiT tasks
  # take the best peer that applies to them (XCA_PEER, default sigma-reparam), as docs/RESULTS.md registers.
  xca_peer=$peer
  [ "$peer" = qk-norm ] && xca_peer=${XCA_PEER:-sigma-reparam}
  reduced_arms="baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,$peer"
  reduced="--tuning-seeds 1 --arms $reduced_arms"
  reduced_xca="--tuning-seeds 1 --arms baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,$xca_peer"
}
published=docs/results  # protocol-NAME/: what `publish` committed
choice_of() {  # the choice.json of task NAME: this machine's, else the committed one (a fresh clone has no runs/)
  if [ -f "runs/tune-$1/choice.json" ]; then echo "runs/tune-$1/choice.json"; else echo "$published/protocol-$1/choice.json"; fi
}
committed_choice() {  # --choice FILE when task NAME's choice is committed: its final runs resume without the tuning runs
  [ ! -f "$published/protocol-$1/choice.json" ] || echo "--choice $published/protocol-$1/choice.json"
}
choice_args() {  # choice_args NAME [--choice-of OTHER]: the --choice speccond tune takes for task NAME, if any;
  # a task listed with --choice-of OTHER is not tuned: it takes OTHER's choice (this machine's, else the committed one)
  own=$(committed_choice "$1")
  if [ -n "$own" ] || [ "$2" != --choice-of ]; then echo "$own"; return 0; fi
  other=$(choice_of "$3")
  [ -f "$other" ] || { echo "$1 takes the lrs chosen by $3, which has not chosen yet: run $3 first" >&2; return 1; }
  echo "--choice $other"
}
finished() {  # task NAME's committed final table has every seed of every arm: nothing is left to train
  complete "$published/protocol-$1/final/holm.json"
}
complete() {  # the final table FILE (holm.json) owes no run
  [ -f "$1" ] && "$py" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["owed"] != 0)' "$1"
}
pretraining=runs/protocol-mlm  # <arm>/seed-<p>: the encoders the language arms fine-tune
kept_pretraining=$published/protocol-mlm/kept  # their records and encoders, committed by publish (kept_runs --pretraining)

tasks() {  # the tasks of a tier, one per line: its name (runs/tune-NAME, docs/results/protocol-NAME), then its arguments
  case $1 in
    full) echo "fashion-mnist --task fashion-mnist --val-size 6000 --arms $full_arms
cifar10 --task cifar10 --val-size 800 --arms $full_arms" ;;
    reduced) peers; echo "lra-listops --task lra-listops --val-size 800 $reduced
detection --task fashion-scenes --model xcit-maskrcnn --val-size 200 $reduced_xca" ;;
    tier1) tasks full; tasks reduced ;;
    tier2) peers; echo "cifar10-swin --task cifar10 --model swin --val-size 800 $reduced
cifar10-xcit --task cifar10 --model xcit --val-size 800 $reduced_xca
cifar10-xcit-noca --task cifar10 --model xcit-noca --val-size 800 $reduced_xca
cifar10-davit --task cifar10 --model davit --val-size 800 $reduced
cifar10-deit --task cifar10 --model deit --val-size 800 $reduced
detection-vit --task fashion-scenes --model vit-maskrcnn --val-size 200 $reduced" ;;
    language)  # validation: 10 % of each task's stored training examples
      peers
      for p in 0 1; do
        arms="baseline:init_from=$pretraining/baseline/seed-$p,spectral:init_from=$pretraining/spectral/seed-$p"
        arms="$arms,spectral:corrected=q+init_from=$pretraining/spectral-corrected=q/seed-$p"
        arms="$arms,spectral:target_kappa=2+init_from=$pretraining/spectral-target_kappa=2/seed-$p"
        arms="$arms,$peer:init_from=$pretraining/$peer/seed-$p"
        for task in sentiment:4579 fact:4373 pairs:3982 hyperbaton:4000; do
          # pre-training seed 1 takes the lrs chosen on seed 0's validation (RESULTS' protocol: a tuning cut)
          shared=""; [ "$p" = 0 ] || shared="--choice-of glue-${task%%:*}-pre0 "
          echo "glue-${task%%:*}-pre$p $shared--task glue-${task%%:*} --val-size ${task##*:} --tuning-seeds 1 --arms $arms"
        done
      done ;;
    *) return 2 ;;
  esac
}
each() {  # each TASKS COMMAND...: COMMAND name arguments..., one task at a time, stopping at the first failure
  tasks=$1; shift
  echo "$tasks" | while read -r name arguments; do
    # shellcheck disable=SC2086  # the task's arguments are words
    "$@" "$name" $arguments || exit 1
  done
}
tune() {
  name=$1; shift
  if finished "$name"; then echo "$name: every final run is in $published/protocol-$name/final; skipped"; return 0; fi
  kept "$name" restore || return 1
  choice=$(choice_args "$name" "$@") || return 1
  [ "$1" != --choice-of ] || shift 2
  # shellcheck disable=SC2086  # --choice and its file are two words
  "$py" -m speccond tune --jobs "${JOBS:-2}" --out "runs/tune-$name" $choice "$@"
}
kept() {  # kept NAME keep|restore: task NAME's finished runs (tuning and final), committed in $published/protocol-NAME/kept
  [ "$2" = keep ] && [ ! -d "runs/tune-$1" ] && return 0
  [ "$2" = restore ] && [ ! -d "$published/protocol-$1/kept" ] && [ ! -f "$published/protocol-$1/kept.tar.xz" ] && return 0
  "$py" -m speccond.harness.protocol.kept_runs "$2" "runs/tune-$1" "$published/protocol-$1/kept" || return 1
  pack "$published/protocol-$1/kept"
}
pack() {  # a kept folder is committed packed (kept.tar.xz, its manifest folded into $published/kept-archives.json)
  [ ! -d "$1" ] || "$py" -m speccond.harness.protocol.kept_runs pack "$1" || return 1
  [ ! -f "$1.manifest.json" ] || "$py" -m speccond.harness.protocol.kept_runs fold "$published" >/dev/null
}
kept_count() {  # kept_count KEPT STAGE: how many finished runs of STAGE (tune or final) KEPT holds, packed or not
  "$py" -m speccond.harness.protocol.kept_runs list "$1" 2>/dev/null | grep -c "^$2/"
}
plan() {  # what tune would do with task NAME on this machine, in one line; trains nothing
  name=$1
  if finished "$name"; then echo "$name: skip, every final run is in $published/protocol-$name/final"
  elif [ -n "$(committed_choice "$name")" ] || [ "$2" = --choice-of ]; then
    count=$(kept_count "$published/protocol-$name/kept" final)
    if [ -n "$(committed_choice "$name")" ]; then from="the committed $published/protocol-$name/choice.json"
    else from="the lrs $3 chooses (no tuning)"; fi
    echo "$name: final runs from $from ($count finished final runs kept)"
  else
    count=$(kept_count "$published/protocol-$name/kept" tune)
    echo "$name: tuning ($count finished tuning runs kept in $published/protocol-$name/kept), then final runs"
  fi
}
pretraining_count() {  # how many finished pre-training runs are in $pretraining
  "$py" -c 'import sys; from pathlib import Path; from speccond.harness.protocol.kept_runs import pretraining_runs
print(len(pretraining_runs(Path(sys.argv[1]))))' "$pretraining"
}
plan_pretraining() {  # the language stage's first step, in one line: how many of the 10 encoders are kept or here
  kept_count=$("$py" -m speccond.harness.protocol.kept_runs list --pretraining "$kept_pretraining" 2>/dev/null | wc -l)
  here_count=$(pretraining_count)
  rest="the rest are trained first"; [ "$kept_count" != 10 ] || rest="none to train"
  echo "pre-training: $kept_count of 10 encoders kept in $kept_pretraining, $here_count finished in $pretraining; $rest"
}
report() {
  name=$1; shift
  [ -d "runs/tune-$name" ] || return 0
  choice=$(choice_args "$name" "$@") || return 0  # a task waiting for another's choice has nothing to report yet
  [ "$1" != --choice-of ] || shift 2
  # shellcheck disable=SC2086
  "$py" -m speccond tune --out "runs/tune-$name" $choice "$@" --stage report
}
publish() {
  name=$1; shift
  report "$name" "$@" || return 1
  [ -f "runs/tune-$name/tuning.md" ] || return 0
  target="docs/results/protocol-$name"
  mkdir -p "$target"
  cp runs/tune-"$name"/tuning.png "$target/"
  if [ -f "runs/tune-$name/choice.json" ]; then  # the choice holds the table: tuning_table.py makes it again
    cp "runs/tune-$name/choice.json" "$target/" && rm -f "$target/tuning.md"
  else
    cp runs/tune-"$name"/tuning.md "$target/"  # no choice yet: the table of the runs so far
  fi
  # A task's final tables are committed once every final run has finished (the headline reads them), so a
  # partial table never reads as a result; until then its finished final runs are kept (below).
  if complete "runs/tune-$name/final/holm.json"; then
    mkdir -p "$target/final"
    for file in holm.md holm.json results.md results.json comparison.png detection.png; do
      [ ! -f "runs/tune-$name/final/$file" ] || cp "runs/tune-$name/final/$file" "$target/final/"
    done
  fi
  kept "$name" keep || return 1
  echo "published $target"
}
publish_pretraining() {  # keep the finished encoders; once all 10 are here, commit their report too
  "$py" -m speccond.harness.protocol.kept_runs keep --pretraining "$pretraining" "$kept_pretraining" || return 1
  pack "$kept_pretraining" || return 1
  [ "$(pretraining_count)" = 10 ] || return 0
  "$py" -m speccond report "$pretraining" > /dev/null || return 1
  for file in results.md results.json comparison.png; do cp "$pretraining/$file" "$published/protocol-mlm/"; done
  echo "published $published/protocol-mlm (the pre-training report)"
}
mlm() {  # MLM pre-training, 2 seeds, at the preset's lr (not tuned), of the arms compare's arguments name
  # shellcheck disable=SC2086
  "$py" -m speccond compare --task mlm --preset full --seeds 2 --out "$pretraining" --set flush_denormal=1 "$@"
}
pretrain() {  # the language arms' encoders, in two chains side by side; those kept in the repository are not trained again
  peers
  if [ -d "$kept_pretraining" ] || [ -f "$kept_pretraining.tar.xz" ]; then
    "$py" -m speccond.harness.protocol.kept_runs restore --pretraining "$pretraining" "$kept_pretraining" || return 1
  fi
  export SPECCOND_PARALLEL_JOBS=2
  mlm --methods "baseline,spectral,$peer" > "$pretraining-a.log" 2>&1 &
  first=$!
  { mlm --methods spectral --sweep corrected=q && mlm --methods spectral --sweep target_kappa=2; } > "$pretraining-b.log" 2>&1
  second=$?
  wait "$first" && [ "$second" = 0 ]
}
all="$(tasks tier1)
$(tasks tier2)
$(tasks language)"
case "${1:-tier1}" in
  # tier 1's reduced tasks are listed only once the full protocol has chosen, so they get its best peer
  tier1) mkdir -p runs; { each "$(tasks full)" tune && each "$(tasks reduced)" tune; } > runs/protocol-tier1.log 2>&1 & ;;
  tier2) mkdir -p runs; each "$(tasks tier2)" tune > runs/protocol-tier2.log 2>&1 & ;;
  language) mkdir -p "$pretraining"; { pretrain && each "$(tasks language)" tune; } > runs/protocol-language.log 2>&1 & ;;
  list) tasks "$2" || { echo "usage: scripts/protocol.sh list tier1|full|reduced|tier2|language" >&2; exit 2; }; exit 0 ;;
  plan) tasks "$2" > /dev/null || { echo "usage: scripts/protocol.sh plan tier1|full|reduced|tier2|language" >&2; exit 2; }
        [ "$2" != language ] || plan_pretraining
        each "$(tasks "$2")" plan; exit $? ;;
  report) each "$all" report; exit $? ;;
  publish) each "$all" publish || exit 1
           [ ! -d "$pretraining" ] || publish_pretraining; exit $? ;;
  *) echo "usage: scripts/protocol.sh [tier1|tier2|language|list TIER|plan TIER|report|publish]" >&2; exit 2 ;;
esac
echo "started; progress in runs/protocol-${1:-tier1}.log; tables so far: scripts/protocol.sh report"
