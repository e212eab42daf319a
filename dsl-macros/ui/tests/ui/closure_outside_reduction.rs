use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 1), tolerance(y: abs 1e-3, rel 1e-3))]
fn f(x: Tensor<f32, (N,)>, y: Out<f32, (N,)>) {
    y[i] = select(|k| x[k], 1.0, 2.0);
}

fn main() {}
