#!/usr/bin/env bash
# One call on the GPU machine (issues 19, 20): the bound of the
# warp-specialised contraction's bulk-copy form on 10^6 inputs per kernel
# (every `_ws` forced wherever its guard admits the case: sums of 192 or
# more), and the MoE step with the linear layers on it
# (`tokitai-bench-moe`, the monitor off and on), against the same step
# without the form (TOKITAI_SKIP_VARIANTS=ws). Carry the release
# binaries:  bash bench/run_tma_soundness.sh
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/release}"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
{
  for k in gemm_f16 linear_bwd_x linear_bwd_w; do
    echo "## soundness $k, _ws forced"
    TOKITAI_FORCE=$WS_FORMS TOKITAI_CONTRACTS=off timeout 75 "$BIN/tokitai-gpucheck" --soundness 1000000 --only "$k" --json "$OUT/sound_$k.json" 2>&1 | tail -4
  done
} > "$OUT/soundness.log" 2>&1
cat "$OUT/soundness.log"
{
  echo "## MoE step, default choice"
  "$BIN/tokitai-bench-moe" --configs nano:128,tiny:4096,medium:4096 --steps 20 --contracts off,warn --json "$OUT/moe_on.json" 2>&1 | tail -25
  echo "## MoE step, without _ws"
  TOKITAI_SKIP_VARIANTS=ws "$BIN/tokitai-bench-moe" --configs tiny:4096,medium:4096 --steps 20 --contracts off --json "$OUT/moe_off.json" 2>&1 | tail -15
} > "$OUT/moe.log" 2>&1
cat "$OUT/moe.log"
tar czf "$OUT/all.tgz" -C "$OUT" --exclude all.tgz .
