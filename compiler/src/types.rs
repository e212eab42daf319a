//! Element types of the language and their properties on every target.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F16,
    Bf16,
    F32,
    F64,
    I32,
    U32,
    I64,
    Bool,
}

impl Dtype {
    pub const ALL: [Dtype; 8] =
        [Dtype::F16, Dtype::Bf16, Dtype::F32, Dtype::F64, Dtype::I32, Dtype::U32, Dtype::I64, Dtype::Bool];

    pub fn from_name(s: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
            Dtype::I32 => "i32",
            Dtype::U32 => "u32",
            Dtype::I64 => "i64",
            Dtype::Bool => "bool",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::Bf16 | Dtype::F32 | Dtype::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, Dtype::I32 | Dtype::U32 | Dtype::I64)
    }

    /// Half-precision types are stored narrow but computed in f32: every
    /// operation on them is performed in f32 and rounded back.
    pub fn is_half(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::Bf16)
    }

    pub fn size_bytes(self) -> u32 {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::Bool => 1,
        }
    }

    /// Unit roundoff (half an ulp of 1) of a float type.
    pub fn unit_roundoff(self) -> Option<f64> {
        match self {
            Dtype::F16 => Some(2f64.powi(-11)),
            Dtype::Bf16 => Some(2f64.powi(-8)),
            Dtype::F32 => Some(2f64.powi(-24)),
            Dtype::F64 => Some(2f64.powi(-53)),
            _ => None,
        }
    }

    /// May a value of `self` be converted to `to` implicitly (no information lost)?
    pub fn widens_to(self, to: Dtype) -> bool {
        use Dtype::*;
        self == to
            || matches!(
                (self, to),
                (F16, F32) | (F16, F64) | (Bf16, F32) | (Bf16, F64) | (F32, F64) | (I32, I64) | (U32, I64)
            )
    }

    /// The common type two operands widen to, if any.
    pub fn join(a: Dtype, b: Dtype) -> Option<Dtype> {
        use Dtype::*;
        if a.widens_to(b) {
            return Some(b);
        }
        if b.widens_to(a) {
            return Some(a);
        }
        match (a, b) {
            (F16, Bf16) | (Bf16, F16) => Some(F32),
            (I32, U32) | (U32, I32) => Some(I64),
            _ => None,
        }
    }

    /// The type arithmetic is carried out in: half types compute in f32.
    pub fn compute_type(self) -> Dtype {
        if self.is_half() {
            Dtype::F32
        } else {
            self
        }
    }

    /// Rust type used by oracles and bindings.
    pub fn rust_type(self) -> &'static str {
        match self {
            Dtype::F16 => "half::f16",
            Dtype::Bf16 => "half::bf16",
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
            Dtype::I32 => "i32",
            Dtype::U32 => "u32",
            Dtype::I64 => "i64",
            Dtype::Bool => "bool",
        }
    }

    /// C++ type name in the generated HIP (prelude typedefs for the halves).
    pub fn hip_type(self) -> &'static str {
        match self {
            Dtype::F16 => "tk_f16",
            Dtype::Bf16 => "tk_bf16",
            Dtype::F32 => "float",
            Dtype::F64 => "double",
            Dtype::I32 => "int",
            Dtype::U32 => "unsigned int",
            Dtype::I64 => "long long",
            Dtype::Bool => "bool",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
