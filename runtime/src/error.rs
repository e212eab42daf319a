//! Every way a runtime call can fail, each naming what is wrong and where.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// An argument does not fit the kernel's signature.
    Argument { kernel: String, message: String },
    /// A tensor has the wrong dtype.
    Dtype { kernel: String, tensor: String, expected: String, got: String },
    /// A tensor has the wrong shape (rank, a literal axis, or a dim that
    /// another tensor fixed differently).
    Shape { kernel: String, tensor: String, message: String },
    /// The kernel's `requires` does not hold for these dims and scalars.
    Requires { kernel: String, message: String },
    /// Under `--contracts strict`: the launch is outside every proved
    /// error bound of the kernel (an input outside its domain, or a bound's
    /// condition broken).
    Contract { kernel: String, message: String },
    /// A tensor lives on another device than the launch.
    WrongDevice { kernel: String, tensor: String, expected: String, got: String },
    /// No usable device of this kind (library missing, no GPU, driver error).
    DeviceUnavailable { backend: &'static str, reason: String },
    /// A device call failed.
    Device { backend: &'static str, call: String, message: String },
    /// Run-time compilation of a kernel failed (the compiler's log).
    Compile { kernel: String, backend: &'static str, log: String },
    /// The CPU oracle rejected the call.
    Cpu { kernel: String, message: String },
    /// Building a tensor from data of the wrong length or kind.
    Tensor(String),
    Io { path: std::path::PathBuf, error: std::io::Error },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Argument { kernel, message } => write!(f, "kernel `{}`: {}", kernel, message),
            Error::Dtype { kernel, tensor, expected, got } => write!(f, "kernel `{}`: tensor `{}` must be {}, got {}", kernel, tensor, expected, got),
            Error::Shape { kernel, tensor, message } => write!(f, "kernel `{}`: tensor `{}`: {}", kernel, tensor, message),
            Error::Requires { kernel, message } => write!(f, "kernel `{}`: {}", kernel, message),
            Error::Contract { kernel, message } => write!(f, "kernel `{}` would run outside its proved error bound (--contracts strict): {}", kernel, message),
            Error::WrongDevice { kernel, tensor, expected, got } => write!(f, "kernel `{}`: tensor `{}` is on {}, the launch is on {}", kernel, tensor, got, expected),
            Error::DeviceUnavailable { backend, reason } => write!(f, "no usable {} device: {}", backend, reason),
            Error::Device { backend, call, message } => write!(f, "{} call `{}` failed: {}", backend, call, message),
            Error::Compile { kernel, backend, log } => write!(f, "{} could not compile kernel `{}`:\n{}", backend, kernel, log),
            Error::Cpu { kernel, message } => write!(f, "kernel `{}` on the CPU: {}", kernel, message),
            Error::Tensor(m) => write!(f, "{}", m),
            Error::Io { path, error } => write!(f, "{}: {}", path.display(), error),
        }
    }
}

impl std::error::Error for Error {}
