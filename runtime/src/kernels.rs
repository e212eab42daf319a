//! The kernels of `examples/ops`, generated and proved by the build script.
//! Each module `file::kernel` has `launch(dev, tensors.., scalars..)`, the
//! `KERNEL` definition, its oracles (`mirror`, `exact`), `INFO` and
//! `HIP_SOURCE`.

macro_rules! kernel_files {
    ($($name:ident),*) => {
        $(
            #[allow(clippy::all, unused_imports)]
            pub mod $name {
                include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".rs"));
            }
        )*
        /// Every kernel the runtime ships, by name.
        pub fn all() -> Vec<&'static crate::KernelDef> {
            let mut v = Vec::new();
            $( v.extend(self::$name::ALL.iter().copied()); )*
            v
        }
        /// The kernel called `name`.
        pub fn by_name(name: &str) -> Option<&'static crate::KernelDef> {
            all().into_iter().find(|k| k.info.name == name)
        }
    };
}

kernel_files!(gelu, layernorm, linear, loss, matmul, moe, optim, padic, probe, sheaf, softmax);
