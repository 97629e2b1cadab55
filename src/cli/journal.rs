//! `journal replay|explain|verify|cost|stats|tail`: post-mortems from the flight recorder.

use karpenter_core::model::time::{format_rfc3339, parse_rfc3339_ms};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;

use super::journal_open::open;
use super::journal_rounds::{Rounds, rounds_of};
use karpenter_core::events::{ClusterView, DomainEvent, RoundRecord};
use karpenter_core::scheduling::solve;
use karpenter_journal::{Journal, Until};
use karpenter_rs::explain::{Explanation, RoundCost, cost_of, recorded_input};

/// Journal subcommands.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// The state at a moment: NodePools, NodeClaims with state and instance, pending pods.
    Replay {
        /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
        #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
        dir: PathBuf,
        /// Stop at a sequence number (`1234`), a time (`2026-01-01T00:20:00Z`) or an offset
        /// from the first event (`20m`).
        #[arg(long, value_name = "SEQ|TIME|OFFSET")]
        until: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Why a NodeClaim exists (its round and pods, the candidates and prices, the offering
    /// chosen, what the cloud answered, why it was disrupted or what it replaced, and how it
    /// ended), or why a pod waited (every round
    /// that saw it and what it decided, nominations not honoured, how it ended).
    Explain {
        /// `nodeclaim/NAME` or `pod/NAMESPACE/NAME`.
        #[arg(value_name = "nodeclaim/NAME|pod/NAMESPACE/NAME")]
        object: String,
        /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
        #[arg(long, value_name = "DIR", default_value = "karpenter-sim-journal")]
        journal: PathBuf,
    },
    /// Re-runs every recorded scheduling round, disruption decision and nomination check from
    /// its recorded inputs and checks that it reaches the same decisions. Exit code 1 on any
    /// difference.
    Verify {
        /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
        #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
        dir: PathBuf,
    },
    /// Per recorded scheduling round: what its new NodeClaims cost, what plain first-fit
    /// decreasing would have cost, and the LP-relaxation lower bound, re-solved from the
    /// round's recorded inputs.
    Cost {
        /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
        #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
        dir: PathBuf,
    },
    /// What the journal holds: events and payload bytes by type, its snapshots, and the
    /// history retention removed.
    Stats {
        /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
        #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
        dir: PathBuf,
    },
    /// Writes a self-contained HTML page with the journal's charts over time ($/h, nodes by
    /// capacity type, pods pending and bound, disruptions by reason) and its figures.
    Report {
        /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
        #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
        dir: PathBuf,
        /// Where to write the page.
        #[arg(long, short = 'o', value_name = "FILE.html")]
        output: PathBuf,
    },
    /// Replays the workload a `simulate` journal recorded under other NodePools and
    /// EC2NodeClasses (e.g. spot allowed or not, other instance families, another
    /// consolidation policy or budgets) on the simulator, and prints both runs side by side:
    /// $/h over time and in total, nodes, pod pending latency p50/p99, disruptions.
    Whatif(super::journal_whatif::WhatIfArgs),
    /// Writes the journal as typed tables (nodeclaims, pods, disruptions, rounds, fleet) in
    /// Parquet, partitioned by cluster and day, for DuckDB, Athena or Spark
    /// (docs/journal-export.md).
    Export(super::journal_export::ExportArgs),
    /// Prints events, one per line.
    Tail {
        /// Journal directory, or s3://BUCKET/PREFIX/CLUSTER (a controller's --journal-bucket history).
        #[arg(value_name = "DIR", default_value = "karpenter-sim-journal")]
        dir: PathBuf,
        /// First sequence number to print.
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
        /// Print only the last N events (when `--since` is not given).
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
    },
}

fn until(journal: &Journal<DomainEvent>, text: Option<&str>) -> anyhow::Result<Until> {
    let Some(text) = text else {
        return Ok(Until::End);
    };
    if let Ok(seq) = text.parse::<u64>() {
        return Ok(Until::Seq(seq));
    }
    if let Some(ms) = parse_rfc3339_ms(text) {
        return Ok(Until::TimeMs(ms));
    }
    if let Ok(offset) = karpenter_core::vocab::duration::parse_duration(text) {
        let first = journal
            .read_raw_from(0)
            .next()
            .transpose()?
            .map(|r| r.recorded_at_ms)
            .unwrap_or(0);
        return Ok(Until::TimeMs(first + offset.as_millis() as i64));
    }
    bail!(
        "--until {text:?}: give a sequence number (1234), a UTC time (2026-01-01T00:20:00Z) or an offset from the first event (20m)"
    )
}

pub fn run(command: JournalCommand) -> anyhow::Result<ExitCode> {
    match command {
        JournalCommand::Replay {
            dir,
            until: at,
            json,
        } => replay(&dir, at.as_deref(), json),
        JournalCommand::Explain { object, journal } => explain(&journal, &object),
        JournalCommand::Verify { dir } => verify(&dir),
        JournalCommand::Cost { dir } => cost(&dir),
        JournalCommand::Stats { dir } => super::journal_stats::stats(&*open(&dir)?, &dir),
        JournalCommand::Tail { dir, since, lines } => tail(&dir, since, lines),
        JournalCommand::Report { dir, output } => report(&dir, &output),
        JournalCommand::Whatif(args) => super::journal_whatif::whatif_command(args),
        JournalCommand::Export(args) => super::journal_export::export(&args),
    }
}

fn report(dir: &Path, output: &Path) -> anyhow::Result<ExitCode> {
    let document = karpenter_rs::report::of_journal(&*open(dir)?, dir)?;
    std::fs::write(output, karpenter_rs::report::html::render(&document))
        .with_context(|| format!("--output: cannot write {}", output.display()))?;
    eprintln!("report: {}", output.display());
    Ok(ExitCode::SUCCESS)
}

fn replay(dir: &Path, at: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let journal = open(dir)?;
    let until = until(&journal, at)?;
    let replayed = journal.replay::<ClusterView>(until)?;
    let view = &replayed.state;
    if json {
        println!("{}", serde_json::to_string_pretty(view)?);
        return Ok(ExitCode::SUCCESS);
    }
    let time = journal
        .read_from(replayed.last_seq)
        .next()
        .transpose()?
        .map(|e| format_rfc3339(e.recorded_at_ms))
        .unwrap_or_else(|| "-".into());
    println!(
        "state at seq {} ({time}), round {}",
        replayed.last_seq, view.last_round
    );
    println!(
        "nodepools: {}",
        view.nodepools
            .iter()
            .map(|(n, w)| format!("{n} (weight {w})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let live: Vec<_> = view.live_nodeclaims().collect();
    println!(
        "nodeclaims: {} live, ${:.3}/h",
        live.len(),
        view.cost_per_hour()
    );
    for (name, c) in &live {
        let instance = c
            .instance
            .as_ref()
            .map(|i| {
                format!(
                    "{} {} {} {} ${:.4}/h",
                    i.id, i.instance_type, i.zone, i.capacity_type, i.price
                )
            })
            .unwrap_or_else(|| "-".into());
        println!(
            "  {name:<32} {:<12} {instance} node={}",
            format!("{:?}", c.state),
            c.node.as_deref().unwrap_or("-")
        );
    }
    let ended = view.nodeclaims.len() - live.len();
    if ended > 0 {
        println!("  ({ended} terminated)");
    }
    super::journal_disruption::print_commands(view);
    println!(
        "pods: {} pending, {} bound",
        view.pending.len(),
        view.bound.len()
    );
    for pod in view.pending.values().take(20) {
        println!("  pending {pod}");
    }
    if view.pending.len() > 20 {
        println!("  … {} more", view.pending.len() - 20);
    }
    Ok(ExitCode::SUCCESS)
}

fn explain(dir: &Path, object: &str) -> anyhow::Result<ExitCode> {
    if let Some(pod) = object.strip_prefix("pod/") {
        return super::explain_pod::explain(&*open(dir)?, pod);
    }
    let Some(name) = object.strip_prefix("nodeclaim/") else {
        bail!(
            "{object:?}: name a NodeClaim as nodeclaim/NAME or a pod as pod/NAMESPACE/NAME (see `karpenter journal replay` for names)"
        );
    };
    match karpenter_rs::explain::nodeclaim(&*open(dir)?, name)? {
        Explanation::Found { text, .. } => print!("{text}"),
        Explanation::NotFound => bail!("no NodeClaim {name:?} in {}", dir.display()),
    }
    Ok(ExitCode::SUCCESS)
}

fn rounds(dir: &Path) -> anyhow::Result<Rounds> {
    rounds_of(&*open(dir)?)
}

fn cost(dir: &Path) -> anyhow::Result<ExitCode> {
    let Rounds {
        catalogs, rounds, ..
    } = rounds(dir)?;
    println!(
        "{:>6} {:>6} {:>6} {:>10} {:>10} {:>10} {:>7} {:>7}",
        "round", "pods", "claims", "$/h", "FFD $/h", "bound $/h", "ratio", "FFD"
    );
    let (mut total, mut total_ffd, mut total_bound) = (0.0, 0.0, 0.0);
    let by_number: BTreeMap<u64, &RoundRecord> = rounds.iter().map(|r| (r.round, r)).collect();
    for record in &rounds {
        let Some(input) = recorded_input(record, &by_number).and_then(|i| i.rebuild(&catalogs))
        else {
            println!("{:>6} inputs not recorded", record.round);
            continue;
        };
        let Some(RoundCost {
            nodeclaims,
            cost,
            ffd: cost_ffd,
            bound,
            ..
        }) = cost_of(record.round, &input)?
        else {
            continue;
        };
        total += cost;
        total_ffd += cost_ffd;
        total_bound += bound;
        println!(
            "{:>6} {:>6} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>7} {:>7}",
            record.round,
            input.pods.len(),
            nodeclaims,
            cost,
            cost_ffd,
            bound,
            ratio(cost, bound),
            ratio(cost_ffd, bound)
        );
    }
    if total_bound > 0.0 {
        println!(
            "{:>6} {:>6} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>7} {:>7}",
            "all",
            "",
            "",
            total,
            total_ffd,
            total_bound,
            ratio(total, total_bound),
            ratio(total_ffd, total_bound)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `cost / bound`, or `-` when the bound is zero (the pods fit existing nodes' spare room in
/// total, though not pod by pod).
fn ratio(cost: f64, bound: f64) -> String {
    if bound > 1e-9 {
        format!("{:.3}", cost / bound)
    } else {
        "-".to_owned()
    }
}

fn verify(dir: &Path) -> anyhow::Result<ExitCode> {
    let Rounds {
        catalogs,
        rounds,
        plans,
        replacements,
    } = rounds(dir)?;
    let (mut ok, mut differ, mut skipped) = (0, 0, 0);
    let by_number: BTreeMap<u64, &RoundRecord> = rounds.iter().map(|r| (r.round, r)).collect();
    for record in &rounds {
        let Some(input) = recorded_input(record, &by_number).and_then(|i| i.rebuild(&catalogs))
        else {
            skipped += 1;
            println!("round {}: skipped (inputs not recorded)", record.round);
            continue;
        };
        let result = solve(&input);
        let mut problems = Vec::new();
        let bindings: Vec<(String, String)> = result
            .bindings
            .iter()
            .map(|b| (b.pod.clone(), b.node.clone()))
            .collect();
        if bindings != record.bindings {
            problems.push(format!(
                "bindings differ: recorded {}, now {}",
                record.bindings.len(),
                bindings.len()
            ));
        }
        let unschedulable: Vec<(String, String)> = result
            .unschedulable
            .iter()
            .map(|u| (u.pod.clone(), u.reason.clone()))
            .collect();
        if unschedulable != record.unschedulable {
            problems.push(format!(
                "unschedulable pods differ: recorded {}, now {}",
                record.unschedulable.len(),
                unschedulable.len()
            ));
        }
        let recorded = plans
            .get(&record.round)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if recorded.len() != result.new_claims.len() {
            problems.push(format!(
                "NodeClaims differ: recorded {}, now {}",
                recorded.len(),
                result.new_claims.len()
            ));
        }
        for (i, (plan, claim)) in recorded.iter().zip(&result.new_claims).enumerate() {
            if plan.nodepool != claim.nodepool
                || plan.pods != claim.pods
                || plan.instance_types != claim.instance_types
            {
                problems.push(format!("NodeClaim {i} ({}) differs", plan.nodeclaim));
            }
        }
        if problems.is_empty() {
            ok += 1;
            println!(
                "round {}: same decisions ({} pods, {} NodeClaims){}",
                record.round,
                record.pods,
                recorded.len(),
                record
                    .repeats
                    .map(|of| format!(", re-run from round {of}'s input"))
                    .unwrap_or_default()
            );
        } else {
            differ += 1;
            println!("round {}: DIFFERENT: {}", record.round, problems.join("; "));
        }
    }
    let journal = open(dir)?;
    let disruptions = super::journal_disruption::verify(&journal, &catalogs, &replacements)?;
    let nominations = super::journal_nominations::verify(&journal)?;
    let events = journal.verify()?;
    println!(
        "{events} events, frames intact; {ok} round(s) reproduced, {differ} different, {skipped} skipped; {} disruption decision(s) reproduced, {} different, {} skipped; {} nomination check(s) reproduced, {} different",
        disruptions.same,
        disruptions.different,
        disruptions.skipped,
        nominations.same,
        nominations.different.len()
    );
    let differ = differ + disruptions.different + nominations.different.len();
    Ok(if differ == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn summary(event: &DomainEvent) -> String {
    match event {
        DomainEvent::NodePoolObserved { weight, hash, .. } => {
            format!("weight={weight} hash={hash}")
        }
        DomainEvent::PodPending { pod, requests, .. } => format!(
            "{pod} {}",
            requests
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        DomainEvent::PodBound {
            node,
            pod: Some(pod),
            ..
        } => format!("{pod} node={node}"),
        DomainEvent::PodBound { node, .. } => format!("node={node}"),
        DomainEvent::RoundCompleted(r) => format!(
            "pods={} nodeclaims={} unschedulable={} {}µs",
            r.pods,
            r.nodeclaims.len(),
            r.unschedulable.len(),
            r.duration_us
        ),
        DomainEvent::InstanceTypesObserved { instance_types, .. } => {
            format!("{} instance types", instance_types.len())
        }
        DomainEvent::NodeClaimPlanned(p) => format!(
            "round={} pods={} options={} cheapest={}",
            p.round,
            p.pods.len(),
            p.instance_types.len(),
            p.instance_types.first().map(|o| &*o.name).unwrap_or("-")
        ),
        DomainEvent::LaunchRequested { client_token, .. } => format!("token={client_token}"),
        DomainEvent::NodeClaimLaunched { instance, .. } => format!(
            "{} {} {} {}",
            instance.id, instance.instance_type, instance.zone, instance.capacity_type
        ),
        DomainEvent::LaunchFailed { reason, .. } => reason.clone(),
        DomainEvent::NodeClaimRegistered { node, .. } => format!("node={node}"),
        DomainEvent::InterruptionReceived { kind, .. } => format!("{kind:?}"),
        DomainEvent::NodeClaimDraining { reason, .. }
        | DomainEvent::NodeClaimTerminating { reason, .. }
        | DomainEvent::NodeClaimTerminated { reason, .. } => reason.clone(),
        DomainEvent::PodDeleted { .. } | DomainEvent::NodeClaimInitialized { .. } => String::new(),
        DomainEvent::InterruptionMessage {
            message_id,
            outcome,
            kind,
            instance_ids,
            detail,
            ..
        } => format!(
            "message={message_id} {outcome:?} {} {} {detail}",
            kind.map(|k| k.as_str()).unwrap_or("-"),
            instance_ids.join(",")
        ),
        DomainEvent::InstanceGarbageCollected {
            instance_id,
            nodeclaim,
            reason,
        } => format!("{instance_id} nodeclaim={nodeclaim} {reason}"),
        DomainEvent::NominationExpired {
            nodeclaim, node, ..
        } => format!("nodeclaim={nodeclaim} node={node}"),
        DomainEvent::NominationsChecked(record) => super::journal_nominations::summary(record),
        DomainEvent::DisruptionDecided(_) | DomainEvent::DisruptionProgressed { .. } => {
            super::journal_disruption::summary(event).unwrap_or_default()
        }
        DomainEvent::JournalTrimmed {
            through,
            events,
            bytes,
        } => format!("through={through} events={events} bytes={bytes}"),
        DomainEvent::JournalShipped {
            through,
            segments,
            bytes,
        } => format!("through={through} segments={segments} bytes={bytes}"),
        DomainEvent::HistoryTakenOver(t) => format!(
            "holder={} from={} through={} snapshot={} imported={}{}",
            t.holder,
            t.location,
            t.through,
            t.snapshot.map_or("-".to_owned(), |s| s.to_string()),
            t.imported,
            t.set_aside
                .as_ref()
                .map_or(String::new(), |s| format!(" set_aside={}", s.path))
        ),
    }
}

fn tail(dir: &Path, since: Option<u64>, lines: usize) -> anyhow::Result<ExitCode> {
    let journal = open(dir)?;
    let start = match since {
        Some(seq) => seq,
        None => journal
            .last_seq()?
            .map_or(0, |last| last.saturating_sub(lines as u64 - 1).max(1)),
    };
    for envelope in journal.read_from(start) {
        let e = envelope?;
        println!(
            "{:>7} {} {:<40} {:<22} {}",
            e.seq,
            format_rfc3339(e.recorded_at_ms),
            e.entity.to_string(),
            e.event_type,
            summary(&e.event)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        let ms = parse_rfc3339_ms("2026-01-01T00:20:00Z").unwrap();
        assert_eq!(ms, karpenter_rs::sim::run::SIM_EPOCH_MS + 20 * 60_000);
        assert_eq!(format_rfc3339(ms), "2026-01-01T00:20:00Z");
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T12:00:00.5Z")
                .map(format_rfc3339)
                .as_deref(),
            Some("2024-02-29T12:00:00Z")
        );
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
    }
}
