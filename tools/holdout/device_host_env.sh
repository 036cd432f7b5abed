# Sourced by the host-time device scripts of issue #15 (device_phases.sh, device_cprofile_zoo.sh,
# device_session21_host.sh) once they have set `out` (the output folder): the repository on
# PYTHONPATH, `H` (this folder), the lease's host probe in $out/host_probe.json, and
# `run_cprofiled NAME DIR SCRIPT ARGS...`, which runs SCRIPT 12 steps under phases.py twice,
# plain then with the main thread under cProfile, appends both PHASES lines to $out/phases.txt
# and writes the per-step cProfile table to $out/cprof_NAME.json.
H=$PWD/tools/holdout
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m phantora_prof.measure.host_probe --out "$out/host_probe.json" > /dev/null 2>&1
echo "probe rc=$?"
run_cprofiled() {  # name dir script args...
  local name=$1 dir=$2; shift 2
  local p
  p=$(cd "$dir" && timeout 150 python3 "$H/phases.py" "$@" --steps 12 2>&1 | grep '^PHASES ')
  echo "$name plain $p" | tee -a "$out/phases.txt"
  p=$(cd "$dir" && timeout 150 python3 "$H/phases.py" --cprofile /tmp/$name.prof "$@" --steps 12 2>&1 | grep '^PHASES ')
  echo "$name cprofile $p" | tee -a "$out/phases.txt"
  python3 "$H/cprofile_table.py" /tmp/$name.prof --steps 9 --out "$out/cprof_$name.json"
}
