#!/usr/bin/env bash
# One call on the GPU machine (issues 19, 20): contractions whose sums are
# too short for the warpgroup unit's bound (64 to 127: an expert's first
# layer, `Linear(96, h)`) on `mma.sync` (`<kernel>_mma`) instead of CUDA
# cores. gpucheck with the choice and with `_mma` forced, the first
# layer timed with the variant and without (`TOKITAI_SKIP_VARIANTS=mma`)
# beside PyTorch, then the tiny step with and without, alternating.
# Needs target/abx/split.tar.xz (bin/tokitai-gpucheck,
# bin/tokitai-bench-kernels, bin/tokitai-bench-moe).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/short-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/split.tar.xz
MMA=linear_fwd_mma,linear_gelu_fwd_mma,linear_bwd_x_mma,linear_bwd_w_mma
{
  echo "## gpucheck --only linear (the choice)"
  TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --only linear 2>&1 | grep -E "FAIL|ERROR|passed|failed" | tail -5
  echo "## gpucheck --only linear, forced: $MMA"
  TOKITAI_FORCE=$MMA TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --only linear 2>&1 | grep -E "FAIL|ERROR|passed|failed" | tail -5
} 2>&1 | tee "$OUT/check.log"
bench() { TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "${@:2}" --json "$OUT/$1.json" 2>&1 | tee -a "$OUT/bench.log" | grep -E "first"; }
bench chosen first
TOKITAI_SKIP_VARIANTS=mma bench without first
python3 bench/torch_ref.py --only first --json "$OUT/torch.json" 2>&1 | grep first
ab_tiny_steps "$BIN/bin" TOKITAI_SKIP_VARIANTS "with mma.sync for short sums" "without mma.sync for short sums" mma 2>&1 | tee "$OUT/step.log"
echo "commit $commit"
