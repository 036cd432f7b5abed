#!/usr/bin/env bash
# Real H200 runs of the held-out zoo (tools/holdout/zoo.py): 10 timed steps, then 3 profiled.
# Usage (on the GPU machine): tools/holdout/device_zoo.sh OUTDIR MODEL...
# Logs go to OUTDIR/logs/MODEL.log, traces to OUTDIR/traces/MODEL/; then OUTDIR is packed into
# bundles of at most 15 MB (the device tool brings back files of at most 16 MiB).
set -u
out=$1; shift
mkdir -p "$out/logs" "$out/traces"
cd "$(dirname "$0")"
for m in "$@"; do
  start=$(date +%s)
  python3 zoo.py --model "$m" --steps 10 --profile-dir "$out/traces/$m" > "$out/logs/$m.log" 2>&1
  echo "$m rc=$? $(( $(date +%s) - start ))s $(grep -o '"median_steady_ms": [0-9.]*' "$out/logs/$m.log")"
done
python3 - "$out" <<'PY'
import os, sys, tarfile
out = sys.argv[1]
files = []
for root, _, names in os.walk(out):
    for n in names:
        p = os.path.join(root, n)
        files.append((os.path.getsize(p), p))
files.sort(reverse=True)
bundles = []  # greedy: biggest first into the first bundle with room
for size, p in files:
    for b in bundles:
        if b[0] + size <= 15_000_000:
            b[0] += size; b[1].append(p); break
    else:
        bundles.append([size, [p]])
for i, (_, ps) in enumerate(bundles):
    with tarfile.open(os.path.join(out, f"bundle{i}.tar"), "w") as t:
        for p in ps:
            t.add(p, arcname=os.path.relpath(p, out))
    for p in ps:
        os.remove(p)
print(len(bundles), "bundles")
PY
