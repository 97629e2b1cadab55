//! `journal export --format parquet`: the journal as typed tables (karpenter-export), with
//! each recorded round's first-fit-decreasing cost and lower bound solved again from its
//! recorded input.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use karpenter_core::events::{DomainEvent, RoundRecord};
use karpenter_export::rows::RoundRow;
use karpenter_journal::Journal;
use karpenter_rs::explain::{cost_of, recorded_input};

use super::journal_open::open;

/// What `journal export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Parquet files, Hive-partitioned by cluster and day.
    Parquet,
}

/// `journal export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
    pub dir: PathBuf,
    /// The file format.
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: Format,
    /// Where the tables go: DIR/<table>/cluster=<NAME>/day=<YYYY-MM-DD>/*.parquet (other
    /// clusters' and other exports' files there are kept).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    /// The cluster's name (the `cluster=` partition); a stored history's own by default.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// Leave out each round's first-fit-decreasing cost and lower bound (solving them again
    /// takes most of the export's time on a long journal).
    #[arg(long)]
    pub no_bounds: bool,
}

/// Runs `journal export`.
pub fn export(args: &ExportArgs) -> anyhow::Result<ExitCode> {
    let journal = open(&args.dir)?;
    let Some(cluster) = args.cluster.clone().or_else(|| journal.cluster.clone()) else {
        bail!(
            "--cluster: name the cluster {} is of (it names the `cluster=` partition, so exports of several clusters can share --output)",
            args.dir.display()
        );
    };
    let mut tables = karpenter_export::project(&journal)?;
    if !args.no_bounds {
        solve_rounds(&journal, &mut tables.rounds)?;
    }
    // Files are named by the journal's range: exporting it again replaces them, and a
    // later export of a longer journal writes beside them only where its days differ.
    let (first, last) = (journal.first_seq()?, journal.last_seq()?);
    let name = format!("seq-{}-{}", first.unwrap_or(0), last.unwrap_or(0));
    let written = karpenter_export::parquet::write(&tables, &cluster, &name, &args.output)
        .with_context(|| format!("--output {}", args.output.display()))?;
    let rows: Vec<String> = written
        .rows
        .iter()
        .map(|(table, n)| format!("{n} {table}"))
        .collect();
    eprintln!(
        "exported cluster {cluster:?}: {} into {} file(s) under {}",
        rows.join(", "),
        written.files.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Fills each round's FFD cost and lower bound from its recorded input.
fn solve_rounds(journal: &Journal<DomainEvent>, rows: &mut [RoundRow]) -> anyhow::Result<()> {
    let recorded = super::journal_rounds::rounds_of(journal)?;
    let by_number: BTreeMap<u64, &RoundRecord> =
        recorded.rounds.iter().map(|r| (r.round, r)).collect();
    for row in rows {
        let Some(record) = by_number.get(&row.round) else {
            continue;
        };
        let Some(input) =
            recorded_input(record, &by_number).and_then(|i| i.rebuild(&recorded.catalogs))
        else {
            continue;
        };
        if let Some(cost) = cost_of(record.round, &input)? {
            row.ffd_cost_per_hour = Some(cost.ffd);
            row.bound_per_hour = Some(cost.bound);
        }
    }
    Ok(())
}
