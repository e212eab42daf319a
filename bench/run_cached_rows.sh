#!/usr/bin/env bash
# One call on the GPU machine (issue 21): the row kernels with their rows
# cached in registers (`schedule::row_cached`, variants `_c<block>x<runs>`)
# against the plain row form (the same binary with those variants
# skipped), twice each, alternating, beside PyTorch and the Triton peers;
# then the cached forms' correctness (tokitai-gpucheck) and memcheck.
# Ours with the contract monitor off. Needs target/release/
# tokitai-bench-kernels and tokitai-gpucheck built here and carried.
source "$(dirname "$0")/gpu_env.sh"
only=(softmax row_norm_sq)
cached=c128x1,c256x1,c256x2,c512x2
for i in 1 2; do
  TOKITAI_CONTRACTS=off ./target/release/tokitai-bench-kernels --only "${only[@]}" --json "$OUT/cached_$i.json" 2>&1 | tee -a "$OUT/rows.log"
  TOKITAI_SKIP_VARIANTS=$cached TOKITAI_CONTRACTS=off ./target/release/tokitai-bench-kernels --only "${only[@]}" --json "$OUT/plain_$i.json" 2>&1 | tee -a "$OUT/rows.log"
done
python3 bench/torch_ref.py --only "${only[@]}" --json "$OUT/torch.json" 2>&1 | tee -a "$OUT/rows.log"
python3 bench/triton_ref.py --only "${only[@]}" --json "$OUT/triton.json" 2>&1 | tee -a "$OUT/rows.log"
for i in 1 2; do
  python3 bench/report.py "$OUT/cached_$i.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit" > "$OUT/cached_$i.md"
  python3 bench/report.py "$OUT/plain_$i.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit" > "$OUT/plain_$i.md"
done
cat "$OUT"/cached_1.md
for k in softmax row_norm_sq; do
  ./target/release/tokitai-gpucheck --only "$k" --json "$OUT/gpucheck_$k.json" 2>&1 | tail -4 | tee -a "$OUT/rows.log"
done
compute-sanitizer --tool memcheck ./target/release/tokitai-gpucheck --only softmax --small 2>&1 | tail -4 | tee -a "$OUT/rows.log"
