#!/usr/bin/env bash
# Issue 18: where the contract monitor's time goes at tiny b4096. Nsight
# Compute times every kernel of two eager tiny steps under --contracts warn
# and off (duration, DRAM bytes), so the probes' share of the step and
# their achieved bandwidth can be read off; then the step itself off/warn.
# Binaries (stripped) in $BIN.
source "$(dirname "$0")/../gpu_env.sh"
BIN="${BIN:-target/prof}"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
# Warm the kernel cache outside the profiler.
"$BIN/tokitai-train" --size tiny --batch 4096 --dataset synth:quality:8192 --steps 1 --device cuda --no-graphs --quiet --contracts warn --checkpoint-dir "$OUT/w" > /dev/null 2>&1
for mode in warn off; do
  timeout 240 ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$BIN/tokitai-train" --size tiny --batch 4096 --dataset synth:quality:8192 --steps 2 --device cuda --no-graphs --quiet --contracts $mode --checkpoint-dir "$OUT/c-$mode" \
    > "$OUT/ncu-$mode.csv" 2> "$OUT/ncu-$mode.err"
  echo "ncu $mode exit $? lines $(wc -l < "$OUT/ncu-$mode.csv")"
done
rm -rf "$OUT"/c-* "$OUT/w"
timeout 150 "$BIN/tokitai-bench-moe" --configs tiny:4096,nano:128 --steps 20 --curve-steps 2 --contracts off,warn 2>&1 | grep -E "ms/step|probe|settle" | tee "$OUT/cost.txt"
