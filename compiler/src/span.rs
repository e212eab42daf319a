//! Source files and byte spans.
//!
//! Every AST node, typed-IR node and `KernelIr` access carries a [`Span`] so
//! that any diagnostic, from a parse error to a refuted proof obligation, can
//! point at the exact characters of the user's program.

use std::ops::Range;

/// A half-open byte range `[lo, hi)` into one [`SourceFile`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Span {
    pub lo: usize,
    pub hi: usize,
}

impl Span {
    pub fn new(lo: usize, hi: usize) -> Span {
        Span { lo, hi: hi.max(lo) }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.lo.min(other.lo), self.hi.max(other.hi))
    }

    pub fn range(self) -> Range<usize> {
        self.lo..self.hi
    }
}

/// One named source text (a `.tk` file, or the text a `#[kernel]` macro built).
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        SourceFile { name: name.into(), text: text.into() }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    /// The source text under a span (empty if the span is out of range).
    pub fn snippet(&self, span: Span) -> &str {
        let lo = floor_char_boundary(&self.text, span.lo.min(self.text.len()));
        let hi = floor_char_boundary(&self.text, span.hi.min(self.text.len()));
        &self.text[lo..hi.max(lo)]
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
