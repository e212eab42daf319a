//! The Mixture-of-Experts training project (shared/docs/moe.md): model
//! sizes and parameter counts, datasets. The model, its kernels and the
//! trainer build on these.

pub mod cli;
pub mod config;
pub mod data;
pub mod model;
pub mod run;
pub mod schedule;
pub mod train;
