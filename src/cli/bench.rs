//! `bench scheduling`.

use std::process::ExitCode;

use clap::Subcommand;
use karpenter_core::scheduling::PreferencePolicy;
use karpenter_rs::bench::{Row, SIZES, run as run_sizes, run_preferences};

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
        /// Also run upstream's preferences case (4,000 pods with preferred node affinity and
        /// preferred anti-affinity), with preferences respected and with them ignored.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        preferences: bool,
    },
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Scheduling {
            sizes,
            repeats,
            preferences,
        } => {
            println!(
                "{:>13} {:>7} {:>6} {:>10} {:>10} {:>6} {:>10} {:>6} {:>11} {:>9} | {:>9} {:>10} {:>6} {:>11}",
                "pods",
                "placed",
                "nodes",
                "$/h",
                "bound $/h",
                "ratio",
                "LP $/h",
                "/LP",
                "round",
                "pods/s",
                "FFD nodes",
                "FFD $/h",
                "ratio",
                "FFD round"
            );
            let print = |row: &Row| {
                let (ours, ffd) = (&row.ours, &row.first_fit);
                println!(
                    "{:>13} {:>7} {:>6} {:>10.2} {:>10.2} {:>6.3} {:>10.2} {:>6.3} {:>8.2} ms {:>9.0} | {:>9} {:>10.2} {:>6.3} {:>8.2} ms",
                    row.label,
                    ours.placed,
                    ours.nodes,
                    ours.cost,
                    row.bound,
                    ours.cost / row.bound,
                    row.relaxation,
                    ours.cost / row.relaxation,
                    ours.round.as_secs_f64() * 1e3,
                    row.pods as f64 / ours.round.as_secs_f64(),
                    ffd.nodes,
                    ffd.cost,
                    ffd.cost / row.bound,
                    ffd.round.as_secs_f64() * 1e3,
                );
            };
            for size in sizes {
                print(&run_sizes(&[size], repeats)?.remove(0));
            }
            if preferences {
                for policy in [PreferencePolicy::Respect, PreferencePolicy::Ignore] {
                    print(&run_preferences(policy, repeats)?);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
