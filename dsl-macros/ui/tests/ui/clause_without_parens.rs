use tokitai_dsl_macros::kernel;

#[kernel(requires)]
fn copy(x: Tensor<f16, (N,)>, y: Out<f16, (N,)>) {
    y[i] = x[i];
}

fn main() {}
