#ifndef TK_RESIDUE_ARITHMETIC
#define TK_RESIDUE_ARITHMETIC
// Residue arithmetic modulo q = p^k (a kernel's `modulus p^k`; issue 23).
// Operands lie in [0, q) (check::residue), q <= 2^32: a product of two is
// below 2^64 and a sum below 2^33, so both are exact in 64 bits before the
// reduction (tokitai_contracts::residue proves it for each declared q).
// Where q <= 2^16 the product is below 2^32 and where q <= 2^31 the sum
// is, so 32 bits suffice; q is a constant once inlined, so one branch is
// left (a remainder by a 32-bit constant is a few instructions, by a
// 64-bit one a few dozen).
__device__ __forceinline__ unsigned tk_mulmod(unsigned a, unsigned b, unsigned long long q) {
    if (q <= 65536ull) return (a * b) % (unsigned)q;
    return (unsigned)(((unsigned long long)a * (unsigned long long)b) % q);
}
__device__ __forceinline__ unsigned tk_addmod(unsigned a, unsigned b, unsigned long long q) {
    if (q <= 2147483648ull) {
        unsigned s = a + b;
        return s >= (unsigned)q ? s - (unsigned)q : s;
    }
    unsigned long long s = (unsigned long long)a + (unsigned long long)b;
    return (unsigned)(s >= q ? s - q : s);
}
// The p-adic valuation capped at k (v(0) = k): for p = 2 the trailing zeros.
__device__ __forceinline__ unsigned tk_vp2(unsigned x, unsigned k) {
    return x == 0u ? k : tk_imin((unsigned)(__ffs((int)x) - 1), k);
}
// For odd p (p^k < 2^32) the chain itself: v counts the j <= k with
// p^j | x, which is min(vp(x), k) as divisibility by p^j implies it by
// p^(j-1), and k for x = 0. No branch: lanes of a warp do not wait for
// each other's longest chain, and once inlined with constant p and k the
// remainders are by constants and one register's valuation is shared by
// every product that reads it (the tiled schedule's micro-tile).
__device__ __forceinline__ unsigned tk_vp(unsigned x, unsigned p, unsigned k) {
    unsigned v = 0u;
    unsigned pj = p;
    #pragma unroll
    for (unsigned j = 1u; j <= k; ++j) {
        v += (x % pj == 0u) ? 1u : 0u;
        pj *= p;
    }
    return v;
}
#endif
