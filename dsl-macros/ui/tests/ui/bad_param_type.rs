use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1))]
fn copy(x: Vec<f16>, y: Out<f16, (N,)>) {
    y[i] = x[i];
}

fn main() {}
