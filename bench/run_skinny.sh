#!/usr/bin/env bash
# One call on the GPU machine (issue 20):
# 1. the tiny step's least efficient contractions at an expert's average
#    routed rows (2048), each with every form of its kernel forced (the
#    form that ran is the last column: a form whose guard the launch fails
#    falls back to the choice), then the choice, then PyTorch;
# 2. the tiny b4096 step tuned as it runs (`TOKITAI_TUNING=auto`: each
#    kernel's shape class timed over its proved candidates at its first
#    launch), then with that table and without it (`TOKITAI_TUNING=off`),
#    alternating; the classes where the tuner's choice is not the
#    compiler's order, with both times.
# Needs $TARBALL (bin/tokitai-bench-kernels, bin/tokitai-bench-moe).
source "$(dirname "$0")/gpu_env.sh"
BIN=/tmp/skinny-bin
mkdir -p "$BIN" && tar -C "$BIN" -xJf "${TARBALL:-target/abx/fbwd.tar.xz}"
run() { TOKITAI_FORCE="$1" TOKITAI_CONTRACTS=off "$BIN/bin/tokitai-bench-kernels" --only "$2" 2>&1 | grep -E "^$2" | sed "s/^/${1:-choice}: /"; }
FWD="linear_fwd_nw linear_fwd_nw4x4 linear_fwd_nw8x1 linear_fwd_nw8x2d256 linear_fwd_ks16 linear_fwd_ks32 linear_fwd_mma linear_fwd_t16 linear_fwd_t32"
BWD_W="linear_bwd_w_ks16 linear_bwd_w_ks32 linear_bwd_w_ks16x16 linear_bwd_w_ks16x32x4x128 linear_bwd_w_ks32x32x4x64 linear_bwd_w_ks16d256 linear_bwd_w_t16 linear_bwd_w_t32 linear_bwd_w_mma linear_bwd_w_wg linear_bwd_w_wg4 linear_bwd_w_ws linear_bwd_w_ws128"
for f in "" $FWD; do run "$f" "moe tiny head linear_fwd 2048x2048x20"; done
for f in "" $BWD_W; do run "$f" "moe tiny head linear_bwd_w 2048x2048x20"; done
for f in "" $BWD_W; do run "$f" "moe tiny first linear_bwd_w 2048x96x2048"; done
python3 bench/torch_ref.py --only "moe tiny head linear" "moe tiny first linear_bwd_w" 2>&1 | grep "moe tiny"
rm -rf "$TOKITAI_CACHE_DIR/tuning"
echo "## tiny:4096, TOKITAI_TUNING=auto (fills the table)"
TOKITAI_TUNING=auto timeout 300 "$BIN/bin/tokitai-bench-moe" --configs tiny:4096 --steps 20 --curve-steps 2 --contracts off 2>&1 | grep -E "ms/step" | grep -v replay
for pass in 1 2; do
  for mode in table off; do
    echo "## tiny:4096, TOKITAI_TUNING=$mode, pass $pass"
    TOKITAI_TUNING=$mode timeout 200 "$BIN/bin/tokitai-bench-moe" --configs tiny:4096 --steps 20 --curve-steps 2 --contracts off 2>&1 | grep -E "ms/step" | grep -v replay
  done
done
cp -r "$TOKITAI_CACHE_DIR/tuning" "$OUT/table"
python3 - "$OUT"/table/*.json <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for name, k in sorted(t["kernels"].items()):
    for c in k["classes"].values():
        ms = {x["name"]: x.get("ms") for x in c["candidates"] if x.get("ms") is not None}
        if c["choice"] != c["default"]:
            print(f'{name} dims {c["dims"]}: tuned {c["choice"]} {ms.get(c["choice"], 0):.4f} ms, default {c["default"]} {ms.get(c["default"], 0) or 0:.4f} ms')
PY
echo "commit $commit"
