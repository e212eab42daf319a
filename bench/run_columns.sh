#!/usr/bin/env bash
# One call on the GPU machine (issue 21): the column form of column sums
# (`<kernel>_col`, `schedule::column`: a block of 1024 threads per 16
# columns, 64 thread groups down the rows, 4 chains a thread) against the row schedule's
# block a column. Correctness first: gpucheck with the compiler's choice
# (the column form from 256 columns) and with every column form forced,
# compute-sanitizer on the forced form; then the column sums timed three
# ways (the choice, the column form skipped, the tuner's other column
# shapes forced) beside PyTorch; then the tiny MoE step with the form and
# without, alternating.
# Needs target/abx/columns.tar.xz (bin/tokitai-gpucheck,
# bin/tokitai-bench-kernels, bin/tokitai-bench-moe; stripped release
# binaries built on the CPU machine).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/columns-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/columns.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
COL=layernorm_bwd_params_col,bias_grad_col,col_sum_col
WIDE=layernorm_bwd_params_col1024x16x8,bias_grad_col1024x16x8,col_sum_col1024x16x8
{
  for only in layernorm_bwd_params bias_grad col_sum; do
    echo "## gpucheck --only $only (the choice)"
    TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --only $only 2>&1 | grep -v " ok " | tail -5
    echo "## gpucheck --only $only, forced: $COL,$WIDE"
    TOKITAI_FORCE=$COL,$WIDE TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --only $only 2>&1 | grep -v " ok " | tail -5
    echo "## gpucheck --only $only, forced: $WIDE"
    TOKITAI_FORCE=$WIDE TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --only $only 2>&1 | grep -v " ok " | tail -5
  done
  for forms in $COL $WIDE; do
    for tool in memcheck racecheck synccheck; do
      echo "## compute-sanitizer $tool, forced: $forms"
      TOKITAI_FORCE=$forms TOKITAI_CONTRACTS=off timeout 200 compute-sanitizer --tool $tool "$BIN/bin/tokitai-gpucheck" --only layernorm_bwd_params --small 2>&1 | tail -2
    done
  done
} > "$OUT/check.log" 2>&1
cat "$OUT/check.log"
ONLY=("bias_grad" "layernorm_bwd_params")
bench() { TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "${@:2}" --json "$OUT/$1.json" 2>&1 | tee -a "$OUT/bench.log"; }
bench chosen "${ONLY[@]}"
TOKITAI_SKIP_VARIANTS=col bench rows "${ONLY[@]}"
SHAPES="${SHAPES:-col512x16x8 col1024x16x8 col1024x16x4 col1024x32x8 col256x16x16 col256x32x16}"
for s in $SHAPES; do
  TOKITAI_FORCE=layernorm_bwd_params_$s,bias_grad_$s bench $s "${ONLY[@]}"
done
bench chosen2 "${ONLY[@]}"
python3 bench/torch_ref.py --only "${ONLY[@]}" --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/bench.log"
for run in chosen rows $SHAPES chosen2; do
  echo "## $run"
  python3 bench/report.py "$OUT/$run.json" "$OUT/torch.json" --commit "$commit"
done > "$OUT/columns_table.md" 2>&1
grep -E "^## |layernorm_bwd_params|bias_grad" "$OUT/columns_table.md" | cut -d'|' -f1-5,8-9
# The tiny step (sparse, the GPU default), with the form and without.
for pass in ${STEP_PASSES:-1 2}; do
  for mode in with without; do
    skip=""; [ $mode = without ] && skip=col
    echo "## ${STEP_CONFIGS:-tiny:4096} step, $mode the column form, pass $pass"
    TOKITAI_SKIP_VARIANTS=$skip timeout 200 "$BIN/bin/tokitai-bench-moe" --configs ${STEP_CONFIGS:-tiny:4096} --steps 20 --curve-steps 2 --contracts off 2>&1 | grep -E "ms/step"
  done
done > "$OUT/step.log" 2>&1
cat "$OUT/step.log"
echo "commit $commit"
