#ifndef TK_RESIDUE_ARITHMETIC
#define TK_RESIDUE_ARITHMETIC
// Residue arithmetic modulo q = p^k (a kernel's `modulus p^k`; issue 23).
// Operands lie in [0, q) (check::residue), q <= 2^32: a product of two is
// below 2^64 and a sum below 2^33, so both are exact in 64 bits before the
// reduction (tokitai_contracts::residue proves it for each declared q).
__device__ __forceinline__ unsigned tk_mulmod(unsigned a, unsigned b, unsigned long long q) {
    return (unsigned)(((unsigned long long)a * (unsigned long long)b) % q);
}
__device__ __forceinline__ unsigned tk_addmod(unsigned a, unsigned b, unsigned long long q) {
    unsigned long long s = (unsigned long long)a + (unsigned long long)b;
    return (unsigned)(s >= q ? s - q : s);
}
// The p-adic valuation capped at k (v(0) = k): for p = 2 the trailing zeros.
__device__ __forceinline__ unsigned tk_vp2(unsigned x, unsigned k) {
    return x == 0u ? k : tk_imin((unsigned)(__ffs((int)x) - 1), k);
}
__device__ __forceinline__ unsigned tk_vp(unsigned x, unsigned p, unsigned k) {
    if (x == 0u) return k;
    unsigned v = 0u;
    while (v < k && x % p == 0u) { x /= p; ++v; }
    return v;
}
#endif
