source bench/gpu_env.sh
BIN=/tmp/grouped-bin; mkdir -p "$BIN" && tar -C "$BIN" -xJf target/abx/grouped.tar.xz
ONLY=("gemm_f16 wg" "gemm_bf16 wg" "linear_")
bench() { TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "${@:2}" --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1; }
bench chosen "${ONLY[@]}"
TOKITAI_FORCE=$WS_FORMS bench ws_forced "${ONLY[@]}"
python3 bench/torch_ref.py --only "${ONLY[@]}" --json "$OUT/torch.json" > "$OUT/torch.log" 2>&1
timeout 300 python3 bench/triton_ref.py --only "${ONLY[@]}" --json "$OUT/triton.json" > "$OUT/triton.log" 2>&1
for run in chosen ws_forced; do
  echo "## $run"
  python3 bench/report.py "$OUT/$run.json" "$OUT/torch.json" --triton "$OUT/triton.json" --commit "$commit"
done > "$OUT/table.md" 2>&1
cat "$OUT/table.md"; grep triton "$OUT/triton.log"
