//! Progress of long runs (proving kernels, the mutation test) on stderr:
//! a bar per task when stderr is a terminal, one plain line per finished
//! task otherwise (a CI log), nothing for a library user who did not ask.
//!
//! The library reports through [`task`]; the command line chooses the
//! display once with [`show_on_stderr`].

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Instant;

enum Display {
    Bars(MultiProgress),
    Lines,
}

static DISPLAY: OnceLock<Display> = OnceLock::new();

/// Show progress on stderr from now on: bars on a terminal, else lines.
pub fn show_on_stderr() {
    let _ = DISPLAY.set(if std::io::stderr().is_terminal() { Display::Bars(MultiProgress::with_draw_target(ProgressDrawTarget::stderr())) } else { Display::Lines });
}

/// One task in progress: a number of steps, known as they are added.
pub struct Task {
    name: String,
    bar: Option<ProgressBar>,
    started: Instant,
    lines: bool,
}

/// Start a task called `name` (shown as the bar's prefix or the line's
/// subject).
pub fn task(name: impl Into<String>) -> Task {
    let name = name.into();
    let (bar, lines) = match DISPLAY.get() {
        Some(Display::Bars(m)) => {
            let bar = m.add(ProgressBar::new(0));
            let style = ProgressStyle::with_template("{prefix:>32} [{bar:30}] {pos}/{len} {elapsed}").unwrap_or_else(|_| ProgressStyle::default_bar()).progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(name.clone());
            (Some(bar), false)
        }
        Some(Display::Lines) => (None, true),
        None => (None, false),
    };
    Task { name, bar, started: Instant::now(), lines }
}

impl Task {
    /// More steps to do.
    pub fn add(&self, steps: usize) {
        if let Some(b) = &self.bar {
            b.inc_length(steps as u64);
        }
    }

    /// One step done.
    pub fn step(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    /// The task is done; `what` says how it ended (for the plain line).
    pub fn finish(self, what: &str) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if self.lines {
            eprintln!("{}: {} ({:.1}s)", self.name, what, self.started.elapsed().as_secs_f64());
        }
    }
}
