#!/usr/bin/env bash
# One call on the GPU machine (issues 19, 20): the split-sum form of
# narrow contractions (`<kernel>_ks16`, `_ks32`, `schedule::split_sum`:
# 16 or 32 x 32 tiles, four thread groups splitting each slab of the
# sum, their partial tiles summed in a tree) against what launches took
# before it
# (the warpgroup unit's `_wg4`, or SIMT tiles). Correctness first:
# gpucheck with the compiler's choice and with the form forced (ragged
# rows, sums and columns), compute-sanitizer on the forced form; then the
# narrow workloads (the tiny head and router, and narrow outputs of more
# rows) timed with the form, without it, with each shape forced and with
# the SIMT 16 x 16 tiles, beside PyTorch; then the tiny MoE step with the form and
# without, alternating.
# Needs target/abx/split.tar.xz (bin/tokitai-gpucheck,
# bin/tokitai-bench-kernels, bin/tokitai-bench-moe; stripped release
# binaries built on the CPU machine), or the tarball TARBALL names.
# The narrow form (`schedule::narrow`, `<kernel>_nw`) is measured by the
# same script: SHAPES="nw nw4x2 nw8x2 nw4x4d256 ks32" WITHOUT=nw (the
# forms each forced, and the choice without them).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/split-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf "${TARBALL:-target/abx/split.tar.xz}"
# The forms checked and timed, and those skipped for the `without` run.
SHAPES="${SHAPES:-ks16 ks32 ks16x16}"
WITHOUT="${WITHOUT:-ks16,ks32}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
forms() { echo linear_fwd_$1,linear_gelu_fwd_$1,linear_bwd_x_$1,linear_bwd_w_$1; }
# PARTS: which of check, time and step to run (one device call may not
# hold all three).
PARTS="${PARTS:-check time step}"
if [[ $PARTS == *check* ]]; then
{
  echo "## gpucheck --only linear (the choice)"
  TOKITAI_CONTRACTS=off timeout 300 "$BIN/bin/tokitai-gpucheck" --only linear 2>&1 | grep -E "FAIL|ERROR|split sums|passed|failed" | tail -30
  for shape in $SHAPES; do
    echo "## gpucheck --only linear, forced: $(forms $shape)"
    TOKITAI_FORCE=$(forms $shape) TOKITAI_CONTRACTS=off timeout 300 "$BIN/bin/tokitai-gpucheck" --only linear 2>&1 | grep -E "FAIL|ERROR|split sums|passed|failed" | tail -30
    for tool in memcheck racecheck synccheck; do
      echo "## compute-sanitizer $tool, forced: $(forms $shape)"
      TOKITAI_FORCE=$(forms $shape) TOKITAI_CONTRACTS=off timeout 200 compute-sanitizer --tool $tool "$BIN/bin/tokitai-gpucheck" --only linear_fwd --small 2>&1 | tail -2
    done
  done
} > "$OUT/check.log" 2>&1
cat "$OUT/check.log"
fi
if [[ $PARTS == *time* ]]; then
ONLY=("head" "router" "narrow")
bench() { TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "${@:2}" --json "$OUT/$1.json" 2>&1 | tee -a "$OUT/bench.log"; }
bench chosen "${ONLY[@]}"
TOKITAI_SKIP_VARIANTS=$WITHOUT bench without "${ONLY[@]}"
TOKITAI_FORCE=linear_fwd_t16,linear_bwd_w_t16 bench t16 "${ONLY[@]}"
# Each shape of the form forced (`split_sum::SHAPES`, `TUNING`).
for shape in $SHAPES; do
  TOKITAI_FORCE=linear_fwd_$shape,linear_bwd_w_$shape bench $shape "${ONLY[@]}"
done
bench chosen2 "${ONLY[@]}"
python3 bench/torch_ref.py --only "${ONLY[@]}" --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/bench.log"
for run in chosen without t16 $SHAPES chosen2; do
  echo "## $run"
  python3 bench/report.py "$OUT/$run.json" "$OUT/torch.json" --commit "$commit"
done > "$OUT/split_table.md" 2>&1
grep -E "^## |head|router|narrow" "$OUT/split_table.md" | cut -d'|' -f1-5,8-9
fi
if [[ $PARTS == *step* ]]; then
# The tiny step (sparse, the GPU default), with the form and without.
for pass in ${STEP_PASSES:-1 2}; do
  for mode in with without; do
    skip=""; [ $mode = without ] && skip=$WITHOUT
    echo "## ${STEP_CONFIGS:-tiny:4096} step, $mode the forms skipped by the without run ($WITHOUT), pass $pass"
    TOKITAI_SKIP_VARIANTS=$skip timeout 200 "$BIN/bin/tokitai-bench-moe" --configs ${STEP_CONFIGS:-tiny:4096} --steps 20 --curve-steps 2 --contracts off 2>&1 | grep -E "ms/step"
  done
done > "$OUT/step.log" 2>&1
cat "$OUT/step.log"
fi
echo "commit $commit"
