//! Nothing here: the crate holds `tests/ui.rs` (see Cargo.toml).
