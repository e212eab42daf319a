#!/usr/bin/env bash
# One call on the GPU machine (issue 19): the warp-specialised contraction
# (`<kernel>_ws`) with its ring filled by bulk tensor copies (TMA, 128-byte
# swizzle). Correctness first, every `_ws` form forced through gpucheck
# (ragged and aligned shapes, both dtypes, all three layouts of the linear
# layers) and under compute-sanitizer; then our gemm and linear workloads
# timed with the form and without it (TOKITAI_SKIP_VARIANTS=ws) beside
# PyTorch (cuBLAS) and autotuned Triton, in one run. Carry the release
# binaries:  bash bench/run_tma.sh
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/release}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
{
  ws_forced_gpucheck "$BIN"
  echo "## compute-sanitizer memcheck, gemm_f16_ws forced"
  TOKITAI_FORCE=$WS_FORMS TOKITAI_CONTRACTS=off compute-sanitizer --tool memcheck "$BIN/tokitai-gpucheck" --only gemm_f16 --small 2>&1 | tail -6
  echo "## compute-sanitizer racecheck, gemm_f16_ws forced"
  TOKITAI_FORCE=$WS_FORMS TOKITAI_CONTRACTS=off compute-sanitizer --tool racecheck "$BIN/tokitai-gpucheck" --only gemm_f16 --small 2>&1 | tail -6
} > "$OUT/check.log" 2>&1
cat "$OUT/check.log"
ONLY=("gemm_f16 wg" "gemm_bf16 wg" "linear_")
TOKITAI_CONTRACTS=off "$BIN/tokitai-bench-kernels" --only "${ONLY[@]}" --json "$OUT/ws_on.json" 2>&1 | tee "$OUT/bench.log"
TOKITAI_SKIP_VARIANTS=ws TOKITAI_CONTRACTS=off "$BIN/tokitai-bench-kernels" --only "${ONLY[@]}" --json "$OUT/ws_off.json" 2>&1 | tee -a "$OUT/bench.log"
python3 bench/torch_ref.py --only "${ONLY[@]}" --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/bench.log"
timeout 240 python3 bench/triton_ref.py --only "gemm_f16 wg" --json "$OUT/triton.json" 2>&1 | tee -a "$OUT/bench.log"
for form in on off; do
  echo "## warp-specialised form (bulk copies) $form"
  python3 bench/report.py "$OUT/ws_$form.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit"
done > "$OUT/tma_table.md" 2>&1
cat "$OUT/tma_table.md"
tar czf "$OUT/all.tgz" -C "$OUT" --exclude all.tgz .
