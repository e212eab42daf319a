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
    size, batch = k.split(" ")[:2]
    if (size, batch) not in configs:
        configs.append((size, batch))
TORCH_MODES = ["fp32", "fp16", "fp16+compile", "fp16-sparse", "fp16+compile-sparse"]
OUR_MODES = ["sparse", "dense", "dense-graph"]
print(f"MoE training step, ms per step (median), {datetime.date.today()}, commit {a.commit}\n")
print("| size, batch | ours sparse | ours dense | ours dense + graph | graph replay only | " + " | ".join(f"torch {m}" for m in TORCH_MODES) + " | best torch / best ours |")
print("|---|" + "---:|" * (4 + len(TORCH_MODES) + 1))
fmt = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else ("" if v is None else str(v))
num = lambda xs: [x for x in xs if isinstance(x, (int, float))]
peaks = []
for size, batch in configs:
    t = [torch.get(f"{size} {batch} {m}") for m in TORCH_MODES]
    mine = [ours.get(f"{size} {batch} ours-{m}") for m in OUR_MODES]
    replay = ours.get(f"{size} {batch} ours-dense-graph replay-only")
    ratio = f"{min(num(t)) / min(num(mine)):.2f}x" if num(t) and num(mine) else "n/a"
    print(f"| {size}, {batch} | " + " | ".join(fmt(x) for x in mine) + f" | {fmt(replay)} | " + " | ".join(fmt(x) for x in t) + f" | {ratio} |")
    peaks.append((size, batch, [ours.get(f"{size} {batch} ours-{m} peak MiB") for m in OUR_MODES], [torch.get(f"{size} {batch} {m} peak MiB") for m in TORCH_MODES]))
if any(num(o) for _, _, o, _ in peaks):
    print("\nPeak device memory, MiB (ours: the memory pool's high-water mark in use; torch: max_memory_allocated), each from the model's creation on\n")
    print("| size, batch | " + " | ".join(f"ours {m}" for m in OUR_MODES) + " | " + " | ".join(f"torch {m}" for m in TORCH_MODES) + " | least ours / least torch |")
    print("|---|" + "---:|" * (len(OUR_MODES) + len(TORCH_MODES) + 1))
    for size, batch, o, t in peaks:
        ratio = f"{min(num(o)) / min(num(t)):.2f}" if num(o) and num(t) else "n/a"
        print(f"| {size}, {batch} | " + " | ".join(f"{x:.0f}" if isinstance(x, (int, float)) else "" for x in o + t) + f" | {ratio} |")
c = ours.get("curve", {})
if c:
    print(f"\nnano, batch 128, {len(c['cpu'])} steps: CPU and GPU loss curves, worst relative difference {c['worst_rel']:.2e} ({'agree' if c['agree'] else 'DISAGREE'}).")
if c and "replays" in c:
    print(f"Graph replay: {c['replays']} of {len(c['cpu'])} steps replayed; losses and norms {'bit-identical' if c.get('graph_identical') else 'DIFFERENT'} to launching every kernel.")
