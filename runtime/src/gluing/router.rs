//! The router's cover as a site (issue 23, moe.md "sheaf consistency"):
//! the input's 9 feature blocks are the opens, adjacent blocks overlap,
//! and each block's section is the routing distribution its columns alone
//! give (`moe::sheaf`, `ps[r, u, :]`, one sample).
//!
//! The space: one point per block (its own part, `u`) and one per pair of
//! adjacent blocks (their shared part, `9 + u` for blocks `u` and
//! `u + 1`). Open `U_u` holds its own point and the shared points of its
//! neighbours; `U_u ∩ U_{u+1}` is their shared point. The section of
//! `U_u` is `p_u` (4 values) at each of its points: a block routes the
//! sample one way. So the residual of an overlap is `Σ_e |p_u,e -
//! p_{u+1},e|`, the L1 distance of the two blocks' routings (twice their
//! total variation), and the sample's local routings glue to one global
//! routing exactly when every pair of adjacent blocks agrees within the
//! tolerance; otherwise the obstructions name the blocks that disagree.
//!
//! The site is built as the text of a site file and read back through
//! `Site::parse`, so it is checked like any user's file, and the text is
//! what `tokitai-glue` reads (`router_site_file`).

use super::site::{wrong, Site, SiteError};
use crate::moe::config::N_EXPERTS;
use crate::moe::sheaf::BLOCKS;
use serde_json::json;

/// The name of block `u`'s open: `cat0` .. `cat7`, then `numerical`.
pub fn block_name(u: usize) -> String {
    if u + 1 == BLOCKS {
        "numerical".to_string()
    } else {
        format!("cat{}", u)
    }
}

/// The site file of one sample's block routings `probs` (`[9, 4]`, row
/// `u` block `u`'s distribution over the experts), with `tolerance` on
/// each overlap's L1 distance.
pub fn router_site_file(probs: &[f32], tolerance: f64) -> Result<String, SiteError> {
    if probs.len() != BLOCKS * N_EXPERTS {
        return Err(wrong("router sections", format!("{} values, expected {} blocks x {} experts = {}", probs.len(), BLOCKS, N_EXPERTS, BLOCKS * N_EXPERTS)));
    }
    let shared = |u: usize| BLOCKS + u;
    let points_of = |u: usize| {
        let mut p = vec![u];
        if u > 0 {
            p.push(shared(u - 1));
        }
        if u + 1 < BLOCKS {
            p.push(shared(u));
        }
        p
    };
    let opens: Vec<_> = (0..BLOCKS).map(|u| json!({"name": block_name(u), "points": points_of(u)})).collect();
    let intersections: Vec<_> = (0..BLOCKS - 1).map(|u| json!({"opens": [block_name(u), block_name(u + 1)], "points": [shared(u)]})).collect();
    let sections: Vec<_> = (0..BLOCKS)
        .map(|u| {
            let row: Vec<f64> = probs[u * N_EXPERTS..(u + 1) * N_EXPERTS].iter().map(|&v| v as f64).collect();
            let values: Vec<f64> = points_of(u).iter().flat_map(|_| row.iter().copied()).collect();
            json!({"open": block_name(u), "values": values})
        })
        .collect();
    let file = json!({
        "points": 2 * BLOCKS - 1,
        "dim": N_EXPERTS,
        "tolerance": tolerance,
        "opens": opens,
        "cover": (0..BLOCKS).map(block_name).collect::<Vec<_>>(),
        "intersections": intersections,
        "sections": sections,
    });
    Ok(serde_json::to_string_pretty(&file).expect("a JSON value prints"))
}

/// The site of one sample's block routings (see `router_site_file`).
pub fn router_site(probs: &[f32], tolerance: f64) -> Result<Site, SiteError> {
    Site::parse(&router_site_file(probs, tolerance)?)
}
