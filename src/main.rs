//! `karpenter`: the karpenter-rs command line.

use std::process::ExitCode;

use clap::Parser;

mod cli;
mod logging;

// jemalloc, configured at build time in `.cargo/config.toml` (a background thread returning
// freed memory within a tenth of a second, two arenas): glibc's allocator kept what short-lived large
// buffers (catalogs, snapshots, round records) left behind, so a long-running controller's
// memory crept up with its uptime (`karpenter bench long-run` measures it).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    // A command that prints ends quietly when what reads its output stops reading
    // (`karpenter journal tail | head`), killed by SIGPIPE as Unix tools are, instead of
    // panicking on the closed pipe. The controller keeps ignoring SIGPIPE: it prints nothing
    // that matters and must not die of a reader going away.
    if !matches!(args.command, cli::Command::Controller(_)) {
        sigpipe::reset();
    }
    if let Err(error) = logging::init(args.log_format, args.log_level(), args.log_file.as_deref()) {
        eprintln!("error: {error:#}");
        return ExitCode::from(2);
    }
    match cli::run(args.command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
