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
print("| size, batch | ours sparse | ours dense | ours dense + graph | graph replay only | torch fp32 | torch fp16 autocast | torch fp16 + compile | best torch / best ours |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
fmt = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else str(v)
for size, batch in configs:
    t = [torch.get(f"{size} {batch} {m}") for m in ["fp32", "fp16", "fp16+compile"]]
    mine = [ours.get(f"{size} {batch} ours-{m}") for m in ["sparse", "dense", "dense-graph"]]
    replay = ours.get(f"{size} {batch} ours-dense-graph replay-only")
    nums = [x for x in t if isinstance(x, (int, float))]
    best = [x for x in mine if isinstance(x, (int, float))]
    ratio = f"{min(nums) / min(best):.2f}x" if nums and best else "n/a"
    print(f"| {size}, {batch} | " + " | ".join(fmt(x) for x in mine) + f" | {fmt(replay)} | " + " | ".join(fmt(x) for x in t) + f" | {ratio} |")
c = ours.get("curve", {})
if c:
    print(f"\nnano, batch 128, {len(c['cpu'])} steps: CPU and GPU loss curves, worst relative difference {c['worst_rel']:.2e} ({'agree' if c['agree'] else 'DISAGREE'}).")
if c and "replays" in c:
    print(f"Graph replay: {c['replays']} of {len(c['cpu'])} steps replayed; losses and norms {'bit-identical' if c.get('graph_identical') else 'DIFFERENT'} to launching every kernel.")
