#!/usr/bin/env bash
# One call on the GPU machine: the runtime's test binaries whose CUDA half
# skips without a GPU (CI), run where there is one. Build them on the CPU
# machine and pack them first:
#   cargo test --release -p tokitai-runtime --test timeline --no-run
#   (copy target/release/deps/timeline-<hash> to target/abx/t/bin/timeline)
#   tar -C target/abx/t -cJf target/abx/gpu-tests.tar.xz bin
# then carry target/abx/gpu-tests.tar.xz. A test that skipped says
# "skipped (GPU suite)" in its output; here none may.
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/gpu-tests
rm -rf "$BIN" && mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/gpu-tests.tar.xz
status=0
for t in "$BIN"/bin/*; do
  echo "## $(basename "$t")"
  "$t" --test-threads 1 --nocapture > "$OUT/$(basename "$t").log" 2>&1
  rc=$?
  grep -E "^test |test result|skipped|panicked" "$OUT/$(basename "$t").log"
  if grep -q "skipped (GPU suite)" "$OUT/$(basename "$t").log"; then echo "a GPU test skipped on the GPU machine"; rc=1; fi
  [ $rc -eq 0 ] || status=1
done
echo "gpu tests exit $status (commit $commit)"
exit $status
