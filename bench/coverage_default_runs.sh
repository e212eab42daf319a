#!/usr/bin/env bash
# One call on the GPU machine (issue 18): the trainer's default runs under
# the contract monitor, and the launches each kernel had outside a proved
# bound. MODE=strict|warn (default strict): strict stops at the first
# such step. A tiny run on the host's CPU takes 10 steps (50 take minutes
# there). Needs target/release/tokitai-train built here and carried.
source "$(dirname "$0")/gpu_env.sh"
mode="${MODE:-strict}"
for cfg in "nano cuda" "tiny cuda" "nano cpu" "tiny cpu --steps 10"; do
  set -- $cfg
  size=$1; dev=$2; shift 2
  d="$OUT/cov-$size-$dev"; rm -rf "$d"
  timeout 300 ./target/release/tokitai-train --size "$size" --device "$dev" "$@" --quiet --contracts "$mode" --checkpoint-dir "$d" > "$OUT/cov-$size-$dev.txt" 2>&1
  echo "== $size $dev $* ($mode) exit $?"; grep -iE "^warning|^error|CONTRACTS|SUMMARY" "$OUT/cov-$size-$dev.txt" | cut -c1-300 | head -8
  [ -f "$d/contracts.json" ] && python3 - "$d/contracts.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
ks = c.get("kernels", c)
print("covered", sum(v["covered"] for v in ks.values()), "of", sum(v["launches"] for v in ks.values()))
for k, v in ks.items():
    if v["covered"] < v["launches"]:
        print("  ", k, v["launches"], v["covered"], v.get("first_outside"))
PY
  rm -f "$d/checkpoint.safetensors"
done
