#!/usr/bin/env bash
# Issue 22: ours against PyTorch on the same CPU cores, alternated. A shared
# host's speed moves by up to 2x between minutes (the H100 host's Xeon ran
# every one of our kernels and PyTorch's slower in a second pass of one
# call), so one pass of ours followed by one of PyTorch compares two
# machines. Here each pass runs ours, then PyTorch, PASSES times, and the
# summary gives per pass the ratio of our default mode (sparse dispatch,
# contracts off) to PyTorch's best mode of that pass, and their median.
#
#   BIN=target/cpu-bench THREADS=2 CORES=0-1 PASSES=3 CONFIGS=nano:4096 \
#       OUT=/tmp bash bench/run_cpu_ab.sh
set -u
BIN=${BIN:-target/release}
CONFIGS=${CONFIGS:-nano:128,nano:4096,tiny:128}
STEPS=${STEPS:-15}
THREADS=${THREADS:-2}
CORES=${CORES:-0-$((THREADS - 1))}
PASSES=${PASSES:-3}
OUT=${OUT:-/tmp}
export TOKITAI_CACHE_DIR=${TOKITAI_CACHE_DIR:-$PWD/target/tokitai-cache}
lscpu | grep -E "Model name|^CPU\(s\)" || true
for pass in $(seq 1 "$PASSES"); do
    echo "== pass $pass: $THREADS threads (cores $CORES)"
    taskset -c "$CORES" env RAYON_NUM_THREADS="$THREADS" "$BIN/tokitai-bench-moe" --device cpu --configs "$CONFIGS" --steps "$STEPS" --curve-steps 1 --contracts off --json "$OUT/ab_ours_${THREADS}_$pass.json" 2>&1 | grep -E "ms/step"
    taskset -c "$CORES" python3 bench/moe_torch.py --cpu --threads "$THREADS" --configs "$CONFIGS" --steps "$STEPS" --warmup 3 2>/dev/null | tail -1 > "$OUT/ab_torch_${THREADS}_$pass.json"
    cat "$OUT/ab_torch_${THREADS}_$pass.json"
done
python3 - "$OUT" "$THREADS" "$PASSES" "$CONFIGS" <<'EOF'
import json, statistics, sys
out, threads, passes, configs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
print(f"\nours (sparse, contracts off) / PyTorch's best mode, {threads} threads, per pass and median")
for cfg in configs:
    size, batch = cfg.split(":")
    ratios = []
    for p in range(1, passes + 1):
        ours = json.load(open(f"{out}/ab_ours_{threads}_{p}.json"))
        torch = json.load(open(f"{out}/ab_torch_{threads}_{p}.json"))
        mine = ours[f"{size} {batch} ours-sparse"]  # one contracts mode: no suffix
        theirs = {k: v for k, v in torch.items() if k.startswith(f"{size} {batch} ")}
        best = min(theirs, key=theirs.get)
        ratios.append(mine / theirs[best])
        print(f"  {size} b{batch} pass {p}: ours {mine:.2f} ms, PyTorch best {theirs[best]:.2f} ms ({best}): {mine / theirs[best]:.2f}")
    print(f"  {size} b{batch}: median ratio {statistics.median(ratios):.2f} over {passes} passes (max {max(ratios):.2f})")
EOF
