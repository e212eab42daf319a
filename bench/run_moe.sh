#!/usr/bin/env bash
# One call on the GPU machine: our MoE trainer's ms per step (sparse and
# dense dispatch) and peak memory, the CPU-vs-GPU loss curve, PyTorch's
# reference model in five modes (fp32, fp16, fp16 + compile; dense and
# sparse dispatch) with its peak memory, and the merged table.
# Needs tokitai-bench-moe built here and carried: in $BIN, else
# target/release. Arguments go to tokitai-bench-moe (--configs ...);
# PyTorch's configurations are $TORCH_CONFIGS, else its default.
# Writes everything under $OUT (or ./out when OUT is unset).
source "$(dirname "$0")/gpu_env.sh"
"${BIN:-./target/release}/tokitai-bench-moe" --json "$OUT/moe_ours.json" "$@" 2>&1 | tee "$OUT/moe.log"
echo "bench-moe exit ${PIPESTATUS[0]}"
python3 bench/moe_torch.py ${TORCH_CONFIGS:+--configs "$TORCH_CONFIGS"} > "$OUT/moe_torch.json" 2> "$OUT/moe_torch.err"; echo "torch exit $?"; tail -3 "$OUT/moe_torch.err"
python3 bench/moe_report.py "$OUT/moe_ours.json" "$OUT/moe_torch.json" --commit "$commit" > "$OUT/moe_table.md" && cat "$OUT/moe_table.md"
