#!/usr/bin/env bash
# Verification speed (issue 17): `tokitaic verify examples/ops/*.tk --report`
# from an empty proof cache (cold) and again with the cache it left (warm),
# RUNS times each, with the per-kernel/phase profile of the last cold run.
# A benchmark, not a test: run it on an otherwise idle machine.
#   cargo build --release --bin tokitaic && bash bench/verify_speed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
BIN=target/release/tokitaic
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (dirty)')"
for i in $(seq "$RUNS"); do
    rm -rf "$WORK/cache" "$WORK/report"
    s=$(date +%s.%N)
    "$BIN" verify examples/ops/*.tk --report "$WORK/report" --cache "$WORK/cache" --timings >"$WORK/cold.out" 2>"$WORK/cold.err"
    e=$(date +%s.%N)
    cold=$(echo "$e - $s" | bc)
    s=$(date +%s.%N)
    "$BIN" verify examples/ops/*.tk --report "$WORK/report" --cache "$WORK/cache" >"$WORK/warm.out" 2>"$WORK/warm.err"
    e=$(date +%s.%N)
    warm=$(echo "$e - $s" | bc)
    echo "run $i: cold ${cold}s, warm ${warm}s; $(grep 'mutation test of the verifier' "$WORK/cold.out")"
done
grep -h "proof cache" "$WORK/warm.err"
echo
echo "profile of the last cold run (CPU seconds summed over threads):"
sed -n '/seconds per kernel/,$p' "$WORK/cold.err"
