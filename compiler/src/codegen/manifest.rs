//! `manifest.json`: what a build produced, with sha256 fingerprints of the
//! source, the compiler version, the target and options.

use crate::kir::{GridDim, KParam, KernelIr};
use crate::tir::Kernel;
use serde::Serialize;
use sha2::{Digest, Sha256};

pub const SCHEMA_VERSION: u32 = 1;

pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{:02x}", b)).collect()
}

#[derive(Serialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub compiler: CompilerInfo,
    pub source: SourceInfo,
    pub target: String,
    pub compile_flags: Vec<String>,
    pub kernels: Vec<KernelEntry>,
}

#[derive(Serialize)]
pub struct CompilerInfo {
    pub name: &'static str,
    pub version: &'static str,
}

#[derive(Serialize)]
pub struct SourceInfo {
    pub path: String,
    pub sha256: String,
}

#[derive(Serialize)]
pub struct ParamEntry {
    pub name: String,
    /// "tensor", "scalar" or "dim"
    pub kind: &'static str,
    pub dtype: String,
    pub shape: Vec<String>,
    pub role: String,
}

#[derive(Serialize)]
pub struct KernelEntry {
    pub name: String,
    pub doc: String,
    pub schedule: crate::kir::Schedule,
    pub block: [u32; 3],
    /// One formula per grid axis (x, then y).
    pub grid: Vec<String>,
    pub grid_stride: Vec<bool>,
    pub shared_bytes: u32,
    pub params: Vec<ParamEntry>,
    pub requires: Vec<String>,
    pub ensures: Vec<String>,
    pub domain: Vec<String>,
    pub tolerance: Vec<(String, f64, f64)>,
    pub hip_file: String,
    pub hip_sha256: String,
    /// Were the obligations proved before emitting?
    pub verified: bool,
    /// Integer type of index arithmetic ("i32" only where proved safe).
    pub index_type: String,
    /// sha256 over source sha256, compiler version, target, flags and kernel name.
    pub fingerprint: String,
}

pub fn fingerprint(source_sha: &str, target: &str, flags: &[String], kernel: &str) -> String {
    sha256_hex(format!("{}\n{}\n{}\n{}\n{}", source_sha, crate::VERSION, target, flags.join(" "), kernel).as_bytes())
}

pub fn kernel_entry(k: &Kernel, ir: &KernelIr, source_sha: &str, hip_text: &str, verified: bool) -> KernelEntry {
    let params = ir
        .params
        .iter()
        .map(|p| match *p {
            KParam::Buffer(b) => {
                let buf = &ir.bufs[b];
                let t = &k.tensors[buf.tensor];
                ParamEntry {
                    name: buf.name.clone(),
                    kind: "tensor",
                    dtype: buf.dtype.to_string(),
                    shape: t.shape.iter().map(|d| k.dim_name(*d)).collect(),
                    role: format!("{:?}", t.role).to_lowercase(),
                }
            }
            KParam::Scalar(s) => ParamEntry { name: k.scalars[s].name.clone(), kind: "scalar", dtype: k.scalars[s].dtype.to_string(), shape: vec![], role: "input".into() },
            KParam::Dim(d) => ParamEntry { name: k.dims[d].name.clone(), kind: "dim", dtype: ir.index_ty.to_string(), shape: vec![], role: "input".into() },
            KParam::TensorMap(m) => {
                let map = &ir.tensor_maps[m];
                ParamEntry { name: map.name.clone(), kind: "tensor_map", dtype: ir.bufs[map.buf].dtype.to_string(), shape: vec![map.box_outer.to_string(), map.box_inner.to_string()], role: "input".into() }
            }
            // The monitor's observation words (or null), after everything else.
            KParam::Observations => ParamEntry {
                name: "tk_obs".into(),
                kind: "observations",
                dtype: "u32".into(),
                shape: vec![(ir.observation_blocks() * crate::kir::OBSERVE_SLOTS * crate::kir::OBSERVE_WORDS).to_string()],
                role: "output".into(),
            },
        })
        .collect();
    let flags = ir.target.compile_flags();
    KernelEntry {
        name: ir.name.clone(),
        doc: k.doc.clone(),
        schedule: ir.schedule,
        block: [ir.block, 1, 1],
        grid: ir.grid_formulas(),
        grid_stride: ir.grid.iter().map(|g| matches!(g, GridDim::Stride { .. })).collect(),
        shared_bytes: ir.shared_bytes(),
        params,
        requires: k.requires.iter().map(|c| c.text()).collect(),
        ensures: k.ensures.iter().map(|c| c.text()).collect(),
        domain: k.domain.iter().map(|d| d.text.clone()).collect(),
        tolerance: k.tolerance.iter().map(|t| (k.tensors[t.tensor].name.clone(), t.abs, t.rel)).collect(),
        verified,
        index_type: ir.index_ty.to_string(),
        hip_file: format!("kernels/{}.hip", ir.name),
        hip_sha256: sha256_hex(hip_text.as_bytes()),
        fingerprint: fingerprint(source_sha, &ir.target.to_string(), &flags, &ir.name),
    }
}

impl KernelEntry {
    pub fn schedule_name(&self) -> &'static str {
        self.schedule.name()
    }
}
