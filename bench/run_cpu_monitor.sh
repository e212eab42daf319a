#!/usr/bin/env bash
# Issue 18: the contract monitor's cost on the CPU step, `warn` against
# `off`, for one or more builds alternated pass by pass on the same cores
# (a shared host's speed moves between minutes: compare within a pass).
#
#   BINS="target/cpu-bench-old target/cpu-bench" THREADS=16 PASSES=2 \
#       CONFIGS=nano:128,nano:4096,tiny:128 bash bench/run_cpu_monitor.sh
#
# Each BIN holds `tokitai-bench-moe` and a COMMIT file naming its build.
set -u
BINS=${BINS:-target/release}
CONFIGS=${CONFIGS:-nano:128,nano:4096,tiny:128}
STEPS=${STEPS:-15}
THREADS=${THREADS:-2}
CORES=${CORES:-0-$((THREADS - 1))}
PASSES=${PASSES:-2}
export TOKITAI_CACHE_DIR=${TOKITAI_CACHE_DIR:-$PWD/target/tokitai-cache}
lscpu | grep -E "Model name|^CPU\(s\)" || true
for pass in $(seq 1 "$PASSES"); do
    for bin in $BINS; do
        echo "== pass $pass, build $(cat "$bin/COMMIT" 2>/dev/null || echo "$bin"), $THREADS threads (cores $CORES)"
        taskset -c "$CORES" env RAYON_NUM_THREADS="$THREADS" "$bin/tokitai-bench-moe" --device cpu --configs "$CONFIGS" --steps "$STEPS" --curve-steps 1 --contracts off,warn,off,warn 2>&1 | grep -E "ours-sparse.*ms/step" | sed -E 's/ \(median.*//'
    done
done
