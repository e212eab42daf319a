//! Domains that compose (issue 18): where a kernel's output has a proved
//! `ensures` range and another kernel's input a numeric `domain` that holds
//! it, the consumer needs no check of that input at run time. A model
//! states the edges of its step ([`Edge`]) and checks them once, when it is
//! built ([`check_edges`]); at run time the monitor knows each tensor a
//! covered producer wrote (see `known`) and skips its probe.

use crate::abi::tk_info::KernelInfo;
use crate::{Error, Result};

/// One producer output feeding one consumer input in a model's step.
#[derive(Clone, Copy, Debug)]
pub struct Edge {
    pub producer: &'static KernelInfo,
    pub output: &'static str,
    pub consumer: &'static KernelInfo,
    pub input: &'static str,
}

/// Check that each edge composes: the output has a proved range, the input
/// has the output's dtype and a numeric domain, and the domain holds the
/// range. The error names the first edge that does not and why.
pub fn check_edges(edges: &[Edge]) -> Result<()> {
    for e in edges {
        check(e).map_err(|why| Error::Contract { kernel: e.consumer.name.into(), message: format!("input `{}` takes `{}`'s output `{}`: {}", e.input, e.producer.name, e.output, why) })?;
    }
    Ok(())
}

fn check(e: &Edge) -> std::result::Result<(), String> {
    let out = e.producer.tensors.iter().find(|t| t.name == e.output && t.role != "input").ok_or_else(|| format!("`{}` has no output `{}`", e.producer.name, e.output))?;
    let inp = e.consumer.tensors.iter().find(|t| t.name == e.input && t.role != "output").ok_or_else(|| format!("`{}` has no input `{}`", e.consumer.name, e.input))?;
    if out.dtype != inp.dtype {
        return Err(format!("the output is {}, the input {}", out.dtype, inp.dtype));
    }
    let &(_, lo, hi) = e.producer.ensures.iter().find(|x| x.0 == e.output).ok_or("the output has no proved `ensures` range")?;
    if e.consumer.magnitudes.iter().any(|m| m.0 == e.input) {
        return Err("the input's domain is in magnitudes: its bound is evaluated at the measured magnitude".into());
    }
    let &(_, dlo, dhi) = e.consumer.domain.iter().find(|d| d.0 == e.input).ok_or("the input has no `domain`")?;
    if dlo <= lo && hi <= dhi {
        Ok(())
    } else {
        Err(format!("its proved range [{}, {}] is not inside the domain [{}, {}]", lo, hi, dlo, dhi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::moe::{combine2, router_bwd, router_softmax, top2};
    use crate::kernels::softmax::softmax_bwd;

    fn edge(producer: &'static KernelInfo, output: &'static str, consumer: &'static KernelInfo, input: &'static str) -> Edge {
        Edge { producer, output, consumer, input }
    }

    #[test]
    fn the_router_composes_and_bad_edges_are_named() {
        check_edges(&[edge(&router_softmax::INFO, "p", &top2::INFO, "p"), edge(&top2::INFO, "w0", &combine2::INFO, "w0"), edge(&router_softmax::INFO, "p", &router_bwd::INFO, "p")]).expect("the MoE router's edges compose");
        let err = |e: Edge| check_edges(&[e]).unwrap_err().to_string();
        assert!(err(edge(&router_softmax::INFO, "p", &softmax_bwd::INFO, "s")).contains("the output is f32, the input f16"));
        assert!(err(edge(&top2::INFO, "w0", &router_bwd::INFO, "gw0")).contains("in magnitudes"));
        assert!(err(edge(&router_softmax::INFO, "q", &top2::INFO, "p")).contains("no output `q`"));
        assert!(err(edge(&top2::INFO, "i0", &combine2::INFO, "pos0")).contains("no proved `ensures` range") || err(edge(&top2::INFO, "i0", &combine2::INFO, "pos0")).contains("no `domain`"));
        // A domain narrower than the range.
        static NARROW: KernelInfo = KernelInfo { domain: &[("w0", 0.0, 0.5)], ..combine2::INFO };
        let e = err(edge(&top2::INFO, "w0", &NARROW, "w0"));
        assert!(e.contains("[0, 1] is not inside the domain [0, 0.5]") && e.contains("combine2"), "{}", e);
    }
}
