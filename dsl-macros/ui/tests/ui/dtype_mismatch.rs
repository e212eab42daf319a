use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1), tolerance(y: abs 1e-3, rel 1e-3))]
fn widen(x: Tensor<f32, (N,)>, y: Out<f16, (N,)>) {
    y[i] = x[i] * 2.0;
}

fn main() {}
