#!/usr/bin/env bash
# One call on the GPU machine (issue 19): the warp-specialised
# contraction's paired epilogue (two neighbouring outputs a 4-byte store)
# against the element-wise one. Correctness first: gpucheck with every
# `_ws` form forced, then every `_wg` and `_wg4` form (ragged shapes: odd
# output rows take the element-wise store beside the vector path),
# memcheck; then the release binaries
# built at the new commit ($BIN) and at the one before ($BASE) timed
# alternately, twice each, beside PyTorch (cuBLAS) and autotuned Triton,
# then the MoE step with both. Carry both builds' binaries:
#   BIN=target/release BASE=target/base bash bench/run_epilogue.sh
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/release}"
BASE="${BASE:-target/base}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
{
  ws_forced_gpucheck "$BIN"
  ws_forced_gpucheck "$BIN" "$WG_FORMS"
  echo "## compute-sanitizer memcheck, every _ws form forced (gemm, small)"
  TOKITAI_FORCE=$WS_FORMS TOKITAI_CONTRACTS=off timeout 200 compute-sanitizer --tool memcheck "$BIN/tokitai-gpucheck" --only gemm --small 2>&1 | tail -6
  echo "## compute-sanitizer memcheck, every _ws form forced (linear)"
  TOKITAI_FORCE=$WS_FORMS TOKITAI_CONTRACTS=off timeout 200 compute-sanitizer --tool memcheck "$BIN/tokitai-gpucheck" --only linear 2>&1 | tail -6
} > "$OUT/check.log" 2>&1
cat "$OUT/check.log"
ONLY=("gemm_f16 wg" "gemm_bf16 wg" "linear_")
for pass in 1 2; do
  TOKITAI_CONTRACTS=off "$BASE/tokitai-bench-kernels" --only "${ONLY[@]}" --json "$OUT/base_$pass.json" > "$OUT/bench_base_$pass.log" 2>&1
  TOKITAI_CONTRACTS=off "$BIN/tokitai-bench-kernels" --only "${ONLY[@]}" --json "$OUT/new_$pass.json" > "$OUT/bench_new_$pass.log" 2>&1
done
python3 bench/torch_ref.py --only "${ONLY[@]}" --json "$OUT/torch.json" > "$OUT/torch.log" 2>&1
timeout 240 python3 bench/triton_ref.py --only "gemm_f16 wg" --json "$OUT/triton.json" > "$OUT/triton.log" 2>&1
for run in base_1 new_1 base_2 new_2; do
  echo "## $run"
  python3 bench/report.py "$OUT/$run.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit"
done > "$OUT/table.md" 2>&1
cat "$OUT/table.md"
for b in "$BASE" "$BIN"; do
  echo "## MoE step, $b"
  TOKITAI_CONTRACTS=off timeout 200 "$b/tokitai-bench-moe" --configs nano:128,tiny:4096,medium:4096 --contracts off 2>&1 | tail -12
done > "$OUT/moe.log" 2>&1
cat "$OUT/moe.log"
tar czf "$OUT/all.tgz" -C "$OUT" --exclude all.tgz .
