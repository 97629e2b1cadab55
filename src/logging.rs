//! Tracing set-up: human-readable logs on a terminal, JSON lines with `--log-format json`.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// How log lines are written (to stderr, so stdout stays clean for YAML and reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable, coloured when stderr is a terminal.
    Text,
    /// One JSON object per line, with span fields (nodepool, nodeclaim, round…).
    Json,
}

/// Installs the global subscriber. `level` is a tracing filter such as `info` or
/// `karpenter_actors=debug,info`.
pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(level).with_context(|| {
        format!(
            "invalid --log-level {level:?}: use e.g. info, debug or karpenter_actors=debug,info"
        )
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    }
    .map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))
}
