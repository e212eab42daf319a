# Sourced by the GPU scripts: run from the repository root, outputs under
# $OUT (./out when unset), the CUDA libraries found, a private kernel cache,
# the commit being measured in $commit.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TOKITAI_CACHE_DIR="${TOKITAI_CACHE_DIR:-/tmp/tokitai-cache}"
export PYTHONUNBUFFERED=1
commit="${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"

# Every warp-specialised form (issue 19), for TOKITAI_FORCE.
WS_FORMS=gemm_f16_ws,gemm_bf16_ws,linear_fwd_ws,linear_bwd_x_ws,linear_bwd_w_ws

# The warp-specialised forms walking the output in groups of tile rows
# (issue 19, `<kernel>_ws8`).
WS8_FORMS=gemm_f16_ws8,gemm_bf16_ws8,linear_fwd_ws8,linear_bwd_x_ws8,linear_bwd_w_ws8

# The warpgroup forms without a producer (issue 19).
WG_FORMS=gemm_f16_wg4,gemm_bf16_wg4,linear_fwd_wg4,linear_bwd_x_wg4,linear_bwd_w_wg4,linear_fwd_wg,linear_bwd_x_wg,linear_bwd_w_wg

# gpucheck with every warp-specialised form (or the forms in $2) forced:
# random and ragged shapes of both gemms (`--small`: no 8192^3 CPU
# oracle), the linear layers with their 1024^3 workloads, gemm 4096^3.
# Binaries in $1; the monitor off unless WS_CONTRACTS says otherwise.
ws_forced_gpucheck() {
  local bin="$1" forms="${2:-$WS_FORMS}" i=0 only flags
  for only in "gemm --small" "linear" "gemm_f16 wg 4096^3"; do
    i=$((i + 1))
    echo "## gpucheck --only $only, forced: $forms"
    set -- $only
    if [ "${2:-}" = "--small" ]; then flags=(--only "$1" --small); else flags=(--only "$only"); fi
    TOKITAI_FORCE=$forms TOKITAI_CONTRACTS="${WS_CONTRACTS:-off}" timeout 150 "$bin/tokitai-gpucheck" "${flags[@]}" --json "$OUT/gpucheck_${i}_${forms%%,*}.json" 2>&1 | tail -40
  done
}

# Issue 18's acceptance runs, binaries in $1: nano (20 steps) and tiny (5)
# under --contracts strict with graphs and without, the runs without
# recording a sample of real launches that tokitai-check-launches then
# replays against the f64 oracle on the GPU and on the CPU.
strict_runs_and_recorded_launches() {
  local bin="$1" size steps graphs flag rec dev
  for size in nano tiny; do
    steps=20; [ "$size" = tiny ] && steps=5
    for graphs in graphs no-graphs; do
      flag=""; [ "$graphs" = no-graphs ] && flag="--no-graphs"
      rec=""; [ "$graphs" = no-graphs ] && rec="--record-launches $OUT/rec-$size"
      timeout 150 "$bin/tokitai-train" --size "$size" --steps "$steps" --device cuda $flag --quiet \
        --contracts strict $rec --checkpoint-dir "$OUT/run-$size-$graphs" > "$OUT/train-$size-$graphs.txt" 2>&1
      echo "train $size $graphs strict exit $?"; grep -A2 "CONTRACTS" "$OUT/train-$size-$graphs.txt" | head -3
      rm -rf "$OUT/run-$size-$graphs"
    done
    for dev in cuda cpu; do
      timeout 120 "$bin/tokitai-check-launches" "$OUT/rec-$size" --device "$dev" > "$OUT/check-$size-$dev.txt" 2>&1
      echo "check $size on $dev exit $?"; tail -1 "$OUT/check-$size-$dev.txt"
    done
    rm -rf "$OUT/rec-$size"
  done
}

# compute-sanitizer's memcheck, racecheck and synccheck over gpucheck with
# the forms in $2 forced, on `--only $3 --small`. Binaries in $1.
sanitize_forced() {
  local bin="$1" forms="$2" only="$3" tool
  for tool in memcheck racecheck synccheck; do
    echo "## compute-sanitizer $tool, forced: $forms"
    TOKITAI_FORCE=$forms TOKITAI_CONTRACTS=off timeout 200 compute-sanitizer --tool $tool "$bin/tokitai-gpucheck" --only "$only" --small 2>&1 | tail -4
  done
}

# The tiny b4096 step (sparse, dense, dense graph) two ways, alternating,
# two passes: labelled $3 with the ablation switch $2 unset, and $4 with
# it set to $5 (TOKITAI_SKIP_VARIANTS=ws128, TOKITAI_UNFUSED=...).
# Binaries in $1.
ab_tiny_steps() {
  local bin="$1" switch="$2" with="$3" without="$4" value="$5" pass mode setting
  for pass in 1 2; do
    for mode in "$with" "$without"; do
      setting=""; [ "$mode" = "$without" ] && setting="$value"
      echo "## tiny:4096 step, $mode, pass $pass"
      env "$switch=$setting" timeout 200 "$bin/tokitai-bench-moe" --configs tiny:4096 --steps 20 --curve-steps 2 --contracts off 2>&1 | grep -E "ms/step" | grep -v replay
    done
  done
}
