"""The peer of `tokitai-bench-cpu-contractions`: torch.matmul and GELU
(tanh form) in fp32 on the CPU at the same M:K:N shapes and thread count,
the linear layer's three
products (x w, gy w^T, x^T gy), median ms and GFLOP/s of `--reps` runs after
one warm-up. Prints lines in the Rust binary's format.

    python3 bench/torch_cpu_contractions.py --threads 16 [--shapes 64:2048:2048,...]
"""
import argparse
import time

import torch


def median_ms(reps, f):
    f()
    times = []
    for _ in range(max(reps, 1)):
        start = time.perf_counter()
        f()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--shapes", default="2048:128:128,64:2048:2048,2048:2048:2048")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__} cpu ({torch.get_num_threads()} threads)")
    n = 1 << 20
    x = torch.randn(n).to(torch.float32)
    fwd = median_ms(a.reps, lambda: torch.nn.functional.gelu(x, approximate="tanh"))
    xg = x.clone().requires_grad_(True)
    yg = torch.nn.functional.gelu(xg, approximate="tanh")
    dy = torch.randn(n)
    bwd = median_ms(a.reps, lambda: torch.autograd.grad(yg, xg, dy, retain_graph=True))
    for name, ms in (("torch gelu", fwd), ("torch gelu bwd", bwd)):
        print(f"{name:<13} {n:>21}  {ms:9.3f} ms  {ms * 1e6 / n:7.2f} ns an element")
    for spec in a.shapes.split(","):
        m, k, n = (int(d) for d in spec.split(":"))
        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        gy = torch.randn(m, n, generator=g)
        flop = 2.0 * m * k * n
        runs = [
            ("torch x@w", lambda: torch.matmul(x, w)),
            ("torch gy@w.T", lambda: torch.matmul(gy, w.t())),
            ("torch x.T@gy", lambda: torch.matmul(x.t(), gy)),
        ]
        for name, f in runs:
            ms = median_ms(a.reps, f)
            print(f"{name:<13} {m:>5} x {k:>5} x {n:>5}  {ms:9.3f} ms  {flop / ms / 1e6:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
