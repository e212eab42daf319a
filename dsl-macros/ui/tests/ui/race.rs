use tokitai_dsl_macros::kernel;

#[kernel(requires(N >= 2), domain(x in -1.0..=1.0), tolerance(x: abs 0.0, rel 0.0))]
fn shift(x: InOut<f16, (N,)>) {
    x[i] = x[0];
}

fn main() {}
