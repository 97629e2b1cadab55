//! Tracing set-up: human-readable logs on a terminal, JSON lines with `--log-format json`,
//! to stderr or to `--log-file`.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use karpenter_rs::progress::LogWriter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// How log lines are written (to stderr, so stdout stays clean for YAML and reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable, coloured when stderr is a terminal.
    Text,
    /// One JSON object per line, with span fields (nodepool, nodeclaim, round…).
    Json,
}

/// Installs the global subscriber. `level` is a tracing filter such as `info` or
/// `karpenter_actors=debug,info`; lines go to `file` (appended) when given, else to stderr,
/// above the live status line if one is shown.
pub fn init(format: LogFormat, level: &str, file: Option<&Path>) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(level).with_context(|| {
        format!(
            "invalid --log-level {level:?}: use e.g. info, debug or karpenter_actors=debug,info"
        )
    })?;
    let (writer, ansi) = match file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| {
                    format!(
                        "--log-file {}: cannot open it for appending; name a file in a writable directory",
                        path.display()
                    )
                })?;
            (BoxMakeWriter::new(Mutex::new(file)), false)
        }
        None => (
            BoxMakeWriter::new(LogWriter),
            std::io::stderr().is_terminal(),
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    }
    .map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))
}
