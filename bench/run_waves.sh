#!/usr/bin/env bash
# One call on the GPU machine (issue 20): the warp-specialised form on 128
# x 128 tiles (`<kernel>_ws128`) against its 256 x 128 tiles (`_ws`) where
# the latter leave a thin last wave: an expert's wide layers at the routed
# rows of a tiny step. Correctness first (every `_ws128` forced through
# gpucheck and compute-sanitizer), then the wave workloads timed with the
# compiler's choice, `_ws128` forced, `_ws` forced and `_wg4` forced,
# beside PyTorch, then (PARTS containing step) the tiny step with and
# without `_ws128`, alternating. Needs target/abx/split.tar.xz
# (bin/tokitai-gpucheck, bin/tokitai-bench-kernels, bin/tokitai-bench-moe).
source "$(dirname "$0")/gpu_env.sh"
PARTS="${PARTS:-check time}"
BIN=/tmp/waves-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/split.tar.xz
WS128=gemm_f16_ws128,gemm_bf16_ws128,linear_fwd_ws128,linear_gelu_fwd_ws128,linear_bwd_x_ws128,linear_bwd_w_ws128
WS=linear_fwd_ws,linear_bwd_x_ws,linear_bwd_w_ws
WG4=linear_fwd_wg4,linear_bwd_x_wg4,linear_bwd_w_wg4
if [[ $PARTS == *check* ]]; then
  {
    ws_forced_gpucheck "$BIN/bin" "$WS128"
    sanitize_forced "$BIN/bin" "$WS128" gemm_f16
  } > "$OUT/check.log" 2>&1
  grep -E "^##|passed|failed|FAIL|ERROR SUMMARY|RACECHECK SUMMARY|errors" "$OUT/check.log"
fi
if [[ $PARTS == *time* ]]; then
  bench() { TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only wave --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1; grep -E "wave" "$OUT/$1.log" | sed "s/^/$1 /"; }
  bench chosen
  TOKITAI_FORCE=$WS128 bench ws128
  TOKITAI_FORCE=$WS bench ws
  TOKITAI_FORCE=$WG4 bench wg4
  bench chosen2
  python3 bench/torch_ref.py --only wave --json "$OUT/torch.json" 2>&1 | grep wave
fi
if [[ $PARTS == *step* ]]; then
  ab_tiny_steps "$BIN/bin" TOKITAI_SKIP_VARIANTS "with ws128" "without ws128" ws128 2>&1 | tee "$OUT/step.log"
fi
echo "commit $commit"
