#!/usr/bin/env bash
# One call on the GPU machine: our MoE trainer's ms per step (sparse and
# dense dispatch) and the CPU-vs-GPU loss curve, PyTorch's reference model
# in three modes on the same sizes, and the merged table.
# Needs target/release/tokitai-bench-moe built here and carried.
# Writes everything under $OUT (or ./out when OUT is unset).
source "$(dirname "$0")/gpu_env.sh"
./target/release/tokitai-bench-moe --json "$OUT/moe_ours.json" "$@" 2>&1 | tee "$OUT/moe.log"
echo "bench-moe exit ${PIPESTATUS[0]}"
python3 bench/moe_torch.py > "$OUT/moe_torch.json" 2> "$OUT/moe_torch.err"; echo "torch exit $?"; tail -3 "$OUT/moe_torch.err"
python3 bench/moe_report.py "$OUT/moe_ours.json" "$OUT/moe_torch.json" --commit "$commit" > "$OUT/moe_table.md" && cat "$OUT/moe_table.md"
