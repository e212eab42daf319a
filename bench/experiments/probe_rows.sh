#!/usr/bin/env bash
# Issue 18: do probes in rows the cached row form serves (16-byte loads,
# rows of at most 8192 halves) read faster than today's 256 rows of 2-byte
# loads? One build, TOKITAI_PROBE_ROW 65536 (today) against 8192: Nsight
# Compute over two eager tiny steps under --contracts warn (every probe's
# time and variant), then the step's cost, alternating.
# Binaries (stripped) in $BIN.
source "$(dirname "$0")/../gpu_env.sh"
BIN="${BIN:-target/ab-new}"
data="--batch 4096 --dataset synth:quality:8192"
for row in 65536 8192; do
  export TOKITAI_PROBE_ROW=$row
  "$BIN/tokitai-train" --size tiny $data --steps 1 --device cuda --no-graphs --quiet --contracts warn --checkpoint-dir "$OUT/w" > /dev/null 2>&1
  timeout 200 ncu --clock-control none --csv --metrics gpu__time_duration.sum "$BIN/tokitai-train" --size tiny $data --steps 2 --device cuda --no-graphs --quiet --contracts warn --checkpoint-dir "$OUT/c" > "$OUT/ncu-row$row.csv" 2> /dev/null
  echo "ncu rows of $row: exit $?"
  python3 - "$OUT/ncu-row$row.csv" <<'PY'
import csv, collections, sys
hdr, t = None, collections.defaultdict(lambda: [0, 0.0])
for r in csv.reader(open(sys.argv[1])):
    if r and r[0] == "ID": hdr = r; continue
    if hdr is None or len(r) != len(hdr): continue
    d = dict(zip(hdr, r))
    if d["Metric Name"] == "gpu__time_duration.sum" and d["Kernel Name"].startswith("probe"):
        t[d["Kernel Name"]][0] += 1; t[d["Kernel Name"]][1] += float(d["Metric Value"].replace(",", "")) / 1000
for k, (n, us) in sorted(t.items(), key=lambda x: -x[1][1]): print(f"  {k:40s} {n:4d} launches {us:9.1f} us")
print(f"  all probes: {sum(v[1] for v in t.values()):.1f} us over two steps")
PY
  rm -rf "$OUT/c" "$OUT/w"
done
for pass in $(seq "${PASSES:-2}"); do
  for row in 65536 8192; do
    echo "## pass $pass, rows of $row"
    TOKITAI_PROBE_ROW=$row timeout 100 "$BIN/tokitai-bench-moe" --configs tiny:4096 --steps 20 --curve-steps 2 --contracts off,warn 2>&1 | grep "ms/step" | grep -v graph
  done
done
