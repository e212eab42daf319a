#!/usr/bin/env bash
# Install what the test suite compiles kernels with, on a CPU-only Debian
# machine: hipcc (AMD, Debian's HIP 5.2) and the NVRTC 13 wheels (NVIDIA).
# Idempotent: skips what is already there.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=""
command -v hipcc >/dev/null 2>&1 || missing="$missing hipcc"
# The prover links the system libz3 (the z3 crate's `bundled` feature builds it instead).
[ -e /usr/include/z3.h ] || missing="$missing libz3-dev"
# The compiler's proof cache links the system SQLite (the runtime bundles its own).
[ -e /usr/include/sqlite3.h ] || missing="$missing libsqlite3-dev"
if [ -n "$missing" ]; then
    echo "installing$missing..."
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if ! python3 -c "import nvidia.cu13" >/dev/null 2>&1 || ! ls "$(python3 -c 'import nvidia, os; print(nvidia.__path__[0])')"/cu13/include/cuda_fp16.h >/dev/null 2>&1; then
    echo "installing the NVRTC wheels..."
    python3 -m pip install -q 'nvidia-cuda-nvrtc==13.0.*' 'nvidia-cuda-runtime==13.0.*'
fi
echo "toolchains: $(hipcc --version 2>/dev/null | grep -m1 -i 'HIP version' || echo hipcc) ; nvrtc wheels ok"
