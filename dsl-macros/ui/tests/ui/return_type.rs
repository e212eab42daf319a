use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1))]
fn copy(x: Tensor<f16, (N,)>) -> f16 {
    y[i] = x[i];
}

fn main() {}
