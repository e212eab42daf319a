//! The example kernels of `examples/ops`, compiled at build time by
//! `tokitai_compiler::Build`: each module holds, per kernel, its HIP source,
//! contract metadata and the exact and mirror oracles.

macro_rules! kernels {
    ($($name:ident),*) => {
        $(
            #[allow(clippy::all)]
            pub mod $name {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".rs"));
            }
        )*
    };
}

kernels!(gelu, layernorm, linear, loss, moe, optim, softmax);
