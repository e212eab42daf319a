#!/usr/bin/env bash
# One call on the GPU machine for issue 23's p-adic product: gpucheck of
# the padic kernels (random cases against the exact oracle, then the
# adversarial cases against the host's dense product and certificate),
# the same under compute-sanitizer memcheck (small shapes), the command
# line on the example files, and the skip-vs-dense benchmark.
# Needs the release binaries carried as target/abx/padic.tar.xz (bin/
# tokitai-gpucheck, tokitai-bench-padic, tokitai-padic; built and stripped
# on the CPU machine). Writes everything under $OUT.
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/padic-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/padic.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
echo "## gpucheck --only padic"
"$BIN/bin/tokitai-gpucheck" --only padic --json "$OUT/gpucheck.json" > "$OUT/gpucheck.log" 2>&1
echo "gpucheck exit $?"; grep -E "^padic_|^padic " "$OUT/gpucheck.log" | head -80; tail -2 "$OUT/gpucheck.log"
echo "## compute-sanitizer memcheck (small)"
timeout 240 compute-sanitizer --tool memcheck "$BIN/bin/tokitai-gpucheck" --only padic --small 2>&1 | tail -4
echo "## tokitai-padic on the example files"
"$BIN/bin/tokitai-padic" examples/padic/a.txt examples/padic/b.txt --device cuda; echo "exit $?"
echo "## skip against dense"
"$BIN/bin/tokitai-bench-padic" --size "${PADIC_SIZE:-2048}" --json "$OUT/padic_bench.json" 2>&1 | tee "$OUT/padic_bench.log"
echo "commit $commit"
