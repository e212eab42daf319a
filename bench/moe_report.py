"""Merge tokitai-bench-moe's and moe_torch.py's JSON into a markdown table:
ms per step, and our speed-up over the best PyTorch mode."""
import argparse, datetime, json

ap = argparse.ArgumentParser()
ap.add_argument("ours")
ap.add_argument("torch")
ap.add_argument("--commit", default="unknown")
a = ap.parse_args()
ours = json.load(open(a.ours))
torch = json.load(open(a.torch))
configs = []
for k in torch:
    size, batch, _ = k.split(" ")
    if (size, batch) not in configs:
        configs.append((size, batch))
print(f"MoE training step, ms per step (median), {datetime.date.today()}, commit {a.commit}\n")
print("| size, batch | ours sparse | ours dense | torch fp32 | torch fp16 autocast | torch fp16 + compile | best torch / ours sparse |")
print("|---|---:|---:|---:|---:|---:|---:|")
fmt = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else str(v)
for size, batch in configs:
    t = [torch.get(f"{size} {batch} {m}") for m in ["fp32", "fp16", "fp16+compile"]]
    s, d = ours.get(f"{size} {batch} ours-sparse"), ours.get(f"{size} {batch} ours-dense")
    nums = [x for x in t if isinstance(x, (int, float))]
    ratio = f"{min(nums) / s:.2f}x" if nums and isinstance(s, (int, float)) else "n/a"
    print(f"| {size}, {batch} | {fmt(s)} | {fmt(d)} | " + " | ".join(fmt(x) for x in t) + f" | {ratio} |")
c = ours.get("curve", {})
if c:
    print(f"\nnano, batch 128, {len(c['cpu'])} steps: CPU and GPU loss curves, worst relative difference {c['worst_rel']:.2e} ({'agree' if c['agree'] else 'DISAGREE'}).")
