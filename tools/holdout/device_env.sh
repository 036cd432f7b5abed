# Sourced by the tools/holdout/device_*.sh scripts once they have set `out` (the output folder)
# and `part`: the output folder, the repository on PYTHONPATH, `H` (this folder), `log` (the
# part's log) opened with the torch and Triton versions of the GPU machine; and two helpers:
# `compare_py EXPR` prints a value of compare.py's (its case lists), `host_bound_phases FILE` appends
# each host-bound run's unprofiled phases (phases.py) to FILE.
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
