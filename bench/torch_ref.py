#!/usr/bin/env python3
"""PyTorch on the workloads of tokitai-bench-kernels (same labels, sizes and
dtypes), timed the same way: device events around each call, median of 20
after 3 warm-up calls. Also the 512 MiB device copy.

Usage: python3 bench/torch_ref.py [--json FILE] [--only TEXT ...]
(--only: just the workloads whose label contains one of the TEXTs, as
tokitai-bench-kernels --only takes them.)
"""
import argparse, json, statistics
import torch
import torch.nn.functional as F

def time_ms(fn, warmup=3, reps=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)

def rand(shape, dtype, lo=-1.0, hi=1.0):
    return (torch.rand(shape, device="cuda", dtype=torch.float32) * (hi - lo) + lo).to(dtype)

def workloads():
    h = torch.float16
    w = {}
    n = 1 << 26
    x, dy = rand(n, h, -8, 8), rand(n, h, -4, 4)
    w["gelu_fwd f16 2^26"] = lambda: F.gelu(x, approximate="tanh")
    w["gelu_bwd f16 2^26"] = lambda: torch.ops.aten.gelu_backward(dy, x, approximate="tanh")
    for r, c in [(16384, 4096), (65536, 1024), (4096, 32000)]:
        xs = rand((r, c), h, -16, 16)
        w[f"softmax_fwd f16 {r}x{c}"] = (lambda xs=xs: torch.softmax(xs, -1))
    s = torch.softmax(rand((16384, 4096), h), -1)
    g = rand((16384, 4096), h)
    w["softmax_bwd f16 16384x4096"] = lambda: torch._softmax_backward_data(g, s, -1, h)
    for r, c in [(16384, 4096), (65536, 1024)]:
        xl, gamma, beta, gy = rand((r, c), h), rand(c, h), rand(c, h), rand((r, c), h)
        w[f"layernorm_fwd f16 {r}x{c}"] = (lambda xl=xl, gamma=gamma, beta=beta, c=c: F.layer_norm(xl, (c,), gamma, beta, 1e-5))
        _, mean, rstd = torch.ops.aten.native_layer_norm(xl, (c,), gamma, beta, 1e-5)
        w[f"layernorm_bwd f16 {r}x{c}"] = (lambda gy=gy, xl=xl, mean=mean, rstd=rstd, gamma=gamma, beta=beta, c=c:
            torch.ops.aten.native_layer_norm_backward(gy, xl, (c,), mean, rstd, gamma, beta, [True, False, False]))
    p = torch.nn.Parameter(rand(n, torch.float32))
    p.grad = rand(n, torch.float32)
    adam = torch.optim.AdamW([p], lr=1e-3, fused=True)
    w["adamw 2^26"] = adam.step
    q = torch.nn.Parameter(rand(n, torch.float32))
    q.grad = rand(n, torch.float32)
    sgd = torch.optim.SGD([q], lr=1e-2, momentum=0.9, foreach=True)
    w["sgd_momentum 2^26"] = sgd.step
    y, t = rand(n, h, -4, 4), rand(n, h, 0, 1)
    w["mse_grad f16 2^26"] = lambda: (2.0 / n) * (y - t)
    gn = rand((65536, 1024), h)
    # The first level of the global gradient norm (ours: row partials, then
    # a short sum); PyTorch's whole norm is the fair peer.
    w["row_norm_sq f16 65536x1024"] = lambda: torch.linalg.vector_norm(gn, dtype=torch.float32) ** 2
    xt, idx = rand((65536, 1024), h, -4, 4), torch.randint(0, 65536, (65536,), device="cuda")
    w["gather_rows f16 65536x1024"] = lambda: xt.index_select(0, idx)
    hh = rand((131072, 1024), h, -4, 4)
    p0, p1 = torch.randint(0, 131072, (65536,), device="cuda"), torch.randint(0, 131072, (65536,), device="cuda")
    w0, w1 = rand(65536, torch.float32, 0, 1), rand(65536, torch.float32, 0, 1)
    w["combine2 f16 65536x1024"] = lambda: (hh[p0].float() * w0[:, None] + hh[p1].float() * w1[:, None]).half()
    pr = rand((1 << 20, 4), torch.float32, 0, 1)
    w["top2 f32 2^20x4"] = lambda: torch.topk(pr, 2, dim=-1)
    xs, ws, bs, gs = rand((2048, 128), h), rand((128, 128), h, -0.125, 0.125), rand(128, h), rand((2048, 128), h)
    w["moe-step linear_fwd 2048x128x128"] = lambda: torch.addmm(bs, xs, ws)
    w["moe-step linear_bwd_w 2048x128x128"] = lambda: xs.t() @ gs
    w["moe-step bias_grad 2048x128"] = lambda: gs.sum(0)
    _, mean_s, rstd_s = torch.ops.aten.native_layer_norm(xs, (128,), bs, bs, 1e-5)
    w["moe-step layernorm_bwd_params 2048x128"] = lambda: torch.ops.aten.native_layer_norm_backward(gs, xs, (128,), mean_s, rstd_s, bs, bs, [False, True, True])
    w["moe-step layernorm_bwd 2048x128"] = lambda: torch.ops.aten.native_layer_norm_backward(gs, xs, (128,), mean_s, rstd_s, bs, bs, [True, False, False])
    # Column sums: the bias gradient, and LayerNorm's parameter gradients
    # (PyTorch's own backward, asked for those two only).
    for r, c, label in [(2048, 2048, "moe tiny layernorm_bwd_params 2048x2048"), (4096, 4096, "layernorm_bwd_params 4096x4096"), (4096, 1024, "layernorm_bwd_params 4096x1024"), (4096, 512, "layernorm_bwd_params 4096x512"), (4096, 256, "layernorm_bwd_params 4096x256")]:
        xc, gc, bc = rand((r, c), h), rand((r, c), h), rand(c, h)
        _, mc, rc = torch.ops.aten.native_layer_norm(xc, (c,), bc, bc, 1e-5)
        w[label] = (lambda gc=gc, xc=xc, c=c, mc=mc, rc=rc, bc=bc: torch.ops.aten.native_layer_norm_backward(gc, xc, (c,), mc, rc, bc, bc, [False, True, True]))
    # The head of a tiny expert: Linear(2048, 20) over 3072 routed rows.
    hx, hw, hb, hg = rand((3072, 2048), h), rand((2048, 20), h, -0.125, 0.125), rand(20, h), rand((3072, 20), h)
    w["moe tiny head linear_fwd 3072x2048x20"] = lambda: torch.addmm(hb, hx, hw)
    w["moe tiny head linear_bwd_w 3072x2048x20"] = lambda: hx.t() @ hg
    # Narrow outputs of long sums at more rows (where the split-sum form
    # stops paying), and the router's 4 experts.
    for m, nn, label in [(8192, 20, "narrow linear_fwd 8192x2048x20"), (16384, 20, "narrow linear_fwd 16384x2048x20"), (4096, 4, "moe tiny router linear_fwd 4096x2048x4")]:
        nx, nw, nb = rand((m, 2048), h), rand((2048, nn), h, -0.125, 0.125), rand(nn, h)
        w[label] = (lambda nx=nx, nw=nw, nb=nb: torch.addmm(nb, nx, nw))
    rx, rg = rand((4096, 2048), h), rand((4096, 4), h)
    w["moe tiny router linear_bwd_w 4096x2048x4"] = lambda: rx.t() @ rg
    fx, fw, fb = rand((3072, 96), h), rand((96, 2048), h, -0.125, 0.125), rand(2048, h)
    w["moe tiny first linear_fwd 3072x96x2048"] = lambda: torch.addmm(fb, fx, fw)
    # The same at an expert's average routed rows (2048).
    h2x, h2w, h2b, h2g = hx[:2048], hw, hb, hg[:2048]
    w["moe tiny head linear_fwd 2048x2048x20"] = lambda: torch.addmm(h2b, h2x, h2w)
    w["moe tiny head linear_bwd_w 2048x2048x20"] = lambda: h2x.t() @ h2g
    f2x, f2g = fx[:2048], rand((2048, 2048), h)
    w["moe tiny first linear_bwd_w 2048x96x2048"] = lambda: f2x.t() @ f2g
    # A hidden layer's LayerNorm then GELU at an expert's routed rows, as
    # a PyTorch user writes it (two kernels), and each alone.
    xg, gg, bg = rand((2560, 2048), h, -4, 4), rand(2048, h, 0.5, 1.5), rand(2048, h, -0.5, 0.5)
    w["moe tiny layernorm_gelu_fwd 2560x2048"] = lambda: F.gelu(F.layer_norm(xg, (2048,), gg, bg, 1e-5), approximate="tanh")
    w["moe tiny layernorm_fwd 2560x2048"] = lambda: F.layer_norm(xg, (2048,), gg, bg, 1e-5)
    w["moe tiny gelu_fwd 2560x2048"] = lambda: F.gelu(xg.view(-1), approximate="tanh")
    _, mg, rg_ = torch.ops.aten.native_layer_norm(xg, (2048,), gg, bg, 1e-5)
    gyg = rand((2560, 2048), h)
    w["moe tiny layernorm_bwd 2560x2048"] = lambda: torch.ops.aten.native_layer_norm_backward(gyg, xg, (2048,), mg, rg_, gg, bg, [True, False, False])
    w["moe tiny gelu_bwd 2560x2048"] = lambda: torch.ops.aten.gelu_backward(gyg.view(-1), xg.view(-1), approximate="tanh")
    # The fused backward's peer: GELU's backward then LayerNorm's (input
    # gradient), as autograd runs them, on the normalised rows yg.
    yg = F.layer_norm(xg, (2048,), gg, bg, 1e-5)
    w["moe tiny layernorm_gelu_bwd 2560x2048"] = lambda: torch.ops.aten.native_layer_norm_backward(
        torch.ops.aten.gelu_backward(gyg, yg, approximate="tanh"), xg, (2048,), mg, rg_, gg, bg, [True, False, False])
    w["moe tiny layernorm_gelu_act 2560x2048"] = w["moe tiny layernorm_gelu_fwd 2560x2048"]
    # An expert's wide layers at the routed rows of a tiny step (the
    # warp-specialised form's wave tails, issue 20).
    for m in (2304, 2560, 2816, 3072, 3328):
        a, b, bias = rand((m, 2048), h), rand((2048, 2048), h, -0.125, 0.125), rand(2048, h)
        w[f"wave linear_fwd {m}x2048x2048"] = (lambda a=a, b=b, bias=bias: torch.addmm(bias, a, b))
    gy, wl, xl = rand((2560, 2048), h), rand((2048, 2048), h, -0.125, 0.125), rand((2560, 2048), h)
    w["wave linear_bwd_x 2560x2048x2048"] = (lambda gy=gy, wl=wl: gy @ wl.t())
    w["wave linear_bwd_w 2560x2048x2048"] = (lambda gy=gy, xl=xl: xl.t() @ gy)
    for r, c, label in [(2048, 2048, "moe tiny bias_grad 2048x2048"), (4096, 4096, "bias_grad 4096x4096")]:
        gc = rand((r, c), h)
        w[label] = (lambda gc=gc: gc.sum(0))
    for m, k, nn in [(4096, 4096, 4096), (16384, 1024, 1024), (4096, 2048, 2048)]:
        a, b, bias = rand((m, k), h), rand((k, nn), h, -0.125, 0.125), rand(nn, h)
        label = "linear_fwd f16 4096^3" if m == k == nn else f"linear_fwd f16 {m}x{k}x{nn}"
        w[label] = (lambda a=a, b=b, bias=bias: torch.addmm(bias, a, b))
    # The layer then the tanh GELU, as a PyTorch user writes it (two
    # kernels: cuBLAS, then the activation).
    for m, k, nn in [(4096, 2048, 2048), (16384, 1024, 1024)]:
        a, b, bias = rand((m, k), h), rand((k, nn), h, -0.125, 0.125), rand(nn, h)
        w[f"linear_gelu_fwd f16 {m}x{k}x{nn}"] = (lambda a=a, b=b, bias=bias: torch.nn.functional.gelu(torch.addmm(bias, a, b), approximate="tanh"))
    # The linear layer's backward contractions as a PyTorch user writes
    # them (transposed views, no copies): gx = gy w^T, gw = x^T gy.
    gy, wl, xl = rand((4096, 2048), h), rand((2048, 2048), h, -0.125, 0.125), rand((4096, 2048), h)
    w["linear_bwd_x f16 4096x2048x2048"] = (lambda gy=gy, wl=wl: gy @ wl.t())
    w["linear_bwd_w f16 4096x2048x2048"] = (lambda gy=gy, xl=xl: xl.t() @ gy)
    # The expert layers of the MoE step at batch 4096 (about 2048 rows an
    # expert), as in tokitai-bench-kernels.
    for size, d in [("nano", 128), ("tiny", 2048), ("medium", 4096)]:
        xe, we, be, ge = rand((2048, d), h), rand((d, d), h, -0.125, 0.125), rand(d, h), rand((2048, d), h)
        w[f"moe {size} linear_fwd 2048x{d}x{d}"] = (lambda xe=xe, we=we, be=be: torch.addmm(be, xe, we))
        w[f"moe {size} linear_bwd_x 2048x{d}x{d}"] = (lambda ge=ge, we=we: ge @ we.t())
        w[f"moe {size} linear_bwd_w 2048x{d}x{d}"] = (lambda xe=xe, ge=ge: xe.t() @ ge)
    # cuBLAS through torch.matmul beside our tensor-core schedule (issue 19).
    for dt, name in [(h, "f16"), (torch.bfloat16, "bf16")]:
        shapes = [(4096, 4096, 4096), (16384, 1024, 1024), (4096, 2048, 2048)] if dt == h else [(4096, 4096, 4096)]
        for m, k, nn in shapes:
            a, b = rand((m, k), dt), rand((k, nn), dt)
            label = f"matmul_{name} tc 4096^3" if m == k == nn else f"matmul_{name} tc {m}x{k}x{nn}"
            w[label] = (lambda a=a, b=b: torch.matmul(a, b))
            w[label.replace("matmul_", "gemm_").replace(" tc ", " wg ")] = w[label]
    a, b = rand((8192, 8192), h), rand((8192, 8192), h)
    w["gemm_f16 wg 8192^3"] = (lambda a=a, b=b: torch.matmul(a, b))
    # Where the warp-specialised form starts to pay (issue 19's threshold).
    for m in (1024, 1536, 2048, 3072):
        a, b = rand((m, 4096), h), rand((4096, m), h)
        w[f"gemm_f16 wg {m}x4096x{m}"] = (lambda a=a, b=b: torch.matmul(a, b))
    return w

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--only", nargs="+", help="only the workloads whose label contains one of these")
    args = ap.parse_args()
    torch.manual_seed(0)
    nbytes = 512 << 20
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    copy_ms = time_ms(lambda: dst.copy_(src))
    del src, dst
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_ms": copy_ms,
           "copy_gbs": 2 * nbytes / (copy_ms * 1e-3) / 1e9, "workloads": {}}
    print(f"torch {torch.__version__} on {out['device']}: copy {copy_ms:.3f} ms, {out['copy_gbs']:.0f} GB/s")
    for label, fn in workloads().items():
        if args.only and not any(o in label for o in args.only):
            continue
        ms = time_ms(fn)
        out["workloads"][label] = ms
        print(f"{label:<34} {ms:10.4f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)

if __name__ == "__main__":
    main()
