#!/usr/bin/env bash
# Issue #14, on the GPU machine: real profiles (loop.py --profile-dir: three steps after the
# timed ten) and unprofiled host time per phase (phases.py) of held-out cases whose error the
# per-category diff must explain (tools/holdout/diff_real.py). CASES: "name script args..." lines.
# Usage: tools/holdout/device_profiles.sh OUTDIR [CASES_FILE]   (default: the cases at the end; a
# file holds one "name script args..." line per case)
set -u
out=$1
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
H=$PWD/tools/holdout
log=$out/logs.txt
tmp=$(mktemp -d)
cases=${2:-$tmp/cases.txt}
[ -n "${2:-}" ] || cat > "$cases" <<'CASES'
timm_mixer zoo.py --model timm_mixer
tv_shufflenet zoo.py --model tv_shufflenet
tv_swin zoo.py --model tv_swin
vit vit.py
timm_convnext zoo.py --model timm_convnext
CASES
while read -r name script args; do
  [ -z "$name" ] && continue
  (cd "$H" && timeout 240 python3 "$script" $args --steps 10 --profile-dir "$tmp/$name" > "$tmp/$name.log" 2>&1)
  echo "== $name rc=$? $(grep '^RESULT' "$tmp/$name.log" | head -c 400)" >> "$log"
  f=$(ls "$tmp/$name"/*.pt.trace.json.gz 2>/dev/null | head -1)
  [ -n "$f" ] && cp "$f" "$out/$name.pt.trace.json.gz"
  p=$(cd "$H" && timeout 240 python3 phases.py "$script" $args --steps 10 2>&1 | grep '^PHASES ')
  echo "$name $p" >> "$log"
done < "$cases"
cat "$log"
