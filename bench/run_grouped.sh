#!/usr/bin/env bash
# One call on the GPU machine (issue 19): the grouped walk of the
# warp-specialised contraction (`<kernel>_ws8`: a three-axis grid whose
# consecutive blocks walk eight tile rows of a column before the next).
# Correctness first, every `_ws8` forced through gpucheck and under
# compute-sanitizer (memcheck, racecheck, synccheck); then our gemm and
# linear workloads timed three ways (the compiler's choice, every `_ws8`
# forced, `_ws8` skipped) beside PyTorch (cuBLAS) and autotuned Triton, in
# one run, then the two large gemms once more in the other order.
# Needs the release binaries carried as target/abx/grouped.tar.xz (bin/
# tokitai-gpucheck, bin/tokitai-bench-kernels; built and stripped on the
# CPU machine).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/grouped-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/grouped.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
{
  ws_forced_gpucheck "$BIN/bin" "$WS8_FORMS"
  sanitize_forced "$BIN/bin" "$WS8_FORMS" gemm_f16
} > "$OUT/check.log" 2>&1
cat "$OUT/check.log"
ONLY=("gemm_f16 wg" "gemm_bf16 wg" "linear_")
bench() { TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "${@:2}" --json "$OUT/$1.json" 2>&1 | tee -a "$OUT/bench.log"; }
bench chosen "${ONLY[@]}"
TOKITAI_FORCE=$WS8_FORMS bench forced "${ONLY[@]}"
TOKITAI_SKIP_VARIANTS=ws8 bench without "${ONLY[@]}"
python3 bench/torch_ref.py --only "${ONLY[@]}" --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/bench.log"
timeout 240 python3 bench/triton_ref.py --only "gemm_f16 wg" --json "$OUT/triton.json" 2>&1 | tee -a "$OUT/bench.log"
LARGE=("gemm_f16 wg 8192^3" "gemm_f16 wg 4096^3")
TOKITAI_SKIP_VARIANTS=ws8 bench without2 "${LARGE[@]}"
bench chosen2 "${LARGE[@]}"
for run in chosen forced without chosen2 without2; do
  echo "## $run"
  python3 bench/report.py "$OUT/$run.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit"
done > "$OUT/grouped_table.md" 2>&1
cat "$OUT/grouped_table.md"
echo "commit $commit"
