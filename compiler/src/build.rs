//! Compiling a `.tk` file into artifacts, and the build-script API.
//!
//! ```no_run
//! // build.rs of a crate that uses kernels:
//! tokitai_compiler::Build::new().file("ops.tk").compile().unwrap();
//! // then in the crate: include!(concat!(env!("OUT_DIR"), "/ops.rs"));
//! ```

use crate::codegen::{bindings, hip, manifest};
use crate::diag::Diagnostic;
use crate::span::SourceFile;
use crate::target::Target;
use std::path::{Path, PathBuf};

/// How to compile.
#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    /// Prove every obligation with Z3 before emitting (needs the `verify`
    /// feature). Unverified kernels index with i64, the safe choice.
    pub verify: bool,
    /// Per-obligation solver timeout.
    pub timeout_ms: u32,
    /// Where the generated Rust finds its support code and a runtime.
    pub style: bindings::BindingStyle,
}

impl Options {
    pub fn new(target: Target) -> Options {
        Options { target, verify: cfg!(feature = "verify"), timeout_ms: 10_000, style: Default::default() }
    }
}

/// Everything one source file compiles to, in memory.
pub struct Artifacts {
    /// Per kernel, what was proved (empty when not verified).
    #[cfg(feature = "verify")]
    pub proofs: Vec<crate::verify::KernelProofs>,
    /// What was proved of each variant (see `variants`).
    #[cfg(feature = "verify")]
    pub variant_proofs: Vec<crate::verify::KernelProofs>,
    pub source: SourceFile,
    pub warnings: Vec<Diagnostic>,
    pub program: crate::tir::Program,
    pub kernels: Vec<crate::kir::KernelIr>,
    /// (kernel name, HIP text with prelude), the kernels then their variants.
    pub hip: Vec<(String, String)>,
    /// Per kernel, its variants (other block sizes or tiles, a matrix unit
    /// under a guard), each with the keys it serves (`schedule::Variant`).
    pub variants: Vec<Vec<crate::schedule::Variant>>,
    /// Per kernel, the candidates of its tuning space that were rejected
    /// (not emitted, never launched), with the reason.
    pub rejected: Vec<Vec<crate::schedule::Rejected>>,
    /// Per kernel, the sha256 of its name and every candidate's name and
    /// code (`tokitai_contracts::tuning::fingerprint`): what a tuning table
    /// made for this code is keyed by.
    pub fingerprints: Vec<String>,
    pub bindings: String,
    pub manifest: manifest::Manifest,
}

/// Why a compilation failed.
#[derive(Debug)]
pub enum BuildError {
    /// The source has errors; the string is the rendered diagnostics.
    Source { file: String, rendered: String, diagnostics: Vec<Diagnostic> },
    Io { path: PathBuf, error: std::io::Error },
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::Source { rendered, file, diagnostics } => {
                write!(f, "{}\n{}: {} error(s)", rendered, file, diagnostics.iter().filter(|d| d.is_error()).count())
            }
            BuildError::Io { path, error } => write!(f, "{}: {}", path.display(), error),
        }
    }
}

impl std::error::Error for BuildError {}

/// Compile one source text for one target, verifying when the `verify`
/// feature is on. Never panics.
pub fn compile_source(source: SourceFile, target: &Target) -> Result<Artifacts, BuildError> {
    compile_with(source, &Options::new(target.clone()))
}

/// Compile with explicit options.
pub fn compile_with(source: SourceFile, opts: &Options) -> Result<Artifacts, BuildError> {
    let target = &opts.target;
    let fail = |source: &SourceFile, diagnostics: Vec<Diagnostic>| BuildError::Source {
        file: source.name.clone(),
        rendered: diagnostics.iter().map(|d| d.render(source)).collect::<Vec<_>>().join("\n"),
        diagnostics,
    };
    let checked = crate::driver::check_source(&source);
    let Some(program) = checked.program else {
        return Err(fail(&source, checked.diagnostics));
    };
    let mut kernels = crate::schedule::schedule_program(&program, target).map_err(|d| fail(&source, d))?;
    #[allow(unused_mut)]
    let mut warnings = checked.diagnostics;
    #[cfg(feature = "verify")]
    let proofs = if opts.verify {
        let cfg = tokitai_contracts::z3_backend::Config { timeout_ms: opts.timeout_ms };
        let proofs: Vec<crate::verify::KernelProofs> = program.kernels.iter().zip(kernels.iter_mut()).map(|(k, ir)| crate::verify::verify_cached(k, ir, &cfg)).collect();
        let diags: Vec<Diagnostic> = proofs.iter().flat_map(|p| p.diagnostics()).collect();
        if diags.iter().any(|d| d.is_error()) {
            return Err(fail(&source, diags));
        }
        warnings.extend(diags);
        proofs
    } else {
        Vec::new()
    };
    // Variants (the same kernel at other block sizes, tiles or forms: the
    // tuning space), proved like the rest.
    let candidates: Vec<crate::schedule::Candidates> = program
        .kernels
        .iter()
        .zip(&kernels)
        .map(|(k, ir)| crate::schedule::schedule_candidates(k, target, ir))
        .collect::<Result<_, Diagnostic>>()
        .map_err(|d| fail(&source, vec![d]))?;
    #[allow(unused_mut)]
    let (mut variants, mut rejected): (Vec<Vec<crate::schedule::Variant>>, Vec<Vec<crate::schedule::Rejected>>) = candidates.into_iter().map(|c| (c.variants, c.rejected)).unzip();
    #[cfg(feature = "verify")]
    let mut variant_proofs = Vec::new();
    #[cfg(feature = "verify")]
    if opts.verify {
        let cfg = tokitai_contracts::z3_backend::Config { timeout_ms: opts.timeout_ms };
        for (((k, vs), rejected), own) in program.kernels.iter().zip(variants.iter_mut()).zip(rejected.iter_mut()).zip(&proofs) {
            // A tolerance the kernel's own schedule proves, every candidate
            // must prove too (where the kernel's own is not proved, W0913,
            // its candidates are held to the same warning, not more).
            let own_tolerance_proved = !own.diagnostics().iter().any(|d| d.code == "W0913");
            let mut kept = Vec::new();
            for mut v in std::mem::take(vs) {
                // A guarded variant is proved with its guard as a `requires`.
                let kernel = v.kernel(k);
                let mut p = crate::verify::verify_cached(&kernel, &mut v.ir, &cfg);
                p.kernel = v.ir.name.clone();
                let diags = p.diagnostics();
                // A candidate with an obligation refuted or unproved is
                // rejected: not emitted, so never launched. The kernel
                // keeps its other forms; the build says which and why.
                match diags.iter().find(|d| d.is_error() || d.code == "W0901" || (d.code == "W0913" && own_tolerance_proved)) {
                    Some(failed) => {
                        let (reason, params) = (format!("not proved: {}", failed.message), v.ir.params_text());
                        // A tolerance the candidate's own order or math
                        // misses is what a tuning space is for: recorded
                        // (report, bindings), not warned about. Any other
                        // obligation failing in a generated form is a
                        // compiler bug worth a warning.
                        let tolerance = failed.code == "E0913" || failed.code == "W0913";
                        if !tolerance {
                            let message = format!("kernel `{}`: candidate `{}` ({}) is not emitted: {}", k.name, v.ir.name, params, reason);
                            warnings.push(Diagnostic::warning("W0930", message, k.span).with_help("the kernel's other forms are unaffected; a launch never takes a candidate that is not proved"));
                        }
                        rejected.push(crate::schedule::Rejected { name: v.ir.name.clone(), params, reason });
                    }
                    None => {
                        variant_proofs.push(p);
                        kept.push(v);
                    }
                }
            }
            *vs = kept;
        }
    }
    let verified = cfg!(feature = "verify") && opts.verify;
    if !verified {
        // Without a proof that 32-bit index arithmetic cannot overflow, index in 64 bits.
        for ir in kernels.iter_mut().chain(variants.iter_mut().flatten().map(|v| &mut v.ir)) {
            ir.index_ty = crate::types::Dtype::I64;
        }
    }
    let source_sha = manifest::sha256_hex(source.text.as_bytes());
    let mut hip: Vec<(String, String)> = kernels.iter().map(|ir| (ir.name.clone(), hip::kernel_source(ir))).collect();
    hip.extend(variants.iter().flatten().map(|v| (v.ir.name.clone(), hip::kernel_source(&v.ir))));
    // What a tuning table is keyed by: each kernel's candidates' code (the
    // kernel, then its variants but the observing twins), as printed above.
    let text = |name: &str| hip.iter().find(|(n, _)| n == name).map_or("", |(_, t)| t.as_str());
    let fingerprints: Vec<String> = program
        .kernels
        .iter()
        .zip(&kernels)
        .zip(&variants)
        .map(|((k, ir), vs)| tokitai_contracts::tuning::fingerprint(&k.name, std::iter::once(ir.name.as_str()).chain(vs.iter().map(|v| v.ir.name.as_str()).filter(|n| !crate::schedule::observe::is_twin(n))).map(|n| (n, text(n)))))
        .collect();
    // Each with the kernel as it is proved (a guarded variant's `requires`
    // holds its guard).
    let irs: Vec<(std::borrow::Cow<crate::tir::Kernel>, &crate::kir::KernelIr)> = program
        .kernels
        .iter()
        .zip(&kernels)
        .map(|(k, ir)| (std::borrow::Cow::Borrowed(k), ir))
        .chain(program.kernels.iter().zip(&variants).flat_map(|(k, vs)| vs.iter().map(move |v| (v.kernel(k), &v.ir))))
        .collect();
    let entries = irs.iter().zip(&hip).map(|((k, ir), (_, text))| manifest::kernel_entry(k, ir, &source_sha, text, verified)).collect();
    let manifest = manifest::Manifest {
        schema_version: manifest::SCHEMA_VERSION,
        compiler: manifest::CompilerInfo { name: "tokitai-compiler", version: crate::VERSION },
        source: manifest::SourceInfo { path: source.name.clone(), sha256: source_sha },
        target: target.to_string(),
        compile_flags: target.compile_flags(),
        kernels: entries,
    };
    let bindings = bindings::file_bindings(&program.kernels, &kernels, &variants, &rejected, &fingerprints, &source.name, &opts.style);
    Ok(Artifacts {
        #[cfg(feature = "verify")]
        proofs,
        #[cfg(feature = "verify")]
        variant_proofs,
        warnings,
        program,
        kernels,
        hip,
        variants,
        rejected,
        fingerprints,
        bindings,
        manifest,
        source,
    })
}

/// Write a file atomically: a temporary sibling, then a rename, so that a
/// reader never sees half a file and a crash leaves the old one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    let io = |error| BuildError::Io { path: path.to_path_buf(), error };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|error| BuildError::Io { path: tmp.clone(), error })?;
    std::fs::rename(&tmp, path).map_err(io)
}

impl Artifacts {
    /// Each kernel of the program with its KernelIr (the printed object
    /// its proofs are about), for the verifier's mutation test
    /// (`verify::mutate::run_all`, `summary`), which so needs nothing of a
    /// build.
    pub fn proved_kernels(&self) -> impl Iterator<Item = (&crate::tir::Kernel, &crate::kir::KernelIr)> {
        self.program.kernels.iter().zip(&self.kernels)
    }
    /// Write `manifest.json`, `kernels/<name>.hip` and `<stem>.rs` into `dir`.
    pub fn write_to(&self, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, BuildError> {
        let mut written = Vec::new();
        for (name, text) in &self.hip {
            let p = dir.join("kernels").join(format!("{}.hip", name));
            write_atomic(&p, text.as_bytes())?;
            written.push(p);
        }
        let p = dir.join(format!("{}.rs", stem));
        write_atomic(&p, self.bindings.as_bytes())?;
        written.push(p);
        let p = dir.join("manifest.json");
        let json = serde_json::to_string_pretty(&self.manifest).unwrap_or_default();
        write_atomic(&p, json.as_bytes())?;
        written.push(p);
        Ok(written)
    }
}

/// Build-script API in the manner of prost-build and lalrpop: compile `.tk`
/// files into `OUT_DIR` (or a chosen directory) as `<stem>.rs` bindings,
/// `<stem>/kernels/*.hip` and `<stem>/manifest.json`.
pub struct Build {
    files: Vec<PathBuf>,
    target: Target,
    verify: bool,
    out_dir: Option<PathBuf>,
    cargo_metadata: bool,
    style: bindings::BindingStyle,
}

impl Default for Build {
    fn default() -> Self {
        Build::new()
    }
}

impl Build {
    pub fn new() -> Build {
        Build { files: Vec::new(), target: Target::default_cuda(), verify: cfg!(feature = "verify"), out_dir: None, cargo_metadata: true, style: Default::default() }
    }
    pub fn file(mut self, path: impl AsRef<Path>) -> Build {
        self.files.push(path.as_ref().to_path_buf());
        self
    }
    pub fn files<P: AsRef<Path>>(mut self, paths: impl IntoIterator<Item = P>) -> Build {
        self.files.extend(paths.into_iter().map(|p| p.as_ref().to_path_buf()));
        self
    }
    pub fn target(mut self, target: Target) -> Build {
        self.target = target;
        self
    }
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Build {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }
    /// Prove obligations before emitting (default: on when the `verify`
    /// feature is compiled in).
    pub fn verify(mut self, on: bool) -> Build {
        self.verify = on;
        self
    }
    /// Share one support module (`tk_rt`, `tk_info`) among the files, at
    /// this path; write its text with `bindings::support_source()`.
    pub fn support_module(mut self, path: &str) -> Build {
        self.style.support = Some(path.to_string());
        self
    }
    /// Emit typed launchers on the runtime crate at `path`
    /// (`tokitai_runtime`, or `crate` inside the runtime itself).
    pub fn launchers(mut self, runtime_path: &str) -> Build {
        self.style.runtime = Some(runtime_path.to_string());
        self
    }
    /// Print `cargo:rerun-if-changed` lines (on by default).
    pub fn cargo_metadata(mut self, on: bool) -> Build {
        self.cargo_metadata = on;
        self
    }

    /// Compile every file. On a source error the message is the rendered
    /// diagnostics, ready for a build script to show.
    pub fn compile(self) -> Result<Vec<PathBuf>, BuildError> {
        let out = match self.out_dir.clone().or_else(|| std::env::var_os("OUT_DIR").map(PathBuf::from)) {
            Some(o) => o,
            None => return Err(BuildError::Io { path: PathBuf::from("OUT_DIR"), error: std::io::Error::other("OUT_DIR is not set and no out_dir was given") }),
        };
        let mut written = Vec::new();
        for f in &self.files {
            if self.cargo_metadata {
                println!("cargo:rerun-if-changed={}", f.display());
            }
            let text = std::fs::read_to_string(f).map_err(|error| BuildError::Io { path: f.clone(), error })?;
            let stem = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "kernels".into());
            let opts = Options { verify: self.verify, style: self.style.clone(), ..Options::new(self.target.clone()) };
            let arts = compile_with(SourceFile::new(f.display().to_string(), text), &opts)?;
            for w in &arts.warnings {
                if self.cargo_metadata {
                    println!("cargo:warning={}", w.one_line(&arts.source));
                }
            }
            let bindings = out.join(format!("{}.rs", stem));
            write_atomic(&bindings, arts.bindings.as_bytes())?;
            written.push(bindings);
            written.extend(arts.write_to(&out.join(&stem), &stem)?);
        }
        Ok(written)
    }
}
