#!/usr/bin/env bash
# GPU calls for issue 18's monitor cost, eighteenth session: row kernels'
# observing twins (launched in place of the choice while the monitor is
# on), probes that compare in f32, and one observation merge a block.
# (The session's calls also timed probes laid out in rows the cached form
# reads, TOKITAI_PROBE_CACHED_ROWS, since removed: bench/RESULTS.md.)
# Two parts:
#   PART=cost: the monitor's cost on the step (off against warn), this
#     build ($BIN) and the one before ($BASE) alternating, $PASSES passes;
#     then Nsight Compute over two eager tiny steps under warn (every
#     kernel's time, DRAM bytes), for the probes' share.
#   PART=check: gpucheck --monitor (device verdicts agree with the host's;
#     every observed range, the twins' included, equals the data's),
#     gpucheck of every kernel with the monitor on, memcheck, and nano/tiny
#     runs under --contracts strict with and without graphs, their recorded
#     launches against the f64 oracle on the GPU and the CPU.
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/twin}"
BASE="${BASE:-target/prof}"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
case "${PART:-cost}" in
cost)
  for pass in $(seq "${PASSES:-2}"); do
    for b in "$BASE" "$BIN"; do
      echo "## pass $pass, $b"
      timeout 200 "$b/tokitai-bench-moe" --configs tiny:4096,medium:4096,nano:128 --steps 20 --curve-steps 2 --contracts off,warn 2>&1 | grep -E "ms/step|probe|settle"
    done
  done > "$OUT/cost.log" 2>&1
  cat "$OUT/cost.log"
  data="--batch 4096 --dataset synth:quality:8192"
  timeout 200 ncu --clock-control none --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$BIN/tokitai-train" --size tiny $data --steps 2 --device cuda --no-graphs --quiet --contracts warn --checkpoint-dir "$OUT/c" \
    > "$OUT/ncu-warn.csv" 2> "$OUT/ncu-warn.err"
  echo "ncu warn exit $? lines $(wc -l < "$OUT/ncu-warn.csv")"; tail -2 "$OUT/ncu-warn.err"
  rm -rf "$OUT/c"
  ;;
check)
  timeout 200 "$BIN/tokitai-gpucheck" --monitor > "$OUT/monitor.txt" 2>&1
  echo "gpucheck --monitor exit $?"; grep -E "DISAGREE|OBSERVED|ERROR" "$OUT/monitor.txt" | head; grep -E "^monitor on|^observations on" "$OUT/monitor.txt"
  TOKITAI_CONTRACTS=warn timeout 150 "$BIN/tokitai-gpucheck" --small > "$OUT/gpucheck.txt" 2>&1
  echo "gpucheck --small (monitor on) exit $?"; grep -E "FAIL|ERROR" "$OUT/gpucheck.txt" | head -5; tail -3 "$OUT/gpucheck.txt"
  TOKITAI_CONTRACTS=warn timeout 120 compute-sanitizer --tool memcheck "$BIN/tokitai-gpucheck" --only layernorm --small > "$OUT/memcheck.txt" 2>&1
  echo "memcheck gpucheck layernorm exit $?"; tail -2 "$OUT/memcheck.txt"
  strict_runs_and_recorded_launches "$BIN"
  # The warp-specialised contractions forced (their observing twins run
  # while the monitor is on).
  WS_CONTRACTS=warn ws_forced_gpucheck "$BIN" > "$OUT/ws_forced.txt" 2>&1; grep -E "passed|failed|FAIL" "$OUT/ws_forced.txt" | tail -6
  ;;
esac
