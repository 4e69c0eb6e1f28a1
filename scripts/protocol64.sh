#!/bin/sh
# The head-width-64 protocol, as pre-registered in docs/RESULTS.md ("Pre-registered protocol at head width 64").
# Every command resumes where it stopped and skips finished runs; finished runs are kept in
# docs/results/protocol64-NAME/kept by `publish`, and restored from there on a fresh clone. publish leaves the
# archive's manifest beside it, so the folder travels whole; before committing it, fold the manifest into
# the index: python -m speccond.harness.protocol.kept_runs fold docs/results (docs/RESULTS_LAYOUT.md).
#   scripts/protocol64.sh pilot           the plateau pilot: the baseline at lr 1e-3 for 10 epochs, on validation
#   scripts/protocol64.sh fashion-mnist   tuning, then the final runs (speccond tune --jobs ${JOBS:-2})
#   scripts/protocol64.sh cifar10         the same on the offline CIFAR-10 split
#   scripts/protocol64.sh publish         tables of what has finished, and keep every finished run
#   scripts/protocol64.sh plan            what is finished and what is left, per task; trains nothing
# SPECCOND_PYTHON and SPECCOND_SRC: scripts/python_env.sh.
# PROTOCOL64_DEVICE=cuda runs the protocol's GPU instance (docs/RESULTS.md, "The GPU instance"): its runs
# and records are apart from the CPU instance's (runs/tune64-gpu-NAME, docs/results/protocol64-gpu-NAME).
# EXTRA64 (tune arguments) and PILOT_EXTRA64 (--set ...) shrink the runs for a smoke test of this script.
# EPOCHS64 overrides Fashion-MNIST's epochs (the plateau rule's 10-epoch branch), with its own folders.
# CHOICE64=gpu runs the CPU final runs at the GPU instance's committed choice (docs/RESULTS.md, "Final runs on
# the CPU at the GPU instance's choice"): no tuning run; folders runs/tune64-gpuchoice-NAME and
# docs/results/protocol64-gpuchoice-NAME.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=1
. scripts/python_env.sh  # py: the interpreter (SPECCOND_PYTHON, else python3 on PATH)
arms=${ARMS64:-baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,spectral-svd,qk-norm}  # ARMS64: smoke runs only
model="--set embed_dim=192 --set num_heads=3 --set depth=4 --set patch_size=4 --set batch_size=128 --set warmup_steps=200"
kept=${KEPT64:-docs/results}  # KEPT64 and RUNS64: a smoke test's scratch folders
runs=${RUNS64:-runs}
fashion_epochs=${EPOCHS64:-5}
pilot_suffix=""; [ "${PILOT_EPOCHS:-10}" = 10 ] || pilot_suffix="${PILOT_EPOCHS}ep"
case ${PROTOCOL64_DEVICE:-cpu} in
  cpu) instance=""; hardware="" ;;
  cuda) instance="gpu-"; hardware="--set device=cuda --set checkpoint_every=1000000" ;;
  *) echo "PROTOCOL64_DEVICE must be cpu or cuda, got $PROTOCOL64_DEVICE" >&2; exit 2 ;;
esac
[ "$fashion_epochs" = 5 ] || instance="${instance}${fashion_epochs}ep-"
choice_from=""
case ${CHOICE64:-own} in
  own) ;;
  gpu) [ -z "$instance" ] || { echo "CHOICE64=gpu runs on the CPU at 5 epochs only (PROTOCOL64_DEVICE=cpu, no EPOCHS64)" >&2; exit 2; }
       choice_from="gpu-"; instance="gpuchoice-" ;;
  *) echo "CHOICE64 must be own or gpu, got $CHOICE64" >&2; exit 2 ;;
esac
model="$model $hardware"

args() {  # the speccond tune arguments of task NAME
  case $1 in
    fashion-mnist) echo "--task fashion-mnist --val-size 6000 $model --set epochs=$fashion_epochs --set track_every=422" ;;
    cifar10) echo "--task cifar10 --val-size 800 $model --set epochs=30 --set track_every=57" ;;
    *) echo "unknown task $1: fashion-mnist or cifar10" >&2; return 2 ;;
  esac
}
keep() {  # keep|restore NAME
  [ "$1" = keep ] && [ ! -d "$runs/tune64-$instance$2" ] && return 0
  [ "$1" = restore ] && [ ! -d "$kept/protocol64-$instance$2/kept" ] && [ ! -f "$kept/protocol64-$instance$2/kept.tar.xz" ] && return 0
  "$py" -m speccond.harness.protocol.kept_runs "$1" "$runs/tune64-$instance$2" "$kept/protocol64-$instance$2/kept"
}
tune() {  # tune NAME [--stage S]
  name=$1; shift
  a=$(args "$name") || exit 2
  keep restore "$name" || exit 1
  choice=""
  if [ -n "$choice_from" ]; then
    choice="--choice $kept/protocol64-$choice_from$name/choice.json"
    [ -f "$kept/protocol64-$choice_from$name/choice.json" ] || { echo "no committed choice at $kept/protocol64-$choice_from$name/choice.json: run the GPU instance's tuning of $name first" >&2; exit 2; }
  fi
  # shellcheck disable=SC2086  # the task's arguments are words
  "$py" -m speccond tune --jobs "${JOBS:-2}" --out "$runs/tune64-$instance$name" --arms "$arms" --tuning-seeds 1 \
    --extend-edges $choice $a $EXTRA64 "$@"
}
case "${1:-plan}" in
  pilot)
    # shellcheck disable=SC2086
    "$py" -m speccond compare --task fashion-mnist --methods baseline --seeds 1 --preset full \
      --out "$runs/tune64-${instance}pilot$pilot_suffix" $model --set epochs=${PILOT_EPOCHS:-10} --set lr=1e-3 --set val_size=6000 --set tuning=1 --set flush_denormal=1 --set track_every=422 $PILOT_EXTRA64 ;;
  fashion-mnist|cifar10) tune "$1" ;;
  publish)
    for name in fashion-mnist cifar10; do
      out="$runs/tune64-$instance$name"; dest="$kept/protocol64-$instance$name"
      [ -d "$out" ] || continue
      tune "$name" --stage report || exit 1
      mkdir -p "$dest"
      for f in tuning.png choice.json; do
        [ ! -f "$out/$f" ] || cp "$out/$f" "$dest/"
      done
      # the table of the runs so far until there is a choice, which holds it (protocol/tuning_table.py makes it)
      if [ -f "$out/choice.json" ]; then rm -f "$dest/tuning.md"; elif [ -f "$out/tuning.md" ]; then cp "$out/tuning.md" "$dest/"; fi
      keep keep "$name" || exit 1
      [ ! -d "$dest/kept" ] || "$py" -m speccond.harness.protocol.kept_runs pack "$dest/kept" || exit 1
    done
    for pilot in "$runs"/tune64-"${instance}"pilot*; do
      [ -d "$pilot" ] || continue
      dest="$kept/protocol64-${pilot#"$runs"/tune64-}"
      mkdir -p "$dest"
      cp -r "$pilot/baseline" "$dest/" 2>/dev/null
      find "$dest" -name checkpoints -type d -prune -exec rm -rf {} +
    done ;;
  plan)
    for name in fashion-mnist cifar10; do
      n=$("$py" -m speccond.harness.protocol.kept_runs list "$kept/protocol64-$instance$name/kept" 2>/dev/null | wc -l)
      echo "$name: $n finished runs kept; scripts/protocol64.sh $name resumes it"
    done ;;
  *) echo "usage: scripts/protocol64.sh pilot|fashion-mnist|cifar10|publish|plan" >&2; exit 2 ;;
esac
