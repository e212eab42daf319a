# One device call (issue 21, fourteenth session): softmax with the proved
# fast-intrinsic candidates (`_fi`: __expf, __fdividef) in the tuner's space;
# tuned against untuned twice, PyTorch and Triton in the same call; three
# _fi forms forced through tokitai-gpucheck and its soundness sampler.
# Outputs in $OUT/all.tgz.
source bench/gpu_env.sh
export TOKITAI_CONTRACTS=off
b=./target/release/tokitai-bench-kernels
only=(softmax)
$b --only "${only[@]}" --tune --tune-report $OUT/tuning.md --json $OUT/tune.json > $OUT/tune.log 2>&1
for i in 1 2; do
  $b --only "${only[@]}" --json $OUT/tuned_$i.json > $OUT/tuned_$i.log 2>&1
  TOKITAI_TUNING=off $b --only "${only[@]}" --json $OUT/default_$i.json > $OUT/default_$i.log 2>&1
done
python3 bench/torch_ref.py --only "${only[@]}" --json $OUT/torch.json > $OUT/torch.log 2>&1
python3 bench/triton_ref.py --only "${only[@]}" --json $OUT/triton.json > $OUT/triton.log 2>&1
unset TOKITAI_CONTRACTS
for c in c128x1_fi c256x2_fi c64x2_fi; do
  echo "== softmax_fwd_$c"; TOKITAI_FORCE=softmax_fwd_$c ./target/release/tokitai-gpucheck --only softmax_fwd 2>&1 | tail -n 1
done > $OUT/forced.log
TOKITAI_FORCE=softmax_fwd_c128x1_fi timeout 120 ./target/release/tokitai-gpucheck --only softmax_fwd --soundness 1000000 > $OUT/soundness_fi.log 2>&1
timeout 120 ./target/release/tokitai-gpucheck --only softmax_fwd --soundness 1000000 > $OUT/soundness_default.log 2>&1
cd $OUT && tar czf all.tgz *.json *.log *.md && rm -f *.json *.log *.md
