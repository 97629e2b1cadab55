//! Tracing set-up: human-readable logs on a terminal, JSON lines with `--log-format json`,
//! to stderr or to `--log-file`.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use karpenter_rs::progress::LogWriter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

mod json;

/// How log lines are written (to stderr, so stdout stays clean for YAML and reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable, coloured when stderr is a terminal.
    Text,
    /// One JSON object per line in upstream Karpenter's layout (`level`, `time`, `logger`,
    /// `message`, `commit`, `controller`, `NodeClaim`/`NodePool` objects, …).
    Json,
}

/// The levels `--log-level` takes, alone or after `TARGET=`.
pub const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// Checks a `--log-level` filter: comma-separated directives, each a level or
/// `TARGET=LEVEL` (e.g. `karpenter_actors=debug,info`). tracing's own parser takes any word
/// as a target, so `verbose` would silence every line; here it is an error naming the levels.
pub fn check_level(text: &str) -> Result<(), String> {
    let known = || LEVELS.join(", ");
    for directive in text.split(',').map(str::trim) {
        let level = match directive.rsplit_once('=') {
            Some((target, level)) => {
                let valid_target = !target.is_empty()
                    && target
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-'));
                if !valid_target {
                    return Err(format!(
                        "{directive:?}: before `=` give a crate or module, e.g. karpenter_actors=debug"
                    ));
                }
                level
            }
            None if directive.is_empty() => {
                return Err(format!(
                    "an empty directive; give a level ({}) or TARGET=LEVEL",
                    known()
                ));
            }
            None => directive,
        };
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "{level:?} is not a level; give one of {}, alone or as TARGET=LEVEL",
                known()
            ));
        }
    }
    Ok(())
}

/// Installs the global subscriber. `level` is a tracing filter such as `info` or
/// `karpenter_actors=debug,info`; lines go to `file` (appended) when given, else to stderr,
/// above the live status line if one is shown.
pub fn init(format: LogFormat, level: &str, file: Option<&Path>) -> anyhow::Result<()> {
    check_level(level).map_err(|e| anyhow::anyhow!("--log-level {level:?}: {e}"))?;
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
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json::UpstreamJson)
            .try_init(),
    }
    .map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))
}

#[cfg(test)]
mod tests {
    use super::check_level;

    #[test]
    fn only_the_documented_levels_are_taken() {
        for ok in [
            "info",
            "DEBUG",
            "warn",
            "karpenter_actors=debug,info",
            "kube::runtime=off",
        ] {
            assert_eq!(check_level(ok), Ok(()), "{ok}");
        }
        let err = check_level("verbose").unwrap_err();
        assert!(err.contains("\"verbose\" is not a level"), "{err}");
        assert!(
            err.contains("error, warn, info, debug, trace, off"),
            "{err}"
        );
        assert!(check_level("karpenter_actors=loud").is_err());
        assert!(check_level("=debug").is_err());
        assert!(check_level("info,").is_err());
        assert!(check_level("a b=info").is_err());
    }
}
