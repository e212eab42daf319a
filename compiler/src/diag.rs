//! Diagnostics: errors and warnings that name the file, line and column, put
//! a caret under the span and end with a help line, rendered like rustc's
//! through `ariadne` (colour off, so that snapshots and logs stay plain).

use crate::span::{SourceFile, Span};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

/// One diagnostic: a code (`E0401`), a message, the primary span with its
/// label, optional secondary labels, an optional help line and notes.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub code: &'static str,
    pub message: String,
    pub span: Span,
    pub label: String,
    pub secondary: Vec<(Span, String)>,
    pub help: Option<String>,
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn error(code: &'static str, message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            span,
            label: String::new(),
            secondary: Vec::new(),
            help: None,
            notes: Vec::new(),
        }
    }

    pub fn warning(code: &'static str, message: impl Into<String>, span: Span) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, message, span) }
    }

    pub fn with_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = label.into();
        self
    }

    pub fn with_secondary(mut self, span: Span, label: impl Into<String>) -> Diagnostic {
        self.secondary.push((span, label.into()));
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Render as plain text: `error[E0401]: message`, then `file:line:col`,
    /// the source line with a caret, labels, and the help line.
    pub fn render(&self, file: &SourceFile) -> String {
        use ariadne::{Config, Label, Report, ReportKind, Source};
        let kind = match self.severity {
            Severity::Error => ReportKind::Error,
            Severity::Warning => ReportKind::Warning,
        };
        let name = file.name.as_str();
        let clamp = |s: Span| {
            let len = file.text.len();
            let lo = s.lo.min(len);
            lo..s.hi.min(len).max(lo)
        };
        // ariadne counts characters, not bytes: convert offsets.
        let to_chars = |r: std::ops::Range<usize>| {
            let c = |b: usize| file.text[..floor_boundary(&file.text, b)].chars().count();
            c(r.start)..c(r.end)
        };
        let primary = to_chars(clamp(self.span));
        let mut report = Report::build(kind, (name, primary.clone()))
            .with_config(Config::default().with_color(false))
            .with_code(self.code)
            .with_message(&self.message)
            .with_label(Label::new((name, primary)).with_message(&self.label).with_order(0));
        for (i, (span, label)) in self.secondary.iter().enumerate() {
            report = report.with_label(
                Label::new((name, to_chars(clamp(*span)))).with_message(label).with_order(i as i32 + 1),
            );
        }
        if let Some(help) = &self.help {
            report = report.with_help(help);
        }
        for note in &self.notes {
            report = report.with_note(note);
        }
        let mut out = Vec::new();
        let cache = (name, Source::from(file.text.as_str()));
        if report.finish().write(cache, &mut out).is_err() {
            // Rendering cannot fail on an in-memory buffer, but never panic:
            // fall back to the one-line form.
            return self.one_line(file);
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// `file:line:col: error[E0401]: message` — for logs and scripts.
    pub fn one_line(&self, file: &SourceFile) -> String {
        let (line, col) = file.line_col(self.span.lo);
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        format!("{}:{}:{}: {}[{}]: {}", file.name, line, col, sev, self.code, self.message)
    }
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A list of diagnostics that stopped compilation (at least one error).
#[derive(Clone, Debug)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn render(&self, file: &SourceFile) -> String {
        self.0.iter().map(|d| d.render(file)).collect::<Vec<_>>().join("\n")
    }
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.is_error())
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.0 {
            writeln!(f, "{}[{}]: {}", if d.is_error() { "error" } else { "warning" }, d.code, d.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}
