//! GELU and softmax as `#[kernel]` Rust functions: the same kernels as
//! `examples/ops/gelu.tk` and `examples/ops/softmax.tk`, written in Rust.
//! Each expands to a module with the HIP source, the oracles and a typed
//! launcher (`gelu_fwd::launch(&dev, &x, &mut y)`), proved at build time.

use tokitai_dsl_macros::kernel;

/// Tanh-approximated GELU: fp16 in and out, fp32 arithmetic.
#[kernel(
    requires(N >= 1, N <= 1000000000),
    domain(x in -8.0..=8.0),
    tolerance(y: abs 1e-5, rel 1e-3),
)]
fn gelu_fwd(x: Tensor<f16, (N,)>, y: Out<f16, (N,)>) {
    y[i] = {
        let v = f32(x[i]);
        let t = tanh(0.7978845608 * (v + 0.044715 * v * v * v));
        f16(0.5 * v * (1.0 + t))
    };
}

/// GELU backward: dx = dy * d/dv gelu(v), with the tanh form's derivative.
#[kernel(
    requires(N >= 1, N <= 1000000000),
    domain(x in -8.0..=8.0, dy in -4.0..=4.0),
    tolerance(dx: abs 2e-4, rel 2e-3),
)]
fn gelu_bwd(x: Tensor<f16, (N,)>, dy: Tensor<f16, (N,)>, dx: Out<f16, (N,)>) {
    dx[i] = {
        let v = f32(x[i]);
        let u = 0.7978845608 * (v + 0.044715 * v * v * v);
        let t = tanh(u);
        let du = 0.7978845608 * (1.0 + 0.134145 * v * v);
        let d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
        f16(f32(dy[i]) * d)
    };
}

/// Row softmax, numerically stable (max subtracted), fp16 in and out.
#[kernel(
    requires(R >= 1, C >= 1, C <= 65536, R * C <= 1000000000),
    domain(x in -16.0..=16.0),
    tolerance(y: abs 1e-6, rel 2e-3),
)]
fn softmax_fwd(x: Tensor<f16, (R, C)>, y: Out<f16, (R, C)>) {
    m[r] = max(|c| f32(x[[r, c]]));
    s[r] = sum(|c| exp(f32(x[[r, c]]) - m[r]));
    y[[r, c]] = f16(exp(f32(x[[r, c]]) - m[r]) / s[r]);
}

/// Softmax VJP: dx = s * (g - sum(g * s)), s the forward output.
#[kernel(
    requires(R >= 1, C >= 1, C <= 4096, R * C <= 1000000000),
    domain(s in 0.0..=1.0, g in -1.0..=1.0),
    tolerance(dx: abs 2e-2, rel 2e-3),
)]
fn softmax_bwd(s: Tensor<f16, (R, C)>, g: Tensor<f16, (R, C)>, dx: Out<f16, (R, C)>) {
    d[r] = sum(|c| f32(g[[r, c]]) * f32(s[[r, c]]));
    dx[[r, c]] = f16(f32(s[[r, c]]) * (f32(g[[r, c]]) - d[r]));
}

/// Every kernel of this crate, for the runtime's checks.
pub const ALL: &[&tokitai_runtime::KernelDef] = &[&gelu_fwd::KERNEL, &gelu_bwd::KERNEL, &softmax_fwd::KERNEL, &softmax_bwd::KERNEL];
