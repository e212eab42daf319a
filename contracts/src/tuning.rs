//! The autotuner's table (issue 21), shared by the runtime that writes it
//! and the compiler's report that reads it: one file per device and
//! driver, each kernel's entries stamped with the kernel's fingerprint,
//! each shape class with every candidate the tuner saw and its choice.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The table file's layout version.
pub const SCHEMA: u32 = 1;

/// A kernel's fingerprint: the sha256 of its name, then every candidate's
/// name and source (the kernel's own schedule first, then its variants in
/// the compiler's order). Any change to any candidate, or to the set,
/// changes it, so a table made for other code is never used.
pub fn fingerprint<'a>(kernel: &str, candidates: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(kernel.as_bytes());
    for (name, source) in candidates {
        h.update([0u8]);
        h.update(name.as_bytes());
        h.update([0u8]);
        h.update(source.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{:02x}", b)).collect()
}

/// One candidate as the tuner saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateTiming {
    pub name: String,
    /// Its schedule and parameters.
    pub schedule: String,
    /// "proved" (timed), "not admitted" (its guard does not hold for these
    /// dims: never launched with them) or "rejected" (not emitted: it
    /// failed a proof or its tolerance; never launched).
    pub status: String,
    /// Median milliseconds of the timed launches (proved and admitted only).
    pub ms: Option<f64>,
    /// Why rejected, or the guard that does not hold.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// What tuning one shape class found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassTuning {
    /// Each dim's class: `ceil(log2(d))`.
    pub class: Vec<u8>,
    /// The launch it was tuned on.
    pub dims: Vec<i64>,
    /// The fastest candidate.
    pub choice: String,
    /// What an untuned launch takes.
    pub default: String,
    pub candidates: Vec<CandidateTiming>,
}

impl ClassTuning {
    /// The default's time over the choice's (1.0: the default won).
    pub fn speedup(&self) -> Option<f64> {
        let ms = |n: &str| self.candidates.iter().find(|c| c.name == n).and_then(|c| c.ms);
        Some(ms(&self.default)? / ms(&self.choice)?)
    }
}

/// One kernel's entries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelTuning {
    pub fingerprint: String,
    /// By class as people read it (`R<=65536 C<=1024`).
    pub classes: BTreeMap<String, ClassTuning>,
}

/// The file: one device and driver.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TableFile {
    pub schema: u32,
    pub device: String,
    pub driver: i32,
    pub kernels: BTreeMap<String, KernelTuning>,
}

impl TableFile {
    /// Read a table; `Err` names what is wrong with it.
    pub fn parse(bytes: &[u8]) -> Result<TableFile, String> {
        let t: TableFile = serde_json::from_slice(bytes).map_err(|e| format!("not a tuning table: {}", e))?;
        if t.schema != SCHEMA {
            return Err(format!("a tuning table of schema {}, not {}", t.schema, SCHEMA));
        }
        Ok(t)
    }
}
