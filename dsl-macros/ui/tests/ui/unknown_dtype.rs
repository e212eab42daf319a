use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1))]
fn copy(x: Tensor<f17, (N,)>, y: Out<f16, (N,)>) {
    y[i] = x[i];
}

fn main() {}
