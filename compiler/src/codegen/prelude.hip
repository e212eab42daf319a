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
