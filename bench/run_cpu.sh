#!/usr/bin/env bash
# Issue 22: the CPU backend against PyTorch on the same CPU, one device
# call: the GPU host's 16 threads, then two cores of it (taskset), ours
# (`tokitai-bench-moe --device cpu`, contracts off and warn) and PyTorch
# (fp32 eager and torch.compile, dense and top-2 sparse dispatch) at
# nano b128, nano b4096 and tiny b128; before them the linear layer's three
# contractions alone at an expert's shapes (ours and torch.matmul).
#
#   BIN=target/cpu-bench bash bench/run_cpu.sh     (BIN: our release binaries)
#   SPECS="16:0-15 2:0-1" (threads:cores), TORCH="16 2" (where PyTorch runs),
#   TORCH_CONFIGS (PyTorch's configurations; default CONFIGS)
set -u
BIN=${BIN:-target/release}
CONFIGS=${CONFIGS:-nano:128,nano:4096,tiny:128}
STEPS=${STEPS:-20}
OUT=${OUT:-/tmp}
export TOKITAI_CACHE_DIR=${TOKITAI_CACHE_DIR:-$PWD/target/tokitai-cache}
lscpu | grep -E "Model name|^CPU\(s\)" || true
python3 -c "import torch; print('torch', torch.__version__)" || true
SPECS=${SPECS:-16:0-15 2:0-1}
TORCH=${TORCH:-16 2}
for spec in $SPECS; do
    threads=${spec%%:*} cores=${spec#*:}
    echo "== $threads threads (cores $cores)"
    # The contractions alone, ours and torch.matmul (where PyTorch runs).
    taskset -c "$cores" env RAYON_NUM_THREADS="$threads" "$BIN/tokitai-bench-cpu-contractions" --reps 10
    case " $TORCH " in *" $threads "*) taskset -c "$cores" python3 bench/torch_cpu_contractions.py --threads "$threads" --reps 10 ;; esac
    taskset -c "$cores" env RAYON_NUM_THREADS="$threads" "$BIN/tokitai-bench-moe" --device cpu --configs "$CONFIGS" --steps "$STEPS" --curve-steps 1 --contracts off,warn --json "$OUT/ours_$threads.json" 2>&1 | grep -E "ms/step|device"
    case " $TORCH " in *" $threads "*) ;; *) continue ;; esac
    taskset -c "$cores" python3 bench/moe_torch.py --cpu --threads "$threads" --configs "${TORCH_CONFIGS:-$CONFIGS}" --steps "$STEPS" --warmup 3 | tee "$OUT/torch_$threads.json"
done
