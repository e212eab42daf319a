#!/usr/bin/env bash
# One call on the GPU machine (issue 19): the linear layer with GELU fused
# into its epilogue (`linear_gelu_fwd`, proved in magnitudes). gpucheck of
# the kernel (its default choices, then every warp-specialised and
# warpgroup form forced), its soundness on the GPU against the bound
# evaluated at each launch, compute-sanitizer memcheck, then its timing
# beside `linear_fwd` and PyTorch's addmm followed by the tanh GELU.
# Needs the release binaries carried as target/abx/gelu.tar.xz (bin/
# tokitai-gpucheck, bin/tokitai-bench-kernels).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/gelu-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/gelu.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
FORMS=linear_gelu_fwd_ws8,linear_gelu_fwd_ws,linear_gelu_fwd_wg4,linear_gelu_fwd_wg
{
  echo "## gpucheck --only linear_gelu_fwd"
  TOKITAI_CONTRACTS=off timeout 150 "$BIN/bin/tokitai-gpucheck" --only linear_gelu_fwd 2>&1 | tail -25
  for f in ${FORMS//,/ }; do
    echo "## gpucheck --only linear_gelu_fwd, forced $f"
    TOKITAI_FORCE=$f TOKITAI_CONTRACTS=off timeout 100 "$BIN/bin/tokitai-gpucheck" --only linear_gelu_fwd 2>&1 | tail -2
  done
  echo "## soundness, 10^6 inputs"
  TOKITAI_CONTRACTS=off timeout 200 "$BIN/bin/tokitai-gpucheck" --soundness 1000000 --only linear_gelu_fwd 2>&1 | tail -8
  echo "## compute-sanitizer memcheck"
  TOKITAI_FORCE=linear_gelu_fwd_ws TOKITAI_CONTRACTS=off timeout 150 compute-sanitizer --tool memcheck "$BIN/bin/tokitai-gpucheck" --only linear_gelu_fwd --small 2>&1 | tail -3
} > "$OUT/check.log" 2>&1
cat "$OUT/check.log"
ONLY=("linear_gelu_fwd" "linear_fwd f16 4096x2048x2048" "linear_fwd f16 16384x1024x1024")
TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "${ONLY[@]}" --json "$OUT/ours.json" > "$OUT/ours.log" 2>&1
python3 bench/torch_ref.py --only "${ONLY[@]}" --json "$OUT/torch.json" > "$OUT/torch.log" 2>&1
python3 bench/report.py "$OUT/ours.json" "$OUT/torch.json" --commit "$commit" | tee "$OUT/table.md"
echo "commit $commit"
