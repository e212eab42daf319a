source bench/gpu_env.sh
export TOKITAI_CONTRACTS=off
b=./target/release/tokitai-bench-kernels
$b --only softmax row_norm_sq --tune --tune-report $OUT/tuning.md --json $OUT/tune.json > $OUT/tune.log 2>&1
for i in 1 2; do
  $b --only softmax row_norm_sq --json $OUT/tuned_$i.json > $OUT/tuned_$i.log 2>&1
  TOKITAI_TUNING=off $b --only softmax row_norm_sq --json $OUT/default_$i.json > $OUT/default_$i.log 2>&1
done
unset TOKITAI_CONTRACTS
for c in c128x1 c256x1 c256x2 c512x2; do echo "== softmax_fwd_$c"; TOKITAI_FORCE=softmax_fwd_$c ./target/release/tokitai-gpucheck --only softmax_fwd 2>&1 | tail -1; done > $OUT/forced.log
compute-sanitizer --tool memcheck ./target/release/tokitai-gpucheck --only softmax --small > $OUT/memcheck.log 2>&1
tail -3 $OUT/memcheck.log
cd $OUT && tar czf all.tgz *.json *.log *.md && rm -f *.json *.log *.md
