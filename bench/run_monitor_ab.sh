#!/usr/bin/env bash
# GPU call for issue 18's monitor cost (twenty-seventh session on): this
# build ($BIN) against the one before ($BASE), in one call:
#   1. correctness of this build: gpucheck --monitor (device verdicts
#      against the host's, observed ranges and relation checks against the
#      data), gpucheck --small with the monitor on (kernels still right
#      when they observe), strict tiny and nano runs (every launch covered);
#   2. with NCU=1, Nsight Compute over two eager tiny steps under --contracts
#      warn, each build (every kernel's time: what the monitor adds where);
#   3. the monitor's cost on the step (off against warn), the builds
#      alternating, $PASSES passes, $CONFIGS.
# Binaries (stripped) in $BIN (train, bench-moe, gpucheck) and $BASE
# (bench-moe; train too for NCU=1).
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/ab-new}"
BASE="${BASE:-target/ab-old}"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
timeout 240 "$BIN/tokitai-gpucheck" --monitor > "$OUT/monitor.txt" 2>&1
echo "gpucheck --monitor exit $?"; grep -E "DISAGREE|OBSERVED|RELATION|ERROR" "$OUT/monitor.txt" | head; grep -E "^monitor on|^observations on|^relation checks on" "$OUT/monitor.txt"
TOKITAI_CONTRACTS=warn timeout 240 "$BIN/tokitai-gpucheck" --small > "$OUT/small_warn.txt" 2>&1
echo "gpucheck --small, monitor on, exit $?"; tail -2 "$OUT/small_warn.txt"
data="--batch 4096 --dataset synth:quality:8192"
timeout 120 "$BIN/tokitai-train" --size tiny $data --steps 5 --device cuda --no-graphs --contracts strict --checkpoint-dir "$OUT/ck" > "$OUT/strict_tiny.txt" 2>&1
echo "strict tiny eager exit $?"; grep -iE "covered" "$OUT/strict_tiny.txt" | tail -1
timeout 120 "$BIN/tokitai-train" --size nano --steps 20 --device cuda --contracts strict --checkpoint-dir "$OUT/ck2" > "$OUT/strict_nano.txt" 2>&1
echo "strict nano (graphs) exit $?"; grep -iE "covered" "$OUT/strict_nano.txt" | tail -1
rm -rf "$OUT/ck" "$OUT/ck2"
if [ "${NCU:-0}" = 1 ]; then
  for b in "$BASE" "$BIN"; do
    name=$(basename "$b")
    "$b/tokitai-train" --size tiny $data --steps 1 --device cuda --no-graphs --quiet --contracts warn --checkpoint-dir "$OUT/w" > /dev/null 2>&1
    timeout 200 ncu --clock-control none --csv --metrics gpu__time_duration.sum "$b/tokitai-train" --size tiny $data --steps 2 --device cuda --no-graphs --quiet --contracts warn --checkpoint-dir "$OUT/c" > "$OUT/ncu-$name.csv" 2> /dev/null
    echo "ncu $name exit $? lines $(wc -l < "$OUT/ncu-$name.csv")"
    rm -rf "$OUT/c" "$OUT/w"
  done
fi
for pass in $(seq "${PASSES:-3}"); do
  for b in "$BASE" "$BIN"; do
    echo "## pass $pass, $b"
    timeout 150 "$b/tokitai-bench-moe" --configs "${CONFIGS:-tiny:4096}" --steps 20 --curve-steps 2 --contracts off,warn 2>&1 | grep -E "ms/step" | grep -v graph
  done
done > "$OUT/cost.log" 2>&1
cat "$OUT/cost.log"
