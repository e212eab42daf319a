#!/usr/bin/env bash
# One call on the GPU machine: where the warp-specialised form of the
# warpgroup contraction (`<kernel>_ws`) starts to pay, and how far it is
# from cuBLAS and Triton. Our gemm_f16 workloads are timed twice in one
# run, with the form and without it (TOKITAI_SKIP_VARIANTS=ws), beside
# PyTorch (cuBLAS) and autotuned Triton on the same shapes.
# Build with WARP_SPECIALISED_MIN_BLOCKS = 1 (the form eligible at every
# size) to find the threshold, and carry the binaries:
#   BIN=target/ws1 bash bench/ws_crossover.sh
source "$(dirname "$0")/gpu_env.sh"
BIN="${BIN:-target/release}"
ONLY="${ONLY:-gemm_f16 wg}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
"$BIN/tokitai-bench-kernels" --only "$ONLY" --json "$OUT/ws_on.json" 2>&1 | tee "$OUT/ws.log"
TOKITAI_SKIP_VARIANTS=ws "$BIN/tokitai-bench-kernels" --only "$ONLY" --json "$OUT/ws_off.json" 2>&1 | tee -a "$OUT/ws.log"
python3 bench/torch_ref.py --only "$ONLY" --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/ws.log"
python3 bench/triton_ref.py --only "$ONLY" --json "$OUT/triton.json" 2>&1 | tee -a "$OUT/ws.log"
for form in on off; do
  echo "## warp-specialised form $form"
  python3 bench/report.py "$OUT/ws_$form.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit"
done > "$OUT/ws_table.md"
cat "$OUT/ws_table.md"
