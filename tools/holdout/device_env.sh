# Sourced by the tools/holdout/device_*.sh scripts once they have set `out` (the output folder)
# and `part`: the output folder, the repository on PYTHONPATH, `H` (this folder), `log` (the
# part's log) opened with the torch and Triton versions of the GPU machine; and helpers:
# `compare_py EXPR` prints a value of compare.py's (its case lists), `host_bound_phases FILE` appends
# each host-bound run's unprofiled phases (phases.py) to FILE, `sweep NUMBER FAMILY SECONDS` runs one
# sweep_families family into sweep/sw<NUMBER>.*, `profile_cases CASES` profiles each of compare.py's
# comma-separated CASES (zoo.py, 5 steps, 2-3 recorded) into traces/<case>.pt.trace.json.gz,
# `anchor` appends the host anchor (the reference gpt.py --batch 1 --seq 64, median step) to the log,
# `blind_set CASES DIR FILE` times compare.py's CASES once into DIR (--real-gpu) and appends their
# unprofiled phases (phases.py) and compare.py's output to FILE (the log, or a file kept out of it),
# `limited_blind_set SET NAME SECONDS` runs it under a time limit, `hidden_blind_set SET NAME` measures compare.py's SET (anchors, blind_set, profiles) with nothing
# of its results in the log: they go to OUTDIR/NAME_run.txt and OUTDIR/NAME/, to be opened after
# the set has been simulated,
# `lease_start` (a blind-set call's start: HF offline, `start` and `gpu` set, the GPU, driver and
# model libraries' versions logged, what `hidden_blind_set` needs in a `bash -c` exported),
# `pack_output PART` turns the output folder into
# OUTDIR.PART.tgz (the device tool returns a limited number of files, at most 16 MiB each).
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
H=$PWD/tools/holdout
log=$out/logs_$part.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$log" 2>&1
compare_py() {
  python3 -c "import sys; sys.path.insert(0, '$H'); import compare; print($1)"
}
host_bound_phases() {
  local case args p
  for case in $(compare_py "' '.join(compare.HOST_BOUND)"); do
    args=$(compare_py "' '.join(compare.CASES['$case'][1])")
    p=$(cd "$H" && timeout 60 python3 phases.py zoo.py $args --steps 10 2>&1 | grep '^PHASES ')
    echo "$case $p" >> "$1"
  done
}
sweep() {
  mkdir -p "$out/sweep"
  timeout "$3" python3 -m phantora_prof.measure.sweep_families --only "$2" \
    --out "$out/sweep/sw$1.pt.trace.json.gz" > "$out/sweep/sw$1.log" 2>&1
  echo "sweep sw$1 $2 rc=$? $(( $(date +%s) - start ))s" >> "$log"
}
anchor() {
  ( cd "$H/_wl" && timeout 120 python3 gpt.py --batch 1 --seq 64 --steps 10 ) 2>&1 \
    | grep -o '"median_steady_ms": [0-9.]*' | sed 's/^/anchor /' >> "$log"
}
profile_cases() {
  local m tmp args f
  mkdir -p "$out/traces"
  for m in ${1//,/ }; do
    tmp=$(mktemp -d)
    args=$(compare_py "' '.join(compare.CASES['$m'][1])")
    (cd "$H" && timeout 200 python3 zoo.py $args --steps 5 --profile-dir "$tmp") > "$out/profiled_$m.log" 2>&1
    echo "profile $m rc=$? $(( $(date +%s) - start ))s" >> "$log"
    f=$(ls "$tmp"/*.pt.trace.json.gz 2>/dev/null | head -1)
    [ -n "$f" ] && cp "$f" "$out/traces/$m.pt.trace.json.gz"
  done
}
lease_start() {
  export HF_HUB_OFFLINE=1
  start=$(date +%s)
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$log"
  python3 -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" >> "$log" 2>&1
  export out log H start part
  export -f compare_py anchor blind_set profile_cases hidden_blind_set
}
pack_output() {
  tar czf "$out.$1.tgz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
  # a larger archive travels in 15 MiB pieces (cat them to rebuild it)
  if [ "$(stat -c %s "$out.$1.tgz")" -gt 15728640 ]; then
    split -b 15m -d "$out.$1.tgz" "$out.$1.tgz." && rm "$out.$1.tgz"
  fi
}
blind_set() {
  local cases=$1 dir=$2 file=$3 m args p
  python3 "$H/compare.py" --real-gpu --only "$cases" --real-dir "$dir" >> "$file" 2>&1
  echo "timed rc=$? $(( $(date +%s) - start ))s" >> "$log"
  for m in ${cases//,/ }; do
    args=$(compare_py "' '.join(compare.CASES['$m'][1])")
    p=$(cd "$H" && timeout 150 python3 phases.py zoo.py $args --steps 10 2>&1 | grep -E '^PHASES ')
    echo "phases $m $p" >> "$file"
  done
}
limited_blind_set() {
  # hidden_blind_set SET NAME under a time limit of SECONDS ($3), its exit code and elapsed time logged
  timeout -k 10 "$3" bash -c "hidden_blind_set $1 $2; exit 0"
  echo "$2 rc=$? $(( $(date +%s) - start ))s" >> "$log"
}
hidden_blind_set() {
  local blind=$out/$2_run.txt main=$log cases
  log=$blind; anchor; log=$main
  cases=$(compare_py "','.join(compare.$1)")
  blind_set "$cases" "$out/$2" "$blind"
  log=$blind; anchor; log=$main
  profile_cases "$cases" > /dev/null 2>&1
}
