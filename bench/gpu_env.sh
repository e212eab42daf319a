# Sourced by the GPU scripts: run from the repository root, outputs under
# $OUT (./out when unset), the CUDA libraries found, a private kernel cache,
# the commit being measured in $commit.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TOKITAI_CACHE_DIR="${TOKITAI_CACHE_DIR:-/tmp/tokitai-cache}"
export PYTHONUNBUFFERED=1
commit="${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
