#!/usr/bin/env python3
"""Ablation (not shipped): the warp-specialised gemm_f16_ws with its
producer's 3072 `cp.async` copies a stage replaced by 24 TMA bulk tensor
copies issued by one thread, into the same unswizzled core-matrix layout
the unit already reads (each box 16 bytes wide: 8 elements along the
operand's contiguous axis, 256 rows of A or 64 rows of B, which the TMA
writes as one column of core matrices), the full barriers completed by
the copies' transaction bytes. Only the layout's strides change in the
consumers' descriptors. Times it against the generated kernel with CuPy
on aligned shapes and checks the outputs are bitwise equal (same
instructions, same order). Run on the GPU machine:
python3 bench/experiments/ws_tma.py
"""
import re, sys
import numpy as np
import cupy as cp
from cuda.bindings import driver as cu
sys.path.insert(0, 'bench/experiments')
from ws_order import kernel_text, median_ms, unpromoted, overlapped, cublas_tflops

A_STAGE, B_STAGE = 256 * 64, 64 * 128
BYTES = (A_STAGE + B_STAGE) * 2

def producer(copies):
    """The producer branch of a TMA form: one thread waits for each stage to
    be released, arms its full barrier with the stage's bytes, and issues
    `copies` (C++ statements over `stage`, `kp` and `full`)."""
    return r'''            if ((int)threadIdx.x == 256) {
                for (int kp = 0; kp < K; kp += 64) {
                    const int slab = (kp / 64);
                    const int stage = (slab % 3);
                    asm volatile("{\n\t.reg .pred done;\n\tTK_WAIT_E:\n\tmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t@!done bra TK_WAIT_E;\n\t}" :: "r"((unsigned)__cvta_generic_to_shared(&empty_1[stage])), "r"((((slab / 3) + 1) % 2)) : "memory");
                    const unsigned full = (unsigned)__cvta_generic_to_shared(&full_0[stage]);
                    asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}" :: "r"(full), "r"(BYTES) : "memory");
COPIES
                }
            }
'''.replace('BYTES', str(BYTES)).replace('COPIES', copies.replace('A_STAGE', str(A_STAGE)).replace('B_STAGE', str(B_STAGE)))

TMA_COPY = 'asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" :: "r"((unsigned)__cvta_generic_to_shared(&DST)), "l"(MAP), "r"(X), "r"(Y), "r"(full) : "memory");'

def copy(dst, tmap, x, y):
    return TMA_COPY.replace('DST', dst).replace('MAP', tmap).replace('X', x).replace('Y', y)

# 16-byte boxes: 8 along k for A (256 rows each), 16 along n for B (64 k rows each).
PRODUCER = producer(
    '                    #pragma unroll\n                    for (int c = 0; c < 8; ++c) {\n                        ' + copy('a_ring_0[stage * A_STAGE + c * 2048]', 'tma_a', 'kp + 8 * c', 'm0_0') + '\n                    }\n'
    '                    #pragma unroll\n                    for (int c = 0; c < 16; ++c) {\n                        ' + copy('b_ring_1[stage * B_STAGE + c * 512]', 'tma_b', 'n0_1 + 8 * c', 'kp') + '\n                    }')

def tma_kernel(k):
    k = k.replace('gemm_f16_ws(', 'gemm_f16_ws_tma(')
    k = k.replace('    int N)\n{', '    int N,\n    const unsigned long long* __restrict__ tma_a,\n    const unsigned long long* __restrict__ tma_b)\n{', 1)
    for i in range(3):
        k = k.replace(f'mbarrier.init.shared::cta.b64 [%0], 128;" :: "r"((unsigned)__cvta_generic_to_shared(&full_0[{i}]))', f'mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"((unsigned)__cvta_generic_to_shared(&full_0[{i}]))')
    lines = k.split('\n')
    out, i, mode = [], 0, None
    while i < len(lines):
        ln = lines[i]
        if 'for (int k0_19 = 0;' in ln:
            mode = 'consumer'
        if mode == 'consumer':
            ln = ln.replace('stage_21 * 18432', f'stage_21 * {A_STAGE}').replace('wg_2 * 9216', 'wg_2 * 1024')
            for old, new in [(' + 144)', ' + 4096)'), (' + 288)', ' + 8192)'), (' + 432)', ' + 12288)'), (' + 4608)', ' + 512)')]:
                ln = ln.replace(old, new)
            ln = ln.replace('stage_21 * 8320', f'stage_21 * {B_STAGE}')
            ln = ln.replace('(9ull << 16) | (72ull << 32)', '(256ull << 16) | (8ull << 32)').replace('(8ull << 16) | (65ull << 32)', '(8ull << 16) | (64ull << 32)')
            if 'setmaxnreg.dec.sync.aligned.u32 88;' in ln:
                out.append(ln)
                out.append(PRODUCER.rstrip('\n'))
                # skip the generated producer loop up to the branch's end
                i += 1
                depth = 0
                while True:
                    t = lines[i].strip()
                    if t.startswith('for (int kp_4'):
                        depth = 1
                    elif depth:
                        depth += t.count('{') - t.count('}')
                    i += 1
                    if depth == 0 and t == '}':
                        break
                mode = 'done'
                continue
        out.append(ln)
        i += 1
    return '\n'.join(out)

# 128-byte swizzled boxes: A's stage in one box, B's in two of 64 n.
PRODUCER_SW128 = producer(
    '                    ' + copy('a_ring_0[stage * A_STAGE]', 'tma_a', 'kp', 'm0_0') + '\n'
    '                    #pragma unroll\n                    for (int c = 0; c < 2; ++c) {\n                        ' + copy('b_ring_1[stage * B_STAGE + c * 4096]', 'tma_b', 'n0_1 + 64 * c', 'kp') + '\n                    }')

def sw128_kernel(k):
    """TMA boxes 128 bytes wide with the 128-byte swizzle, which the unit
    reads through descriptors of layout SWIZZLE_128B: A as 256 rows of 64
    k (one box a stage), B as two boxes of 64 k rows x 64 n."""
    k = tma_kernel(k).replace('gemm_f16_ws_tma(', 'gemm_f16_ws_sw128(')
    start = k.index('            if ((int)threadIdx.x == 256) {')
    end = k.index('\n        }\n    } else {', start)
    k = k[:start] + PRODUCER_SW128.rstrip('\n') + k[end:]
    lines = k.split('\n')
    out, mode = [], None
    for ln in lines:
        if 'for (int k0_19 = 0;' in ln:
            mode = 'consumer'
        if 'setmaxnreg.dec' in ln:
            mode = None
        if mode == 'consumer':
            # undo tma_kernel's unswizzled strides, then the swizzled ones
            ln = ln.replace('wg_2 * 1024', 'wg_2 * 8192')
            for old, new in [(' + 512)', ' + 4096)'), (' + 4096)', ' + 16)'), (' + 8192)', ' + 32)'), (' + 12288)', ' + 48)')]:
                pass
            ln = re.sub(r'&a_ring_0\[([^\]]*)\]', lambda m: '&a_ring_0[' + m.group(1).replace(' + 4096)', ' + 16)').replace(' + 8192)', ' + 32)').replace(' + 12288)', ' + 48)').replace(' + 512)', ' + 4096)') + ']', ln)
            ln = re.sub(r'&b_ring_1\[([^\]]*)\]', lambda m: '&b_ring_1[' + m.group(1).replace(' + 128)', ' + 1024)').replace(' + 256)', ' + 2048)').replace(' + 384)', ' + 3072)') + ']', ln)
            ln = ln.replace('(256ull << 16) | (8ull << 32)', '(1ull << 16) | (64ull << 32) | (1ull << 62)').replace('(8ull << 16) | (64ull << 32)', '(512ull << 16) | (64ull << 32) | (1ull << 62)')
        out.append(ln)
    return '\n'.join(out)

def tensor_map(ptr, inner, outer, box_inner, box_outer, swizzle=False):
    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, ptr,
        [cu.cuuint64_t(inner), cu.cuuint64_t(outer)], [cu.cuuint64_t(inner * 2)], [cu.cuuint32_t(box_inner), cu.cuuint32_t(box_outer)], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzle else cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    words = np.array([int(w) for w in tmap.opaque], dtype=np.uint64)
    return cp.asarray(words)

def main():
    prelude, k = kernel_text('snapshots/hip__cuda-sm90__matmul.snap')
    kt = tma_kernel(k)
    open('/tmp/ws_tma.cu', 'w').write(prelude + kt)
    assert kt.count('cp.async.bulk.tensor') == 2 and 'kp_4' not in kt.split('setmaxnreg.dec')[1].split('} else {')[0], 'surgery'
    opts = ('-arch=sm_90a', '--fmad=false', '-std=c++17', '-I/usr/local/cuda/include')
    f0 = cp.RawModule(code=prelude + k, options=opts, backend='nvrtc').get_function('gemm_f16_ws')
    f1 = cp.RawModule(code=prelude + kt, options=opts, backend='nvrtc').get_function('gemm_f16_ws_tma')
    ks = sw128_kernel(k)
    open('/tmp/ws_sw128.cu', 'w').write(prelude + ks)
    f2 = cp.RawModule(code=prelude + ks, options=opts, backend='nvrtc').get_function('gemm_f16_ws_sw128')
    # B's two strides the other way round (which of LBO and SBO runs along
    # n for an MN-major swizzled operand): the bitwise check tells.
    ks2 = ks.replace('(512ull << 16) | (64ull << 32)', '(64ull << 16) | (512ull << 32)').replace('gemm_f16_ws_sw128(', 'gemm_f16_ws_sw128b(')
    f3 = cp.RawModule(code=prelude + ks2, options=opts, backend='nvrtc').get_function('gemm_f16_ws_sw128b')
    # Not valid (no promotions, both chains of a slab in flight): the
    # ceiling of the TMA form if the promotions cost nothing.
    kc = overlapped(unpromoted(ks.replace('gemm_f16_ws_sw128(', 'gemm_f16_ws_sw128_ceiling(')))
    f4 = cp.RawModule(code=prelude + kc, options=opts, backend='nvrtc').get_function('gemm_f16_ws_sw128_ceiling')
    smem = 209712
    for f in (f0, f1, f2, f3, f4):
        f.max_dynamic_shared_size_bytes = smem
    for (M, K, N) in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 2048, 2048), (16384, 1024, 1024), (2048, 4096, 2048), (1536, 4096, 1536), (1000, 1000, 1000)]:
        x = (cp.random.rand(M, K, dtype=cp.float32) - 0.5).astype(cp.float16)
        w = (cp.random.rand(K, N, dtype=cp.float32) - 0.5).astype(cp.float16)
        ta = tensor_map(x.data.ptr, K, M, 8, 256)
        tb = tensor_map(w.data.ptr, N, K, 8, 64)
        grid = ((N + 127) // 128, (M + 255) // 256)
        res, ys = {}, {}
        sa = tensor_map(x.data.ptr, K, M, 64, 256, swizzle=True)
        sb = tensor_map(w.data.ptr, N, K, 64, 64, swizzle=True)
        for name, f, extra in [('generated', f0, ()), ('tma', f1, (ta, tb)), ('sw128', f2, (sa, sb)), ('sw128b', f3, (sa, sb)), ('ceiling', f4, (sa, sb))]:
            y = cp.zeros((M, N), dtype=cp.float16)
            args = (x, w, y, cp.int32(M), cp.int32(K), cp.int32(N)) + extra
            res[name] = 2 * M * N * K / median_ms(lambda: f(grid, (384,), args, shared_mem=smem)) / 1e9
            ys[name] = y
        cublas = cublas_tflops(x, w)
        print(f"{M}x{K}x{N}: cuBLAS {cublas:.1f} TFLOP/s; generated {res['generated'] / cublas:.0%} of it, TMA 128-byte swizzle {res['sw128'] / cublas:.0%}")
        same = bool(cp.all(ys['generated'].view(cp.uint16) == ys['tma'].view(cp.uint16)))
        same_sw = bool(cp.all(ys['generated'].view(cp.uint16) == ys['sw128'].view(cp.uint16)))
        same_sw2 = bool(cp.all(ys['generated'].view(cp.uint16) == ys['sw128b'].view(cp.uint16)))
        print(f"{M}x{K}x{N}: generated {res['generated']:.1f} TFLOP/s, TMA 16-byte boxes {res['tma']:.1f} ({res['tma'] / res['generated']:.3f}x, bitwise equal: {same}), TMA 128-byte swizzle {res['sw128']:.1f} ({res['sw128'] / res['generated']:.3f}x, bitwise equal: {same_sw}), the same with B's strides swapped {res['sw128b']:.1f} (bitwise equal: {same_sw2}); not valid, no promotions: {res['ceiling']:.1f} ({res['ceiling'] / res['generated']:.3f}x)")

if __name__ == '__main__':
    main()
