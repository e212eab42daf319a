//! The Mixture-of-Experts training project (shared/docs/moe.md): sizes,
//! data, the model and its sheaf-padic router on generated kernels, the
//! training step, the run driver behind `tokitai-train`, `--diagnose`,
//! evaluation and export of a saved model, and
//! the router/model ablation behind `tokitai-ablate`.

pub mod ablation;
pub mod cli;
pub mod config;
pub mod data;
pub mod diagnose;
pub mod driver;
pub mod eval;
pub mod export;
pub mod model;
pub mod run;
pub mod schedule;
pub mod sheaf;
pub mod train;
