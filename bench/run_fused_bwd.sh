#!/usr/bin/env bash
# One call on the GPU machine (issue 20): a hidden layer's GELU and
# LayerNorm backward as one launch (`layernorm_gelu_bwd`), and the forward
# that keeps no normalised rows for it (`layernorm_gelu_act`). gpucheck and
# compute-sanitizer on the LayerNorm kernels, the fused kernels and the
# ones they replace timed beside PyTorch, nano trained under --contracts
# strict, then the tiny step fused and unfused
# (`TOKITAI_UNFUSED=layernorm_gelu_bwd`), alternating, and one timeline of
# the fused sparse step. Needs $TARBALL (default target/abx/fbwd.tar.xz:
# bin/tokitai-gpucheck, bin/tokitai-bench-kernels, bin/tokitai-bench-moe,
# bin/tokitai-train).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/fbwd-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf "${TARBALL:-target/abx/fbwd.tar.xz}"
echo "## gpucheck --only layernorm"
TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --only layernorm --json "$OUT/gpucheck.json" > "$OUT/gpucheck.log" 2>&1
grep -E "layernorm_gelu|FAIL|ERROR|checks passed" "$OUT/gpucheck.log" | tail -16
for tool in memcheck racecheck synccheck; do
  echo "## compute-sanitizer $tool, --only layernorm_gelu --small"
  TOKITAI_CONTRACTS=off timeout 200 compute-sanitizer --tool $tool "$BIN/bin/tokitai-gpucheck" --only layernorm_gelu --small 2>&1 | tail -3
done
TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "moe tiny layernorm" "moe tiny gelu" --json "$OUT/kernels.json" > "$OUT/kernels.log" 2>&1
grep -E "moe tiny" "$OUT/kernels.log"
python3 bench/torch_ref.py --only "moe tiny layernorm" "moe tiny gelu" --json "$OUT/torch.json" 2>&1 | grep "moe tiny"
echo "## nano, 20 steps, cuda, --contracts strict; then the CPU"
for dev in cuda cpu; do
  timeout 200 "$BIN/bin/tokitai-train" --size nano --steps 20 --device $dev --quiet --contracts strict --checkpoint-dir "$OUT/nano-$dev" > "$OUT/nano-$dev.txt" 2>&1
  echo "nano $dev exit $?"; grep -iE "final|loss|CONTRACTS" "$OUT/nano-$dev.txt" | tail -4
  rm -rf "$OUT/nano-$dev"
done
ab_tiny_steps "$BIN/bin" TOKITAI_UNFUSED fused unfused layernorm_gelu_bwd 2>&1 | tee "$OUT/step.log"
echo "## timeline, tiny:4096, fused; the nano CPU-GPU curves over 20 steps"
timeout 300 "$BIN/bin/tokitai-bench-moe" --configs tiny:4096 --steps 3 --curve-steps 20 --contracts off --timeline "$OUT/timeline" > "$OUT/timeline.log" 2>&1
grep -E "^curve:|graph replay|ms/step|layernorm|gelu|busy|idle" "$OUT/timeline.log" | head -60
echo "commit $commit"
