//! Reports you can look at: `simulate --report FILE.html` and `journal report DIR --output
//! FILE.html` write one self-contained HTML page with charts over time ($/h against the
//! from-scratch figures, nodes by capacity type, pods pending and bound, disruptions by
//! reason) and the end-of-run tables.
//!
//! - [`timeline`]: the series, read from the journal (so both commands draw the same ones).
//! - [`html`]: the page (inline SVG, no script).
//! - [`summary`]: a run's figures read from its journal alone (for `journal whatif`).

pub mod html;
pub mod run;
pub mod summary;
pub mod timeline;

use std::collections::BTreeMap;
use std::path::Path;

use karpenter_core::events::DomainEvent;
use karpenter_core::model::time::format_rfc3339;
use karpenter_journal::{Journal, Until};

use crate::report::run::{Report, counts as counts_text, hms};
use html::{Chart, Document, PALETTE, Series, Table};
use timeline::Timeline;

/// The interval the charts are sampled at, in journal time.
pub const EVERY_MS: i64 = 60_000;

fn seconds(timeline: &Timeline, at_ms: i64) -> f64 {
    let start = timeline.points.first().map_or(at_ms, |p| p.at_ms);
    (at_ms - start) as f64 / 1000.0
}

/// The four charts of a run.
pub fn charts(timeline: &Timeline) -> Vec<Chart> {
    let scratch = &timeline.scratch;
    let series =
        |name: &str, color: &'static str, value: &dyn Fn(&timeline::Point) -> f64| Series {
            name: name.to_owned(),
            color,
            points: timeline
                .points
                .iter()
                .map(|p| (seconds(timeline, p.at_ms), value(p)))
                .collect(),
            dashed: false,
        };
    let mut cost = vec![series("fleet", PALETTE[0], &|p| p.cost_per_hour)];
    if !scratch.is_empty() {
        cost.push(Series {
            name: "from scratch (one round for the pods running)".into(),
            color: PALETTE[1],
            points: scratch
                .iter()
                .map(|s| (seconds(timeline, s.at_ms), s.cost_per_hour))
                .collect(),
            dashed: true,
        });
        cost.push(Series {
            name: "lower bound of that round".into(),
            color: PALETTE[2],
            points: scratch
                .iter()
                .filter_map(|s| s.bound.map(|b| (seconds(timeline, s.at_ms), b)))
                .collect(),
            dashed: true,
        });
    }
    let mut nodes = vec![series("all", PALETTE[7], &|p| {
        p.nodes.values().sum::<usize>() as f64
    })];
    for (i, capacity) in timeline.capacity_types.iter().enumerate() {
        nodes.push(series(capacity, PALETTE[i % 7], &|p| {
            p.nodes.get(capacity).copied().unwrap_or(0) as f64
        }));
    }
    let pods = vec![
        series("pending", PALETTE[3], &|p| p.pods_pending as f64),
        series("bound", PALETTE[2], &|p| p.pods_bound as f64),
    ];
    let disrupted = timeline
        .reasons
        .iter()
        .enumerate()
        .map(|(i, reason)| {
            series(reason, PALETTE[i % PALETTE.len()], &|p| {
                p.disrupted.get(reason).copied().unwrap_or(0) as f64
            })
        })
        .collect();
    vec![
        Chart {
            title: "Cost".into(),
            unit: "$/h".into(),
            series: cost,
        },
        Chart {
            title: "Nodes by capacity type".into(),
            unit: "instances running".into(),
            series: nodes,
        },
        Chart {
            title: "Pods".into(),
            unit: "count".into(),
            series: pods,
        },
        Chart {
            title: "Disruptions by reason".into(),
            unit: "NodeClaims drained so far".into(),
            series: disrupted,
        },
    ]
}

/// What the summary says of the from-scratch line: what it is, and any pods it lacks.
fn scratch_note(timeline: &Timeline) -> String {
    let lacking = timeline
        .scratch
        .iter()
        .map(|s| s.unknown)
        .max()
        .unwrap_or(0);
    let mut note = "From scratch: one scheduling round for the pods bound at that moment, planned from the journal with the NodePools of the latest round and no existing node; its lower bound beside it.".to_owned();
    if lacking > 0 {
        note.push_str(&format!(
            " Up to {lacking} bound pod(s) are left out of it: no recorded round held them or a replica of theirs (history trimmed)."
        ));
    }
    note
}

fn row(name: &str, value: String) -> Vec<String> {
    vec![name.to_owned(), value]
}

/// A simulation's page: its journal's timeline and its report.
pub fn of_simulation(report: &Report, timeline: &Timeline) -> Document {
    // The state of the last event holds until the run ends.
    let mut timeline = timeline.clone();
    if let (Some(first), Some(last)) = (timeline.points.first(), timeline.points.last()) {
        let end = first.at_ms + report.simulated_seconds as i64 * 1000;
        if end > last.at_ms {
            let mut held = last.clone();
            held.at_ms = end;
            timeline.points.push(held);
        }
    }
    let mut run = vec![
        row(
            "simulated time",
            hms(std::time::Duration::from_secs(report.simulated_seconds)),
        ),
        row("nodes at the end", report.node_count.to_string()),
        row("$/h at the end", format!("${:.3}", report.cost_per_hour)),
    ];
    if let Some(scratch) = &report.from_scratch {
        run.push(row(
            "from scratch at the end",
            format!(
                "${:.3}/h on {} nodes for {} pods (bound {})",
                scratch.cost_per_hour,
                scratch.nodes,
                scratch.pods,
                scratch.bound.map_or("-".into(), |b| format!("${b:.3}/h"))
            ),
        ));
    }
    run.extend([
        row(
            "utilisation of requests",
            format!(
                "cpu {:.1}%, memory {:.1}%",
                report.cpu_utilisation, report.memory_utilisation
            ),
        ),
        row(
            "pod pending latency",
            format!(
                "p50 {:.0}s, p99 {:.0}s",
                report.pending_p50, report.pending_p99
            ),
        ),
        row(
            "pods",
            format!(
                "{} bound, {} pending",
                report.pods_bound, report.pods_pending
            ),
        ),
        row(
            "NodeClaims",
            format!(
                "{} launched, {} terminated",
                report.nodeclaims_launched, report.nodeclaims_terminated
            ),
        ),
        row("scheduling rounds", report.rounds.to_string()),
        row(
            "interruptions",
            format!(
                "{} received, {} handled",
                report.interruptions.received, report.interruptions.delivered
            ),
        ),
        row(
            "evictions",
            format!(
                "{} ({} refused by PDBs)",
                report.evictions.0, report.evictions.1
            ),
        ),
        row("instances leaked", report.leaked_instances.to_string()),
    ]);
    let d = &report.disruptions;
    let disruptions = vec![
        row("NodeClaims drained, by reason", counts_text(&d.by_reason)),
        row("commands, by method", counts_text(&d.commands)),
        row("commands, by outcome", counts_text(&d.outcomes)),
        row("DisruptionBlocked events", d.blocked_events.to_string()),
        row(
            "passes, simulations",
            format!("{}, {}", d.passes, d.simulations),
        ),
        row(
            "longest a node removed as empty stayed empty",
            format!("{:.0}s", d.longest_empty_seconds),
        ),
    ];
    let fleet = fleet_table(report.nodes.iter().map(|g| {
        (
            g.instance_type.clone(),
            g.capacity_type.clone(),
            g.count,
            g.cost_per_hour,
        )
    }));
    Document {
        title: format!("karpenter-rs simulation: {}", report.scenario),
        summary: vec![
            format!(
                "{} simulated; {} nodes at ${:.2}/h at the end; {} pods bound, {} pending; journal to seq {}",
                hms(std::time::Duration::from_secs(report.simulated_seconds)),
                report.node_count,
                report.cost_per_hour,
                report.pods_bound,
                report.pods_pending,
                report.journal_last_seq
            ),
            scratch_note(&timeline),
        ],
        charts: charts(&timeline),
        tables: vec![table("Run", run), fleet, table("Disruption", disruptions)],
    }
}

/// Instances running at the end: `(instance type, capacity type, count, $/h)`.
fn fleet_table(groups: impl Iterator<Item = (String, String, usize, f64)>) -> Table {
    Table {
        title: "Fleet at the end".into(),
        header: ["instance type", "capacity type", "count", "$/h"]
            .map(String::from)
            .to_vec(),
        rows: groups
            .map(|(instance_type, capacity, count, price)| {
                vec![
                    instance_type,
                    capacity,
                    count.to_string(),
                    format!("${price:.3}"),
                ]
            })
            .collect(),
    }
}

/// The fleet questions `journal export`'s tables answer (`karpenter_export::figures`): spend
/// by day, savings by disruption reason, the ten longest pod waits.
pub fn figures_tables(tables: &karpenter_export::Tables) -> Vec<Table> {
    use karpenter_export::figures::{longest_waits, savings_by_reason, spend_by_day};
    let header = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    vec![
        Table {
            title: "Spend by day (UTC)".into(),
            header: header(&["day", "hours", "dollars", "$/h"]),
            rows: spend_by_day(tables)
                .iter()
                .map(|d| {
                    vec![
                        d.day.clone(),
                        format!("{:.2}", d.hours),
                        format!("${:.2}", d.dollars),
                        format!("${:.3}", d.cost_per_hour()),
                    ]
                })
                .collect(),
        },
        Table {
            title: "Savings by disruption reason (commands done)".into(),
            header: header(&["reason", "commands", "NodeClaims", "$/h saved"]),
            rows: savings_by_reason(tables)
                .iter()
                .map(|r| {
                    vec![
                        r.reason.clone(),
                        r.commands.to_string(),
                        r.nodeclaims.to_string(),
                        format!("${:.3}", r.savings_per_hour),
                    ]
                })
                .collect(),
        },
        Table {
            title: "The ten longest pod waits".into(),
            header: header(&["pod", "waited", "outcome", "why"]),
            rows: longest_waits(tables, 10)
                .iter()
                .map(|w| {
                    vec![
                        w.pod.clone(),
                        format!("{:.0}s", w.wait_seconds),
                        w.outcome.clone(),
                        w.why.clone(),
                    ]
                })
                .collect(),
        },
    ]
}

fn table(title: &str, rows: Vec<Vec<String>>) -> Table {
    Table {
        title: title.into(),
        header: vec!["".into(), "".into()],
        rows,
    }
}

/// A recorded journal's page: its timeline and what its events say at the end.
pub fn of_journal(journal: &Journal<DomainEvent>, dir: &Path) -> anyhow::Result<Document> {
    let timeline = timeline::timeline(journal, EVERY_MS)?;
    let end = journal
        .replay::<karpenter_core::events::ClusterView>(Until::End)?
        .state;
    let (disruptions, last_seq) = crate::report::run::journaled(journal)?;
    let mut groups: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
    let (mut launched, mut terminated) = (0u64, 0u64);
    for envelope in journal.read_from(timeline.first_seq) {
        match envelope?.event {
            DomainEvent::NodeClaimLaunched { .. } => launched += 1,
            DomainEvent::NodeClaimTerminated { .. } => terminated += 1,
            _ => {}
        }
    }
    for (_, claim) in end.live_nodeclaims() {
        if let Some(i) = &claim.instance {
            let group = groups
                .entry((i.instance_type.clone(), i.capacity_type.to_string()))
                .or_default();
            group.0 += 1;
            group.1 += i.price;
        }
    }
    let cost = karpenter_core::model::total_price(groups.values().map(|g| g.1));
    let nodes: usize = groups.values().map(|g| g.0).sum();
    let (from, to) = (
        timeline.points.first().map(|p| p.at_ms),
        timeline.points.last().map(|p| p.at_ms),
    );
    let span = |at: Option<i64>| at.map(format_rfc3339).unwrap_or_else(|| "-".into());
    let trimmed = if timeline.first_seq > 1 {
        format!(
            " (history before seq {} was trimmed by retention)",
            timeline.first_seq
        )
    } else {
        String::new()
    };
    let run = vec![
        row("from", span(from)),
        row("to", span(to)),
        row("nodes at the end", nodes.to_string()),
        row("$/h at the end", format!("${cost:.3}")),
        row(
            "pods at the end",
            format!("{} bound, {} pending", end.bound.len(), end.pending.len()),
        ),
        row(
            "NodeClaims",
            format!("{launched} launched, {terminated} terminated{trimmed}"),
        ),
        row("scheduling rounds", end.last_round.to_string()),
        row(
            "NodeClaims drained, by reason",
            counts_text(&disruptions.by_reason),
        ),
        row("commands, by method", counts_text(&disruptions.commands)),
        row("commands, by outcome", counts_text(&disruptions.outcomes)),
    ];
    let fleet = fleet_table(groups.into_iter().map(
        |((instance_type, capacity), (count, price))| (instance_type, capacity, count, price),
    ));
    Ok(Document {
        title: format!("karpenter-rs journal: {}", dir.display()),
        summary: vec![
            format!(
                "{} of journal time, seq {} to {last_seq}",
                hms(std::time::Duration::from_millis(
                    timeline.span_ms().max(0) as u64
                )),
                timeline.first_seq,
            ),
            scratch_note(&timeline),
        ],
        charts: charts(&timeline),
        tables: [table("Run", run), fleet]
            .into_iter()
            .chain(figures_tables(&karpenter_export::project(journal)?))
            .collect(),
    })
}
