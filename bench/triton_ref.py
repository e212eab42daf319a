#!/usr/bin/env python3
"""Triton peers of tokitai-bench-kernels. For the contractions (issue 19): one
autotuned `tl.dot` matmul written the way the Triton tutorial teaches it
(grouped tile order, f32 accumulation, masked loads for ragged edges, an
optional bias in the epilogue, f16 or bf16 out), run on the same labels,
sizes and layouts as ours. Backward contractions take transposed views (the
kernel reads any strides), as a Triton user would write them. For the
memory-bound kernels (issue 21): bench/triton_rows.py, the tutorials'
softmax, layer norm and element-wise patterns.

Timed as bench/torch_ref.py times PyTorch: device events around each call,
median of 20 after 3 warm-up calls (the autotuner's own runs come first).

Usage: python3 bench/triton_ref.py [--json FILE] [--only TEXT ...]
"""
import argparse, json
import torch
import triton
import triton.language as tl
# The same timing and inputs as PyTorch's side (this directory is on the
# path when the script runs).
from torch_ref import rand, time_ms
import triton_rows


def configs():
    # Tile shapes and pipeline depths the tutorial's Hopper list covers,
    # plus the 256-wide tiles Triton picks for large square GEMMs.
    out = []
    for bm, bn, bk, stages, warps in [
        (128, 256, 64, 3, 8),
        (256, 128, 64, 3, 8),
        (128, 128, 64, 4, 8),
        (128, 128, 64, 4, 4),
        (128, 64, 64, 4, 4),
        (64, 128, 64, 4, 4),
        (128, 128, 128, 3, 8),
        (64, 64, 64, 5, 4),
    ]:
        out.append(triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8}, num_stages=stages, num_warps=warps))
    return out


@triton.autotune(configs=configs(), key=["M", "N", "K", "sam", "sak", "sbk", "sbn"])
@triton.jit
def matmul_kernel(a, b, c, bias, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # Tiles in groups of GROUP_M rows of tiles, so that the tiles running at
    # once share their operands in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_here = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_here
    tile_n = (pid % per_group) // rows_here
    rm = tile_m * BM + tl.arange(0, BM)
    rn = tile_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a + rm[:, None] * sam + rk[None, :] * sak
    pb = b + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BK)):
        left = K - k0 * BK
        ta = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        tb = tl.load(pb, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(ta, tb, acc)
        pa += BK * sak
        pb += BK * sbk
    if HAS_BIAS:
        acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    pc = c + rm[:, None] * scm + rn[None, :] * scn
    tl.store(pc, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b, bias=None):
    """a [M, K] @ b [K, N] (+ bias [N]), any strides."""
    (M, K), (K2, N) = a.shape, b.shape
    assert K == K2, (a.shape, b.shape)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
    matmul_kernel[grid](a, b, c, bias if bias is not None else c, M, N, K,
                        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        HAS_BIAS=bias is not None)
    return c


def workloads():
    """label -> (function, flops): the labels of tokitai-bench-kernels."""
    h = torch.float16
    w = {}
    for m, k, n in [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 1024, 1024), (4096, 2048, 2048),
                    (1024, 4096, 1024), (1536, 4096, 1536), (2048, 4096, 2048), (3072, 4096, 3072)]:
        a, b = rand((m, k), h), rand((k, n), h)
        shape = "4096^3" if m == k == n == 4096 else "8192^3" if m == k == n else f"{m}x{k}x{n}"
        w[f"gemm_f16 wg {shape}"] = ((lambda a=a, b=b: matmul(a, b)), 2 * m * k * n)
    a, b = rand((4096, 4096), torch.bfloat16), rand((4096, 4096), torch.bfloat16)
    w["gemm_bf16 wg 4096^3"] = ((lambda a=a, b=b: matmul(a, b)), 2 * 4096 ** 3)
    # The linear layer: y = x w + b; gx = gy w^T; gw = x^T gy.
    for m, k, n in [(4096, 4096, 4096), (16384, 1024, 1024), (4096, 2048, 2048)]:
        x, wl, bias = rand((m, k), h), rand((k, n), h), rand(n, h)
        label = "linear_fwd f16 4096^3" if m == k == n else f"linear_fwd f16 {m}x{k}x{n}"
        w[label] = ((lambda x=x, wl=wl, bias=bias: matmul(x, wl, bias)), 2 * m * k * n)
    m, k, n = 4096, 2048, 2048
    x, wl, gy = rand((m, k), h), rand((k, n), h), rand((m, n), h)
    w["linear_bwd_x f16 4096x2048x2048"] = ((lambda gy=gy, wl=wl: matmul(gy, wl.t())), 2 * m * k * n)
    w["linear_bwd_w f16 4096x2048x2048"] = ((lambda x=x, gy=gy: matmul(x.t(), gy)), 2 * m * k * n)
    # The expert layers of the MoE step at batch 4096 (top-2 of 4 experts:
    # about 2048 rows an expert), h = 128 / 2048 / 4096 (nano, tiny, medium).
    for size, d in [("nano", 128), ("tiny", 2048), ("medium", 4096)]:
        m = 2048
        x, wl, bias, gy = rand((m, d), h), rand((d, d), h), rand(d, h), rand((m, d), h)
        flops = 2 * m * d * d
        w[f"moe {size} linear_fwd {m}x{d}x{d}"] = ((lambda x=x, wl=wl, bias=bias: matmul(x, wl, bias)), flops)
        w[f"moe {size} linear_bwd_x {m}x{d}x{d}"] = ((lambda gy=gy, wl=wl: matmul(gy, wl.t())), flops)
        w[f"moe {size} linear_bwd_w {m}x{d}x{d}"] = ((lambda x=x, gy=gy: matmul(x.t(), gy)), flops)
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write {label: ms} here")
    ap.add_argument("--only", nargs="*", help="just the workloads whose label contains one of these")
    args = ap.parse_args()
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    # Correct before timed: each kernel against torch.matmul on one shape
    # of each layout (f32 accumulation both; f16 outputs agree to rounding).
    a, b, bias = rand((300, 200), torch.float16), rand((200, 260), torch.float16), rand(260, torch.float16)
    for got, want in [(matmul(a, b, bias), torch.addmm(bias, a, b)), (matmul(a, b.t().contiguous().t()), a @ b), (matmul(a.t().contiguous().t(), b), a @ b)]:
        err = (got.float() - want.float()).abs().max().item()
        assert err <= 2e-2 * want.float().abs().max().item(), f"triton matmul disagrees with torch: {err}"
    failed = triton_rows.check()
    for name, why in failed.items():
        print(f"triton peer `{name}` not timed: {why}")
    results = {}
    both = dict(workloads())
    both.update(triton_rows.workloads(skip=failed))
    for label, (fn, flops) in both.items():
        if args.only and not any(t in label for t in args.only):
            continue
        ms = time_ms(fn)
        results[label] = ms
        rate = f"{flops / ms / 1e9:8.1f} TFLOP/s" if flops else ""
        print(f"{label:<40} {ms:9.4f} ms {rate}  (triton)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
