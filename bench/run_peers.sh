#!/usr/bin/env bash
# One call on the GPU machine (issue 21): the memory-bound kernels, ours,
# PyTorch's and the Triton peers' (bench/triton_rows.py), timed in one
# call, and the merged table. Ours with the contract monitor off
# (TOKITAI_CONTRACTS=off: its probes would read every input a second
# time; the monitor's own cost is measured by bench/run_contracts.sh).
# Needs target/release/tokitai-bench-kernels built here and carried.
source "$(dirname "$0")/gpu_env.sh"
only=(gelu softmax layernorm_fwd "layernorm_bwd f16" adamw sgd_momentum mse_grad)
TOKITAI_CONTRACTS=off ./target/release/tokitai-bench-kernels --only "${only[@]}" --json "$OUT/ours.json" 2>&1 | tee "$OUT/peers.log"
python3 bench/torch_ref.py --only "${only[@]}" --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/peers.log"
python3 bench/triton_ref.py --only "${only[@]}" --json "$OUT/triton.json" 2>&1 | tee -a "$OUT/peers.log"
python3 bench/report.py "$OUT/ours.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit" > "$OUT/table.md" && cat "$OUT/table.md"
