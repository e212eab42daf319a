//! `.tk` source to AST: the lexer, the lalrpop grammar and parse diagnostics.

pub mod ast;
pub mod lexer;

#[allow(clippy::all, unused_parens, dead_code)]
mod grammar {
    include!(concat!(env!("OUT_DIR"), "/syntax/grammar.rs"));
}

use crate::diag::Diagnostic;
use crate::span::Span;
use lalrpop_util::ParseError;
use lexer::{LexError, Lexer, Tok};

/// Parse a whole file. Never panics; every failure is a diagnostic.
pub fn parse_file(src: &str) -> Result<ast::File, Diagnostic> {
    grammar::FileParser::new().parse(Lexer::new(src)).map_err(|e| parse_error(e, src))
}

/// Parse a single expression (used by tests and by `#[kernel]`).
pub fn parse_expr(src: &str) -> Result<ast::Expr, Diagnostic> {
    grammar::ExprParser::new().parse(Lexer::new(src)).map_err(|e| parse_error(e, src))
}

fn describe_expected(expected: &[String]) -> String {
    let mut names: Vec<String> = expected
        .iter()
        .map(|e| match e.trim_matches('"') {
            "ident" => "an identifier".to_string(),
            "int" => "an integer".to_string(),
            "float" => "a number".to_string(),
            "dtype" => "a dtype (f16, bf16, f32, f64, i32, u32, i64, bool)".to_string(),
            "doc" => "a doc comment".to_string(),
            other => format!("`{}`", other.trim_start_matches('\\').replace("\\\"", "")),
        })
        .collect();
    names.sort();
    names.dedup();
    match names.len() {
        0 => "nothing more".to_string(),
        1 => names.remove(0),
        n if n <= 6 => {
            let last = names.pop().unwrap_or_default();
            format!("{} or {}", names.join(", "), last)
        }
        _ => format!("one of {} and {} more", names[..5].join(", "), names.len() - 5),
    }
}

fn parse_error(e: ParseError<usize, Tok, LexError>, src: &str) -> Diagnostic {
    match e {
        ParseError::InvalidToken { location } => {
            Diagnostic::error("E0100", "invalid token", Span::new(location, location + 1)).with_label("here")
        }
        ParseError::UnrecognizedEof { location, expected } => {
            let at = location.min(src.len());
            Diagnostic::error("E0101", "unexpected end of file", Span::new(at, at))
                .with_label(format!("expected {}", describe_expected(&expected)))
                .with_help("the kernel or expression is incomplete: check for a missing `}`, `)` or `;`")
        }
        ParseError::UnrecognizedToken { token: (lo, tok, hi), expected } => {
            let mut d = Diagnostic::error("E0102", format!("unexpected {}", tok), Span::new(lo, hi))
                .with_label(format!("expected {}", describe_expected(&expected)));
            if let Some(h) = token_help(&tok, &expected) {
                d = d.with_help(h);
            }
            d
        }
        ParseError::ExtraToken { token: (lo, tok, hi) } => {
            Diagnostic::error("E0103", format!("unexpected {} after the end", tok), Span::new(lo, hi))
                .with_label("nothing may follow here")
        }
        ParseError::User { error } => error.into_diagnostic(),
    }
}

fn token_help(tok: &Tok, expected: &[String]) -> Option<String> {
    let expects = |s: &str| expected.iter().any(|e| e.trim_matches('"') == s);
    if expects(";") && !matches!(tok, Tok::Semi) {
        return Some("each statement ends with `;`".into());
    }
    match tok {
        Tok::Assign if expects("==") => Some("comparison is `==`; `=` only defines a tensor".into()),
        Tok::Ident(name) if name == "return" => Some("a kernel body defines its outputs with `y[i] = ...;`".into()),
        _ => None,
    }
}
