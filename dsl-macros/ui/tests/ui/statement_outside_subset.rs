use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1))]
fn copy(x: Tensor<f16, (N,)>, y: Out<f16, (N,)>) {
    for i in 0..N {
        y[i] = x[i];
    }
}

fn main() {}
