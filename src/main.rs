//! `karpenter`: the karpenter-rs command line.

use std::process::ExitCode;

use clap::Parser;

mod cli;
mod logging;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args = cli::Args::parse();
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
