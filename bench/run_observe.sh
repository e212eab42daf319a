#!/usr/bin/env bash
# GPU calls for issue 18's monitor cost: kernels observe their outputs
# (each store folds its value; each warp merges into the launch's
# observation words), so the monitor no longer probes what a kernel of
# the step wrote. Two parts, one call each:
#   PART=check: gpucheck --monitor (device verdicts agree with the host's;
#     every observed range equals the output's range read back), gpucheck
#     of every kernel with the monitor on (observations merged), the `_ws`
#     forms forced, memcheck, and nano/tiny runs under --contracts strict
#     with and without graphs, their recorded launches against the f64
#     oracle on the GPU and the CPU.
#   PART=cost: the monitor's cost on the step (off against warn) with the
#     new build ($BIN) and the one before ($BASE), alternating, and the new
#     one with TOKITAI_OBSERVE=off; the kernels' own speed with the
#     monitor off (the folds are printed, skipped at run time), both
#     builds alternating.
# The binaries are carried in two calls (64 MiB): PART=check with
# BIN=target/obs (gpucheck, train, check-launches), PART=cost with
# BIN=target/obsc (bench-moe, bench-kernels) and BASE=target/base, each
# directory stripped.
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/obs}"
BASE="${BASE:-target/base}"
case "${PART:-check}" in
check)
  nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
  timeout 200 "$BIN/tokitai-gpucheck" --monitor > "$OUT/monitor.txt" 2>&1
  echo "gpucheck --monitor exit $?"; grep -E "DISAGREE|OBSERVED|ERROR" "$OUT/monitor.txt" | head; grep -E "^monitor on|^observations on" "$OUT/monitor.txt"
  TOKITAI_CONTRACTS=warn timeout 150 "$BIN/tokitai-gpucheck" --small > "$OUT/gpucheck.txt" 2>&1
  echo "gpucheck --small (monitor on) exit $?"; tail -3 "$OUT/gpucheck.txt"
  ws_forced_gpucheck "$BIN" > "$OUT/ws_forced.txt" 2>&1; grep -E "passed|failed|FAIL" "$OUT/ws_forced.txt" | tail -6
  TOKITAI_CONTRACTS=warn timeout 120 compute-sanitizer --tool memcheck "$BIN/tokitai-gpucheck" --only gelu --small > "$OUT/memcheck.txt" 2>&1
  echo "memcheck gpucheck gelu exit $?"; tail -2 "$OUT/memcheck.txt"
  timeout 150 compute-sanitizer --tool memcheck "$BIN/tokitai-train" --size nano --steps 3 --device cuda --quiet --contracts strict --checkpoint-dir "$OUT/mc" > "$OUT/memcheck_train.txt" 2>&1
  echo "memcheck nano train exit $?"; tail -2 "$OUT/memcheck_train.txt"
  strict_runs_and_recorded_launches "$BIN"
  ;;
cost)
  for pass in $(seq "${PASSES:-1}"); do
    for b in "$BASE" "$BIN"; do
      echo "## pass $pass, $b"
      timeout 160 "$b/tokitai-bench-moe" --configs nano:128,tiny:4096,medium:4096 --steps 20 --curve-steps 2 --contracts off,warn \
        --json "$OUT/moe_$(basename "$b")_$pass.json" 2>&1 | grep -E "ms/step|probe|settle"
    done
  done > "$OUT/cost.log" 2>&1
  # The same build with the kernels' observation switched off (the
  # monitor probes every input, as before): what observing saves.
  echo "## $BIN, TOKITAI_OBSERVE=off" >> "$OUT/cost.log"
  TOKITAI_OBSERVE=off timeout 120 "$BIN/tokitai-bench-moe" --configs nano:128,tiny:4096 --steps 20 --curve-steps 2 --contracts off,warn \
    --json "$OUT/moe_observe_off.json" 2>&1 | grep -E "ms/step|probe|settle" >> "$OUT/cost.log"
  cat "$OUT/cost.log"
  ONLY=("gemm_f16 wg 4096" "moe tiny" "linear_fwd f16 4096^3" "gelu_fwd" "layernorm_fwd f16 16384" "adamw" "softmax_fwd f16 16384")
  for pass in $(seq "${PASSES:-1}"); do
    for b in "$BASE" "$BIN"; do
      TOKITAI_CONTRACTS=off timeout 100 "$b/tokitai-bench-kernels" --only "${ONLY[@]}" --json "$OUT/kernels_$(basename "$b")_$pass.json" > "$OUT/kernels_$(basename "$b")_$pass.log" 2>&1
      echo "bench-kernels $b pass $pass exit $?"
    done
  done
  ;;
esac
