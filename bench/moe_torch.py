"""PyTorch reference of the MoE training step (shared/docs/moe.md), timed
per step in three modes: fp32 eager, fp16 autocast eager, and fp16 autocast
with torch.compile. Same model as ours: router Linear(96, 4), softmax, top-2
probabilities as weights (not renormalised); experts Linear(96, h) +
LayerNorm + GELU(tanh), n_hidden x [Linear(h, h) + LayerNorm + GELU],
Linear(h, 20); MSE loss; global gradient clipping; fused AdamW. Experts run
on the whole batch (the dense form, as the old crate and perf.md's figures),
or on the rows routed to them (the `-sparse` modes: top-2 dispatch with
index_select and index_add, the way a PyTorch user writes it). On the GPU
each mode also reports its peak of allocated memory.

`--cpu` times the CPU instead: fp32 eager and fp32 with torch.compile, on
`--threads` threads (torch.set_num_threads), both dispatches.

Prints one JSON object: {"<size> <batch> <mode>": ms_per_step,
"<size> <batch> <mode> peak MiB": MiB, ...}.
"""
import argparse, json, time
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {"nano": (128, 2), "tiny": (2048, 5), "medium": (4096, 5), "full": (4096, 12)}


class Expert(nn.Module):
    def __init__(self, h, n_hidden):
        super().__init__()
        dims = [96] + [h] * (n_hidden + 1)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.LayerNorm(b, eps=1e-5), nn.GELU(approximate="tanh")) for a, b in zip(dims[:-1], dims[1:]))
        self.out = nn.Linear(h, 20)

    def forward(self, x):
        for l in self.layers:
            x = l(x)
        return self.out(x)


class MoE(nn.Module):
    def __init__(self, size, sparse=False):
        super().__init__()
        h, n = SIZES[size]
        self.router = nn.Linear(96, 4)
        self.experts = nn.ModuleList(Expert(h, n) for _ in range(4))
        self.sparse = sparse

    def forward(self, x):
        p = torch.softmax(self.router(x).float(), dim=-1)
        top, idx = torch.topk(p, 2, dim=-1)
        if self.sparse:
            y = torch.zeros(x.shape[0], 20, device=x.device, dtype=torch.float32)
            for e, expert in enumerate(self.experts):
                rows, slot = (idx == e).nonzero(as_tuple=True)
                if rows.numel() == 0:
                    continue
                h = expert(x.index_select(0, rows)).float()
                y = y.index_add(0, rows, h * top[rows, slot].unsqueeze(-1))
            return y
        w = torch.zeros_like(p).scatter(-1, idx, top)
        outs = torch.stack([e(x).float() for e in self.experts], dim=1)
        return (w.unsqueeze(-1) * outs).sum(dim=1)


def time_mode(size, batch, mode, steps, warmup, device="cuda", sparse=False):
    """Median ms per step, and on the GPU the peak of memory allocated
    (torch.cuda.max_memory_allocated, MiB) from the model's creation on."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    model = MoE(size, sparse).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=device == "cuda")
    x = torch.rand(batch, 96, device=device)
    t = torch.rand(batch, 20, device=device)
    amp = mode not in ("fp32", "fp32+compile")
    scaler = torch.amp.GradScaler(device, enabled=amp)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.float16, enabled=amp):
            y = model(x)
            loss = F.mse_loss(y.float(), t)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return loss

    if mode.endswith("+compile"):
        step = torch.compile(step)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return times[len(times) // 2], peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="nano:128,nano:4096,tiny:4096")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cpu", action="store_true", help="time the CPU instead: fp32 eager and fp32+compile, dense and sparse dispatch")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    args = ap.parse_args()
    out = {}
    if args.cpu:
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        for cfg in args.configs.split(","):
            size, batch = cfg.split(":")
            for mode in ["fp32", "fp32+compile"]:
                for sparse in [False, True]:
                    key = f"{size} {batch} cpu-{mode}-{'sparse' if sparse else 'dense'} ({torch.get_num_threads()} threads)"
                    try:
                        out[key] = time_mode(size, int(batch), mode, args.steps, args.warmup if mode == "fp32" else args.warmup + 5, "cpu", sparse)[0]
                    except Exception as e:  # a mode that fails is recorded, not fatal
                        out[key] = f"failed: {type(e).__name__}: {e}"[:200]
        print(json.dumps(out))
        return
    # Dense (the old crate's form) and sparse top-2 dispatch (the way a
    # PyTorch user writes it); the report takes the best of them.
    for cfg in args.configs.split(","):
        size, batch = cfg.split(":")
        for mode in ["fp32", "fp16", "fp16+compile", "fp16-sparse", "fp16+compile-sparse"]:
            key = f"{size} {batch} {mode}"
            try:
                base = mode.removesuffix("-sparse")
                out[key], out[f"{key} peak MiB"] = time_mode(size, int(batch), base, args.steps, args.warmup if base != "fp16+compile" else args.warmup + 5, sparse=mode.endswith("-sparse"))
            except Exception as e:  # a mode that fails is recorded, not fatal
                out[key] = f"failed: {type(e).__name__}: {e}"[:200]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
