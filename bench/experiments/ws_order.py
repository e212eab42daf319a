#!/usr/bin/env python3
"""Ablation (not shipped): does ordering the two consumer warpgroups'
wgmma chains pay in gemm_f16_ws?

Takes the generated gemm_f16_ws (snapshots/hip__cuda-sm90__matmul.snap)
and hand-edited copies: one in which the consumers pass a token through two
named barriers, so that warpgroup 1 issues each chain only after
warpgroup 0 issued its own, and warpgroup 0 each next chain only after
warpgroup 1 issued its previous one: the unit always holds the other
warpgroup's chain while one promotes; and ceilings that are not valid
schedules (no promotions; both chains of a slab in flight; no copies).
Times them with CuPy (NVRTC) on the same inputs and checks that the
ordered one's outputs equal the generated one's bitwise. Run on the GPU
machine: python3 bench/experiments/ws_order.py
"""
import sys, re
import cupy as cp

def kernel_text(snap_path):
    snap = open(snap_path).read()
    body = snap.split('---\n', 2)[2]
    prelude = body[:body.index('extern "C"')]
    j = body.index('gemm_f16_ws(')
    start = body.rindex('extern "C"', 0, j)
    end = body.index('\n}\n', j) + 3
    return prelude, body[start:end]

def ordered(k):
    lines = k.split('\n')
    out = []
    consumer_loop = False
    for ln in lines:
        if 'for (int k0_19 = 0;' in ln:
            out.append('            int tk_chain = 0;')
            consumer_loop = True
        if consumer_loop and 'asm volatile("wgmma.fence.sync.aligned;"' in ln:
            ind = ln[:len(ln) - len(ln.lstrip())]
            out.append(ind + 'if (wg_2 == 0) { if (tk_chain > 0) asm volatile("bar.sync 2, 256;" ::: "memory"); } else { asm volatile("bar.sync 1, 256;" ::: "memory"); }')
        if consumer_loop and 'wgmma.commit_group.sync.aligned;\\n\\twgmma.wait_group.sync.aligned 0;' in ln:
            ind = ln[:len(ln) - len(ln.lstrip())]
            out.append(ind + 'asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");')
            out.append(ind + 'if (wg_2 == 0) asm volatile("bar.arrive 1, 256;" ::: "memory"); else asm volatile("bar.arrive 2, 256;" ::: "memory");')
            out.append(ind + 'tk_chain += 1;')
            ln = ln.replace('wgmma.commit_group.sync.aligned;\\n\\t', '')
        out.append(ln)
        if consumer_loop and ln.strip() == '}' and out[-2].strip().startswith('asm volatile("{\\n\\t.reg .b64 state;\\n\\tmbarrier.arrive'):
            # end of the consumer loop: warpgroup 0 takes warpgroup 1's last token
            out.append('            if (wg_2 == 0) asm volatile("bar.sync 2, 256;" ::: "memory");')
            consumer_loop = False
    return '\n'.join(out)

def unpromoted(k):
    """The consumers' chains accumulate straight into the running sums
    (no fresh part, no promotion): NOT a valid schedule (the unit's
    truncation error then grows with K), only the ceiling of what removing
    the promotions could buy."""
    lines = k.split('\n')
    out = []
    consumer_loop = False
    skip = 0
    for ln in lines:
        if 'for (int k0_19 = 0;' in ln:
            consumer_loop = True
        if consumer_loop:
            if re.match(r'\s*float part_[23]\[64\];', ln):
                continue
            if skip:
                skip -= 1
                continue
            if re.match(r'\s*#pragma unroll', ln) and 'acc_1' in '\n'.join(lines[lines.index(ln):lines.index(ln) + 3]):
                pass
            ln = re.sub(r'"=f"\(part_2\[(\d+)\]\)', lambda m: f'"+f"(acc_1[{m.group(1)}])', ln)
            ln = re.sub(r'"\+f"\(part_2\[(\d+)\]\)', lambda m: f'"+f"(acc_1[{m.group(1)}])', ln)
            ln = re.sub(r'"=f"\(part_3\[(\d+)\]\)', lambda m: f'"+f"(acc_1[{int(m.group(1)) + 64}])', ln)
            ln = re.sub(r'"\+f"\(part_3\[(\d+)\]\)', lambda m: f'"+f"(acc_1[{int(m.group(1)) + 64}])', ln)
            if 'wgmma.mma_async' in ln:
                ln = ln.replace('"n"(0) : "memory");', '"n"(1) : "memory");')
            if 'acc_1[r_22] = (acc_1[r_22] + part_2[r_22]);' in ln or 'acc_1[(r_23 + 64)] = (acc_1[(r_23 + 64)] + part_3[r_23]);' in ln:
                # drop the promotion loop: its `#pragma unroll` and `for` were emitted already
                out.pop(); out.pop()
                skip = 1
                continue
            if ln.strip() == '}' and out and out[-1].strip().startswith('asm volatile("{\\n\\t.reg .b64 state;'):
                consumer_loop = False
        out.append(ln)
    return '\n'.join(out)

def overlapped(k3):
    """From `unpromoted`: the slab's two chains in flight together (one
    wait a slab instead of two). Not valid either: a ceiling."""
    lines = k3.split('\n')
    out, seen = [], False
    it = iter(range(len(lines)))
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not seen and 'for (int k0_19 = 0;' in ln:
            seen = 'loop'
        if seen == 'loop' and 'wgmma.commit_group.sync.aligned;\\n\\twgmma.wait_group.sync.aligned 0;' in ln:
            ind = ln[:len(ln) - len(ln.lstrip())]
            out.append(ind + 'asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");')
            i += 2  # and the register fence after the wait
            seen = True
            continue
        out.append(ln)
        i += 1
    return '\n'.join(out)

def no_copies(k):
    """The producer signals each stage without copying anything: the
    consumers' side alone (outputs are garbage)."""
    return '\n'.join(ln for ln in k.split('\n') if not ('cp.async.ca.shared.global' in ln and 'kp_4' not in ln and 'stage_6' in ln))

def median_ms(launch, warmup=3, runs=20):
    """Median time of `launch()` over `runs` launches (CUDA events), after
    `warmup` untimed ones."""
    for _ in range(warmup):
        launch()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(runs):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(); launch(); e.record(); e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e))
    times.sort()
    return times[len(times) // 2]

def cublas_tflops(x, w):
    """cuBLAS (through PyTorch) on the same CuPy inputs, in the same
    process: TFLOP/s of the median of 20 timed products after 3."""
    import torch
    tx, tw = torch.as_tensor(x, device='cuda'), torch.as_tensor(w, device='cuda')
    for _ in range(3):
        torch.matmul(tx, tw)
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s0.record(); torch.matmul(tx, tw); e0.record(); e0.synchronize()
        times.append(s0.elapsed_time(e0))
    times.sort()
    (M, K), N = x.shape, w.shape[1]
    return 2 * M * N * K / times[len(times) // 2] / 1e9

def main():
    prelude, k = kernel_text(sys.argv[1] if len(sys.argv) > 1 else 'snapshots/hip__cuda-sm90__matmul.snap')
    k2 = ordered(k).replace('gemm_f16_ws(', 'gemm_f16_ws_ordered(')
    assert (k2.count('bar.arrive'), k2.count('bar.sync 2'), k2.count('bar.sync 1')) == (4, 3, 2)
    open('/tmp/ws_ordered.cu', 'w').write(prelude + k2)
    opts = ('-arch=sm_90a', '--fmad=false', '-std=c++17', '-I/usr/local/cuda/include')
    k3 = unpromoted(k).replace('gemm_f16_ws(', 'gemm_f16_ws_unpromoted(')
    assert 'part_2' not in k3.split('for (int k0_24')[0] and k3.count('"n"(0)') == k.count('"n"(0)') - 2, "surgery"
    open('/tmp/ws_unpromoted.cu', 'w').write(prelude + k3)
    k4 = overlapped(k3.replace('gemm_f16_ws_unpromoted(', 'gemm_f16_ws_overlapped('))
    k5 = no_copies(k).replace('gemm_f16_ws(', 'gemm_f16_ws_nocopy(')
    k6 = no_copies(k4).replace('gemm_f16_ws_overlapped(', 'gemm_f16_ws_nocopy_overlapped(')
    assert k4.count('wait_group.sync.aligned 0') == k3.count('wait_group.sync.aligned 0') - 1
    assert k5.count('cp.async.ca.shared.global') == k.count('cp.async.ca.shared.global') - 2
    variants = [('gemm_f16_ws', k), ('gemm_f16_ws_ordered', k2), ('gemm_f16_ws_unpromoted', k3), ('gemm_f16_ws_overlapped', k4), ('gemm_f16_ws_nocopy', k5), ('gemm_f16_ws_nocopy_overlapped', k6)]
    mods = {name: cp.RawModule(code=prelude + text, options=opts, backend='nvrtc').get_function(name) for name, text in variants}
    smem = 209712
    for f in mods.values():
        f.max_dynamic_shared_size_bytes = smem
    for (M, K, N) in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 2048, 2048), (16384, 1024, 1024), (2048, 4096, 2048)]:
        x = (cp.random.rand(M, K, dtype=cp.float32) - 0.5).astype(cp.float16)
        w = (cp.random.rand(K, N, dtype=cp.float32) - 0.5).astype(cp.float16)
        ys = {}
        res = {}
        for name, f in mods.items():
            y = cp.zeros((M, N), dtype=cp.float16)
            args = (x, w, y, cp.int32(M), cp.int32(K), cp.int32(N))
            grid = ((N + 127) // 128, (M + 255) // 256)
            ms = median_ms(lambda: f(grid, (384,), args, shared_mem=smem))
            res[name] = 2 * M * N * K / ms / 1e9
            ys[name] = y
        same = bool(cp.all(ys['gemm_f16_ws'].view(cp.uint16) == ys['gemm_f16_ws_ordered'].view(cp.uint16)))
        base = res['gemm_f16_ws']
        others = ', '.join(f"{n[len('gemm_f16_ws_'):]} {v:.1f} ({v / base:.3f}x)" for n, v in res.items() if n != 'gemm_f16_ws')
        print(f"{M}x{K}x{N}: generated {base:.1f} TFLOP/s; {others}; ordered equals generated bitwise: {same}")

if __name__ == '__main__':
    main()
