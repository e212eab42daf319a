//! The compiler's fuzz campaign (issue 24, item 5): `.tk` programs
//! generated from the grammar (`grammar`) and token-mutated examples
//! (`mutate`) through every stage of the compiler (`campaign`). The quick
//! campaign runs in the test suite (`tests/quick.rs`); the long one is
//! `cargo run --release -p tokitai-fuzz -- --inputs 100000`.

pub mod campaign;
pub mod grammar;
pub mod mutate;
