use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1))]
fn shift(x: Tensor<i32, (N,)>, y: Out<i32, (N,)>) {
    y[i] = x[i] << 2;
}

fn main() {}
