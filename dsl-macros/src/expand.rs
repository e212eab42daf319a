//! Compile a `#[kernel]` function and emit its module, or its errors on
//! the user's tokens.

use crate::surface::{self, TkText};
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::quote;
use tokitai_compiler::build::{compile_with, BuildError, Options};
use tokitai_compiler::codegen::bindings::BindingStyle;
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let f: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => return e.to_compile_error(),
    };
    let name = f.sig.ident.clone();
    match expand(attr, &f) {
        Ok(ts) => ts,
        // A module of the kernel's name stays, so that uses of it report
        // no second error; the user's function stays for rust-analyzer
        // (which sets `cfg(rust_analyzer)`), so the IDE still sees it, while
        // rustc, which cannot resolve its kernel vocabulary, skips it.
        Err(e) => {
            let err = e.to_compile_error();
            quote! {
                #err
                #[allow(dead_code)]
                pub mod #name {}
                #[allow(unexpected_cfgs, dead_code)]
                const _: () = {
                    #[cfg(rust_analyzer)]
                    #item
                };
            }
        }
    }
}

fn expand(attr: TokenStream, f: &syn::ItemFn) -> syn::Result<TokenStream> {
    let clauses = surface::parse_clauses(attr)?;
    let tk = surface::kernel_source(&clauses, f)?;
    let name = f.sig.ident.to_string();
    let source = SourceFile::new(format!("#[kernel] fn {}", name), tk.text.clone());
    let target = Target::default_cuda();
    let mut opts = Options::new(target);
    opts.verify = proving();
    opts.style = BindingStyle { support: Some("tokitai_runtime::abi".into()), runtime: Some("tokitai_runtime".into()) };
    let artifacts = compile_with(source, &opts).map_err(|e| diagnostics(&tk, &f.sig.ident, e))?;
    let bindings: TokenStream = artifacts.bindings.parse().map_err(|e| syn::Error::new(f.sig.ident.span(), format!("internal: generated bindings do not parse: {}", e)))?;
    let ident = &f.sig.ident;
    let wrapper = quote::format_ident!("__tokitai_kernel_{}", ident);
    let tk_text = tk.text.as_str();
    Ok(quote! {
        #[doc(hidden)]
        #[allow(clippy::all, unused)]
        pub mod #wrapper {
            #bindings
            /// The `.tk` source this function was read as.
            pub const TK_SOURCE: &str = #tk_text;
        }
        pub use #wrapper::#ident;
    })
}

/// Prove at macro time? The `prove` feature (a crate's choice), unless
/// `TOKITAI_PROVE=0` (a one-off: cargo does not rebuild when it changes).
/// Outcomes are kept in the persistent proof cache (`$TOKITAI_CACHE_DIR`,
/// else the user's cache directory), shared with `tokitaic` and build
/// scripts.
fn proving() -> bool {
    if std::env::var("TOKITAI_PROVE").is_ok_and(|v| v == "0") {
        return false;
    }
    #[cfg(feature = "prove")]
    {
        tokitai_compiler::cache::configure(tokitai_compiler::cache::Location::Default);
        true
    }
    #[cfg(not(feature = "prove"))]
    false
}

/// The compiler's diagnostics as errors on the Rust tokens they came from.
fn diagnostics(tk: &TkText, fallback: &syn::Ident, e: BuildError) -> syn::Error {
    let BuildError::Source { diagnostics, .. } = e else {
        return syn::Error::new(fallback.span(), e.to_string());
    };
    let mut all: Option<syn::Error> = None;
    for d in diagnostics.iter().filter(|d| d.is_error()) {
        let mut message = format!("[{}] {}", d.code, d.message);
        if !d.label.is_empty() {
            message.push_str(&format!("\n  {}", d.label));
        }
        for (_, label) in &d.secondary {
            message.push_str(&format!("\n  note: {}", label));
        }
        for n in &d.notes {
            message.push_str(&format!("\n  note: {}", n));
        }
        if let Some(h) = &d.help {
            message.push_str(&format!("\n  help: {}", h));
        }
        let (start, end) = tk.span_of(d.span.lo, d.span.hi).unwrap_or((fallback.span(), fallback.span()));
        let err = syn::Error::new_spanned(spanned(start, end), message);
        match &mut all {
            Some(a) => a.combine(err),
            None => all = Some(err),
        }
    }
    all.unwrap_or_else(|| syn::Error::new(fallback.span(), "the kernel failed to compile"))
}

/// Two tokens carrying `start` and `end`: `Error::new_spanned` then covers
/// the range between them (on stable Rust, where spans cannot be joined).
fn spanned(start: Span, end: Span) -> TokenStream {
    let mut a = proc_macro2::Punct::new('#', proc_macro2::Spacing::Alone);
    a.set_span(start);
    let mut b = proc_macro2::Punct::new('#', proc_macro2::Spacing::Alone);
    b.set_span(end);
    [TokenTree::Punct(a), TokenTree::Punct(b)].into_iter().collect()
}
