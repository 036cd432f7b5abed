# Sourced by the tools/holdout/device_*.sh scripts once they have set `out` (the output folder)
# and `part`: the output folder, the repository on PYTHONPATH, `H` (this folder), `log` (the
# part's log) opened with the torch and Triton versions of the GPU machine.
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
H=$PWD/tools/holdout
log=$out/logs_$part.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$log" 2>&1
