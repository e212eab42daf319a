//! Model sizes and shapes (moe.md): 96 inputs, 20 outputs, 4 experts with
//! top-2 routing; each expert `Linear(96, h) + LayerNorm + GELU`, then
//! `n_hidden` x `[Linear(h, h) + LayerNorm + GELU]`, then `Linear(h, 20)`;
//! the router `Linear(96, 4)`.

use std::fmt;
use std::str::FromStr;

pub const INPUT_DIM: usize = 96;
pub const OUTPUT_DIM: usize = 20;
pub const N_EXPERTS: usize = 4;
pub const TOP_K: usize = 2;
/// Categorical one-hot blocks of the input (74 columns), then 22 numerical.
pub const CATEGORICAL_BLOCKS: [usize; 8] = [9, 11, 14, 7, 5, 16, 8, 4];
pub const NUMERICAL: usize = 22;
/// Outcome classes, then auxiliary metrics, of the 20 outputs.
pub const CLASSES: usize = 12;
pub const AUX: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    Nano,
    Tiny,
    Medium,
    Full,
}

impl Size {
    pub const ALL: [Size; 4] = [Size::Nano, Size::Tiny, Size::Medium, Size::Full];

    pub fn name(self) -> &'static str {
        match self {
            Size::Nano => "nano",
            Size::Tiny => "tiny",
            Size::Medium => "medium",
            Size::Full => "full",
        }
    }
    /// Expert width.
    pub fn hidden(self) -> usize {
        match self {
            Size::Nano => 128,
            Size::Tiny => 2048,
            Size::Medium | Size::Full => 4096,
        }
    }
    /// Hidden `Linear(h, h) + LayerNorm + GELU` blocks per expert.
    pub fn n_hidden(self) -> usize {
        match self {
            Size::Nano => 2,
            Size::Tiny | Size::Medium => 5,
            Size::Full => 12,
        }
    }
    pub fn default_steps(self) -> usize {
        match self {
            Size::Nano => 20,
            Size::Tiny => 50,
            Size::Medium | Size::Full => 100,
        }
    }
    /// Parameters of one expert: linears (weights and biases) and layer
    /// norms (gain and bias).
    pub fn expert_params(self) -> usize {
        let h = self.hidden();
        let linear = |i: usize, o: usize| i * o + o;
        let norm = 2 * h;
        linear(INPUT_DIM, h) + norm + self.n_hidden() * (linear(h, h) + norm) + linear(h, OUTPUT_DIM)
    }
    pub fn router_params(self) -> usize {
        INPUT_DIM * N_EXPERTS + N_EXPERTS
    }
    /// The MoE's parameter count (the table of moe.md).
    pub fn param_count(self) -> usize {
        N_EXPERTS * self.expert_params() + self.router_params()
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Size, String> {
        Size::ALL.into_iter().find(|z| z.name() == s).ok_or_else(|| format!("unknown size `{}` (expected nano, tiny, medium or full)", s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_match_the_table_of_moe_md() {
        assert_eq!(Size::Nano.param_count(), 195_540);
        assert_eq!(Size::Tiny.param_count(), 84_984_276);
        assert_eq!(Size::Medium.param_count(), 337_740_244);
        assert_eq!(Size::Full.param_count(), 807_846_356);
        assert_eq!(CATEGORICAL_BLOCKS.iter().sum::<usize>() + NUMERICAL, INPUT_DIM);
        assert_eq!(CLASSES + AUX, OUTPUT_DIM);
    }

    #[test]
    fn sizes_parse_with_a_clear_error() {
        assert_eq!("tiny".parse::<Size>(), Ok(Size::Tiny));
        assert_eq!("huge".parse::<Size>().unwrap_err(), "unknown size `huge` (expected nano, tiny, medium or full)");
    }
}
