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
    /// Where the tables go: DIR/<table>/cluster=<NAME>/day=<YYYY-MM-DD>/seq-<FIRST>-<LAST>.parquet
    /// (this cluster's earlier export of records this one holds is replaced; other clusters'
    /// files are kept).
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
    let cluster = partition_cluster(
        args.cluster.as_deref(),
        journal.cluster.as_deref(),
        &args.dir.display().to_string(),
    )?;
    let mut tables = karpenter_export::project(&journal)?;
    if !args.no_bounds {
        solve_rounds(&journal, &mut tables.rounds)?;
    }
    // Files are named by the journal's range: exporting it again, or grown, replaces them.
    let records = karpenter_export::parquet::Range {
        first: journal.first_seq()?.unwrap_or(0),
        last: journal.last_seq()?.unwrap_or(0),
    };
    let written = karpenter_export::parquet::write(&tables, &cluster, records, &args.output)
        .with_context(|| format!("--output {}", args.output.display()))?;
    let rows: Vec<String> = written
        .rows
        .iter()
        .map(|(table, n)| format!("{n} {table}"))
        .collect();
    let replaced = match written.replaced.len() {
        0 => String::new(),
        n => format!(" (replacing {n} file(s) of an earlier export)"),
    };
    eprintln!(
        "exported cluster {cluster:?}, records {records}: {} into {} file(s) under {}{replaced}",
        rows.join(", "),
        written.files.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The `cluster=` partition: `--cluster`, or the stored history's own cluster; a
/// `--cluster` other than the stored history's is refused, so one cluster's records never
/// land in another's partition.
fn partition_cluster(
    given: Option<&str>,
    stored: Option<&str>,
    source: &str,
) -> anyhow::Result<String> {
    match (given, stored) {
        (Some(given), Some(stored)) if given != stored => bail!(
            "--cluster {given:?}: {source} holds the history of cluster {stored:?}; leave --cluster out (a stored history names its own) or give {stored:?}"
        ),
        (Some(cluster), _) | (None, Some(cluster)) => Ok(cluster.to_owned()),
        (None, None) => bail!(
            "--cluster: name the cluster {source} is of (it names the `cluster=` partition, so exports of several clusters can share --output)"
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_is_the_stored_clusters_and_another_is_refused() {
        let s3 = "s3://journals/karpenter/prod-eu";
        assert_eq!(
            partition_cluster(None, Some("prod-eu"), s3).unwrap(),
            "prod-eu"
        );
        assert_eq!(
            partition_cluster(Some("prod-eu"), Some("prod-eu"), s3).unwrap(),
            "prod-eu"
        );
        assert_eq!(partition_cluster(Some("lab"), None, "dir").unwrap(), "lab");
        let error = partition_cluster(Some("prod-us"), Some("prod-eu"), s3).unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("--cluster \"prod-us\"") && text.contains("\"prod-eu\""),
            "{text}"
        );
        let error = partition_cluster(None, None, "dir").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("--cluster: name the cluster dir"),
            "{error}"
        );
    }
}
