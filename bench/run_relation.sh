#!/usr/bin/env bash
# GPU call for issue 18's monitor cost, twenty-sixth session: AdamW checks
# `m * m <= 64 v` on the moments it stores, so the next step's launch needs
# no relation probe over both moments. One call:
#   1. gpucheck --monitor on this build ($BIN): device verdicts agree with
#      the host's, observed ranges with the data, and the relation checks
#      with the data (a second launch judged by them);
#   2. the monitor's cost on the step (off against warn), this build and the
#      one before ($BASE) alternating, $PASSES passes, eager configs;
#   3. tiny under --contracts strict, eager (every launch covered).
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/rel-new}"
BASE="${BASE:-target/rel-old}"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
timeout 240 "$BIN/tokitai-gpucheck" --monitor > "$OUT/monitor.txt" 2>&1
echo "gpucheck --monitor exit $?"; grep -E "DISAGREE|OBSERVED|RELATION|ERROR" "$OUT/monitor.txt" | head; grep -E "^monitor on|^observations on|^relation checks on" "$OUT/monitor.txt"
for pass in $(seq "${PASSES:-2}"); do
  for b in "$BASE" "$BIN"; do
    echo "## pass $pass, $b"
    timeout 150 "$b/tokitai-bench-moe" --configs "${CONFIGS:-tiny:4096,medium:4096}" --steps 20 --curve-steps 2 --contracts off,warn 2>&1 | grep -E "ms/step|probe|settle"
  done
done > "$OUT/cost.log" 2>&1
cat "$OUT/cost.log"
data="--batch 4096 --dataset synth:quality:8192"
timeout 120 "$BIN/tokitai-train" --size tiny $data --steps 5 --device cuda --no-graphs --contracts strict --checkpoint-dir "$OUT/ck" > "$OUT/strict_tiny.txt" 2>&1
echo "strict tiny eager exit $?"; grep -iE "covered|launches" "$OUT/strict_tiny.txt" | tail -3
rm -rf "$OUT/ck"
