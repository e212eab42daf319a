#!/usr/bin/env bash
# One kernel of the benchmark under Nsight Compute, on the GPU machine:
# the full set of sections and, per SASS instruction, where its warps
# stalled (the source page), for the first launch of the workload.
#   bash bench/profile_kernel.sh "gemm_f16 wg 4096^3" gemm_f16 [BIN_DIR]
# The second argument is a regular expression for the kernel's name (the
# benchmark launches others: inputs, probes). BIN_DIR holds tokitai-bench-kernels built on the CPU machine (default
# target/gpu-c). Writes $OUT/profile.ncu-rep, details.txt, sass.csv and
# the hottest instructions in hot.txt.
source "$(dirname "$0")/gpu_env.sh"
label="${1:?the workload label, as tokitai-bench-kernels --only takes it}"
kernel="${2:?a regular expression for the kernel name}"
bin="${3:-target/gpu-c}"
# The contract monitor off unless asked: with it on, the first launch of a
# kernel with an observing twin is the twin (its range reductions in the
# profile, as in the thirty-eighth session's first two profiles).
TOKITAI_CONTRACTS="${TOKITAI_CONTRACTS:-off}" ncu --clock-control none --kernel-name "regex:$kernel" --launch-count 1 --set full --import-source no \
    -o "$OUT/profile" "$bin/tokitai-bench-kernels" --only "$label" > "$OUT/ncu.log" 2>&1
echo "ncu exit $?"; tail -3 "$OUT/ncu.log"
ncu -i "$OUT/profile.ncu-rep" --page details > "$OUT/details.txt" 2>&1
ncu -i "$OUT/profile.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2>&1
python3 - "$OUT/sass.csv" > "$OUT/hot.txt" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if "Source" in r)
cols = rows[head]
def col(name):
    return next((i for i, c in enumerate(cols) if c.startswith(name)), None)
src, samp = col("Source"), col("Warp Stall Sampling (All")
stall_cols = [(i, c) for i, c in enumerate(cols) if c.startswith("stall_") or c.startswith("Stall")]
data = [r for r in rows[head + 1:] if len(r) == len(cols)]
num = lambda v: float(v.replace(",", "")) if v.strip() not in ("", "-") else 0.0
total = sum(num(r[samp]) for r in data) or 1.0
print(f"{len(data)} SASS instructions, {total:.0f} stall samples")
for r in sorted(data, key=lambda r: -num(r[samp]))[:40]:
    print(f"{100 * num(r[samp]) / total:5.1f}%  {r[src].strip()}")
EOF
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Bank Conflicts|Stall|Tensor|Issue Slots" "$OUT/details.txt" | head -60
head -45 "$OUT/hot.txt"
