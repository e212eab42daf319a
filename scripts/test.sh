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
# One proof cache for the whole run, inside the build tree: a clean clone
# proves every kernel once (the runtime's build script, first), and the
# tests that compile the same kernels again reuse those outcomes.
export TOKITAI_CACHE_DIR="${TOKITAI_CACHE_DIR:-$PWD/target/tokitai-cache}"
# cargo-nextest, where installed (machines of this kind have it), runs the
# test binaries side by side: on CI's 2 cores the test phase took 165 s
# instead of cargo test's 204 s. It does not run doc tests: cargo test
# does, after it. Without nextest, cargo test runs everything.
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --release --no-fail-fast
    cargo test --workspace --release --doc
else
    cargo test --workspace --release --no-fail-fast
fi
