#!/usr/bin/env bash
# One call on the GPU machine (issue 21): the contract-checked tuner.
# 1. `tokitai-bench-kernels --tune` times, for each workload's launch,
#    every proved candidate its dims admit and stores the fastest in the
#    device's tuning table ($TOKITAI_CACHE_DIR/tuning); tuning.md lists
#    every candidate with its proof status, time and the choice.
# 2. The same binary with the table (tuned) and with TOKITAI_TUNING=off
#    (the compiler's order), twice each, alternating; PyTorch and Triton
#    in the same call.
# 3. Every row candidate forced in turn (TOKITAI_FORCE) through
#    tokitai-gpucheck: a tuner may pick any proved candidate, so each is
#    checked against the exact oracle on the GPU.
# Ours with the contract monitor off. Needs target/release/
# tokitai-bench-kernels and tokitai-gpucheck built here and carried.
source "$(dirname "$0")/gpu_env.sh"
only=(softmax layernorm row_norm_sq "moe nano" "moe tiny" adamw sgd_momentum gelu mse_grad)
bench=./target/release/tokitai-bench-kernels
rm -rf "$TOKITAI_CACHE_DIR/tuning"
export TOKITAI_CONTRACTS=off
$bench --only "${only[@]}" --tune --tune-report "$OUT/tuning.md" --json "$OUT/tune.json" 2>&1 | tee -a "$OUT/tuning.log"
for i in 1 2; do
  $bench --only "${only[@]}" --json "$OUT/tuned_$i.json" 2>&1 | tee -a "$OUT/tuning.log"
  TOKITAI_TUNING=off $bench --only "${only[@]}" --json "$OUT/default_$i.json" 2>&1 | tee -a "$OUT/tuning.log"
done
cp -r "$TOKITAI_CACHE_DIR/tuning" "$OUT/table"
python3 bench/torch_ref.py --only "${only[@]}" --json "$OUT/torch.json" 2>&1 | tail -30 | tee -a "$OUT/tuning.log"
python3 bench/triton_ref.py --only "${only[@]}" --json "$OUT/triton.json" 2>&1 | tail -30 | tee -a "$OUT/tuning.log"
for i in 1 2; do
  python3 bench/report.py "$OUT/tuned_$i.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit" > "$OUT/tuned_$i.md"
  python3 bench/report.py "$OUT/default_$i.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit" > "$OUT/default_$i.md"
done
unset TOKITAI_CONTRACTS
for k in softmax_fwd row_norm_sq; do
  for c in b128 b512 c128x1 c256x1 c256x2 c512x2; do
    echo "== TOKITAI_FORCE=${k}_$c" | tee -a "$OUT/forced.log"
    TOKITAI_FORCE="${k}_$c" ./target/release/tokitai-gpucheck --only "$k" 2>&1 | tail -2 | tee -a "$OUT/forced.log"
  done
done
