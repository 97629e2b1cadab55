//! What a run shows while it goes: on a terminal, one live status line (indicatif) that log
//! lines print above instead of tearing; elsewhere, a plain line now and then, so a log
//! file or a CI console reads top to bottom.

use std::io::{self, Write};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How a run reports its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Nothing until the report.
    Off,
    /// A plain line on stderr every so much simulated time.
    Lines(Duration),
    /// A live status line on stderr (for a terminal).
    Live,
}

impl Progress {
    /// Live on a terminal, a line every 5 simulated minutes otherwise, nothing when `quiet`.
    pub fn for_stderr(quiet: bool) -> Self {
        use std::io::IsTerminal;
        if quiet {
            Progress::Off
        } else if io::stderr().is_terminal() {
            Progress::Live
        } else {
            Progress::Lines(Duration::from_secs(300))
        }
    }
}

/// The status line on screen, if any; log lines are written around it.
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// A live status line: a bar over the run's simulated length with a one-line summary.
/// Dropping it clears it from the screen.
pub struct StatusLine {
    bar: ProgressBar,
}

impl StatusLine {
    /// Shows a status line for a run of `length` simulated time.
    pub fn show(length: Duration) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(length.as_secs().max(1)),
            ProgressDrawTarget::stderr(),
        );
        // The template is fixed and valid; a bad one would only lose the styling.
        if let Ok(style) =
            ProgressStyle::with_template("{prefix} [{bar:16}] {percent:>3}% {wide_msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        if let Ok(mut shown) = SHOWN.lock() {
            *shown = Some(bar.clone());
        }
        StatusLine { bar }
    }

    /// Moves to `at` (simulated time since the start) with `summary` beside the bar.
    pub fn update(&self, at: Duration, prefix: String, summary: String) {
        self.bar.set_prefix(prefix);
        self.bar.set_message(summary);
        self.bar.set_position(at.as_secs());
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        if let Ok(mut shown) = SHOWN.lock() {
            *shown = None;
        }
        self.bar.finish_and_clear();
    }
}

/// Stderr for log lines: with a status line on screen, each line is printed above it.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let shown = SHOWN.lock().ok().and_then(|s| s.clone());
        match shown {
            // The log layer writes each event whole, so a suspension holds one line.
            Some(bar) => bar.suspend(|| io::stderr().write(buf)),
            None => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LogWriter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_line_is_shown_while_it_lives() {
        assert!(SHOWN.lock().expect("lock").is_none());
        let line = StatusLine::show(Duration::from_secs(3600));
        line.update(
            Duration::from_secs(60),
            "00:01:00".into(),
            "pending=1".into(),
        );
        assert_eq!(line.bar.position(), 60);
        assert!(SHOWN.lock().expect("lock").is_some());
        let mut writer = LogWriter;
        writer.write_all(b"").expect("a log line is written");
        drop(line);
        assert!(SHOWN.lock().expect("lock").is_none());
    }
}
