//! Sheaf gluing over a finite site (issue 23): given sections on the opens
//! of a cover, return the global section they glue to, or the
//! obstructions that stop it, each naming the opens.
//!
//! Two sections agree on an overlap when the residual, the sum over the
//! overlap's points of |a - b|, is at most the site's tolerance. The
//! residuals of all overlaps are one launch of the proved kernel
//! `overlap_residual` (`examples/ops/sheaf.tk`); its bound, evaluated for
//! the launch (`monitor::judge`), puts the exact residual in an interval
//! around the computed one. An overlap is accepted only where that whole
//! interval is within the tolerance, and reported as incompatible where
//! it is wholly beyond it; between the two, the kernel's rounding cannot
//! tell, and the overlap is reported as undecided: gluing never returns a
//! section that the exact residuals would refuse.

pub mod router;
pub mod site;

use crate::kernels::sheaf::overlap_residual;
use crate::{Bound, Device, Result, Tensor};
use serde::Serialize;
pub use router::{router_site, router_site_file};
pub use site::{Site, SiteError};

/// Why a well-formed site does not glue.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Obstruction {
    /// The cover's opens leave these points of the space out.
    InvalidCover { uncovered: Vec<usize> },
    /// Two opens of the cover share these points, and no declared
    /// intersection of the two holds them.
    MissingOverlap { opens: [String; 2], points: Vec<usize> },
    /// An open of the cover has no section.
    MissingSection { open: String },
    /// The two sections differ on the overlap: the exact residual is
    /// within `exact` (the computed one and the kernel's proved bound),
    /// which lies beyond the tolerance, or (`decided: false`) straddles it.
    IncompatibleOverlap { opens: [String; 2], residual: f64, exact: (f64, f64), tolerance: f64, decided: bool },
}

impl std::fmt::Display for Obstruction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Obstruction::InvalidCover { uncovered } => write!(f, "invalid cover: no open of the cover holds point(s) {:?}", uncovered),
            Obstruction::MissingOverlap { opens, points } => write!(f, "missing overlap: \"{}\" and \"{}\" share point(s) {:?}, which no declared intersection of the two holds", opens[0], opens[1], points),
            Obstruction::MissingSection { open } => write!(f, "missing section: the cover's open \"{}\" has none", open),
            Obstruction::IncompatibleOverlap { opens, residual, exact, tolerance, decided: true } => {
                write!(f, "incompatible overlap: \"{}\" and \"{}\" differ by {} (exactly in [{}, {}]), above the tolerance {}", opens[0], opens[1], residual, exact.0, exact.1, tolerance)
            }
            Obstruction::IncompatibleOverlap { opens, residual, exact, tolerance, decided: false } => write!(
                f,
                "undecided overlap: \"{}\" and \"{}\" differ by {} (exactly in [{}, {}]), which the residual kernel's rounding cannot place below the tolerance {}",
                opens[0], opens[1], residual, exact.0, exact.1, tolerance
            ),
        }
    }
}

/// One overlap's comparison.
#[derive(Clone, Debug, Serialize)]
pub struct OverlapCheck {
    pub opens: [String; 2],
    pub points: usize,
    /// The residual the kernel computed, and the interval its proved
    /// bound puts the exact one in.
    pub residual: f64,
    pub exact: (f64, f64),
    pub agrees: bool,
}

/// What gluing found: every overlap compared, every obstruction, and the
/// global section (`dim` values a point, each point's from the first open
/// of the cover that holds it) where there is none.
#[derive(Clone, Debug, Serialize)]
pub struct Gluing {
    pub overlaps: Vec<OverlapCheck>,
    pub obstructions: Vec<Obstruction>,
    pub section: Option<Vec<f32>>,
}

/// Glue `site`'s sections, comparing the overlaps on `dev`.
pub fn glue(site: &Site, dev: &Device) -> Result<Gluing> {
    let mut obstructions = structural(site);
    // The overlaps to compare: declared intersections of two opens of the
    // cover that both have a section.
    let compared: Vec<&site::Intersection> = site.intersections.iter().filter(|x| x.opens.iter().all(|o| site.cover.contains(o) && site.sections[*o].is_some()) && !x.points.is_empty()).collect();
    let residuals = residuals(site, &compared, dev)?;
    let mut overlaps = Vec::new();
    for (x, (residual, exact)) in compared.iter().zip(residuals) {
        let opens = x.opens.map(|o| site.opens[o].name.clone());
        let agrees = exact.1 <= site.tolerance;
        if !agrees {
            obstructions.push(Obstruction::IncompatibleOverlap { opens: opens.clone(), residual, exact, tolerance: site.tolerance, decided: exact.0 > site.tolerance });
        }
        overlaps.push(OverlapCheck { opens, points: x.points.len(), residual, exact, agrees });
    }
    let section = obstructions.is_empty().then(|| global_section(site));
    Ok(Gluing { overlaps, obstructions, section })
}

/// The obstructions a site's shape shows, before any value is compared.
fn structural(site: &Site) -> Vec<Obstruction> {
    let mut found = Vec::new();
    let covered: std::collections::BTreeSet<usize> = site.cover.iter().flat_map(|&o| site.opens[o].points.iter().copied()).collect();
    let uncovered: Vec<usize> = (0..site.points).filter(|p| !covered.contains(p)).collect();
    if !uncovered.is_empty() {
        found.push(Obstruction::InvalidCover { uncovered });
    }
    for (i, &a) in site.cover.iter().enumerate() {
        for &b in &site.cover[i + 1..] {
            let declared: std::collections::BTreeSet<usize> = site.intersections.iter().filter(|x| x.opens == [a, b] || x.opens == [b, a]).flat_map(|x| x.points.iter().copied()).collect();
            let shared: Vec<usize> = site.opens[a].points.iter().copied().filter(|p| site.opens[b].points.contains(p) && !declared.contains(p)).collect();
            if !shared.is_empty() {
                found.push(Obstruction::MissingOverlap { opens: [site.opens[a].name.clone(), site.opens[b].name.clone()], points: shared });
            }
        }
    }
    for &o in &site.cover {
        if site.sections[o].is_none() {
            found.push(Obstruction::MissingSection { open: site.opens[o].name.clone() });
        }
    }
    found
}

/// Each compared overlap's residual, computed in one launch of
/// `overlap_residual`, and the interval its proved bound puts the exact
/// residual in.
fn residuals(site: &Site, compared: &[&site::Intersection], dev: &Device) -> Result<Vec<(f64, (f64, f64))>> {
    if compared.is_empty() {
        return Ok(Vec::new());
    }
    let width = compared.iter().map(|x| x.points.len() * site.dim).max().unwrap_or(1);
    let zero = half::f16::ZERO;
    let (mut a, mut b) = (vec![zero; compared.len() * width], vec![zero; compared.len() * width]);
    for (row, x) in compared.iter().enumerate() {
        for (k, &p) in x.points.iter().enumerate() {
            let at = row * width + k * site.dim;
            let (Some(va), Some(vb)) = (site.at(x.opens[0], p), site.at(x.opens[1], p)) else { unreachable!("a declared intersection lies in both opens, which have sections") };
            a[at..at + site.dim].copy_from_slice(va);
            b[at..at + site.dim].copy_from_slice(vb);
        }
    }
    let magnitude = |v: &[half::f16]| v.iter().fold(0f64, |m, x| m.max(x.to_f64().abs()));
    let ranges = [Some((-magnitude(&a), magnitude(&a))), Some((-magnitude(&b), magnitude(&b))), None];
    let shape = [compared.len(), width];
    let (ta, tb) = (Tensor::from_f16(&shape, a)?.to_device(dev)?, Tensor::from_f16(&shape, b)?.to_device(dev)?);
    let mut r = Tensor::zeros(&[compared.len()], crate::DType::F32, dev)?;
    overlap_residual::launch(dev, &ta, &tb, &mut r)?;
    // The bound for this launch: the kernel's tolerance evaluated at its
    // dims and the sections' magnitudes. A launch outside every proved
    // bound (none at sane magnitudes) decides nothing.
    let bound = Bound { dims: vec![compared.len() as i64, width as i64], scalars: Vec::new() };
    let verdict = crate::monitor::judge(&overlap_residual::KERNEL, &bound, &ranges, None);
    let (abs, rel) = match (&verdict.outside, verdict.bounds.first()) {
        (None, Some(&(_, abs, rel))) => (abs, rel),
        _ => (f64::INFINITY, 0.0),
    };
    Ok(r.to_f32_vec()?
        .into_iter()
        .map(|computed| {
            let computed = computed as f64;
            // |computed - exact| <= abs + rel |exact|, exact >= 0; each end
            // moved outward by a few of f64's roundings, so that the f64
            // arithmetic here cannot narrow the interval.
            let outward = 8.0 * f64::EPSILON;
            let low = ((computed - abs) / (1.0 + rel) * (1.0 - outward)).max(0.0);
            let high = if rel < 1.0 { (computed + abs) / (1.0 - rel) * (1.0 + outward) } else { f64::INFINITY };
            (computed, (low, high))
        })
        .collect())
}

/// Each point's values from the first open of the cover that holds it.
fn global_section(site: &Site) -> Vec<f32> {
    (0..site.points)
        .flat_map(|p| {
            let o = site.cover.iter().copied().find(|&o| site.opens[o].points.contains(&p)).expect("a valid cover holds every point");
            site.at(o, p).expect("every open of the cover has a section").iter().map(|v| v.to_f32()).collect::<Vec<_>>()
        })
        .collect()
}
