"""Triton peers of the memory-bound kernels of tokitai-bench-kernels (issue
21), written the way the Triton tutorials teach them (`02-fused-softmax`,
`05-layer-norm`, the vector-add pattern for element-wise work): a program
per row holding the whole row in registers (the next power of two of the
row length, masked), f32 arithmetic, f16 in and out; a program per 1024
elements for element-wise kernels. Same labels, shapes and dtypes as ours;
the AdamW peer updates what ours does (f16 parameters and gradients, f32
moments, learning-rate multiplier, unscaling, clipping by the global norm),
so both move the same bytes.

Imported by bench/triton_ref.py, which checks each against PyTorch before
timing it.
"""
import torch
import triton
import triton.language as tl

@triton.jit
def _tanh(z):
    return 2.0 * tl.sigmoid(2.0 * z) - 1.0


# 0.7978845608028654 below is sqrt(2 / pi), GELU's tanh form.
@triton.jit
def gelu_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    t = _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
    tl.store(y_ptr + offs, (0.5 * x * (1.0 + t)).to(tl.float16), mask=mask)


@triton.jit
def gelu_bwd_kernel(gy_ptr, x_ptr, gx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    gy = tl.load(gy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    t = _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
    d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
    tl.store(gx_ptr + offs, (gy * d).to(tl.float16), mask=mask)


@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * cols + offs, (e / tl.sum(e, axis=0)).to(tl.float16), mask=mask)


@triton.jit
def softmax_bwd_kernel(g_ptr, s_ptr, gx_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    g = tl.load(g_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(s_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(g * s, axis=0)
    tl.store(gx_ptr + row * cols + offs, (s * (g - dot)).to(tl.float16), mask=mask)


@triton.jit
def layernorm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * cols + offs, (xc * rstd * w + b).to(tl.float16), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layernorm_bwd_kernel(gy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, gx_ptr, cols, BLOCK: tl.constexpr):
    # The tutorial's `_layer_norm_bwd_dx_fused` without the weight
    # gradients (PyTorch's peer computes dx only, as ours does here).
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    gy = tl.load(gy_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = w * gy
    c1 = tl.sum(xhat * wdy, axis=0) / cols
    c2 = tl.sum(wdy, axis=0) / cols
    tl.store(gx_ptr + row * cols + offs, ((wdy - (xhat * c1 + c2)) * rstd).to(tl.float16), mask=mask)


@triton.jit
def adamw_kernel(p_ptr, m_ptr, v_ptr, g_ptr, lrs_ptr, nsq_ptr, lr_ptr, bc1_ptr, bc2_ptr, n, cols,
                 beta1, beta2, eps, wd, inv_scale, max_norm, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    nsq = tl.load(nsq_ptr)
    lr = tl.load(lr_ptr) * tl.load(lrs_ptr + offs // cols, mask=mask, other=0.0)
    scale = tl.minimum(inv_scale, max_norm / (tl.sqrt(nsq) + 1e-6 / inv_scale))
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32) * scale
    m = beta1 * tl.load(m_ptr + offs, mask=mask, other=0.0) + (1.0 - beta1) * g
    v = beta2 * tl.load(v_ptr + offs, mask=mask, other=0.0) + (1.0 - beta2) * g * g
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    p = p * (1.0 - lr * wd) - lr * (m * tl.load(bc1_ptr)) / (tl.sqrt(v * tl.load(bc2_ptr)) + eps)
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)
    tl.store(p_ptr + offs, p.to(tl.float16), mask=mask)


def _row_warps(block):
    # The tutorial's rule: more warps for longer rows.
    return 4 if block <= 1024 else 8 if block <= 4096 else 16 if block <= 16384 else 32


def gelu_fwd(x):
    y = torch.empty_like(x)
    n = x.numel()
    gelu_fwd_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


def gelu_bwd(gy, x):
    gx = torch.empty_like(x)
    n = x.numel()
    gelu_bwd_kernel[(triton.cdiv(n, 1024),)](gy, x, gx, n, BLOCK=1024)
    return gx


def softmax_fwd(x):
    rows, cols = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    softmax_fwd_kernel[(rows,)](x, y, cols, BLOCK=block, num_warps=_row_warps(block))
    return y


def softmax_bwd(g, s):
    rows, cols = s.shape
    gx = torch.empty_like(s)
    block = triton.next_power_of_2(cols)
    softmax_bwd_kernel[(rows,)](g, s, gx, cols, BLOCK=block, num_warps=_row_warps(block))
    return gx


def layernorm_fwd(x, w, b, eps=1e-5):
    rows, cols = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(cols)
    layernorm_fwd_kernel[(rows,)](x, w, b, y, mean, rstd, cols, eps, BLOCK=block, num_warps=_row_warps(block))
    return y, mean, rstd


def layernorm_bwd(gy, x, w, mean, rstd):
    rows, cols = x.shape
    gx = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    layernorm_bwd_kernel[(rows,)](gy, x, w, mean, rstd, gx, cols, BLOCK=block, num_warps=_row_warps(block))
    return gx


class AdamW:
    """One step's launch on f16 parameters [G, C], f32 moments."""

    def __init__(self, p, m, v, g, lrs, nsq, lr, bc1, bc2):
        self.t = (p, m, v, g, lrs, nsq, lr, bc1, bc2)

    def step(self, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.01, inv_scale=1.0, max_norm=1.0):
        p = self.t[0]
        n, cols = p.numel(), p.shape[-1]
        adamw_kernel[(triton.cdiv(n, 1024),)](*self.t, n, cols, beta1, beta2, eps, wd, inv_scale, max_norm, BLOCK=1024)


def check():
    """Each peer against PyTorch on one awkward shape (row lengths not a
    power of two, element counts not a multiple of the block). Returns
    {kernel: why} for those that disagree (or fail to compile): they are
    not timed."""
    failed = {}
    for name, fn in [("gelu", _check_gelu), ("softmax", _check_softmax), ("layernorm", _check_layernorm), ("adamw", _check_adamw)]:
        try:
            fn()
        except Exception as e:  # a peer that fails is reported, not timed
            failed[name] = f"{type(e).__name__}: {e}"
    return failed


def close(got, want, what, tol=2e-2):
    err = (got.float() - want.float()).abs().max().item()
    assert err <= tol * max(1.0, want.float().abs().max().item()), f"triton {what} disagrees with torch: {err}"


def _check_gelu():
    from torch_ref import rand
    import torch.nn.functional as F
    h = torch.float16
    x, dy = rand(100_003, h, -8, 8), rand(100_003, h, -4, 4)
    close(gelu_fwd(x), F.gelu(x.float(), approximate="tanh"), "gelu_fwd")
    close(gelu_bwd(dy, x), torch.ops.aten.gelu_backward(dy.float(), x.float(), approximate="tanh"), "gelu_bwd")


def _check_softmax():
    from torch_ref import rand
    h = torch.float16
    xs = rand((37, 3000), h, -16, 16)
    close(softmax_fwd(xs), torch.softmax(xs.float(), -1), "softmax_fwd")
    s, g = torch.softmax(rand((37, 3000), h), -1), rand((37, 3000), h)
    close(softmax_bwd(g, s), torch._softmax_backward_data(g.float(), s.float(), -1, torch.float32), "softmax_bwd")


def _check_layernorm():
    from torch_ref import rand
    import torch.nn.functional as F
    h = torch.float16
    xl, w, b, gy = rand((37, 1000), h), rand(1000, h), rand(1000, h), rand((37, 1000), h)
    y, mean, rstd = layernorm_fwd(xl, w, b)
    _, m_ref, r_ref = torch.ops.aten.native_layer_norm(xl.float(), (1000,), w.float(), b.float(), 1e-5)
    close(y, F.layer_norm(xl.float(), (1000,), w.float(), b.float(), 1e-5), "layernorm_fwd")
    close(rstd, r_ref.flatten(), "layernorm_fwd rstd", tol=1e-3)
    want = torch.ops.aten.native_layer_norm_backward(gy.float(), xl.float(), (1000,), m_ref, r_ref, w.float(), b.float(), [True, False, False])[0]
    close(layernorm_bwd(gy, xl, w, mean, rstd), want, "layernorm_bwd")


def _check_adamw():
    from torch_ref import rand
    h = torch.float16
    G, C = 7, 1000
    p, gr = rand((G, C), h), rand((G, C), h)
    m, v = rand((G, C), torch.float32) * 0.1, rand((G, C), torch.float32, 0, 0.01)
    lrs, one = rand(G, torch.float32, 0.5, 1.5), torch.ones(1, device="cuda")
    nsq, lr = (gr.float() ** 2).sum().reshape(1), torch.full((1,), 1e-3, device="cuda")
    scale = min(1.0, 1.0 / (nsq.sqrt().item() + 1e-6))
    gc = gr.float() * scale
    m_want, v_want = 0.9 * m + 0.1 * gc, 0.999 * v + 0.001 * gc * gc
    lr_row = (1e-3 * lrs)[:, None]
    p_want = p.float() * (1 - lr_row * 0.01) - lr_row * m_want / (v_want.sqrt() + 1e-8)
    AdamW(p, m, v, gr, lrs, nsq, lr, one, one).step()
    close(m, m_want, "adamw m", tol=1e-5)
    close(v, v_want, "adamw v", tol=1e-5)
    close(p, p_want, "adamw theta", tol=2e-3)


def workloads(skip=()):
    """label -> (function, flops = 0): the memory-bound labels of
    tokitai-bench-kernels, on the shapes torch_ref.py gives PyTorch; none
    for the peers in `skip` (those `check` found wrong)."""
    from torch_ref import rand
    h = torch.float16
    w = {}
    n = 1 << 26
    if "gelu" not in skip:
        x, dy = rand(n, h, -8, 8), rand(n, h, -4, 4)
        w["gelu_fwd f16 2^26"] = (lambda: gelu_fwd(x), 0)
        w["gelu_bwd f16 2^26"] = (lambda: gelu_bwd(dy, x), 0)
    for r, c in [(16384, 4096), (65536, 1024), (4096, 32000)] if "softmax" not in skip else []:
        xs = rand((r, c), h, -16, 16)
        w[f"softmax_fwd f16 {r}x{c}"] = ((lambda xs=xs: softmax_fwd(xs)), 0)
    if "softmax" not in skip:
        s, g = torch.softmax(rand((16384, 4096), h), -1), rand((16384, 4096), h)
        w["softmax_bwd f16 16384x4096"] = (lambda: softmax_bwd(g, s), 0)
    for r, c in [(16384, 4096), (65536, 1024)] if "layernorm" not in skip else []:
        xl, gamma, beta, gy = rand((r, c), h), rand(c, h), rand(c, h), rand((r, c), h)
        _, mean, rstd = layernorm_fwd(xl, gamma, beta)
        w[f"layernorm_fwd f16 {r}x{c}"] = ((lambda xl=xl, gamma=gamma, beta=beta: layernorm_fwd(xl, gamma, beta)), 0)
        w[f"layernorm_bwd f16 {r}x{c}"] = ((lambda gy=gy, xl=xl, gamma=gamma, mean=mean, rstd=rstd: layernorm_bwd(gy, xl, gamma, mean, rstd)), 0)
    if "adamw" in skip:
        return w
    G, C = 1 << 16, 1024
    opt = AdamW(rand((G, C), h), rand((G, C), torch.float32) * 0.1, rand((G, C), torch.float32, 0, 0.01), rand((G, C), h),
                rand(G, torch.float32, 0.5, 1.5), torch.full((1,), 1e6, device="cuda"), torch.full((1,), 1e-3, device="cuda"),
                torch.ones(1, device="cuda"), torch.ones(1, device="cuda"))
    w["adamw 2^26"] = (opt.step, 0)
    return w
