//! `#[kernel]`: a contract-carrying kernel written as a Rust function.
//!
//! The function is read into the `.tk` language (`surface`: the mapping
//! is a table there), compiled by `tokitai-compiler` exactly as a `.tk`
//! file is (checks, schedule, proofs with Z3 when the `prove` feature is
//! on, HIP and oracle codegen), and replaced by a module of the same name:
//! `HIP_SOURCE`, the f64 and mirror oracles (`exact`, `mirror`), `INFO`,
//! `KERNEL` and a typed `launch` on `tokitai_runtime` that checks shapes,
//! dtypes and `requires` at every launch.
//!
//! Errors point at the user's tokens: subset and syntax errors from the
//! reader, dtype, shape and race errors from the checker, and every
//! obligation Z3 refutes with its counterexample.
//!
//! Outcomes are kept in the persistent proof cache (`$TOKITAI_CACHE_DIR`,
//! else the user's cache directory; shared with `tokitaic`), so an
//! unchanged kernel is not proved again. A crate that depends on this one with
//! `default-features = false` skips proving at build time.

use proc_macro::TokenStream;

mod expand;
mod surface;

/// See the crate documentation; the `.tk` to Rust mapping is in `surface`.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::kernel(attr.into(), item.into()).into()
}
