//! The sheaf-padic router (our definition of moe.md's sketch), on the
//! kernels of `examples/ops/sheaf.tk`.
//!
//! - p-adic gating: the 4 = 2^2 experts are the leaves of a binary tree.
//!   The router's `Linear(96, 6)` gives the root's two gate logits and two
//!   for each internal node; expert `e = 2a + c` gets `A[a] * B_a[c]`
//!   (two-way softmaxes). Experts 0 and 1 (and 2 and 3) share a 2-adic ball
//!   and the root's routing mass.
//! - Sheaf consistency: the opens of the cover are the input's 9 feature
//!   blocks (8 categorical one-hot blocks, then the numerical block). Each
//!   block's local section is the routing distribution its columns alone
//!   give (`x_U W_U` through the same gates, no bias). Adjacent blocks
//!   (U_u, U_{u+1}) are the overlaps compared; the disagreement energy
//!   `sum |p_u - p_{u+1}|^2`, averaged over the batch, is logged and added
//!   to the objective with weight `SHEAF_WEIGHT`.
//!
//! The router's gradient has both parts: through the top-2 weights and the
//! gates, and through the energy to each column's own block section.

use super::config::{CATEGORICAL_BLOCKS, INPUT_DIM, N_EXPERTS, NUMERICAL};
use crate::kernels::sheaf;
use crate::{DType, Device, Result, Tensor};

/// Gate logits of the binary tree: 2 at the root, 2 per internal node.
pub const ROUTER_LOGITS: usize = 6;
/// The cover's opens: the categorical blocks and the numerical block.
pub const BLOCKS: usize = CATEGORICAL_BLOCKS.len() + 1;
/// Weight of the disagreement energy in the objective (moe.md's default).
pub const SHEAF_WEIGHT: f64 = 0.01;

/// Block of each input column.
pub fn block_of_columns() -> Vec<i32> {
    let mut blk = Vec::with_capacity(INPUT_DIM);
    for (u, &n) in CATEGORICAL_BLOCKS.iter().enumerate() {
        blk.extend(std::iter::repeat_n(u as i32, n));
    }
    blk.extend(std::iter::repeat_n(CATEGORICAL_BLOCKS.len() as i32, NUMERICAL));
    blk
}

/// What the backward pass needs from the forward pass.
pub struct Tape {
    /// Block sections' logits `[B, 9, 6]` and gate probabilities `[B, 9, 4]`.
    zs: Tensor,
    ps: Tensor,
    /// Each sample's disagreement energy `[B]` (read after the step).
    pub energy: Tensor,
}

impl Tape {
    /// Batch mean of the disagreement energy (a device read).
    pub fn mean_energy(&self) -> Result<f64> {
        Ok(batch_mean(&self.energy.to_f64_vec()?))
    }

    /// Sample `r`'s block routings, `[9, 4]` row-major (a device read):
    /// the sections of the router's cover (`gluing::router_site`).
    pub fn block_routings(&self, r: usize) -> Result<Vec<f32>> {
        let all = self.ps.to_f32_vec()?;
        let width = BLOCKS * N_EXPERTS;
        all.get(r * width..(r + 1) * width).map(<[f32]>::to_vec).ok_or_else(|| crate::Error::Tensor(format!("block routings: sample {} is outside the batch of {}", r, all.len() / width)))
    }
}

/// The batch mean of per-sample energies.
pub fn batch_mean(energy: &[f64]) -> f64 {
    energy.iter().sum::<f64>() / energy.len().max(1) as f64
}

/// Gate the router logits into `probs` (`[B, 4]`) and compute the block
/// sections and their energy; `blk` is `block_of_columns()` on `dev`.
pub fn forward(dev: &Device, x: &Tensor, logits: &Tensor, w: &Tensor, blk: &Tensor, probs: &mut Tensor) -> Result<Tape> {
    let b = x.shape()[0];
    sheaf::padic_gate::launch(dev, logits, probs)?;
    let mut zs = Tensor::output(&[b, BLOCKS, ROUTER_LOGITS], DType::F16, dev)?;
    sheaf::sheaf_sections::launch(dev, x, w, blk, &mut zs)?;
    zs.set_shape(&[b * BLOCKS, ROUTER_LOGITS])?;
    let mut ps = Tensor::output(&[b * BLOCKS, N_EXPERTS], DType::F32, dev)?;
    sheaf::padic_gate::launch(dev, &zs, &mut ps)?;
    ps.set_shape(&[b, BLOCKS, N_EXPERTS])?;
    let mut en = Tensor::output(&[b], DType::F32, dev)?;
    sheaf::sheaf_energy::launch(dev, &ps, &mut en)?;
    Ok(Tape { zs, ps, energy: en })
}

/// The router's weight and bias gradients: `gw0`/`gw1` are the top-2
/// weights' gradients, `energy_scale` the factor of the summed energy in
/// the (loss-scaled) objective; `blk` as for `forward`. Written into `gw`
/// (`[96, 6]`) and `gb` (`[6]`).
#[allow(clippy::too_many_arguments)]
pub fn backward(dev: &Device, x: &Tensor, blk: &Tensor, tape: &Tape, logits: &Tensor, i0: &Tensor, i1: &Tensor, gw0: &Tensor, gw1: &Tensor, energy_scale: f32, gw: &mut Tensor, gb: &mut Tensor) -> Result<()> {
    let b = x.shape()[0];
    let mut gp = Tensor::output(&[b, N_EXPERTS], DType::F32, dev)?;
    sheaf::top2_grad::launch(dev, i0, i1, gw0, gw1, &mut gp)?;
    let mut gz = Tensor::output(&[b, ROUTER_LOGITS], DType::F32, dev)?;
    sheaf::padic_gate_bwd::launch(dev, logits, &gp, &mut gz)?;
    let mut gps = Tensor::output(&[b, BLOCKS, N_EXPERTS], DType::F32, dev)?;
    sheaf::sheaf_energy_bwd::launch(dev, &tape.ps, energy_scale, &mut gps)?;
    gps.set_shape(&[b * BLOCKS, N_EXPERTS])?;
    let mut gzs = Tensor::output(&[b * BLOCKS, ROUTER_LOGITS], DType::F32, dev)?;
    sheaf::padic_gate_bwd::launch(dev, &tape.zs, &gps, &mut gzs)?;
    gzs.set_shape(&[b, BLOCKS, ROUTER_LOGITS])?;
    sheaf::sheaf_router_wgrad::launch(dev, x, &gz, &gzs, blk, gw)?;
    sheaf::col_sum::launch(dev, &gz, gb)

}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_has_its_block() {
        let blk = block_of_columns();
        assert_eq!(blk.len(), INPUT_DIM);
        assert_eq!(blk[0], 0);
        assert_eq!(blk[8], 0);
        assert_eq!(blk[9], 1);
        assert_eq!(blk[73], 7);
        assert_eq!(blk[74], 8);
        assert_eq!(*blk.last().unwrap(), BLOCKS as i32 - 1);
    }
}
