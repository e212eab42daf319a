#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the kernel compilers
# (hipcc, NVRTC wheels), then builds and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-toolchains.sh
# The NVRTC wheel: its library for the runtime's in-process NVRTC tests, its
# headers (cuda_fp16.h) for every NVRTC compile.
NV="$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])')/cu13"
export TOKITAI_CUDA_INCLUDE="$NV/include"
export LD_LIBRARY_PATH="$NV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo test --workspace --release
