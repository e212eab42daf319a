use tokitai_dsl_macros::kernel;

#[kernel(require(N >= 1))]
fn copy(x: Tensor<f16, (N,)>, y: Out<f16, (N,)>) {
    y[i] = x[i];
}

fn main() {}
