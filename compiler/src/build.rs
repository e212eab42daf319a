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

/// Everything one source file compiles to, in memory.
pub struct Artifacts {
    pub source: SourceFile,
    pub warnings: Vec<Diagnostic>,
    pub program: crate::tir::Program,
    pub kernels: Vec<crate::kir::KernelIr>,
    /// (kernel name, HIP text with prelude)
    pub hip: Vec<(String, String)>,
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

/// Compile one source text for one target. Never panics.
pub fn compile_source(source: SourceFile, target: &Target) -> Result<Artifacts, BuildError> {
    let fail = |source: &SourceFile, diagnostics: Vec<Diagnostic>| BuildError::Source {
        file: source.name.clone(),
        rendered: diagnostics.iter().map(|d| d.render(source)).collect::<Vec<_>>().join("\n"),
        diagnostics,
    };
    let checked = crate::driver::check_source(&source);
    let Some(program) = checked.program else {
        return Err(fail(&source, checked.diagnostics));
    };
    let kernels = crate::schedule::schedule_program(&program, target).map_err(|d| fail(&source, d))?;
    let source_sha = manifest::sha256_hex(source.text.as_bytes());
    let hip: Vec<(String, String)> = kernels.iter().map(|ir| (ir.name.clone(), hip::kernel_source(ir))).collect();
    let entries = program
        .kernels
        .iter()
        .zip(&kernels)
        .zip(&hip)
        .map(|((k, ir), (_, text))| manifest::kernel_entry(k, ir, &source_sha, text))
        .collect();
    let manifest = manifest::Manifest {
        schema_version: manifest::SCHEMA_VERSION,
        compiler: manifest::CompilerInfo { name: "tokitai-compiler", version: crate::VERSION },
        source: manifest::SourceInfo { path: source.name.clone(), sha256: source_sha },
        target: target.to_string(),
        compile_flags: target.compile_flags(),
        kernels: entries,
    };
    let bindings = bindings::file_bindings(&program.kernels, &kernels, &source.name);
    Ok(Artifacts { warnings: checked.diagnostics, program, kernels, hip, bindings, manifest, source })
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
    out_dir: Option<PathBuf>,
    cargo_metadata: bool,
}

impl Default for Build {
    fn default() -> Self {
        Build::new()
    }
}

impl Build {
    pub fn new() -> Build {
        Build { files: Vec::new(), target: Target::default_cuda(), out_dir: None, cargo_metadata: true }
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
            let arts = compile_source(SourceFile::new(f.display().to_string(), text), &self.target)?;
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
