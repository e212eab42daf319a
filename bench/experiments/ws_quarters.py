#!/usr/bin/env python3
"""Ablation (not shipped, issue 19): can the promotions of gemm_f16_ws
overlap the unit without a second 64 x 128 accumulator?

The generated kernel's consumer warpgroup owns 128 x 128 of the tile as
two halves of 64 x 128; per slab it chains four m64n128k16 instructions
into a fresh 64-register part, waits for all of them (wait_group 0), adds
the part to its running sums, then does the same for the other half: the
unit drains twice a slab per warpgroup. Two parts of 64 registers in
flight together do not fit beside the 128 running sums (232 registers).

Here each half is split along n into two quarters of 64 x 64 (m64n64k16,
32 registers a part): the warpgroup issues quarter q's chain into one part,
commits, waits until at most one group is pending (quarter q - 1 done),
promotes quarter q - 1 from the other part while q runs, and waits for
everything only after the last quarter. Each output element's sum is the
same (four instructions from zero a slab, added to the running sum in
slab order), so the outputs must equal the generated kernel's bit for
bit. (Keeping the last quarter in flight across the slab boundary is not
tried: the stage's release needs the unit done.)

Beside them, three more copies: the epilogue storing each thread's two
neighbouring columns as one 4-byte word (`pairs`), a ring of four stages
instead of three (`4st`), and, not valid, no epilogue at all (`noepi`:
the ceiling of a free store). The generated kernel's text is the one in
snapshots/ at the commit this ran at (bench/RESULTS.md, sixteenth
session: the element-wise epilogue).

Run on the GPU machine: python3 bench/experiments/ws_quarters.py
"""
import re, sys
import cupy as cp
sys.path.insert(0, 'bench/experiments')
from ws_order import median_ms, cublas_tflops
from ws_tma import tensor_map

def kernel_text(snap_path, name):
    snap = open(snap_path).read()
    body = snap.split('---\n', 2)[2]
    prelude = body[:body.index('extern "C"')]
    j = body.index(name + '(')
    start = body.rindex('#ifndef TK_TENSOR_MAP', 0, j)
    end = body.index('\n}\n', j) + 3
    return prelude, body[start:end]

def by_pointer(k):
    """Tensor maps in global memory, passed by pointer (CuPy cannot pass a
    128-byte struct by value); the same for every variant."""
    k = k.replace('const __grid_constant__ tk_tensor_map tma_x', 'const tk_tensor_map* __restrict__ tma_x')
    k = k.replace('const __grid_constant__ tk_tensor_map tma_w', 'const tk_tensor_map* __restrict__ tma_w')
    return k.replace('reinterpret_cast<unsigned long long>(&tma_x)', 'reinterpret_cast<unsigned long long>(tma_x)').replace('reinterpret_cast<unsigned long long>(&tma_w)', 'reinterpret_cast<unsigned long long>(tma_w)')

def regs(arr, n, out):
    c = '"=f"' if out else '"+f"'
    return ', '.join(f'{c}({arr}[{i}])' for i in range(n))

def wgmma64(part, first, a_off, b_off):
    outs = '{' + ', '.join(f'%{i}' for i in range(32)) + '}'
    return ('asm volatile("{\\n\\t.reg .pred p;\\n\\tsetp.ne.b32 p, %34, 0;\\n\\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 '
            + outs + ', %32, %33, p, 1, 1, 0, 1;\\n\\t}" : ' + regs(part, 32, first)
            + ' : "l"(((unsigned long long)((__cvta_generic_to_shared(&a_ring_0[' + a_off + ']) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62)))'
            + ', "l"(((unsigned long long)((__cvta_generic_to_shared(&b_ring_1[' + b_off + ']) & 0x3FFFF) >> 4) | (512ull << 16) | (64ull << 32) | (1ull << 62)))'
            + ', "n"(' + ('0' if first else '1') + ') : "memory");')

def consumer_loop(ind, order, across=False):
    """The consumer's slab loop: quarters in `order` ((mh, nh) pairs)."""
    I = ind
    s = [f'{I}float qp_0[32];', f'{I}float qp_1[32];',
         f'{I}for (int k0_13 = 0; k0_13 < K; k0_13 += 64) {{',
         f'{I}    const int slab_14 = (k0_13 / 64);',
         f'{I}    const int stage_15 = (slab_14 % 3);',
         f'{I}    asm volatile("{{\\n\\t.reg .pred done;\\n\\tTK_WAIT:\\n\\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n\\t@!done bra TK_WAIT;\\n\\t}}" :: "r"((unsigned)__cvta_generic_to_shared(&full_0[stage_15])), "r"(((slab_14 / 3) % 2)) : "memory");']
    def promote(q):
        mh, nh = order[q]
        part = f'qp_{q % 2}'
        return [f'{I}    asm volatile("" : {regs(part, 32, False)} :: "memory");',
                f'{I}    #pragma unroll',
                f'{I}    for (int r = 0; r < 32; ++r) acc_1[{mh * 64 + nh * 32} + r] = (acc_1[{mh * 64 + nh * 32} + r] + {part}[r]);']
    for q, (mh, nh) in enumerate(order):
        part = f'qp_{q % 2}'
        s.append(f'{I}    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')
        for i in range(4):
            a_off = f'(stage_15 * 16384) + (wg_2 * 8192) + {mh * 4096 + 16 * i}'
            b_off = f'(stage_15 * 8192) + {nh * 4096 + 1024 * i}'
            s.append(I + '    ' + wgmma64(part, i == 0, a_off, b_off))
        s.append(f'{I}    asm volatile("wgmma.commit_group.sync.aligned;\\n\\twgmma.wait_group.sync.aligned 1;" ::: "memory");')
        if q > 0:
            s += promote(q - 1)
    s.append(f'{I}    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");')
    s += promote(len(order) - 1)
    s.append(f'{I}    asm volatile("{{\\n\\t.reg .b64 state;\\n\\tmbarrier.arrive.shared::cta.b64 state, [%0];\\n\\t}}" :: "r"((unsigned)__cvta_generic_to_shared(&empty_1[stage_15])) : "memory");')
    s.append(f'{I}}}')
    return '\n'.join(s)

def quarters(k, name, order):
    k = k.replace('gemm_f16_ws(', name + '(')
    start = k.index('            for (int k0_13 = 0; k0_13 < K; k0_13 += 64) {')
    end = k.index('mbarrier.arrive.shared::cta.b64 state, [%0];', start)
    end = k.index('\n            }\n', end) + len('\n            }\n')
    return k[:start] + consumer_loop('            ', order) + '\n' + k[end:]

EPILOGUE_HEAD = '            for (int r_37 = 0; r_37 < 128; ++r_37) {'

def epilogue_span(k):
    start = k.index(EPILOGUE_HEAD)
    end = k.index('\n            }\n', start) + len('\n            }\n')
    return start, end

def no_epilogue(k, name):
    """Not valid (a ceiling): the tile is never stored; a test the compiler
    cannot decide keeps every running sum live."""
    k = k.replace('gemm_f16_ws(', name + '(')
    start, end = epilogue_span(k)
    body = ('            for (int r_37 = 0; r_37 < 128; ++r_37) {\n'
            '                if (acc_1[r_37] == 1234.5f && M < 0) { y[r_37] = tk_f16_from(acc_1[r_37]); }\n'
            '            }\n')
    return k[:start] + body + k[end:]

def paired_epilogue(k, name):
    """Each thread's two neighbouring columns (registers r, r + 1) stored as
    one 4-byte word where both lie inside and the word is aligned."""
    k = k.replace('gemm_f16_ws(', name + '(')
    start, end = epilogue_span(k)
    body = (
        '            #pragma unroll\n'
        '            for (int r_37 = 0; r_37 < 128; r_37 += 2) {\n'
        '                const int m_38 = ((m0_0 + (wg_2 * 128)) + (((r_37 / 64) * 64) + ((((((int)threadIdx.x % 128) / 32) * 16) + ((((int)threadIdx.x % 128) % 32) / 4)) + ((((r_37 % 64) % 4) / 2) * 8))));\n'
        '                const int n_39 = (n0_1 + (((((r_37 % 64) / 4) * 8) + (((((int)threadIdx.x % 128) % 32) % 4) * 2))));\n'
        '                if (m_38 < M && n_39 + 1 < N && ((m_38 * N + n_39) % 2) == 0) {\n'
        '                    *reinterpret_cast<__half2*>(&y[m_38 * N + n_39]) = __floats2half2_rn(acc_1[r_37], acc_1[r_37 + 1]);\n'
        '                } else {\n'
        '                    if (m_38 < M && n_39 < N) y[m_38 * N + n_39] = tk_f16_from(acc_1[r_37]);\n'
        '                    if (m_38 < M && n_39 + 1 < N) y[m_38 * N + n_39 + 1] = tk_f16_from(acc_1[r_37 + 1]);\n'
        '                }\n'
        '            }\n')
    return k[:start] + body + k[end:]

def four_stages(k, name):
    """A ring of four stages (192 KB) where the generated kernel has three:
    the element path's slabs share the ring's memory (they run only when
    the vector path does not), the barriers follow the ring."""
    k = k.replace('gemm_f16_ws(', name + '(')
    k = k.replace('reinterpret_cast<tk_f16*>(tk_shared + 98304); // 24576', 'reinterpret_cast<tk_f16*>(tk_shared + 131072); // 32768')
    k = k.replace('reinterpret_cast<tk_f16*>(tk_shared + 147456); // 16384', 'reinterpret_cast<tk_f16*>(tk_shared + 0); // 16384')
    k = k.replace('reinterpret_cast<tk_f16*>(tk_shared + 180224); // 8192', 'reinterpret_cast<tk_f16*>(tk_shared + 32768); // 8192')
    k = k.replace('reinterpret_cast<unsigned long long*>(tk_shared + 196608); // 3', 'reinterpret_cast<unsigned long long*>(tk_shared + 196608); // 4')
    k = k.replace('reinterpret_cast<unsigned long long*>(tk_shared + 196632); // 3', 'reinterpret_cast<unsigned long long*>(tk_shared + 196640); // 4')
    for arr, n in (('full_0', 1), ('empty_1', 256)):
        old = f'asm volatile("mbarrier.init.shared::cta.b64 [%0], {n};" :: "r"((unsigned)__cvta_generic_to_shared(&{arr}[2])) : "memory");'
        assert old in k, arr
        k = k.replace(old, old + '\n            ' + old.replace(f'&{arr}[2]', f'&{arr}[3]'))
    for v in ('slab_14', 'slab_5'):
        k = k.replace(f'({v} % 3)', f'({v} % 4)').replace(f'(({v} / 3) % 2)', f'(({v} / 4) % 2)').replace(f'((({v} / 3) + 1) % 2)', f'((({v} / 4) + 1) % 2)')
    assert k.count('% 4)') >= 2 and '% 3)' not in k.split('setmaxnreg.inc')[1].split('} else {')[0], 'surgery'
    return k

def main():
    prelude, k = kernel_text('snapshots/hip__cuda-sm90__matmul.snap', 'gemm_f16_ws')
    k = by_pointer(k)
    variants = [('gemm_f16_ws', k),
                ('gemm_f16_ws_q_mn', quarters(k, 'gemm_f16_ws_q_mn', [(0, 0), (0, 1), (1, 0), (1, 1)])),
                ('gemm_f16_ws_q_nm', quarters(k, 'gemm_f16_ws_q_nm', [(0, 0), (1, 0), (0, 1), (1, 1)])),
                ('gemm_f16_ws_pairs', paired_epilogue(k, 'gemm_f16_ws_pairs')),
                ('gemm_f16_ws_4st', four_stages(k, 'gemm_f16_ws_4st')),
                ('gemm_f16_ws_noepi', no_epilogue(k, 'gemm_f16_ws_noepi'))]
    for name, text in variants:
        open(f'/tmp/{name}.cu', 'w').write(prelude + text)
    opts = ('-arch=sm_90a', '--fmad=false', '-std=c++17', '-I/usr/local/cuda/include')
    fs = {name: cp.RawModule(code=prelude + text, options=opts, backend='nvrtc').get_function(name) for name, text in variants}
    smem = 196608 + 48 + 1024
    for f in fs.values():
        f.max_dynamic_shared_size_bytes = smem
    print('registers:', {name: getattr(f, 'num_regs', '?') for name, f in fs.items()}, flush=True)
    for (M, K, N) in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 2048, 2048), (16384, 1024, 1024), (2048, 4096, 2048), (3072, 4096, 3072), (1000, 1000, 1000)]:
        x = (cp.random.rand(M, K, dtype=cp.float32) - 0.5).astype(cp.float16)
        w = (cp.random.rand(K, N, dtype=cp.float32) - 0.5).astype(cp.float16)
        ta = tensor_map(x.data.ptr, K, M, 64, 256, swizzle=True)
        tb = tensor_map(w.data.ptr, N, K, 64, 64, swizzle=True)
        grid = ((N + 127) // 128, (M + 255) // 256)
        res, ys = {}, {}
        for rep in range(3):
            for name, f in fs.items():
                y = cp.zeros((M, N), dtype=cp.float16)
                args = (x, w, y, cp.int32(M), cp.int32(K), cp.int32(N), ta, tb)
                t = 2 * M * N * K / median_ms(lambda: f(grid, (384,), args, shared_mem=smem)) / 1e9
                res.setdefault(name, []).append(t)
                ys[name] = y
        cublas = cublas_tflops(x, w)
        base = ys['gemm_f16_ws'].view(cp.uint16)
        line = f'{M}x{K}x{N}: cuBLAS {cublas:.1f}'
        for name, ts in res.items():
            same = bool(cp.all(ys[name].view(cp.uint16) == base))
            med = sorted(ts)[1]
            line += f'; {name[len("gemm_f16_"):]} {med:.1f} [{min(ts):.0f}-{max(ts):.0f}] ({med / cublas:.0%}, bitwise {same})'
        print(line, flush=True)

if __name__ == '__main__':
    main()
