#!/usr/bin/env bash
# Issue 18: should kernels observe their outputs inside captured steps too,
# now that a block (not each warp) merges? The same build with
# TOKITAI_OBSERVE=eager and =all alternating, $PASSES passes, off/warn;
# then nano and tiny under --contracts strict with graphs, observing all.
source "$(dirname "$0")/../gpu_env.sh"
BIN="${BIN:-target/twin}"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
for pass in $(seq "${PASSES:-2}"); do
  for at in eager all; do
    echo "## pass $pass, TOKITAI_OBSERVE=$at"
    TOKITAI_OBSERVE=$at timeout 200 "$BIN/tokitai-bench-moe" --configs tiny:4096,medium:4096,nano:128 --steps 20 --curve-steps 2 --contracts off,warn 2>&1 | grep -E "ms/step|probe|settle"
  done
done > "$OUT/cost.log" 2>&1
for size in nano tiny; do
  steps=20; [ "$size" = tiny ] && steps=5
  timeout 150 "$BIN/tokitai-train" --size "$size" --steps "$steps" --device cuda --quiet --contracts strict --checkpoint-dir "$OUT/run-$size" > "$OUT/train-$size.txt" 2>&1
  echo "train $size graphs strict (observing all) exit $?"; grep "CONTRACTS" "$OUT/train-$size.txt"
  rm -rf "$OUT/run-$size"
done
