"""One training step's kernel time from Nsight Compute's CSV.

Usage: python3 bench/step_profile.py NCU_CSV

The CSV is `ncu --csv --metrics gpu__time_duration.sum` over the first
launches of a run. One step is the launches after an AdamW launch up to
and including the next one (the step's optimizer); the last whole step
in the file is summed by kernel name and grid, largest first.
"""
import csv
import sys
from collections import defaultdict


def launches(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Value" in r)
    cols = rows[head]
    at = {c: cols.index(c) for c in ("ID", "Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Value")}
    out = []
    for r in rows[head + 1:]:
        if len(r) != len(cols) or r[at["Metric Name"]] != "gpu__time_duration.sum":
            continue
        ns = float(r[at["Metric Value"]].replace(",", ""))
        out.append((r[at["Kernel Name"]], r[at["Grid Size"]], r[at["Block Size"]], ns / 1000.0))
    return out


def main():
    ls = launches(sys.argv[1])
    opt = [i for i, l in enumerate(ls) if l[0].startswith("adamw")]
    if len(opt) < 2:
        sys.exit(f"fewer than two AdamW launches among {len(ls)}: no whole step")
    step = ls[opt[-2] + 1: opt[-1] + 1]
    total = sum(l[3] for l in step)
    print(f"one step: {len(step)} launches, {total / 1000:.3f} ms of kernel time")
    by = defaultdict(lambda: [0.0, 0])
    for name, grid, block, us in step:
        key = (name, grid, block)
        by[key][0] += us
        by[key][1] += 1
    print(f"{'us':>9} {'share':>6} {'n':>4}  kernel grid block")
    for (name, grid, block), (us, n) in sorted(by.items(), key=lambda kv: -kv[1][0])[:40]:
        print(f"{us:9.1f} {100 * us / total:5.1f}% {n:4d}  {name} {grid} {block}")


if __name__ == "__main__":
    main()
