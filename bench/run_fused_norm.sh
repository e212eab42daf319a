#!/usr/bin/env bash
# One call on the GPU machine (issue 20): a hidden layer's LayerNorm and
# GELU as one launch (`layernorm_gelu_fwd`). gpucheck on the LayerNorm
# kernels, the fused kernel and the two it replaces timed beside PyTorch,
# then the tiny step fused and unfused (`TOKITAI_UNFUSED=layernorm_gelu`),
# alternating. Needs target/abx/split.tar.xz (bin/tokitai-gpucheck,
# bin/tokitai-bench-kernels, bin/tokitai-bench-moe).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/fused-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/split.tar.xz
echo "## gpucheck --only layernorm"
TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --only layernorm --json "$OUT/gpucheck.json" > "$OUT/gpucheck.log" 2>&1
grep -E "layernorm_gelu|FAIL|ERROR|checks passed" "$OUT/gpucheck.log" | tail -12
TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "moe tiny layernorm" "moe tiny gelu" --json "$OUT/kernels.json" > "$OUT/kernels.log" 2>&1
grep -E "moe tiny" "$OUT/kernels.log"
python3 bench/torch_ref.py --only "moe tiny layernorm" "moe tiny gelu" --json "$OUT/torch.json" 2>&1 | grep "moe tiny"
ab_tiny_steps "$BIN/bin" TOKITAI_UNFUSED fused unfused layernorm_gelu 2>&1 | tee "$OUT/step.log"
echo "commit $commit"
