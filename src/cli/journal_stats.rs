//! `journal stats`: what a journal holds, by event type (what fills it), with its snapshots
//! and how much history retention removed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use karpenter_core::events::DomainEvent;
use karpenter_core::model::time::format_rfc3339;
use karpenter_journal::Journal;

/// Events and payload bytes of one type.
#[derive(Debug, Default, Clone, Copy)]
struct Count {
    events: u64,
    bytes: u64,
}

pub fn stats(journal: &Journal<DomainEvent>, dir: &Path) -> anyhow::Result<ExitCode> {
    let mut by_type: BTreeMap<String, Count> = BTreeMap::new();
    let mut first = None;
    let mut last = None;
    for raw in journal.read_raw_from(0) {
        let raw = raw?;
        let count = by_type.entry(raw.event_type.clone()).or_default();
        count.events += 1;
        count.bytes += raw.payload.len() as u64;
        first.get_or_insert((raw.seq, raw.recorded_at_ms));
        last = Some((raw.seq, raw.recorded_at_ms));
    }
    let total = by_type.values().fold(Count::default(), |a, c| Count {
        events: a.events + c.events,
        bytes: a.bytes + c.bytes,
    });
    println!("journal {}", dir.display());
    match (first, last) {
        (Some((first_seq, first_ms)), Some((last_seq, last_ms))) => println!(
            "events: {} (seq {first_seq}..{last_seq}, {} .. {}), payloads {:.1} MB, stored in {:.1} MB (payloads from 16 KiB on are compressed)",
            total.events,
            format_rfc3339(first_ms),
            format_rfc3339(last_ms),
            total.bytes as f64 / 1e6,
            journal.event_bytes()? as f64 / 1e6
        ),
        _ => println!("events: none"),
    }
    let snapshots = journal.snapshot_seqs()?;
    println!(
        "snapshots: {} (at seq {})",
        snapshots.len(),
        snapshots
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some((first_seq, _)) = first
        && first_seq > 1
    {
        println!(
            "removed by retention: the {} events before seq {first_seq}",
            first_seq - 1
        );
    }
    let mut rows: Vec<_> = by_type.into_iter().collect();
    rows.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
    println!("{:<26} {:>9} {:>10} {:>7}", "type", "events", "MB", "share");
    for (name, c) in rows {
        println!(
            "{name:<26} {:>9} {:>10.2} {:>6.1}%",
            c.events,
            c.bytes as f64 / 1e6,
            100.0 * c.bytes as f64 / total.bytes.max(1) as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}
