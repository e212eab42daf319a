use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1), ensures(y in 0..4))]
fn pass(x: Tensor<i32, (N,)>, y: Out<i32, (N,)>) {
    y[i] = x[i];
}

fn main() {}
