//! `bench scheduling`.

use std::process::ExitCode;

use clap::Subcommand;
use karpenter_rs::bench::{SIZES, run as run_sizes};

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Upstream Karpenter's scheduling benchmark on identical input: 400 fake instance types,
    /// its generated pod lists (generic, zone and hostname spread, zone self-affinity,
    /// hostname anti-affinity), one NodePool. Prints one row per size; fails if any pod is
    /// left unplaced.
    Scheduling {
        /// Sizes to run (from 1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000).
        #[arg(long, value_delimiter = ',', default_values_t = SIZES.to_vec())]
        sizes: Vec<usize>,
        /// Rounds per size; the median is printed.
        #[arg(long, default_value_t = 3)]
        repeats: usize,
    },
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Scheduling { sizes, repeats } => {
            println!(
                "{:>6} {:>7} {:>6} {:>11} {:>12} {:>10}",
                "pods", "placed", "nodes", "$/h", "round", "pods/s"
            );
            for size in sizes {
                let row = run_sizes(&[size], repeats)?.remove(0);
                println!(
                    "{:>6} {:>7} {:>6} {:>11.2} {:>9.3} ms {:>10.0}",
                    row.pods,
                    row.placed,
                    row.nodes,
                    row.cost,
                    row.round.as_secs_f64() * 1e3,
                    row.pods as f64 / row.round.as_secs_f64()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
