#!/usr/bin/env bash
# One call on the GPU machine (issue 18):
# 1. the device monitor agrees with the host monitor (tokitai-gpucheck --monitor);
# 2. nano and tiny runs on the GPU under `--contracts strict`, as the
#    defaults run them (graphs) and launching every kernel (--no-graphs),
#    the eager runs recording a sample of their launches (a replayed graph
#    passes no launch through the recorder);
# 3. every recorded launch replayed on the GPU and on the CPU against the
#    f64 oracle within the bound evaluated for it;
# 4. the monitor's cost on the step, GPU and CPU: tokitai-bench-moe --contracts off,warn.
# Needs target/release/{tokitai-train,tokitai-check-launches,tokitai-gpucheck,
# tokitai-bench-moe} built here and carried. Outputs under $OUT (./out when unset).
source "$(dirname "$0")/gpu_env.sh"
./target/release/tokitai-gpucheck --monitor > "$OUT/monitor-agreement.txt" 2>&1
echo "gpucheck --monitor exit $?"; grep -E "DISAGREE|ERROR" "$OUT/monitor-agreement.txt" | head; tail -1 "$OUT/monitor-agreement.txt"
for size in nano tiny; do
  steps=20; [ "$size" = tiny ] && steps=5
  for graphs in graphs no-graphs; do
    flag=""; [ "$graphs" = no-graphs ] && flag="--no-graphs"
    rec=""; [ "$graphs" = no-graphs ] && rec="--record-launches $OUT/rec-$size"
    rm -rf "$OUT/run-$size-$graphs"; [ -n "$rec" ] && rm -rf "$OUT/rec-$size"
    ./target/release/tokitai-train --size "$size" --steps "$steps" --device cuda $flag --quiet \
      --contracts strict $rec --checkpoint-dir "$OUT/run-$size-$graphs" > "$OUT/train-$size-$graphs.txt" 2>&1
    echo "train $size $graphs strict exit $?"; grep -A3 "CONTRACTS" "$OUT/train-$size-$graphs.txt" | head -4
    rm -f "$OUT/run-$size-$graphs/checkpoint.safetensors"
  done
  for dev in cuda cpu; do
    ./target/release/tokitai-check-launches "$OUT/rec-$size" --device "$dev" > "$OUT/check-$size-$dev.txt" 2>&1
    echo "check $size on $dev exit $?"; tail -1 "$OUT/check-$size-$dev.txt"
  done
  rm -rf "$OUT/rec-$size"
done
./target/release/tokitai-bench-moe --configs nano:128,tiny:4096 --steps 30 --curve-steps 3 --contracts off,warn \
  --json "$OUT/monitor-cost.json" > "$OUT/monitor-cost.txt" 2>&1
echo "bench-moe exit $?"; grep "ms/step" "$OUT/monitor-cost.txt"
# The same on this machine's CPU (the default path), nano only.
./target/release/tokitai-bench-moe --device cpu --configs nano:128 --steps 30 --curve-steps 2 --contracts off,warn \
  --json "$OUT/monitor-cost-cpu.json" > "$OUT/monitor-cost-cpu.txt" 2>&1
echo "bench-moe cpu exit $?"; grep "ms/step" "$OUT/monitor-cost-cpu.txt"
