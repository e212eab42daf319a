#!/usr/bin/env python3
"""Merge tokitai-bench-kernels' JSON with torch_ref.py's into the Markdown
table of bench/RESULTS.md.

Usage: python3 bench/report.py OURS.json TORCH.json [--triton TRITON.json]
       [--commit SHA] > table.md
(--triton: bench/triton_ref.py's timings; every workload Triton ran then also says how
they stand against the Triton peer.)
"""
import argparse, datetime, json

MEMORY_BOUND_TARGET = 0.90

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ours")
    ap.add_argument("torch")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--triton", help="bench/triton_ref.py --json output")
    a = ap.parse_args()
    ours, ref = json.load(open(a.ours)), json.load(open(a.torch))
    triton = json.load(open(a.triton)) if a.triton else {}
    copy = ours["copy_gbs"]
    print(f"Date {datetime.date.today()}, commit `{a.commit}`, device {ours['device']}, PyTorch {ref['torch']}.")
    print(f"Device copy (512 MiB, read + write) measured in the same call: ours {ours['copy_gbs']:.0f} GB/s, PyTorch {ref['copy_gbs']:.0f} GB/s.\n")
    print("| workload | ours ms | ours GB/s | ours % of copy | TFLOP/s | PyTorch ms | PyTorch % of copy | speed vs PyTorch | targets |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for w in ours["workloads"]:
        label = w["label"]
        if "error" in w:
            print(f"| {label} | not run: {w['error']} | | | | | | | |")
            continue
        t = ref["workloads"].get(label)
        speed = t / w["ms"] if t else float("nan")
        torch_share = (w["bytes"] / (t * 1e-3) / 1e9) / copy if t else float("nan")
        if w["tflops"] > 0:
            verdict = f"{100 * speed:.0f}% of cuBLAS" if t else "recorded (cuBLAS peer)"
            if label in triton:
                verdict += f", {triton[label] / w['ms']:.2f}x Triton"
        else:
            ok_bw = w["copy_share"] >= MEMORY_BOUND_TARGET
            ok_pt = speed >= 1.0
            # Ahead of Triton too, where the Triton peer ran (issue 21).
            ok_tr = label not in triton or triton[label] >= w["ms"]
            checks = [("<90% of copy", ok_bw), ("slower than PyTorch", ok_pt), ("slower than Triton", ok_tr)]
            verdict = "met" if ok_bw and ok_pt and ok_tr else "missed: " + ", ".join(x for x, ok in checks if not ok)
            if label in triton:
                verdict += f" ({triton[label] / w['ms']:.2f}x Triton)"
        tf = f"{w['tflops']:.1f}" if w["tflops"] > 0 else ""
        print(f"| {label} | {w['ms']:.4f} | {w['gbs']:.0f} | {100*w['copy_share']:.1f}% | {tf} | {t:.4f} | {100*torch_share:.1f}% | {speed:.2f}x | {verdict} |")
    l = ours["launch_us"]
    print(f"\nLaunch overhead (host time per launch, 20000 launches of gelu_fwd at N=1024): runtime {l['runtime']:.2f} us, bare cudarc {l['bare_cudarc']:.2f} us.")

if __name__ == "__main__":
    main()
