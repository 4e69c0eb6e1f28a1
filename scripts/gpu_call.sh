# Sourced by the one-call GPU scripts (gpu64.sh, gpu_scale.sh) after they cd to the checkout: one wall-clock
# budget for the whole call, its log, the data pack unpacked and checked, the records packed at the end.
# Every such script takes the same arguments, read here from the caller's own: PACK OUT [SECONDS], PACK (pack) a
# folder that `speccond data pack` wrote, or - when the data are prepared in $SPECCOND_DATA already, OUT (out)
# where the log and records land, SECONDS (budget) the wall-clock budget in whole seconds, default 540; a missing one or a budget that is not a number stops the
# call with its usage line before anything is written. The caller sets call (its name: OUT/$call.log,
# OUT/$call-records.tar.xz) and device (cpu or cuda). It gets: pack, out, budget, start, py, log and
#   left            the seconds a phase may still run: the budget less what has gone and 45 s to publish and pack
#   say LINE        LINE, with the seconds since the start, on stdout and in the log
#   unpack_data     the pack unpacked (each file checked against its manifest) and, on cuda, torch's device checked
#   pack_records RUNS PATH...   every checkpoints folder under RUNS removed, then each PATH that exists packed
# A phase runs under `timeout "$(left)"`, which signals its whole process group (a tune's pool workers too) at
# its deadline.
usage="usage: scripts/$(basename "$0") PACK OUT [SECONDS]"  # $0: the sourcing script
pack=${1:?$usage}
out=${2:?$usage}
budget=${3:-540}
case $budget in
  ''|*[!0-9]*) echo "$usage: SECONDS is a whole number of seconds, got '$budget'" >&2; exit 2 ;;
esac
start=$(date +%s)
py=${SPECCOND_PYTHON:-python3}
export SPECCOND_PYTHON="$py" SPECCOND_DATA="${SPECCOND_DATA:-/tmp/speccond-data}" OMP_NUM_THREADS=1
export PYTHONPATH="${SPECCOND_SRC:-$PWD/src}" PYTHONUNBUFFERED=1
mkdir -p "$out"
log="$out/$call.log"
left() { s=$((budget - ($(date +%s) - start) - 45)); [ "$s" -gt 1 ] && echo "$s" || echo 1; }  # less 45 s to publish and pack
say() { echo "[$call $(($(date +%s) - start)) s] $*" | tee -a "$log"; }

unpack_data() {
  if [ "$pack" != - ]; then  # "-": the datasets are already prepared in $SPECCOND_DATA
    "$py" -m speccond data unpack "$pack" >>"$log" 2>&1 || { say "the data pack $pack did not unpack (see $log)"; return 2; }
  fi
  [ "$device" = cpu ] || "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" \
    || { say "torch sees no CUDA device; this is the GPU instance"; return 2; }
}

pack_records() {
  find "$1" -name checkpoints -type d -prune -exec rm -rf {} + 2>/dev/null
  shift
  for path do shift; [ -e "$path" ] && set -- "$@" "$path"; done  # the paths that exist (a glob may match none)
  [ $# -gt 0 ] || { say "no records to pack: no run has started"; return; }
  tar -cJf "$out/$call-records.tar.xz" "$@" 2>>"$log"
  say "records packed: $(du -h "$out/$call-records.tar.xz" | cut -f1)"
}
