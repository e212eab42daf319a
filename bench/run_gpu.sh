#!/usr/bin/env bash
# One call on the GPU machine: the GPU correctness suite, the soundness of
# the derived error bounds, our kernels' timings, PyTorch's on the same
# workloads, and the merged table.
# Needs the release binaries built on the CPU machine and carried:
#   cargo build --release -p tokitai-bench
#   (device tool: carry target/release/tokitai-gpucheck, target/release/tokitai-bench-kernels)
# Writes everything under $OUT (or ./out when OUT is unset).
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
./target/release/tokitai-gpucheck --json "$OUT/gpucheck.json" > "$OUT/gpucheck.log" 2>&1
echo "gpucheck exit $?"; tail -3 "$OUT/gpucheck.log"; grep -E "FAIL|ERROR" "$OUT/gpucheck.log" | head -20
# The derived error bounds against the GPU: >= 10^6 inputs per kernel.
./target/release/tokitai-gpucheck --soundness 1000000 --json "$OUT/soundness.json" > "$OUT/soundness.log" 2>&1
echo "soundness exit $?"; tail -1 "$OUT/soundness.log"
./target/release/tokitai-bench-kernels --json "$OUT/ours.json" 2>&1 | tee "$OUT/bench.log"
python3 bench/torch_ref.py --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/bench.log"
# The Triton peer of the contractions (autotuned tl.dot, issue 19).
python3 bench/triton_ref.py --json "$OUT/triton.json" 2>&1 | tee -a "$OUT/bench.log"
python3 bench/report.py "$OUT/ours.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit" > "$OUT/table.md" && cat "$OUT/table.md"
