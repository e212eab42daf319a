use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1, idx in 0..), tolerance(y: abs 0.0, rel 0.0))]
fn gather(x: Tensor<f16, (T,)>, idx: Tensor<i32, (N,)>, y: Out<f16, (N,)>) {
    y[i] = x[idx[i]];
}

fn main() {}
