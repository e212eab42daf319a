//! tokitai-glue: glue the sections of a finite site (a JSON file, format in
//! the README's "Sheaf gluing"), comparing every overlap with the proved
//! kernel `overlap_residual`. Prints each overlap's residual and the
//! interval its proved bound puts the exact residual in, then the global
//! section or the obstructions, each naming the opens. Exits 0 when the
//! sections glue, 1 when an obstruction stops them, 2 on a bad file or
//! device.

use clap::Parser;
use std::path::PathBuf;
use tokitai_runtime::gluing::{glue, Site};
use tokitai_runtime::Device;

/// Glue a site's sections, or name what stops them.
#[derive(Parser, Debug)]
#[command(name = "tokitai-glue", version)]
struct Cli {
    /// The site file (JSON).
    site: PathBuf,
    /// cpu, cuda, cuda:N, hip[:N] or auto.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Also write the result here as JSON (written whole, then renamed).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    tokitai_runtime::exit::exit(run(&cli));
}

fn run(cli: &Cli) -> Result<bool, String> {
    let site = Site::read(&cli.site).map_err(|e| format!("{}: {}", cli.site.display(), e))?;
    let dev = Device::from_spec(&cli.device).map_err(|e| format!("--device: {}", e))?;
    let g = glue(&site, &dev).map_err(|e| e.to_string())?;
    for o in &g.overlaps {
        println!("overlap \"{}\" / \"{}\": {} point{}, residual {} (exactly in [{}, {}]), {}", o.opens[0], o.opens[1], o.points, if o.points == 1 { "" } else { "s" }, o.residual, o.exact.0, o.exact.1, if o.agrees { "agrees" } else { "does not agree" });
    }
    match &g.section {
        Some(s) => println!("glued: a global section of {} points x {} values: {:?}", site.points, site.dim, s),
        None => {
            for ob in &g.obstructions {
                println!("obstruction: {}", ob);
            }
        }
    }
    if let Some(path) = &cli.json {
        let text = serde_json::to_string_pretty(&g).map_err(|e| e.to_string())?;
        tokitai_runtime::cache::write_atomic(path, text.as_bytes()).map_err(|e| format!("{}: {}", path.display(), e))?;
    }
    Ok(g.section.is_some())
}
