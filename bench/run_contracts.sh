#!/usr/bin/env bash
# One call on the GPU machine (issue 18): nano and tiny runs on the GPU
# under the contract monitor, recording a sample of their launches, then
# every recorded launch replayed on the GPU and on the CPU against the f64
# oracle within the bound evaluated for it.
# Needs target/release/tokitai-train and tokitai-check-launches built here
# and carried. Writes everything under $OUT (or ./out when OUT is unset).
source "$(dirname "$0")/gpu_env.sh"
for size in nano tiny; do
  steps=20; [ "$size" = tiny ] && steps=5
  rm -rf "$OUT/run-$size" "$OUT/rec-$size"
  ./target/release/tokitai-train --size "$size" --steps "$steps" --device cuda --no-graphs --quiet \
    --contracts warn --record-launches "$OUT/rec-$size" --checkpoint-dir "$OUT/run-$size" 2>&1 | tail -4
  echo "train $size exit ${PIPESTATUS[0]}"
  for dev in cuda cpu; do
    ./target/release/tokitai-check-launches "$OUT/rec-$size" --device "$dev" > "$OUT/check-$size-$dev.txt" 2>&1
    echo "check $size on $dev exit $?"; tail -1 "$OUT/check-$size-$dev.txt"
  done
  rm -rf "$OUT/rec-$size" "$OUT/run-$size/checkpoint.safetensors"
done
