//! SplitMix64: a small deterministic generator for reproducible test data
//! and reports (no dependency, the same numbers on every platform).

pub struct SplitMix(pub u64);

impl SplitMix {
    /// Seeded from a name (its sha256), so that data is tied to what it tests.
    pub fn seeded(name: &str) -> SplitMix {
        let h = crate::codegen::manifest::sha256_hex(name.as_bytes());
        SplitMix(u64::from_str_radix(&h[..16], 16).unwrap_or(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi].
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1).max(1) as u64)) as i64
    }
}
