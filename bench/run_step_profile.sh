#!/usr/bin/env bash
# One call on the GPU machine: where one training step's kernel time goes.
# Nsight Compute times the first launches of `tokitai-bench-moe` (the
# sparse step, the GPU default; monitor off), and bench/step_profile.py
# sums one whole step (between two AdamW launches) by kernel and grid.
#   bash bench/run_step_profile.sh [CONFIG]   (default tiny:4096)
# Needs target/abx/split.tar.xz (bin/tokitai-bench-moe; stripped release
# binaries built on the CPU machine).
source "$(dirname "$0")/gpu_env.sh"
config="${1:-tiny:4096}"
BIN=/tmp/profile-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/split.tar.xz
timeout 400 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-count "${LAUNCHES:-1500}" \
  "$BIN/bin/tokitai-bench-moe" --configs "$config" --steps 2 --curve-steps 1 --contracts off > "$OUT/ncu-step.csv" 2> "$OUT/ncu-step.err"
echo "ncu exit $? lines $(wc -l < "$OUT/ncu-step.csv")"; tail -2 "$OUT/ncu-step.err"
python3 bench/step_profile.py "$OUT/ncu-step.csv" | tee "$OUT/step_profile.txt"
echo "commit $commit"
