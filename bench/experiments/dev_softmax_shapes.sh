# One device call (issue 21, fourteenth session): the tuner over softmax and
# row_norm_sq with the tuning-only cached shapes (c32x4 ... c128x4) and the
# held exp term, tuned against untuned twice, PyTorch and Triton in the same
# call; every new shape forced through tokitai-gpucheck; memcheck of the
# one-warp form. Outputs in $OUT/all.tgz.
source bench/gpu_env.sh
export TOKITAI_CONTRACTS=off
b=./target/release/tokitai-bench-kernels
only=(softmax row_norm_sq)
$b --only "${only[@]}" --tune --tune-report $OUT/tuning.md --json $OUT/tune.json > $OUT/tune.log 2>&1
for i in 1 2; do
  $b --only "${only[@]}" --json $OUT/tuned_$i.json > $OUT/tuned_$i.log 2>&1
  TOKITAI_TUNING=off $b --only "${only[@]}" --json $OUT/default_$i.json > $OUT/default_$i.log 2>&1
done
python3 bench/torch_ref.py --only "${only[@]}" --json $OUT/torch.json > $OUT/torch.log 2>&1
python3 bench/triton_ref.py --only "${only[@]}" --json $OUT/triton.json > $OUT/triton.log 2>&1
for i in 1 2; do
  python3 bench/report.py $OUT/tuned_$i.json $OUT/torch.json --triton $OUT/triton.json --commit "$commit" > $OUT/tuned_$i.md 2>&1
done
unset TOKITAI_CONTRACTS
for k in softmax_fwd softmax_bwd; do
  for c in c32x4 c64x2 c64x4 c128x2 c128x4; do
    echo "== ${k}_$c"; TOKITAI_FORCE=${k}_$c ./target/release/tokitai-gpucheck --only $k 2>&1 | tail -1
  done
done > $OUT/forced.log
TOKITAI_FORCE=softmax_fwd_c32x4,softmax_bwd_c32x4 compute-sanitizer --tool memcheck ./target/release/tokitai-gpucheck --only softmax --small > $OUT/memcheck.log 2>&1
TOKITAI_FORCE=softmax_fwd_c32x4,softmax_bwd_c32x4 compute-sanitizer --tool racecheck ./target/release/tokitai-gpucheck --only softmax --small > $OUT/racecheck.log 2>&1
tail -2 $OUT/memcheck.log $OUT/racecheck.log
cd $OUT && tar czf all.tgz *.json *.log *.md && rm -f *.json *.log *.md
