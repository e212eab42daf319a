//! Compilation targets: which vendor, which architecture, which warp size.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// NVIDIA through NVRTC or nvcc, `sm_XY`.
    Cuda { sm: u32 },
    /// AMD through hipcc/hiprtc, e.g. `gfx90a`.
    Hip { arch: String },
}

impl Target {
    pub fn default_cuda() -> Target {
        Target::Cuda { sm: 90 }
    }
    pub fn default_hip() -> Target {
        Target::Hip { arch: "gfx90a".into() }
    }

    /// Threads per warp (wavefront). CDNA (gfx9) runs 64-wide wavefronts;
    /// RDNA (gfx10+) compiles to wave32 by default; NVIDIA warps are 32.
    pub fn warp_size(&self) -> u32 {
        match self {
            Target::Cuda { .. } => 32,
            Target::Hip { arch } if arch.starts_with("gfx9") => 64,
            Target::Hip { .. } => 32,
        }
    }

    /// Does the target's matrix unit (AMD MFMA) keep subnormal f16 and
    /// bf16 operands? CDNA3 and later (gfx94x, gfx95x): AMD documents the
    /// flush below for MI200 only, and PyTorch's numerical-accuracy notes
    /// say no other AMD GPU it supports shows it. CDNA2 (gfx90a, MI200)
    /// does not: its MFMA_F16, MFMA_BF16 and MFMA_BF16_1K flush subnormal
    /// inputs and outputs to zero (AMD's MIOpen documentation, "MI200
    /// MFMA behavior specifics"), so a product of a subnormal and a large
    /// value is lost whole. The schedule is chosen only where this holds
    /// (`schedule::tensor_core::layout`).
    pub fn mfma_keeps_subnormals(&self) -> bool {
        matches!(self, Target::Hip { arch } if arch.starts_with("gfx94") || arch.starts_with("gfx95"))
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Target::Cuda { .. })
    }

    /// Flags the generated code is meant to be compiled with: FMA
    /// contraction off, because the kernel spells out every `fma` it wants
    /// and the mirror oracle follows them exactly.
    pub fn compile_flags(&self) -> Vec<String> {
        match self {
            Target::Cuda { sm } => vec![format!("--gpu-architecture=sm_{}", sm), "--fmad=false".into(), "-std=c++17".into()],
            Target::Hip { arch } => vec![format!("--offload-arch={}", arch), "-O3".into(), "-ffp-contract=off".into(), "-std=c++17".into()],
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Cuda { sm } => write!(f, "cuda-sm{}", sm),
            Target::Hip { arch } => write!(f, "hip-{}", arch),
        }
    }
}

impl FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Target, String> {
        if let Some(sm) = s.strip_prefix("cuda-sm") {
            return match sm.parse::<u32>() {
                Ok(sm) if (50..=120).contains(&sm) => Ok(Target::Cuda { sm }),
                _ => Err(format!("unknown CUDA architecture `{}` (expected e.g. cuda-sm90)", s)),
            };
        }
        if let Some(arch) = s.strip_prefix("hip-") {
            let ok = arch.starts_with("gfx") && arch.len() >= 6 && arch[3..].chars().all(|c| c.is_ascii_alphanumeric());
            return if ok { Ok(Target::Hip { arch: arch.to_string() }) } else { Err(format!("unknown AMD architecture `{}` (expected e.g. hip-gfx90a)", s)) };
        }
        Err(format!("unknown target `{}`: expected cuda-smXY (e.g. cuda-sm90) or hip-gfxNNN (e.g. hip-gfx90a)", s))
    }
}
