#!/usr/bin/env bash
# One call on the GPU machine (issue 24, item 2): train nano and tiny on the
# GPU, export each with a sample, and check the PyTorch reference module
# against our forward (bench/export_check.py). Needs target/release/
# tokitai-train built here and carried. Outputs under $OUT.
source "$(dirname "$0")/gpu_env.sh"
for cfg in "nano 20" "tiny 10"; do
  set -- $cfg
  size=$1; steps=$2
  dir="$OUT/run-$size"; rm -rf "$dir"
  ./target/release/tokitai-train --size "$size" --steps "$steps" --device cuda --quiet --checkpoint-dir "$dir" > "$OUT/train-$size.txt" 2>&1
  echo "train $size exit $?"; tail -1 "$OUT/train-$size.txt"
  /usr/bin/time -f "export $size: %e s" ./target/release/tokitai-train export --checkpoint-dir "$dir" -o "$OUT/export-$size/model.safetensors" --sample 256 --device cuda
  echo "export $size exit $?"
  python3 bench/export_check.py "$OUT/export-$size/model.safetensors" "$OUT/export-$size/model.sample.safetensors" --json "$OUT/export-check-$size.json"
  echo "check $size exit $?"
  rm -f "$dir/checkpoint.safetensors" "$OUT/export-$size/model.safetensors"
done
