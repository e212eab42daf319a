#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the kernel compilers
# (hipcc, NVRTC wheels), then builds and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-toolchains.sh
cargo test --workspace --release
