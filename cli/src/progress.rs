//! Progress on long transfers, drawn by `indicatif`: a bar with rate and ETA when the size
//! is known, a spinner with a count when not. Drawn on stderr only when it is a terminal, so
//! pipes and logs get just the final line.

use std::io::Read;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `total` bytes (hidden when stderr is not a terminal).
pub fn bytes(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

/// A counter of `unit`s for work of unknown size.
pub fn counter(unit: &str, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} {{msg}} {{human_pos}} {unit} ({{per_sec}}, {{elapsed}})"
        ))
        .expect("a valid template"),
    );
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A count of steps (tables pulled, files pushed).
pub fn steps(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed}, ETA {eta})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

/// A reader that advances `bar` by what it reads.
pub struct Reading<R> {
    inner: R,
    bar: ProgressBar,
}

impl<R: Read> Reading<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, bar: ProgressBar) -> Self {
        Self { inner, bar }
    }
}

impl<R: Read> Read for Reading<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}
