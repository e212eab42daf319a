//! The race rule and the definition rules.
//!
//! Statements run in order, per element. A statement may read a tensor that
//! the kernel writes only where no other thread could be writing it:
//! - at its own element (the same index variables in the same positions), or
//! - after the writing statement, across a reduction variable (the whole row
//!   is complete before the reduction reads it).
//!
//! Anything else (`y[i+1]`, a transposed read `t[j, i]`) is a cross-element
//! read and is rejected with both accesses named.

use super::KernelChecker;
use crate::diag::Diagnostic;
use crate::span::Span;
use crate::syntax::ast;
use crate::tir::*;
use petgraph::graph::DiGraph;
use std::collections::HashMap;

impl<'a> KernelChecker<'a> {
    pub(super) fn check_races_and_definitions(&mut self, k: &ast::Kernel, stmts: &[Stmt], params: &[Param]) -> Option<DiGraph<StmtId, TensorId>> {
        let writer: HashMap<TensorId, StmtId> = stmts.iter().enumerate().map(|(i, s)| (s.target, i)).collect();
        let mut graph = DiGraph::new();
        let nodes: Vec<_> = (0..stmts.len()).map(|i| graph.add_node(i)).collect();
        let mut read = vec![false; self.tensors.len()];
        let mut scalar_read = vec![false; self.scalars.len()];
        let mut ok = true;
        for (si, s) in stmts.iter().enumerate() {
            let mut loads: Vec<(TensorId, Vec<TExpr>, Span)> = Vec::new();
            s.value.walk(&mut |e| match &e.kind {
                TExprKind::Load { tensor, index } => loads.push((*tensor, index.clone(), e.span)),
                TExprKind::Scalar(sc) => scalar_read[*sc] = true,
                _ => {}
            });
            for (t, index, span) in loads {
                read[t] = true;
                let Some(&w) = writer.get(&t) else { continue };
                let role = self.tensors[t].role;
                let name = self.tensors[t].name.clone();
                if w >= si && role != TensorRole::Inout {
                    let msg = if w == si {
                        format!("`{}` is defined in terms of itself", name)
                    } else {
                        format!("`{}` is read before it is defined", name)
                    };
                    self.error(
                        Diagnostic::error("E0605", msg, span)
                            .with_label("read here")
                            .with_secondary(stmts[w].span, "defined here")
                            .with_help("statements run in order: define a tensor before reading it"),
                    );
                    ok = false;
                    continue;
                }
                if w != si {
                    graph.add_edge(nodes[w.min(si)], nodes[si.max(w)], t);
                }
                let same_element = index.len() == s.vars.len() && index.iter().zip(&s.vars).all(|(e, v)| e.as_var() == Some(*v));
                let allowed = if si <= w {
                    same_element
                } else {
                    index.iter().enumerate().all(|(j, e)| match e.as_var() {
                        Some(v) => s.vars.get(j) == Some(&v) || self.vars[v].kind == VarKind::Reduction && !s.vars.contains(&v),
                        None => false,
                    })
                };
                if !allowed {
                    let when = if si == w {
                        "while this statement writes it"
                    } else if si < w {
                        "which a later statement overwrites"
                    } else {
                        "which another thread writes"
                    };
                    self.error(
                        Diagnostic::error("E0501", format!("race: `{}` reads an element of `{}` {}", self.src.snippet(span), name, when), span)
                            .with_label("this read may see another thread's element")
                            .with_secondary(stmts[w].span, "the write")
                            .with_help(format!(
                                "read `{}` only at the element this statement defines (its own index variables, in order){}",
                                name,
                                if si > w { ", or across a reduction" } else { "" }
                            )),
                    );
                    ok = false;
                }
            }
        }
        for (t, info) in self.tensors.clone().iter().enumerate() {
            match info.role {
                TensorRole::Output if !writer.contains_key(&t) => {
                    self.error(
                        Diagnostic::error("E0602", format!("output `{}` is never defined", info.name), info.span)
                            .with_label("declared here")
                            .with_help(format!("define it in the body, e.g. `{}{} = ...;`", info.name, if info.shape.is_empty() { String::new() } else { format!("[{}]", vec!["i"; info.shape.len()].join(", ")) })),
                    );
                    ok = false;
                }
                TensorRole::Intermediate if !read[t] => {
                    let span = writer.get(&t).map(|w| stmts[*w].span).unwrap_or(info.span);
                    self.error(
                        Diagnostic::error("E0603", format!("intermediate `{}` is defined but never used", info.name), span)
                            .with_label("computed for nothing")
                            .with_help(format!("remove it, or if it is a result, declare it as an output: `-> ({}: {}[...])`", info.name, info.dtype)),
                    );
                    ok = false;
                }
                TensorRole::Input if !read[t] => self.error(
                    Diagnostic::warning("W0601", format!("input `{}` is never read", info.name), info.span)
                        .with_label("unused")
                        .with_help("remove the parameter if the kernel does not need it"),
                ),
                TensorRole::Inout if !writer.contains_key(&t) => self.error(
                    Diagnostic::warning("W0602", format!("`{}` is inout but never written", info.name), info.span)
                        .with_label("only read")
                        .with_help("declare it as an input"),
                ),
                _ => {}
            }
        }
        for (i, s) in self.scalars.clone().iter().enumerate() {
            if !scalar_read[i] {
                self.error(
                    Diagnostic::warning("W0601", format!("scalar `{}` is never read", s.name), s.span)
                        .with_label("unused")
                        .with_help("remove the parameter if the kernel does not need it"),
                );
            }
        }
        let _ = (k, params);
        if ok {
            Some(graph)
        } else {
            None
        }
    }
}
