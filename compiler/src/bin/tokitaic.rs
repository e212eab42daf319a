//! `tokitaic`: the tokitai kernel compiler's command line.
//!
//! Exit codes: 0 success; 1 the source has errors; 2 bad command line;
//! 3 an I/O error (unreadable input, unwritable output).

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tokitai_compiler::build::{compile_source, BuildError};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

#[derive(Parser)]
#[command(name = "tokitaic", version, about = "Compile contract-carrying .tk kernels to HIP C++, Rust oracles and bindings")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where proof outcomes are kept between runs.
#[derive(clap::Args)]
struct CacheArgs {
    /// Keep and reuse proof outcomes in DIR (default: $TOKITAI_CACHE_DIR,
    /// else $XDG_CACHE_HOME/tokitai, else ~/.cache/tokitai).
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    cache: Option<PathBuf>,
    /// Prove everything in this run; read and write no cache.
    #[arg(long)]
    no_cache: bool,
}

impl CacheArgs {
    /// Open the chosen cache for this process (a warning, never a failure,
    /// when it cannot be used).
    fn configure(&self) {
        use tokitai_compiler::cache::Location;
        let location = match (&self.cache, self.no_cache) {
            (_, true) => Location::Off,
            (Some(d), false) => Location::Dir(d.clone()),
            (None, false) => Location::Default,
        };
        tokitai_compiler::cache::configure(location);
    }
}

#[derive(Subcommand)]
enum Command {
    /// Compile a .tk file: kernels/<name>.hip, <stem>.rs (oracles and bindings) and manifest.json.
    Build {
        /// The .tk source file.
        file: PathBuf,
        /// Output directory (default: tokitai-out/<stem>).
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// Target: cuda-smXY (e.g. cuda-sm90) or hip-gfxNNN (e.g. hip-gfx90a).
        #[arg(long, default_value = "cuda-sm90")]
        target: Target,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Parse and check .tk files; print diagnostics.
    Check {
        /// The .tk source files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Prove every kernel's obligations with Z3 and print what was proved.
    Verify {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, default_value = "cuda-sm90")]
        target: Target,
        /// Per-obligation solver timeout in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u32,
        /// Write report.md, report.json, report.tex, error_plot.svg and bounds_plot.svg here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Skip the verifier's mutation test (run by default with --report,
        /// its kill rate goes into the report).
        #[arg(long)]
        no_mutants: bool,
        /// A training run's `contracts.json` (written by `tokitai-train`
        /// beside its checkpoint): the report then shows, per kernel, the
        /// share of the run's launches covered by a proved bound.
        #[arg(long, requires = "report")]
        run_coverage: Option<PathBuf>,
        /// A device's tuning table (`$TOKITAI_CACHE_DIR/tuning/<gpu>-driver<N>.json`,
        /// written by `tokitai-bench-kernels --tune`): the report then
        /// lists the proved candidate chosen for each shape class, and
        /// whether the table was made for these kernels' code.
        #[arg(long, requires = "report")]
        tuning: Option<PathBuf>,
        /// Print where the time went: seconds per kernel and phase
        /// (symbolic execution, each obligation kind, tolerance
        /// derivation, mutation testing, report sampling).
        #[arg(long)]
        timings: bool,
        #[command(flatten)]
        cache: CacheArgs,
    },
    /// Print the HIP C++ of a .tk file for one target to standard output.
    EmitHip {
        file: PathBuf,
        #[arg(long, default_value = "cuda-sm90")]
        target: Target,
    },
}

fn read(path: &PathBuf) -> Result<SourceFile, ExitCode> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(SourceFile::new(path.display().to_string(), t)),
        Err(e) => {
            eprintln!("error: cannot read {}: {}", path.display(), e);
            Err(ExitCode::from(3))
        }
    }
}

fn report(e: BuildError) -> ExitCode {
    match e {
        BuildError::Source { rendered, file, diagnostics } => {
            eprintln!("{}", rendered);
            let n = diagnostics.iter().filter(|d| d.is_error()).count();
            eprintln!("error: could not compile {} ({} error{})", file, n, if n == 1 { "" } else { "s" });
            ExitCode::from(1)
        }
        BuildError::Io { path, error } => {
            eprintln!("error: {}: {}", path.display(), error);
            ExitCode::from(3)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Build { file, out, target, cache } => {
            cache.configure();
            let src = match read(&file) {
                Ok(s) => s,
                Err(c) => return c,
            };
            let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "kernels".into());
            let arts = match compile_source(src, &target) {
                Ok(a) => a,
                Err(e) => return report(e),
            };
            for w in &arts.warnings {
                eprintln!("{}", w.render(&arts.source));
            }
            let dir = out.unwrap_or_else(|| PathBuf::from("tokitai-out").join(&stem));
            match arts.write_to(&dir, &stem) {
                Ok(files) => {
                    for k in &arts.manifest.kernels {
                        println!("{:<22} {:<14} block {:>3}  grid {}", k.name, k.schedule_name(), k.block[0], k.grid.join(" x "));
                    }
                    println!("wrote {} files to {} for {}", files.len(), dir.display(), target);
                    ExitCode::SUCCESS
                }
                Err(e) => report(e),
            }
        }
        Command::Check { files } => {
            let mut code = ExitCode::SUCCESS;
            for f in &files {
                let src = match read(f) {
                    Ok(s) => s,
                    Err(c) => return c,
                };
                let checked = tokitai_compiler::driver::check_source(&src);
                for d in &checked.diagnostics {
                    eprintln!("{}", d.render(&src));
                }
                match checked.program {
                    Some(p) => println!("{}: {} kernel{} ok", f.display(), p.kernels.len(), if p.kernels.len() == 1 { "" } else { "s" }),
                    None => code = ExitCode::from(1),
                }
            }
            code
        }
        Command::Verify { files, target, timeout_ms, report: report_dir, no_mutants, run_coverage, tuning, timings, cache } => {
            let started = std::time::Instant::now();
            cache.configure();
            tokitai_compiler::progress::show_on_stderr();
            let mut all = Vec::new();
            let mut code = ExitCode::SUCCESS;
            for f in &files {
                let src = match read(f) {
                    Ok(s) => s,
                    Err(c) => return c,
                };
                let t = std::time::Instant::now();
                let opts = tokitai_compiler::build::Options { timeout_ms, ..tokitai_compiler::build::Options::new(target.clone()) };
                let arts = match tokitai_compiler::build::compile_with(src, &opts) {
                    Ok(a) => a,
                    Err(e) => {
                        code = report(e);
                        continue;
                    }
                };
                for proofs in arts.proofs.iter().chain(&arts.variant_proofs) {
                    let count = |s: &str| proofs.obligations.iter().filter(|o| o.outcome.status() == s).count();
                    // Solver seconds spent in this run (a cached outcome
                    // carries the seconds of the run that decided it).
                    let secs: f64 = proofs.obligations.iter().filter(|o| !o.cached).map(|o| o.outcome.seconds()).sum();
                    let cached = proofs.obligations.iter().filter(|o| o.cached).count();
                    let from_cache = if cached > 0 { format!("  ({} from cache)", cached) } else { String::new() };
                    println!("{:<22} {:>4} proved {:>3} refuted {:>3} unknown  index {}  {:.2}s{}", proofs.kernel, count("proved"), count("refuted"), count("unknown"), proofs.index_ty, secs, from_cache);
                    if let Some(n) = &proofs.index_note {
                        println!("    note: {}", n);
                    }
                }
                for w in &arts.warnings {
                    eprintln!("{}", w.render(&arts.source));
                }
                println!("{}: verified in {:.1}s", f.display(), t.elapsed().as_secs_f64());
                all.push(arts);
            }
            if let Some(dir) = report_dir {
                let mutation = (!no_mutants && code == ExitCode::SUCCESS).then(|| {
                    let t = std::time::Instant::now();
                    let m = tokitai_compiler::verify::mutate::summary(&all.iter().flat_map(|a| a.proved_kernels()).collect::<Vec<_>>(), timeout_ms.min(5_000));
                    println!("mutation test of the verifier: {} of {} injected bugs refuted ({:.1}s)", m.refuted, m.mutants, t.elapsed().as_secs_f64());
                    m
                });
                let mut r = tokitai_compiler::report::build(&all, &target.to_string(), mutation);
                if let Some(path) = &run_coverage {
                    match tokitai_compiler::report::read_run_coverage(path) {
                        Ok(run) => r.run = Some(run),
                        Err(e) => {
                            eprintln!("error: --run-coverage {}", e);
                            return ExitCode::from(2);
                        }
                    }
                }
                if let Some(path) = &tuning {
                    match tokitai_compiler::report::read_tuning(path, &all) {
                        Ok(t) => r.tuning = Some(t),
                        Err(e) => {
                            eprintln!("error: --tuning {}", e);
                            return ExitCode::from(2);
                        }
                    }
                }
                let files = [
                    ("report.md", r.to_markdown(false)),
                    ("report.json", r.to_json()),
                    ("report.tex", r.to_latex(false)),
                    ("error_plot.svg", r.error_plot_svg()),
                    ("bounds_plot.svg", r.bounds_plot_svg()),
                ];
                for (name, text) in files {
                    if let Err(e) = tokitai_compiler::build::write_atomic(&dir.join(name), text.as_bytes()) {
                        return report(e);
                    }
                }
                let within = r.kernels.iter().all(|k| k.errors.iter().all(|e| e.within));
                println!("report written to {} ({} kernels; observed errors {} the declared tolerances)", dir.display(), r.kernels.len(), if within { "within" } else { "NOT within" });
                if !within {
                    code = ExitCode::from(1);
                }
            }
            if let Some(c) = tokitai_compiler::cache::global() {
                eprintln!("{}", c.summary());
            }
            if timings {
                eprintln!("\nseconds per kernel and phase (summed over threads; wall time {:.1}s):", started.elapsed().as_secs_f64());
                eprint!("{}", tokitai_compiler::timings::render(usize::MAX));
                let [linear, relaxed, nonlinear] = tokitai_contracts::z3_backend::route_counts();
                eprintln!("solver queries: {} decided in linear arithmetic, {} proved by the linear relaxation, {} nonlinear", linear, relaxed, nonlinear);
            }
            code
        }
        Command::EmitHip { file, target } => {
            let src = match read(&file) {
                Ok(s) => s,
                Err(c) => return c,
            };
            match compile_source(src, &target) {
                Ok(a) => {
                    print!("{}", tokitai_compiler::codegen::hip::module_source(&a.kernels));
                    ExitCode::SUCCESS
                }
                Err(e) => report(e),
            }
        }
    }
}
