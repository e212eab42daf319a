//! Shared pieces of the GPU drivers: the workloads of perf.md and timing
//! with device events.

use cudarc::driver::{sys, CudaContext, CudaStream};
use std::sync::Arc;

/// One measured workload: a kernel at named dims.
pub struct Workload {
    pub label: &'static str,
    pub kernel: &'static str,
    pub dims: &'static [(&'static str, i64)],
}

/// The sizes of perf.md (and the MoE kernels at training-like sizes).
pub const WORKLOADS: &[Workload] = &[
    Workload { label: "gelu_fwd f16 2^26", kernel: "gelu_fwd", dims: &[("N", 1 << 26)] },
    Workload { label: "gelu_bwd f16 2^26", kernel: "gelu_bwd", dims: &[("N", 1 << 26)] },
    Workload { label: "softmax_fwd f16 16384x4096", kernel: "softmax_fwd", dims: &[("R", 16384), ("C", 4096)] },
    Workload { label: "softmax_fwd f16 65536x1024", kernel: "softmax_fwd", dims: &[("R", 65536), ("C", 1024)] },
    Workload { label: "softmax_fwd f16 4096x32000", kernel: "softmax_fwd", dims: &[("R", 4096), ("C", 32000)] },
    Workload { label: "softmax_bwd f16 16384x4096", kernel: "softmax_bwd", dims: &[("R", 16384), ("C", 4096)] },
    Workload { label: "layernorm_fwd f16 16384x4096", kernel: "layernorm_fwd", dims: &[("R", 16384), ("C", 4096)] },
    Workload { label: "layernorm_fwd f16 65536x1024", kernel: "layernorm_fwd", dims: &[("R", 65536), ("C", 1024)] },
    Workload { label: "layernorm_bwd f16 16384x4096", kernel: "layernorm_bwd", dims: &[("R", 16384), ("C", 4096)] },
    Workload { label: "layernorm_bwd f16 65536x1024", kernel: "layernorm_bwd", dims: &[("R", 65536), ("C", 1024)] },
    Workload { label: "adamw 2^26", kernel: "adamw", dims: &[("G", 1 << 16), ("C", 1024)] },
    Workload { label: "sgd_momentum 2^26", kernel: "sgd_momentum", dims: &[("G", 1 << 16), ("C", 1024)] },
    Workload { label: "mse_grad f16 2^26", kernel: "mse_grad", dims: &[("N", 1 << 26)] },
    Workload { label: "row_norm_sq f16 65536x1024", kernel: "row_norm_sq", dims: &[("G", 65536), ("C", 1024)] },
    Workload { label: "gather_rows f16 65536x1024", kernel: "gather_rows", dims: &[("T", 65536), ("D", 1024), ("R", 65536)] },
    Workload { label: "combine2 f16 65536x1024", kernel: "combine2", dims: &[("S", 131072), ("D", 1024), ("R", 65536)] },
    Workload { label: "top2 f32 2^20x4", kernel: "top2", dims: &[("R", 1 << 20), ("E", 4)] },
    // The shapes of a nano expert's training step at batch 4096 (about
    // 2048 rows per expert).
    Workload { label: "moe-step linear_fwd 2048x128x128", kernel: "linear_fwd", dims: &[("M", 2048), ("K", 128), ("N", 128)] },
    Workload { label: "moe-step linear_bwd_w 2048x128x128", kernel: "linear_bwd_w", dims: &[("M", 2048), ("K", 128), ("N", 128)] },
    Workload { label: "moe-step bias_grad 2048x128", kernel: "bias_grad", dims: &[("M", 2048), ("N", 128)] },
    Workload { label: "moe-step layernorm_bwd_params 2048x128", kernel: "layernorm_bwd_params", dims: &[("R", 2048), ("C", 128)] },
    Workload { label: "moe-step layernorm_bwd 2048x128", kernel: "layernorm_bwd", dims: &[("R", 2048), ("C", 128)] },
    // Column sums (issue 21): the tiny MoE step's parameter gradients
    // (about 2048 rows an expert, 2048 columns), and where the column form
    // starts to pay (`schedule::COLUMN_MIN_COLUMNS`).
    // The head of a tiny expert (`Linear(2048, 20)`, about 3000 routed
    // rows): few output tiles and long sums (issues 19 and 20).
    Workload { label: "moe tiny head linear_fwd 3072x2048x20", kernel: "linear_fwd", dims: &[("M", 3072), ("K", 2048), ("N", 20)] },
    Workload { label: "moe tiny head linear_bwd_w 3072x2048x20", kernel: "linear_bwd_w", dims: &[("M", 3072), ("K", 2048), ("N", 20)] },
    // Narrow outputs at more rows (up to the last the split-sum form
    // serves, `split_sum::SHAPES`: 16384 at 32 columns or fewer), and the
    // tiny router's 4 experts.
    Workload { label: "narrow linear_fwd 8192x2048x20", kernel: "linear_fwd", dims: &[("M", 8192), ("K", 2048), ("N", 20)] },
    Workload { label: "narrow linear_fwd 16384x2048x20", kernel: "linear_fwd", dims: &[("M", 16384), ("K", 2048), ("N", 20)] },
    Workload { label: "moe tiny router linear_fwd 4096x2048x4", kernel: "linear_fwd", dims: &[("M", 4096), ("K", 2048), ("N", 4)] },
    Workload { label: "moe tiny router linear_bwd_w 4096x2048x4", kernel: "linear_bwd_w", dims: &[("M", 4096), ("K", 2048), ("N", 4)] },
    // An expert's first layer (`Linear(96, 2048)`): a sum too short for
    // the warpgroup unit's bound.
    Workload { label: "moe tiny first linear_fwd 3072x96x2048", kernel: "linear_fwd", dims: &[("M", 3072), ("K", 96), ("N", 2048)] },
    // The same at an expert's average routed rows in a tiny b4096 step
    // (8192 / 4): the head's two contractions and the first layer's
    // weight gradient (an output of 96 x 2048, one row of 128-row tiles),
    // the step's least efficient launches in the thirty-eighth session's
    // timeline (about 50 us each for 8 MB read).
    Workload { label: "moe tiny head linear_fwd 2048x2048x20", kernel: "linear_fwd", dims: &[("M", 2048), ("K", 2048), ("N", 20)] },
    Workload { label: "moe tiny head linear_bwd_w 2048x2048x20", kernel: "linear_bwd_w", dims: &[("M", 2048), ("K", 2048), ("N", 20)] },
    Workload { label: "moe tiny first linear_bwd_w 2048x96x2048", kernel: "linear_bwd_w", dims: &[("M", 2048), ("K", 96), ("N", 2048)] },
    // An expert's wide layers at the routed rows a tiny step gives them
    // (2048 on average, 1400-3400 in a run): where the 256-row tiles of the
    // warp-specialised form leave a thin last wave on 132 SMs (issue 20).
    Workload { label: "wave linear_fwd 2304x2048x2048", kernel: "linear_fwd", dims: &[("M", 2304), ("K", 2048), ("N", 2048)] },
    Workload { label: "wave linear_fwd 2560x2048x2048", kernel: "linear_fwd", dims: &[("M", 2560), ("K", 2048), ("N", 2048)] },
    Workload { label: "wave linear_fwd 2816x2048x2048", kernel: "linear_fwd", dims: &[("M", 2816), ("K", 2048), ("N", 2048)] },
    Workload { label: "wave linear_fwd 3072x2048x2048", kernel: "linear_fwd", dims: &[("M", 3072), ("K", 2048), ("N", 2048)] },
    Workload { label: "wave linear_fwd 3328x2048x2048", kernel: "linear_fwd", dims: &[("M", 3328), ("K", 2048), ("N", 2048)] },
    Workload { label: "wave linear_bwd_x 2560x2048x2048", kernel: "linear_bwd_x", dims: &[("M", 2560), ("N", 2048), ("K", 2048)] },
    Workload { label: "wave linear_bwd_w 2560x2048x2048", kernel: "linear_bwd_w", dims: &[("M", 2560), ("K", 2048), ("N", 2048)] },
    // A hidden layer's LayerNorm and GELU at an expert's routed rows: one
    // fused launch against the two it replaces (issue 20).
    Workload { label: "moe tiny layernorm_gelu_fwd 2560x2048", kernel: "layernorm_gelu_fwd", dims: &[("R", 2560), ("C", 2048)] },
    Workload { label: "moe tiny layernorm_fwd 2560x2048", kernel: "layernorm_fwd", dims: &[("R", 2560), ("C", 2048)] },
    Workload { label: "moe tiny gelu_fwd 2560x2048", kernel: "gelu_fwd", dims: &[("N", 2560 * 2048)] },
    Workload { label: "moe tiny layernorm_bwd 2560x2048", kernel: "layernorm_bwd", dims: &[("R", 2560), ("C", 2048)] },
    Workload { label: "moe tiny gelu_bwd 2560x2048", kernel: "gelu_bwd", dims: &[("N", 2560 * 2048)] },
    // The fused backward of LayerNorm and GELU, and the forward that keeps
    // no normalised rows for it (issue 20).
    Workload { label: "moe tiny layernorm_gelu_bwd 2560x2048", kernel: "layernorm_gelu_bwd", dims: &[("R", 2560), ("C", 2048)] },
    Workload { label: "moe tiny layernorm_gelu_act 2560x2048", kernel: "layernorm_gelu_act", dims: &[("R", 2560), ("C", 2048)] },
    Workload { label: "moe tiny bias_grad 2048x2048", kernel: "bias_grad", dims: &[("M", 2048), ("N", 2048)] },
    Workload { label: "moe tiny layernorm_bwd_params 2048x2048", kernel: "layernorm_bwd_params", dims: &[("R", 2048), ("C", 2048)] },
    Workload { label: "layernorm_bwd_params 4096x4096", kernel: "layernorm_bwd_params", dims: &[("R", 4096), ("C", 4096)] },
    Workload { label: "layernorm_bwd_params 4096x1024", kernel: "layernorm_bwd_params", dims: &[("R", 4096), ("C", 1024)] },
    Workload { label: "layernorm_bwd_params 4096x512", kernel: "layernorm_bwd_params", dims: &[("R", 4096), ("C", 512)] },
    Workload { label: "layernorm_bwd_params 4096x256", kernel: "layernorm_bwd_params", dims: &[("R", 4096), ("C", 256)] },
    Workload { label: "bias_grad 4096x4096", kernel: "bias_grad", dims: &[("M", 4096), ("N", 4096)] },
    Workload { label: "linear_fwd f16 4096^3", kernel: "linear_fwd", dims: &[("M", 4096), ("K", 4096), ("N", 4096)] },
    Workload { label: "linear_fwd f16 16384x1024x1024", kernel: "linear_fwd", dims: &[("M", 16384), ("K", 1024), ("N", 1024)] },
    Workload { label: "linear_fwd f16 4096x2048x2048", kernel: "linear_fwd", dims: &[("M", 4096), ("K", 2048), ("N", 2048)] },
    // The layer with GELU fused into its epilogue (issue 19).
    Workload { label: "linear_gelu_fwd f16 4096x2048x2048", kernel: "linear_gelu_fwd", dims: &[("M", 4096), ("K", 2048), ("N", 2048)] },
    Workload { label: "linear_gelu_fwd f16 16384x1024x1024", kernel: "linear_gelu_fwd", dims: &[("M", 16384), ("K", 1024), ("N", 1024)] },
    Workload { label: "linear_bwd_x f16 4096x2048x2048", kernel: "linear_bwd_x", dims: &[("M", 4096), ("N", 2048), ("K", 2048)] },
    Workload { label: "linear_bwd_w f16 4096x2048x2048", kernel: "linear_bwd_w", dims: &[("M", 4096), ("K", 2048), ("N", 2048)] },
    // The expert layers of the MoE step at batch 4096 (top-2 of 4
    // experts: about 2048 rows an expert), h = 128 / 2048 / 4096 (nano,
    // tiny, medium); issue 19's "three linear contractions at the MoE
    // sizes" (bench/triton_ref.py and torch_ref.py time the same labels).
    Workload { label: "moe nano linear_fwd 2048x128x128", kernel: "linear_fwd", dims: &[("M", 2048), ("K", 128), ("N", 128)] },
    Workload { label: "moe nano linear_bwd_x 2048x128x128", kernel: "linear_bwd_x", dims: &[("M", 2048), ("N", 128), ("K", 128)] },
    Workload { label: "moe nano linear_bwd_w 2048x128x128", kernel: "linear_bwd_w", dims: &[("M", 2048), ("K", 128), ("N", 128)] },
    Workload { label: "moe tiny linear_fwd 2048x2048x2048", kernel: "linear_fwd", dims: &[("M", 2048), ("K", 2048), ("N", 2048)] },
    Workload { label: "moe tiny linear_bwd_x 2048x2048x2048", kernel: "linear_bwd_x", dims: &[("M", 2048), ("N", 2048), ("K", 2048)] },
    Workload { label: "moe tiny linear_bwd_w 2048x2048x2048", kernel: "linear_bwd_w", dims: &[("M", 2048), ("K", 2048), ("N", 2048)] },
    Workload { label: "moe medium linear_fwd 2048x4096x4096", kernel: "linear_fwd", dims: &[("M", 2048), ("K", 4096), ("N", 4096)] },
    Workload { label: "moe medium linear_bwd_x 2048x4096x4096", kernel: "linear_bwd_x", dims: &[("M", 2048), ("N", 4096), ("K", 4096)] },
    Workload { label: "moe medium linear_bwd_w 2048x4096x4096", kernel: "linear_bwd_w", dims: &[("M", 2048), ("K", 4096), ("N", 4096)] },
    // The tensor-core schedule (issue 19): the sizes of perf.md's GEMMs.
    Workload { label: "matmul_f16 tc 4096^3", kernel: "matmul_f16", dims: &[("M", 4096), ("K", 4096), ("N", 4096)] },
    Workload { label: "matmul_f16 tc 16384x1024x1024", kernel: "matmul_f16", dims: &[("M", 16384), ("K", 1024), ("N", 1024)] },
    Workload { label: "matmul_f16 tc 4096x2048x2048", kernel: "matmul_f16", dims: &[("M", 4096), ("K", 2048), ("N", 2048)] },
    Workload { label: "matmul_bf16 tc 4096^3", kernel: "matmul_bf16", dims: &[("M", 4096), ("K", 4096), ("N", 4096)] },
    // The warpgroup schedule (sm_90a: wgmma), same sizes and 8192^3.
    Workload { label: "gemm_f16 wg 4096^3", kernel: "gemm_f16", dims: &[("M", 4096), ("K", 4096), ("N", 4096)] },
    Workload { label: "gemm_f16 wg 8192^3", kernel: "gemm_f16", dims: &[("M", 8192), ("K", 8192), ("N", 8192)] },
    Workload { label: "gemm_f16 wg 16384x1024x1024", kernel: "gemm_f16", dims: &[("M", 16384), ("K", 1024), ("N", 1024)] },
    Workload { label: "gemm_f16 wg 4096x2048x2048", kernel: "gemm_f16", dims: &[("M", 4096), ("K", 2048), ("N", 2048)] },
    // Where warp specialisation starts to pay (its 256 x 128 tiles against
    // the plain 128 x 128 ones: `schedule::WARP_SPECIALISED_MIN_BLOCKS`).
    Workload { label: "gemm_f16 wg 1024x4096x1024", kernel: "gemm_f16", dims: &[("M", 1024), ("K", 4096), ("N", 1024)] },
    Workload { label: "gemm_f16 wg 1536x4096x1536", kernel: "gemm_f16", dims: &[("M", 1536), ("K", 4096), ("N", 1536)] },
    Workload { label: "gemm_f16 wg 2048x4096x2048", kernel: "gemm_f16", dims: &[("M", 2048), ("K", 4096), ("N", 2048)] },
    Workload { label: "gemm_f16 wg 3072x4096x3072", kernel: "gemm_f16", dims: &[("M", 3072), ("K", 4096), ("N", 3072)] },
    Workload { label: "gemm_bf16 wg 4096^3", kernel: "gemm_bf16", dims: &[("M", 4096), ("K", 4096), ("N", 4096)] },
];

/// The first CUDA device with its context and stream (for [`time_ms`]),
/// its description printed; exit 2 naming why where there is none.
pub fn cuda_device_or_exit() -> (tokitai_runtime::Device, Arc<CudaContext>, Arc<CudaStream>) {
    let dev = match tokitai_runtime::Device::cuda(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}", e);
            std::process::exit(2);
        }
    };
    let tokitai_runtime::Device::Cuda(cuda) = &dev else { unreachable!("Device::cuda gives a CUDA device") };
    let (ctx, stream) = (cuda.context().clone(), cuda.stream().clone());
    println!("device: {}", dev.describe());
    (dev, ctx, stream)
}

/// Median milliseconds of `reps` runs of `f`, each bracketed by events on
/// `stream`, after `warmup` untimed runs.
pub fn time_ms(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, warmup: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warmup {
        f();
    }
    stream.synchronize().expect("synchronize");
    let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = ctx.new_event(flags).expect("event");
        let end = ctx.new_event(flags).expect("event");
        start.record(stream).expect("record");
        f();
        end.record(stream).expect("record");
        end.synchronize().expect("event sync");
        times.push(start.elapsed_ms(&end).expect("elapsed") as f64);
    }
    times.sort_by(|a, b| a.partial_cmp(b).expect("finite times"));
    times[times.len() / 2]
}
