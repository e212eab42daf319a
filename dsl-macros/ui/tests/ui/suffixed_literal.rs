use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1), tolerance(y: abs 1e-3, rel 1e-3))]
fn half(x: Tensor<f32, (N,)>, y: Out<f32, (N,)>) {
    y[i] = x[i] * 0.5f32;
}

fn main() {}
