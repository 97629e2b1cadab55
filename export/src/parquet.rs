//! The tables as Parquet files, laid out as Hive partitions:
//! `DIR/<table>/cluster=<name>/day=<YYYY-MM-DD>/<file>.parquet`, so DuckDB
//! (`read_parquet('DIR/pods/*/*/*.parquet', hive_partitioning = true)`), Athena and Spark
//! read `cluster` and `day` from the path. Times are UTC timestamps in milliseconds.
//!
//! A file is written under a temporary name in its partition and renamed into place, so a
//! reader never sees a partly written file. Files are named by the range of journal records
//! they came from (`seq-<first>-<last>.parquet`): an export replaces this cluster's earlier
//! exports of records it holds too (the same journal again, or the same journal grown), so
//! no row is counted twice; it keeps other clusters' and disjoint ranges' files, and refuses
//! an earlier export it covers only in part rather than lose the records it lacks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, TimestampMillisecondArray,
    UInt64Array,
};
use arrow_schema::{Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::rows::{DisruptionRow, FleetRow, NodeClaimRow, PodRow, RoundRow, Tables};

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Arrow or Parquet refused the data.
    #[error("cannot encode table {table}: {message}")]
    Encode {
        /// The table.
        table: &'static str,
        /// What it said.
        message: String,
    },
    /// The cluster name cannot name a partition.
    #[error(
        "cluster name {0:?}: give a name of letters, digits, '-', '_' or '.' (it names the `cluster=` partition)"
    )]
    ClusterName(String),
    /// An earlier export of this cluster holds records this one has only some of.
    #[error(
        "{existing} holds records {theirs} of cluster {cluster:?} and this export holds {ours}: replacing it would lose the records this journal no longer has: export a journal that holds them all (the cluster's s3:// history), write to another directory, or move the earlier export's files away"
    )]
    PartOverlap {
        /// The cluster.
        cluster: String,
        /// The earlier export's file.
        existing: PathBuf,
        /// Its records.
        theirs: Range,
        /// This export's records.
        ours: Range,
    },
}

/// The journal records an export came from, by sequence number (both ends included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The first record's sequence number.
    pub first: u64,
    /// The last record's.
    pub last: u64,
}

impl Range {
    /// The file name of a table's export of these records.
    fn file_name(self) -> String {
        format!("seq-{}-{}.parquet", self.first, self.last)
    }

    /// The range a file name gives, if it is an export's.
    fn of_file(name: &str) -> Option<Range> {
        let (first, last) = name
            .strip_prefix("seq-")?
            .strip_suffix(".parquet")?
            .split_once('-')?;
        Some(Range {
            first: first.parse().ok()?,
            last: last.parse().ok()?,
        })
    }

    fn within(self, other: Range) -> bool {
        self.first >= other.first && self.last <= other.last
    }

    fn overlaps(self, other: Range) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}–{}", self.first, self.last)
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Rows per table.
    pub rows: BTreeMap<&'static str, usize>,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Earlier exports' files removed because this export holds their records.
    pub replaced: Vec<PathBuf>,
}

/// The tables, in the order they are written.
const TABLES: [&str; 5] = ["nodeclaims", "pods", "disruptions", "rounds", "fleet"];

/// The columns of one file, built one after another.
struct Columns {
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
}

impl Columns {
    fn new() -> Columns {
        Columns {
            fields: Vec::new(),
            arrays: Vec::new(),
        }
    }

    fn push(mut self, name: &str, nullable: bool, array: ArrayRef) -> Columns {
        self.fields
            .push(Field::new(name, array.data_type().clone(), nullable));
        self.arrays.push(array);
        self
    }

    fn text<'a>(self, name: &str, values: impl Iterator<Item = &'a str>) -> Columns {
        let array = StringArray::from_iter_values(values);
        self.push(name, false, Arc::new(array))
    }

    fn text_or_null<'a>(
        self,
        name: &str,
        values: impl Iterator<Item = Option<&'a str>>,
    ) -> Columns {
        let array: StringArray = values.collect();
        self.push(name, true, Arc::new(array))
    }

    fn float(self, name: &str, values: impl Iterator<Item = f64>) -> Columns {
        let array = Float64Array::from_iter_values(values);
        self.push(name, false, Arc::new(array))
    }

    fn float_or_null(self, name: &str, values: impl Iterator<Item = Option<f64>>) -> Columns {
        let array: Float64Array = values.collect();
        self.push(name, true, Arc::new(array))
    }

    fn count(self, name: &str, values: impl Iterator<Item = u64>) -> Columns {
        let array = UInt64Array::from_iter_values(values);
        self.push(name, false, Arc::new(array))
    }

    fn count_or_null(self, name: &str, values: impl Iterator<Item = Option<u64>>) -> Columns {
        let array: UInt64Array = values.collect();
        self.push(name, true, Arc::new(array))
    }

    fn flag(self, name: &str, values: impl Iterator<Item = bool>) -> Columns {
        let array: BooleanArray = values.map(Some).collect();
        self.push(name, false, Arc::new(array))
    }

    fn time(self, name: &str, values: impl Iterator<Item = i64>) -> Columns {
        self.time_or_null(name, values.map(Some), false)
    }

    fn time_or_null(
        self,
        name: &str,
        values: impl Iterator<Item = Option<i64>>,
        nullable: bool,
    ) -> Columns {
        let array: TimestampMillisecondArray = values.collect();
        let array = array.with_timezone("UTC");
        self.push(name, nullable, Arc::new(array))
    }

    fn batch(self, table: &'static str) -> Result<RecordBatch, ExportError> {
        let schema = Arc::new(Schema::new(self.fields));
        RecordBatch::try_new(schema, self.arrays).map_err(|e| ExportError::Encode {
            table,
            message: e.to_string(),
        })
    }
}

/// The schema of every table, for documentation and for readers that check it.
pub fn schemas() -> Result<Vec<(&'static str, Arc<Schema>)>, ExportError> {
    Ok(vec![
        ("nodeclaims", nodeclaims(&[])?.schema()),
        ("pods", pods(&[])?.schema()),
        ("disruptions", disruptions(&[])?.schema()),
        ("rounds", rounds(&[])?.schema()),
        ("fleet", fleet(&[])?.schema()),
    ])
}

fn nodeclaims(rows: &[&NodeClaimRow]) -> Result<RecordBatch, ExportError> {
    let it = || rows.iter();
    Columns::new()
        .text("nodeclaim", it().map(|r| r.nodeclaim.as_str()))
        .text("nodepool", it().map(|r| r.nodepool.as_str()))
        .count_or_null("round", it().map(|r| r.round))
        .count_or_null("replacement_for", it().map(|r| r.replacement_for))
        .count("pods_planned", it().map(|r| r.pods_planned))
        .time("first_seen_at", it().map(|r| r.first_seen_at))
        .time_or_null("planned_at", it().map(|r| r.planned_at), true)
        .time_or_null("launched_at", it().map(|r| r.launched_at), true)
        .time_or_null("registered_at", it().map(|r| r.registered_at), true)
        .time_or_null("initialized_at", it().map(|r| r.initialized_at), true)
        .time_or_null("draining_at", it().map(|r| r.draining_at), true)
        .time_or_null("terminated_at", it().map(|r| r.terminated_at), true)
        .text_or_null("instance_id", it().map(|r| r.instance_id.as_deref()))
        .text_or_null("instance_type", it().map(|r| r.instance_type.as_deref()))
        .text_or_null("capacity_type", it().map(|r| r.capacity_type.as_deref()))
        .text_or_null("zone", it().map(|r| r.zone.as_deref()))
        .float_or_null("price_per_hour", it().map(|r| r.price_per_hour))
        .count("launch_failures", it().map(|r| r.launch_failures))
        .count_or_null("disruption_command", it().map(|r| r.disruption_command))
        .text_or_null(
            "disruption_reason",
            it().map(|r| r.disruption_reason.as_deref()),
        )
        .text_or_null("drain_reason", it().map(|r| r.drain_reason.as_deref()))
        .text_or_null("end_reason", it().map(|r| r.end_reason.as_deref()))
        .float("running_hours", it().map(|r| r.running_hours))
        .float("cost", it().map(|r| r.cost))
        .batch("nodeclaims")
}

fn pods(rows: &[&PodRow]) -> Result<RecordBatch, ExportError> {
    let it = || rows.iter();
    Columns::new()
        .text("uid", it().map(|r| r.uid.as_str()))
        .text("pod", it().map(|r| r.pod.as_str()))
        .time("pending_at", it().map(|r| r.pending_at))
        .time_or_null("bound_at", it().map(|r| r.bound_at), true)
        .time_or_null("deleted_at", it().map(|r| r.deleted_at), true)
        .text("outcome", it().map(|r| r.outcome.as_str()))
        .float("wait_seconds", it().map(|r| r.wait_seconds))
        .text_or_null("node", it().map(|r| r.node.as_deref()))
        .text_or_null("nodeclaim", it().map(|r| r.nodeclaim.as_deref()))
        .flag("new_node", it().map(|r| r.new_node))
        .count("rounds", it().map(|r| r.rounds))
        .text_or_null(
            "last_unschedulable",
            it().map(|r| r.last_unschedulable.as_deref()),
        )
        .count("nominations_expired", it().map(|r| r.nominations_expired))
        .text("why", it().map(|r| r.why.as_str()))
        .batch("pods")
}

fn disruptions(rows: &[&DisruptionRow]) -> Result<RecordBatch, ExportError> {
    let it = || rows.iter();
    Columns::new()
        .count("command", it().map(|r| r.command))
        .time("decided_at", it().map(|r| r.decided_at))
        .text("method", it().map(|r| r.method.as_str()))
        .text("reason", it().map(|r| r.reason.as_str()))
        .count("candidates", it().map(|r| r.candidates))
        .text(
            "candidate_nodeclaims",
            it().map(|r| r.candidate_nodeclaims.as_str()),
        )
        .float(
            "candidates_cost_per_hour",
            it().map(|r| r.candidates_cost_per_hour),
        )
        .count("replacements", it().map(|r| r.replacements))
        .count("pods_moved", it().map(|r| r.pods_moved))
        .float("savings_per_hour", it().map(|r| r.savings_per_hour))
        .text("outcome", it().map(|r| r.outcome.as_str()))
        .text_or_null(
            "abandoned_because",
            it().map(|r| r.abandoned_because.as_deref()),
        )
        .time_or_null("ended_at", it().map(|r| r.ended_at), true)
        .batch("disruptions")
}

fn rounds(rows: &[&RoundRow]) -> Result<RecordBatch, ExportError> {
    let it = || rows.iter();
    Columns::new()
        .count("round", it().map(|r| r.round))
        .time("at", it().map(|r| r.at))
        .count("pods", it().map(|r| r.pods))
        .count("bound_to_running", it().map(|r| r.bound_to_running))
        .count("nodeclaims", it().map(|r| r.nodeclaims))
        .count("unschedulable", it().map(|r| r.unschedulable))
        .count("duration_us", it().map(|r| r.duration_us))
        .float("cost_per_hour", it().map(|r| r.cost_per_hour))
        .float_or_null("ffd_cost_per_hour", it().map(|r| r.ffd_cost_per_hour))
        .float_or_null("bound_per_hour", it().map(|r| r.bound_per_hour))
        .batch("rounds")
}

fn fleet(rows: &[&FleetRow]) -> Result<RecordBatch, ExportError> {
    let it = || rows.iter();
    Columns::new()
        .time("from_at", it().map(|r| r.from_at))
        .time("to_at", it().map(|r| r.to_at))
        .float("seconds", it().map(|r| r.seconds))
        .float("cost_per_hour", it().map(|r| r.cost_per_hour))
        .count("nodes", it().map(|r| r.nodes))
        .count("spot_nodes", it().map(|r| r.spot_nodes))
        .count("on_demand_nodes", it().map(|r| r.on_demand_nodes))
        .count("reserved_nodes", it().map(|r| r.reserved_nodes))
        .batch("fleet")
}

/// The UTC date of `ms`, `YYYY-MM-DD`.
pub fn day(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.to_zoned(jiff::tz::TimeZone::UTC).date().to_string(),
        Err(_) => "invalid".into(),
    }
}

/// Rows grouped by the day `at` gives.
fn by_day<T>(rows: &[T], at: impl Fn(&T) -> i64) -> BTreeMap<String, Vec<&T>> {
    let mut out: BTreeMap<String, Vec<&T>> = BTreeMap::new();
    for row in rows {
        out.entry(day(at(row))).or_default().push(row);
    }
    out
}

/// Writes `tables` of cluster `cluster`, projected from journal records `records`, under
/// `dir`, one file per table and day, and then removes this cluster's earlier exports of
/// records within `records`.
pub fn write(
    tables: &Tables,
    cluster: &str,
    records: Range,
    dir: &Path,
) -> Result<Written, ExportError> {
    let valid = !cluster.is_empty()
        && cluster
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !cluster.starts_with('.');
    if !valid {
        return Err(ExportError::ClusterName(cluster.to_owned()));
    }
    let earlier = earlier_exports(dir, cluster)?;
    if let Some((existing, theirs)) = earlier
        .iter()
        .find(|(_, theirs)| theirs.overlaps(records) && !theirs.within(records))
    {
        return Err(ExportError::PartOverlap {
            cluster: cluster.to_owned(),
            existing: existing.clone(),
            theirs: *theirs,
            ours: records,
        });
    }
    let name = records.file_name();
    let mut written = Written::default();
    let mut files = |table: &'static str,
                     count: usize,
                     days: Vec<(String, Result<RecordBatch, ExportError>)>|
     -> Result<(), ExportError> {
        written.rows.insert(table, count);
        for (day, batch) in days {
            let path = dir
                .join(table)
                .join(format!("cluster={cluster}"))
                .join(format!("day={day}"))
                .join(&name);
            write_file(&path, table, &batch?)?;
            written.files.push(path);
        }
        Ok(())
    };
    let t = tables;
    files(
        "nodeclaims",
        t.nodeclaims.len(),
        by_day(&t.nodeclaims, |r| r.first_seen_at)
            .into_iter()
            .map(|(d, rows)| (d, nodeclaims(&rows)))
            .collect(),
    )?;
    files(
        "pods",
        t.pods.len(),
        by_day(&t.pods, |r| r.pending_at)
            .into_iter()
            .map(|(d, rows)| (d, pods(&rows)))
            .collect(),
    )?;
    files(
        "disruptions",
        t.disruptions.len(),
        by_day(&t.disruptions, |r| r.decided_at)
            .into_iter()
            .map(|(d, rows)| (d, disruptions(&rows)))
            .collect(),
    )?;
    files(
        "rounds",
        t.rounds.len(),
        by_day(&t.rounds, |r| r.at)
            .into_iter()
            .map(|(d, rows)| (d, rounds(&rows)))
            .collect(),
    )?;
    files(
        "fleet",
        t.fleet.len(),
        by_day(&t.fleet, |r| r.from_at)
            .into_iter()
            .map(|(d, rows)| (d, fleet(&rows)))
            .collect(),
    )?;
    for (path, theirs) in earlier {
        if theirs.within(records) && !written.files.contains(&path) {
            std::fs::remove_file(&path).map_err(|source| ExportError::Io {
                path: path.clone(),
                source,
            })?;
            written.replaced.push(path);
        }
    }
    Ok(written)
}

/// This cluster's exported files under `dir`, with the records each came from.
fn earlier_exports(dir: &Path, cluster: &str) -> Result<Vec<(PathBuf, Range)>, ExportError> {
    let list = |path: &Path| -> Result<Vec<PathBuf>, ExportError> {
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                let path = path.to_owned();
                return Err(ExportError::Io { path, source });
            }
        };
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| ExportError::Io {
                path: path.to_owned(),
                source,
            })?;
            paths.push(entry.path());
        }
        paths.sort();
        Ok(paths)
    };
    let mut out = Vec::new();
    for table in TABLES {
        let partition = dir.join(table).join(format!("cluster={cluster}"));
        for day in list(&partition)?.into_iter().filter(|d| d.is_dir()) {
            for file in list(&day)? {
                let name = file.file_name().and_then(|n| n.to_str());
                if let Some(range) = name.and_then(Range::of_file) {
                    out.push((file, range));
                }
            }
        }
    }
    Ok(out)
}

fn write_file(path: &Path, table: &'static str, batch: &RecordBatch) -> Result<(), ExportError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ExportError::Io { path, source }
    };
    let encode = |e: parquet::errors::ParquetError| ExportError::Encode {
        table,
        message: e.to_string(),
    };
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let partial = path.with_extension("parquet.partial");
    let file = std::fs::File::create(&partial).map_err(io(&partial))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_created_by("karpenter journal export".into())
        .build();
    let mut writer =
        ArrowWriter::try_new(file, batch.schema(), Some(properties)).map_err(encode)?;
    writer.write(batch).map_err(encode)?;
    let file = writer.into_inner().map_err(encode)?;
    file.sync_all().map_err(io(&partial))?;
    std::fs::rename(&partial, path).map_err(io(path))?;
    Ok(())
}
