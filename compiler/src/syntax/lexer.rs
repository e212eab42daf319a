//! A hand-written lexer feeding lalrpop with `(lo, Tok, hi)` triples.
//!
//! Hand-written rather than lalrpop's built-in lexer so that doc comments,
//! block comments and number literals get precise spans and messages of our
//! own, and so that an unterminated comment or a stray character becomes a
//! diagnostic instead of a parser panic.

use crate::diag::Diagnostic;
use crate::span::Span;
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    // keywords
    Kernel,
    Fn,
    Let,
    Requires,
    Domain,
    Tolerance,
    Ensures,
    Modulus,
    In,
    Inout,
    Sum,
    SumMod,
    Max,
    Min,
    Argmax,
    True,
    False,
    Dtype(crate::types::Dtype),
    // literals and names
    Ident(String),
    Int(i64),
    Float(f64),
    Doc(String),
    // punctuation
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Comma,
    Semi,
    Colon,
    Arrow,
    Assign,
    EqEq,
    NotEq,
    Lt,
    Le,
    Gt,
    Ge,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Caret,
    AndAnd,
    OrOr,
    Bang,
    DotDot,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Tok::Kernel => "`kernel`",
            Tok::Fn => "`fn`",
            Tok::Let => "`let`",
            Tok::Requires => "`requires`",
            Tok::Domain => "`domain`",
            Tok::Tolerance => "`tolerance`",
            Tok::Ensures => "`ensures`",
            Tok::Modulus => "`modulus`",
            Tok::In => "`in`",
            Tok::Inout => "`inout`",
            Tok::Sum => "`sum`",
            Tok::SumMod => "`summod`",
            Tok::Max => "`max`",
            Tok::Min => "`min`",
            Tok::Argmax => "`argmax`",
            Tok::True => "`true`",
            Tok::False => "`false`",
            Tok::Dtype(d) => return write!(f, "`{}`", d),
            Tok::Ident(s) => return write!(f, "identifier `{}`", s),
            Tok::Int(v) => return write!(f, "integer `{}`", v),
            Tok::Float(v) => return write!(f, "number `{}`", v),
            Tok::Doc(_) => "doc comment",
            Tok::LParen => "`(`",
            Tok::RParen => "`)`",
            Tok::LBracket => "`[`",
            Tok::RBracket => "`]`",
            Tok::LBrace => "`{`",
            Tok::RBrace => "`}`",
            Tok::Comma => "`,`",
            Tok::Semi => "`;`",
            Tok::Colon => "`:`",
            Tok::Arrow => "`->`",
            Tok::Assign => "`=`",
            Tok::EqEq => "`==`",
            Tok::NotEq => "`!=`",
            Tok::Lt => "`<`",
            Tok::Le => "`<=`",
            Tok::Gt => "`>`",
            Tok::Ge => "`>=`",
            Tok::Plus => "`+`",
            Tok::Minus => "`-`",
            Tok::Star => "`*`",
            Tok::Slash => "`/`",
            Tok::Percent => "`%`",
            Tok::Caret => "`^`",
            Tok::AndAnd => "`&&`",
            Tok::OrOr => "`||`",
            Tok::Bang => "`!`",
            Tok::DotDot => "`..`",
        };
        f.write_str(s)
    }
}

/// A lexical error, turned into a diagnostic by the parser driver.
#[derive(Clone, Debug, PartialEq)]
pub struct LexError {
    pub span: Span,
    pub message: String,
    pub help: Option<String>,
}

impl LexError {
    pub fn into_diagnostic(self) -> Diagnostic {
        let d = Diagnostic::error("E0100", self.message, self.span).with_label("here");
        match self.help {
            Some(h) => d.with_help(h),
            None => d,
        }
    }
}

pub struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Lexer<'a> {
        Lexer { src, pos: 0 }
    }

    fn peek_char(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek_char()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn err(&self, lo: usize, hi: usize, msg: impl Into<String>, help: Option<&str>) -> LexError {
        LexError { span: Span::new(lo, hi), message: msg.into(), help: help.map(str::to_owned) }
    }

    /// Skip whitespace and comments; return a doc comment if one starts here.
    fn skip_trivia(&mut self) -> Result<Option<(usize, Tok, usize)>, LexError> {
        loop {
            match self.peek_char() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('/') if self.peek_at(1) == Some('/') => {
                    let lo = self.pos;
                    let is_doc = self.src[self.pos..].starts_with("///") && !self.src[self.pos..].starts_with("////");
                    while let Some(c) = self.peek_char() {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                    if is_doc {
                        let text = self.src[lo + 3..self.pos].trim_end_matches('\r');
                        let text = text.strip_prefix(' ').unwrap_or(text).to_string();
                        return Ok(Some((lo, Tok::Doc(text), self.pos)));
                    }
                }
                Some('/') if self.peek_at(1) == Some('*') => {
                    let lo = self.pos;
                    self.pos += 2;
                    let mut depth = 1;
                    while depth > 0 {
                        match self.bump() {
                            None => {
                                return Err(self.err(lo, lo + 2, "unterminated block comment", Some("close it with `*/`")))
                            }
                            Some('*') if self.peek_char() == Some('/') => {
                                self.bump();
                                depth -= 1;
                            }
                            Some('/') if self.peek_char() == Some('*') => {
                                self.bump();
                                depth += 1;
                            }
                            _ => {}
                        }
                    }
                }
                _ => return Ok(None),
            }
        }
    }

    fn number(&mut self, lo: usize) -> Result<(usize, Tok, usize), LexError> {
        let mut is_float = false;
        while matches!(self.peek_char(), Some(c) if c.is_ascii_digit() || c == '_') {
            self.bump();
        }
        // `0..K` is a range, not the float `0.`
        if self.peek_char() == Some('.') && self.peek_at(1) != Some('.') {
            if matches!(self.peek_at(1), Some(c) if c.is_ascii_digit()) {
                is_float = true;
                self.bump();
                while matches!(self.peek_char(), Some(c) if c.is_ascii_digit() || c == '_') {
                    self.bump();
                }
            } else if !matches!(self.peek_at(1), Some(c) if c.is_alphabetic() || c == '_') {
                // `1.` alone is a float too
                is_float = true;
                self.bump();
            }
        }
        if matches!(self.peek_char(), Some('e') | Some('E')) {
            let save = self.pos;
            self.bump();
            if matches!(self.peek_char(), Some('+') | Some('-')) {
                self.bump();
            }
            if matches!(self.peek_char(), Some(c) if c.is_ascii_digit()) {
                is_float = true;
                while matches!(self.peek_char(), Some(c) if c.is_ascii_digit()) {
                    self.bump();
                }
            } else {
                self.pos = save;
            }
        }
        let text: String = self.src[lo..self.pos].chars().filter(|&c| c != '_').collect();
        if matches!(self.peek_char(), Some(c) if c.is_alphanumeric() || c == '_') {
            let mut hi = self.pos;
            while let Some(c) = self.src[hi..].chars().next().filter(|c| c.is_alphanumeric() || *c == '_') {
                hi += c.len_utf8();
            }
            return Err(self.err(
                lo,
                hi,
                format!("invalid number literal `{}`", &self.src[lo..hi]),
                Some("numbers have no suffixes here; cast instead, e.g. `f16(1.0)`"),
            ));
        }
        if is_float {
            match text.parse::<f64>() {
                Ok(v) if v.is_finite() => Ok((lo, Tok::Float(v), self.pos)),
                _ => Err(self.err(lo, self.pos, format!("number `{}` is out of range", text), None)),
            }
        } else {
            match text.parse::<i64>() {
                Ok(v) => Ok((lo, Tok::Int(v), self.pos)),
                Err(_) => Err(self.err(
                    lo,
                    self.pos,
                    format!("integer `{}` does not fit in 64 bits", text),
                    None,
                )),
            }
        }
    }
}

fn keyword(s: &str) -> Option<Tok> {
    use crate::types::Dtype;
    Some(match s {
        "kernel" => Tok::Kernel,
        "fn" => Tok::Fn,
        "let" => Tok::Let,
        "requires" => Tok::Requires,
        "domain" => Tok::Domain,
        "tolerance" => Tok::Tolerance,
        "ensures" => Tok::Ensures,
        "modulus" => Tok::Modulus,
        "in" => Tok::In,
        "inout" => Tok::Inout,
        "sum" => Tok::Sum,
        "summod" => Tok::SumMod,
        "max" => Tok::Max,
        "min" => Tok::Min,
        "argmax" => Tok::Argmax,
        "true" => Tok::True,
        "false" => Tok::False,
        _ => return Dtype::from_name(s).map(Tok::Dtype),
    })
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Result<(usize, Tok, usize), LexError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.skip_trivia() {
            Err(e) => {
                self.pos = self.src.len(); // stop after the first lexical error
                return Some(Err(e));
            }
            Ok(Some(doc)) => return Some(Ok(doc)),
            Ok(None) => {}
        }
        let lo = self.pos;
        let c = self.bump()?;
        let two = |l: &mut Lexer, next: char, yes: Tok, no: Tok| {
            if l.peek_char() == Some(next) {
                l.bump();
                yes
            } else {
                no
            }
        };
        let tok = match c {
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            '[' => Tok::LBracket,
            ']' => Tok::RBracket,
            '{' => Tok::LBrace,
            '}' => Tok::RBrace,
            ',' => Tok::Comma,
            ';' => Tok::Semi,
            ':' => Tok::Colon,
            '+' => Tok::Plus,
            '*' => Tok::Star,
            '/' => Tok::Slash,
            '%' => Tok::Percent,
            '^' => Tok::Caret,
            '-' => two(self, '>', Tok::Arrow, Tok::Minus),
            '=' => two(self, '=', Tok::EqEq, Tok::Assign),
            '!' => two(self, '=', Tok::NotEq, Tok::Bang),
            '<' => two(self, '=', Tok::Le, Tok::Lt),
            '>' => two(self, '=', Tok::Ge, Tok::Gt),
            '&' if self.peek_char() == Some('&') => {
                self.bump();
                Tok::AndAnd
            }
            '|' if self.peek_char() == Some('|') => {
                self.bump();
                Tok::OrOr
            }
            '.' if self.peek_char() == Some('.') => {
                self.bump();
                Tok::DotDot
            }
            c if c.is_ascii_digit() => return Some(self.number(lo)),
            c if c.is_ascii_alphabetic() || c == '_' => {
                while matches!(self.peek_char(), Some(c) if c.is_ascii_alphanumeric() || c == '_') {
                    self.bump();
                }
                let word = &self.src[lo..self.pos];
                keyword(word).unwrap_or_else(|| Tok::Ident(word.to_string()))
            }
            other => {
                let help = match other {
                    '&' => Some("logical and is `&&`"),
                    '|' => Some("logical or is `||`"),
                    '.' => Some("ranges are written `0..K`"),
                    _ => None,
                };
                let e = self.err(lo, self.pos, format!("unexpected character `{}`", other.escape_debug()), help);
                self.pos = self.src.len();
                return Some(Err(e));
            }
        };
        Some(Ok((lo, tok, self.pos)))
    }
}
