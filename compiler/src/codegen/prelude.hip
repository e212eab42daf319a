// tokitai prelude: one HIP C++ text for AMD (hipcc, hiprtc) and NVIDIA
// (NVRTC, nvcc). On NVIDIA the few HIP-specific names map to CUDA's.
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef __half tk_f16;
typedef __nv_bfloat16 tk_bf16;
__device__ __forceinline__ float tk_to_f32(tk_f16 x) { return __half2float(x); }
__device__ __forceinline__ float tk_to_f32(tk_bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ tk_f16 tk_f16_from(float x) { return __float2half_rn(x); }
__device__ __forceinline__ tk_bf16 tk_bf16_from(float x) { return __float2bfloat16_rn(x); }
template <class T> __device__ __forceinline__ T tk_shfl_xor(T v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
#else
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>
typedef __half tk_f16;
typedef hip_bfloat16 tk_bf16;
__device__ __forceinline__ float tk_to_f32(tk_f16 x) { return __half2float(x); }
__device__ __forceinline__ float tk_to_f32(tk_bf16 x) { return static_cast<float>(x); }
__device__ __forceinline__ tk_f16 tk_f16_from(float x) { return __float2half_rn(x); }
__device__ __forceinline__ tk_bf16 tk_bf16_from(float x) { return tk_bf16(x); }
template <class T> __device__ __forceinline__ T tk_shfl_xor(T v, int mask) { return __shfl_xor(v, mask); }
#endif
// Halves travel through shuffles as f32 (exact both ways).
__device__ __forceinline__ tk_f16 tk_shfl_xor(tk_f16 v, int mask) { return tk_f16_from(tk_shfl_xor(tk_to_f32(v), mask)); }
__device__ __forceinline__ tk_bf16 tk_shfl_xor(tk_bf16 v, int mask) { return tk_bf16_from(tk_shfl_xor(tk_to_f32(v), mask)); }
__device__ __forceinline__ bool tk_shfl_xor(bool v, int mask) { return tk_shfl_xor((int)v, mask) != 0; }
template <class T> __device__ __forceinline__ T tk_imin(T a, T b) { return a < b ? a : b; }
template <class T> __device__ __forceinline__ T tk_imax(T a, T b) { return a > b ? a : b; }
// A register vector of W elements, aligned to its size up to 16 bytes, so
// that it moves as 16-byte words or as one smaller word (4 bytes for a pair
// of halves): W * sizeof(T) is a power of two at every use, and the kernels
// test buffers for the alignment before they take the vector path.
template <class T, int W> struct alignas(sizeof(T) * W < 16 ? sizeof(T) * W : 16) tk_vec { T v[W]; };
// The contract monitor's observation of the values a thread stores
// (KStmt::ObserveFlush): the smallest and largest value, and whether a NaN
// was stored (infinities are kept and read back as non-finite). Printed
// only where the launch passes observation words. A fold is in registers
// and short: inside a contraction's epilogue every store is predicated
// straight-line code, and a longer fold (a compare and a select a value)
// turned each guarded store into a branch, which serialised the bias
// loads: linear_fwd_ws 62 -> 74 us a launch (H100, issue 18).
// On NVIDIA sm_80 and later the min and max propagate a NaN (`.NaN`), so
// the fold is two instructions and the NaN is found once, at the merge;
// elsewhere fminf and fmaxf pass over a NaN and a compare counts it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TK_NAN_MINMAX 1
#endif
struct tk_observed { float lo, hi; unsigned bad; };
__device__ __forceinline__ tk_observed tk_observed_none() { return {__int_as_float(0x7f800000), __int_as_float(0xff800000), 0u}; }
__device__ __forceinline__ void tk_observe(tk_observed& o, float v) {
#ifdef TK_NAN_MINMAX
    asm("min.NaN.f32 %0, %0, %1;" : "+f"(o.lo) : "f"(v));
    asm("max.NaN.f32 %0, %0, %1;" : "+f"(o.hi) : "f"(v));
#else
    o.lo = fminf(o.lo, v);
    o.hi = fmaxf(o.hi, v);
    o.bad |= (v != v) ? 1u : 0u;
#endif
}
__device__ __forceinline__ void tk_observe(tk_observed& o, tk_f16 v) { tk_observe(o, tk_to_f32(v)); }
__device__ __forceinline__ void tk_observe(tk_observed& o, tk_bf16 v) { tk_observe(o, tk_to_f32(v)); }
// The observation of an f16 output: on NVIDIA sm_80 and later its smallest
// and largest values as two pairs of halves, folded a pair at a time
// (`min.NaN.f16x2`: one instruction for the two values a paired store
// writes); elsewhere as f32. Both are exact: every half is a float.
#ifdef TK_NAN_MINMAX
struct tk_observed_f16 { unsigned lo, hi; };
__device__ __forceinline__ tk_observed_f16 tk_observed_f16_none() { return {0x7c007c00u, 0xfc00fc00u}; }
__device__ __forceinline__ void tk_observe_pair(tk_observed_f16& o, unsigned pair) {
    asm("min.NaN.f16x2 %0, %0, %1;" : "+r"(o.lo) : "r"(pair));
    asm("max.NaN.f16x2 %0, %0, %1;" : "+r"(o.hi) : "r"(pair));
}
__device__ __forceinline__ void tk_observe(tk_observed_f16& o, tk_f16 v) {
    const unsigned h = __half_as_ushort(v);
    tk_observe_pair(o, h | (h << 16));
}
__device__ __forceinline__ void tk_observe(tk_observed_f16& o, const tk_vec<tk_f16, 2>& v) {
    tk_observe_pair(o, (unsigned)__half_as_ushort(v.v[0]) | ((unsigned)__half_as_ushort(v.v[1]) << 16));
}
// As f32 for the merge: a NaN in either half of either pair is a NaN stored.
__device__ __forceinline__ tk_observed tk_observed_of(tk_observed_f16 o) {
    const float l0 = __half2float(__ushort_as_half((unsigned short)(o.lo & 0xffffu))), l1 = __half2float(__ushort_as_half((unsigned short)(o.lo >> 16)));
    const float h0 = __half2float(__ushort_as_half((unsigned short)(o.hi & 0xffffu))), h1 = __half2float(__ushort_as_half((unsigned short)(o.hi >> 16)));
    const unsigned bad = (l0 != l0 || l1 != l1 || h0 != h0 || h1 != h1) ? 1u : 0u;
    return {fminf(l0, l1), fmaxf(h0, h1), bad};
}
#else
struct tk_observed_f16 { tk_observed o; };
__device__ __forceinline__ tk_observed_f16 tk_observed_f16_none() { return {tk_observed_none()}; }
__device__ __forceinline__ void tk_observe(tk_observed_f16& o, tk_f16 v) { tk_observe(o.o, v); }
__device__ __forceinline__ void tk_observe(tk_observed_f16& o, const tk_vec<tk_f16, 2>& v) { tk_observe(o.o, v.v[0]); tk_observe(o.o, v.v[1]); }
__device__ __forceinline__ tk_observed tk_observed_of(tk_observed_f16 o) { return o.o; }
#endif
// A vector store's values: each lane (an f16 fold takes pairs).
template <class F, class T, int W> __device__ __forceinline__ void tk_observe(F& o, const tk_vec<T, W>& v) {
#pragma unroll
    for (int e = 0; e < W; ++e) tk_observe(o, v.v[e]);
}
template <int W> __device__ __forceinline__ void tk_observe(tk_observed_f16& o, const tk_vec<tk_f16, W>& v) {
#pragma unroll
    for (int e = 0; e + 1 < W; e += 2) tk_observe(o, *reinterpret_cast<const tk_vec<tk_f16, 2>*>(&v.v[e]));
    if (W % 2 != 0) tk_observe(o, v.v[W - 1]);
}
// A domain relation `t * t <= factor * s` on the values a thread stored at
// one element (KStmt::ObserveRelation), compared in double as the host
// compares it (tokitai_contracts::relation::holds): the square of an f32 is
// exact there. A failure, a NaN included, counts in the fold's third word.
__device__ __forceinline__ void tk_relate(tk_observed& o, float t, float s, double factor) {
    const double td = (double)t;
    o.bad |= (td * td <= factor * (double)s) ? 0u : 1u;
}
// An f32's order key: its bits with the sign bit set for a positive value,
// all bits flipped for a negative one, so that unsigned order is the
// values' order; no value has key 0 or complemented key 0 but NaNs, so
// zeroed words mean "nothing stored" and start the merge.
__device__ __forceinline__ unsigned tk_order_key(float v) {
    const unsigned b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// Combine the folds of the 32 lanes of a warp (a 64-lane wavefront as two
// halves: every mask stays inside one).
__device__ __forceinline__ tk_observed tk_observed_warp(tk_observed o) {
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) {
        o.lo = fminf(o.lo, tk_shfl_xor(o.lo, m));
        o.hi = fmaxf(o.hi, tk_shfl_xor(o.hi, m));
        o.bad |= tk_shfl_xor(o.bad, m);
    }
    return o;
}
// Every thread of the block arrives (a block-wide collective, like a
// barrier): each warp combines its lanes, the first warp combines the
// warps' (through 32 shared entries: a block has at most 1024 threads),
// and the first thread merges them into `slot[0..3]`: the largest value's
// key, the smallest's complemented key, NaNs seen. One merge a block, not
// one a warp: the atomics of a slot queue in L2, and a warp's merge each
// held gelu_fwd at 8 MB from 8.1 to 16.8-18.4 us, a block's at 10.5 (H100,
// Nsight Compute, issue 18). The atomics return nothing the thread waits
// for (RED on NVIDIA).
// The second barrier frees the entries for the next output's merge.
__device__ __forceinline__ void tk_observe_flush(unsigned* slot, tk_observed o) {
    __shared__ tk_observed tk_obs_warps[32];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    // A NaN the folds carried (see TK_NAN_MINMAX) is counted before the
    // shuffles' fminf and fmaxf pass over it.
    o.bad |= (o.lo != o.lo || o.hi != o.hi) ? 1u : 0u;
    o = tk_observed_warp(o);
    if (lane == 0u) tk_obs_warps[warp] = o;
    __syncthreads();
    if (warp == 0u) {
        const tk_observed none = {__int_as_float(0x7f800000), __int_as_float(0xff800000), 0u};
        o = tk_observed_warp(lane < ((blockDim.x + 31u) >> 5) ? tk_obs_warps[lane] : none);
        if (lane == 0u) {
            if (o.lo <= o.hi) {
                atomicMax(slot, tk_order_key(o.hi));
                atomicMax(slot + 1, ~tk_order_key(o.lo));
            }
            if (o.bad != 0u) atomicAdd(slot + 2, 1u);
        }
    }
    __syncthreads();
}
__device__ __forceinline__ void tk_observe_flush(unsigned* slot, tk_observed_f16 o) { tk_observe_flush(slot, tk_observed_of(o)); }
