use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1))]
fn copy<T>(x: Tensor<f16, (N,)>, y: Out<f16, (N,)>) {
    y[i] = x[i];
}

fn main() {}
