//! The one launch path every typed launcher goes through: bind the dims
//! from the tensors' shapes, check dtypes, shapes, devices and `requires`,
//! then hand the call to the device's backend.

use crate::call::{Arg, Bound, KernelDef, Observed};
use crate::{Device, Error, Result};

/// Bind and check everything about a call that does not need a device.
pub fn bind(k: &KernelDef, args: &[Arg]) -> Result<Bound> {
    let info = k.info;
    let kernel = || info.name.to_string();
    let n_tensors = args.iter().filter(|a| a.tensor().is_some()).count();
    if n_tensors != info.tensors.len() || args.len() != info.tensors.len() + info.scalars.len() {
        return Err(Error::Argument { kernel: kernel(), message: format!("expected {} tensors and {} scalars, got {} arguments", info.tensors.len(), info.scalars.len(), args.len()) });
    }
    let mut dims: Vec<Option<(i64, &str)>> = vec![None; info.dims.len()];
    let mut scalars = Vec::new();
    for (param, t) in info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())) {
        if t.dtype().name() != param.dtype {
            return Err(Error::Dtype { kernel: kernel(), tensor: param.name.into(), expected: param.dtype.into(), got: t.dtype().name().into() });
        }
        let shape_err = |message: String| Error::Shape { kernel: kernel(), tensor: param.name.into(), message };
        if t.shape().len() != param.shape.len() {
            return Err(shape_err(format!("expected {} axes [{}], got shape {:?}", param.shape.len(), param.shape.join(", "), t.shape())));
        }
        for (axis, (name, &len)) in param.shape.iter().zip(t.shape()).enumerate() {
            let len = len as i64;
            match info.dims.iter().position(|d| d == name) {
                Some(d) => match dims[d] {
                    None => dims[d] = Some((len, param.name)),
                    Some((v, from)) if v != len => {
                        return Err(shape_err(format!("axis {} is dim {} = {}, but `{}` has {} = {}", axis, name, len, from, name, v)));
                    }
                    Some(_) => {}
                },
                None => {
                    let want: i64 = name.parse().map_err(|_| shape_err(format!("axis {} names unknown dim {}", axis, name)))?;
                    if want != len {
                        return Err(shape_err(format!("axis {} must have length {}, got {}", axis, want, len)));
                    }
                }
            }
        }
    }
    for a in args {
        if let Arg::Scalar(v) = a {
            scalars.push(*v);
        }
    }
    let dims: Vec<i64> = dims
        .iter()
        .zip(info.dims)
        .map(|(d, name)| d.map(|(v, _)| v).ok_or_else(|| Error::Argument { kernel: kernel(), message: format!("dim {} is not the length of any tensor axis", name) }))
        .collect::<Result<_>>()?;
    (k.requires)(&dims, &scalars).map_err(|message| Error::Requires { kernel: kernel(), message })?;
    Ok(Bound { dims, scalars })
}

/// Launch `k` on `dev` with `args` in signature order.
pub fn launch(dev: &Device, k: &KernelDef, args: &mut [Arg]) -> Result<()> {
    let bound = checked(dev, k, args)?;
    let start = crate::profile::now();
    let ticket = crate::monitor::before_launch(dev, k, &bound, args)?;
    crate::record::before_launch(k, &bound, args);
    let dispatched = start.map(|s| (s.elapsed(), std::time::Instant::now()));
    dispatch(dev, k, &bound, args, ticket.observed())?;
    let ran = dispatched.map(|d| (d, std::time::Instant::now()));
    crate::monitor::after_launch(k, args, ticket);
    if let Some(((before, dispatch_start), monitor_start)) = ran {
        crate::profile::add(k.info.name, before, dispatch_start, monitor_start);
    }
    Ok(())
}

/// Launch one of the contract monitor's own probes: every check of
/// `launch`, no monitor and no recorder; `beside`: on the device's probe
/// stream (see `Device::fork_probes`), else in the step's own order.
pub(crate) fn launch_probe(dev: &Device, k: &KernelDef, args: &mut [Arg], beside: bool) -> Result<()> {
    let bound = checked(dev, k, args)?;
    match dev {
        #[cfg(feature = "cuda")]
        Device::Cuda(c) if beside => c.launch_probe(k, &bound, args),
        _ => dispatch(dev, k, &bound, args, None),
    }
}

/// [`bind`], and every tensor on `dev`.
pub(crate) fn checked(dev: &Device, k: &KernelDef, args: &[Arg]) -> Result<Bound> {
    let bound = bind(k, args)?;
    for (param, t) in k.info.tensors.iter().zip(args.iter().filter_map(|a| a.tensor())) {
        if !t.is_on(dev) {
            return Err(Error::WrongDevice { kernel: k.info.name.into(), tensor: param.name.into(), expected: dev.location(), got: t.location() });
        }
    }
    Ok(bound)
}

/// `observed`: what the contract monitor runs observing, and its words.
fn dispatch(dev: &Device, k: &KernelDef, bound: &Bound, args: &mut [Arg], observed: Option<Observed>) -> Result<()> {
    dev.backend().run(k, bound, args, observed)
}

#[cfg(test)]
mod tests {
    use crate::kernels::linear::{linear_bwd_w, linear_fwd};

    #[test]
    fn a_guarded_variant_serves_only_the_launches_its_guard_admits() {
        // linear_fwd's dims: M, K, N. On the unit from K = 128 (one
        // promotion a slab from K = 192), on mma.sync from K = 64, for outputs of at least 33
        // default tiles or sums of at least 1024; warp-specialised (from
        // K = 192 too) for outputs of at least 64 of its 256 x 128 tiles
        // (the key counts the kernel's own tiles: 2048 x 1024 is the
        // first such output of 1024 columns), and walking groups of tile
        // rows for outputs of at least 1024 of them (8192 x 4096).
        let ran = |k: &crate::call::KernelDef, d: &[i64]| k.choose(d).name;
        assert_eq!(ran(&linear_fwd::KERNEL, &[8192, 4096, 4096]), "linear_fwd_ws8");
        assert_eq!(ran(&linear_fwd::KERNEL, &[8192, 192, 8192]), "linear_fwd_ws8");
        assert_eq!(ran(&linear_fwd::KERNEL, &[8192, 191, 8192]), "linear_fwd_wg");
        assert_eq!(ran(&linear_fwd::KERNEL, &[8064, 4096, 4096]), "linear_fwd_ws");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 2048, 2048]), "linear_fwd_ws");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 192, 2048]), "linear_fwd_ws");
        assert_eq!(ran(&linear_fwd::KERNEL, &[2048, 4096, 1024]), "linear_fwd_ws");
        assert_eq!(ran(&linear_fwd::KERNEL, &[1920, 4096, 1024]), "linear_fwd_wg4");
        assert_eq!(ran(&linear_fwd::KERNEL, &[1024, 2048, 1024]), "linear_fwd_wg4");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 191, 2048]), "linear_fwd_wg");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 128, 2048]), "linear_fwd_wg");
        // Sums of 64 to 127 (the MoE's first layer, 96 long) on mma.sync.
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 127, 2048]), "linear_fwd_mma");
        assert_eq!(ran(&linear_fwd::KERNEL, &[3072, 96, 2048]), "linear_fwd_mma");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 63, 2048]), "linear_fwd");
        assert_eq!(ran(&linear_fwd::KERNEL, &[128, 128, 128]), "linear_fwd_t16");
        assert_eq!(ran(&linear_fwd::KERNEL, &[128, 1024, 128]), "linear_fwd_wg4");
        // linear_bwd_w sums over M (dims M, K, N): nano's weight gradient.
        assert_eq!(ran(&linear_bwd_w::KERNEL, &[2048, 128, 128]), "linear_bwd_w_wg4");
        assert_eq!(ran(&linear_bwd_w::KERNEL, &[100, 128, 128]), "linear_bwd_w_t16");
    }

    #[test]
    fn narrow_outputs_of_long_sums_take_the_narrow_or_split_sum_form() {
        use crate::kernels::linear::linear_bwd_x;
        let ran = |k: &crate::call::KernelDef, d: &[i64]| k.choose(d).name;
        // linear_fwd's dims: M, K, N. The tiny expert's head (20 columns)
        // and router (4), summed over 2048: the narrow form (sums of at
        // least 256) up to 128 default tiles (M = 8192), then 32-row
        // split-sum tiles up to 256 (M = 16384).
        assert_eq!(ran(&linear_fwd::KERNEL, &[2112, 2048, 20]), "linear_fwd_nw");
        assert_eq!(ran(&linear_fwd::KERNEL, &[3072, 2048, 20]), "linear_fwd_nw");
        assert_eq!(ran(&linear_fwd::KERNEL, &[4096, 2048, 4]), "linear_fwd_nw");
        assert_eq!(ran(&linear_fwd::KERNEL, &[8192, 2048, 20]), "linear_fwd_nw");
        assert_eq!(ran(&linear_fwd::KERNEL, &[8192 + 64, 2048, 20]), "linear_fwd_ks32");
        // Sums of 64 to 255: the split-sum form, 16-row tiles up to 33
        // default tiles, 32-row tiles up to 256.
        assert_eq!(ran(&linear_fwd::KERNEL, &[2112, 255, 20]), "linear_fwd_ks16");
        assert_eq!(ran(&linear_fwd::KERNEL, &[16384, 64, 32]), "linear_fwd_ks32");
        // Past the guards (sums shorter than 64, outputs wider than 32) or
        // the keys (more rows): as before.
        assert_eq!(ran(&linear_fwd::KERNEL, &[16384 + 64, 2048, 20]), "linear_fwd_wg4");
        assert!(!ran(&linear_fwd::KERNEL, &[3072, 63, 20]).contains("_ks"));
        assert!(!ran(&linear_fwd::KERNEL, &[3072, 2048, 33]).contains("_ks"));
        assert!(!ran(&linear_fwd::KERNEL, &[3072, 2048, 33]).contains("_nw"));
        // The weight gradient sums over M (dims M, K, N) down A's columns,
        // which the narrow form does not take: the head's is 2048 x 20;
        // the input gradient's columns are K (dims M, N, K), its sum N, 20
        // long.
        assert_eq!(ran(&linear_bwd_w::KERNEL, &[3072, 2048, 20]), "linear_bwd_w_ks16");
        assert!(!ran(&linear_bwd_x::KERNEL, &[3072, 20, 2048]).contains("_ks"));
        assert!(!ran(&linear_bwd_x::KERNEL, &[3072, 20, 2048]).contains("_nw"));
        // A tuning shape is never an untuned choice; the guard decides
        // where any shape of the form may run.
        let ks = linear_fwd::KERNEL.variants.iter().find(|v| v.name == "linear_fwd_ks16x16").expect("emitted");
        assert!(ks.min_row > ks.max_row);
        assert!(ks.admits(&[3072, 64, 32]) && !ks.admits(&[3072, 63, 32]) && !ks.admits(&[3072, 64, 33]));
        let nw = linear_fwd::KERNEL.variants.iter().find(|v| v.name == "linear_fwd_nw4x4").expect("emitted");
        assert!(nw.min_row > nw.max_row);
        assert!(nw.admits(&[3072, 256, 32]) && !nw.admits(&[3072, 255, 32]) && !nw.admits(&[3072, 256, 33]));
    }

    #[test]
    fn a_thin_last_wave_of_256_row_tiles_takes_the_128_row_tiles() {
        use crate::kernels::linear::linear_bwd_x;
        let on = |k: &crate::call::KernelDef, d: &[i64], sms: u32| k.choose_on(d, Some(sms)).name;
        // linear_fwd's dims: M, K, N. At 2560 x 2048 on 132 SMs the
        // 256 x 128 tiles run 160 blocks (two waves, the second of 28),
        // the 128 x 128 ones 320 (three waves of 0.58 each): 1.74 < 2.
        assert_eq!(on(&linear_fwd::KERNEL, &[2560, 2048, 2048], 132), "linear_fwd_ws128");
        assert_eq!(on(&linear_fwd::KERNEL, &[2304, 2048, 2048], 132), "linear_fwd_ws128");
        assert_eq!(on(&linear_bwd_x::KERNEL, &[3072, 2048, 2048], 132), "linear_bwd_x_ws128");
        // Whole waves already (128 blocks: one against two), or four
        // waves of the smaller against two (3328 rows: 2.32 > 2).
        assert_eq!(on(&linear_fwd::KERNEL, &[2048, 2048, 2048], 132), "linear_fwd_ws");
        assert_eq!(on(&linear_fwd::KERNEL, &[3328, 2048, 2048], 132), "linear_fwd_ws");
        // The weight gradient's 2048 x 2048 output: 128 tiles, one wave.
        assert_eq!(on(&linear_bwd_w::KERNEL, &[2560, 2048, 2048], 132), "linear_bwd_w_ws");
        // Only in place of the warp-specialised form, only where its
        // guard holds (a sum of at least 192), and never without a
        // device's count (the compiler's order alone).
        assert_eq!(on(&linear_fwd::KERNEL, &[1024, 2048, 1024], 132), "linear_fwd_wg4");
        assert_eq!(on(&linear_fwd::KERNEL, &[2560, 191, 2048], 132), "linear_fwd_wg");
        assert_eq!(linear_fwd::KERNEL.choose(&[2560, 2048, 2048]).name, "linear_fwd_ws");
        // On more multiprocessors the 160 blocks are one wave.
        assert_eq!(on(&linear_fwd::KERNEL, &[2560, 2048, 2048], 160), "linear_fwd_ws");
    }

    #[test]
    fn column_sums_of_at_least_256_columns_take_the_column_form() {
        use crate::kernels::layernorm::layernorm_bwd_params;
        use crate::kernels::linear::bias_grad;
        let ran = |k: &crate::call::KernelDef, d: &[i64]| k.choose(d).name;
        // layernorm_bwd_params's dims: R, C; bias_grad's: M, N.
        assert_eq!(ran(&layernorm_bwd_params::KERNEL, &[2048, 2048]), "layernorm_bwd_params_col");
        assert_eq!(ran(&layernorm_bwd_params::KERNEL, &[3, 256]), "layernorm_bwd_params_col");
        assert_eq!(ran(&bias_grad::KERNEL, &[4096, 1025]), "bias_grad_col");
        // Fewer columns keep a block a column (nano's 128, the head's 20).
        assert_ne!(ran(&layernorm_bwd_params::KERNEL, &[2048, 255]), "layernorm_bwd_params_col");
        assert!(!ran(&layernorm_bwd_params::KERNEL, &[2048, 128]).contains("_col"));
        assert!(!ran(&bias_grad::KERNEL, &[4096, 20]).contains("_col"));
    }
}
