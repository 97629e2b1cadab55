//! The disruption side of an explanation: the commands a journal holds, and why a NodeClaim
//! was disrupted or launched as a replacement.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use karpenter_core::events::DomainEvent;
use karpenter_core::events::disruption::{DisruptionRecord, Phase};
use karpenter_core::model::time::format_rfc3339;
use karpenter_journal::{Envelope, Journal};

/// `, replaced by a, b` (or nothing).
pub fn replaced_by_text(record: &DisruptionRecord) -> String {
    if record.replacements.is_empty() {
        String::new()
    } else {
        format!(", replaced by {}", record.replacements.join(", "))
    }
}

/// The candidates' names, comma-separated.
pub fn names(record: &DisruptionRecord) -> String {
    record
        .candidates
        .iter()
        .map(|m| m.nodeclaim.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// A decided command's event, with the events of the phases it went through.
pub type Recorded = (Envelope<DomainEvent>, Vec<Envelope<DomainEvent>>);

/// Every decided command, with the phases it went through (in journal order).
pub fn commands(journal: &Journal<DomainEvent>) -> anyhow::Result<Vec<Recorded>> {
    let mut out: Vec<Recorded> = Vec::new();
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    for envelope in journal.read_from(0) {
        let envelope = envelope?;
        match &envelope.event {
            DomainEvent::DisruptionDecided(r) => {
                index.insert(r.command, out.len());
                out.push((envelope, Vec::new()));
            }
            DomainEvent::DisruptionProgressed { command, .. } => {
                if let Some(i) = index.get(command) {
                    out[*i].1.push(envelope);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Why `nodeclaim` was disrupted, or launched to replace others.
pub fn explain(
    journal: &Journal<DomainEvent>,
    nodeclaim: &str,
    out: &mut String,
) -> anyhow::Result<()> {
    for (decided, phases) in commands(journal)? {
        let DomainEvent::DisruptionDecided(r) = &decided.event else {
            continue;
        };
        let candidate = r.candidates.iter().any(|m| m.nodeclaim == nodeclaim);
        let replacement = r.replacements.iter().any(|n| n == nodeclaim);
        if !candidate && !replacement {
            continue;
        }
        let at = format_rfc3339(decided.recorded_at_ms);
        let role = if candidate {
            format!("disrupted ({})", r.method.as_str())
        } else {
            "launched as a replacement".to_owned()
        };
        writeln!(
            out,
            "{at} [{}] {role} by disruption command {}: {} of {}{}; saves ${:.4}/h",
            decided.seq,
            r.command,
            r.method.name(),
            names(r),
            replaced_by_text(r),
            r.savings
        )?;
        if let Some(input) = &r.input
            && let Some(node) = input
                .snapshot
                .nodes
                .iter()
                .find(|n| n.nodeclaim == nodeclaim)
        {
            let why = match r.method {
                karpenter_core::disruption::Method::Emptiness => format!(
                    "no pod that would have to move; last pod event {}",
                    node.last_pod_event_ms
                        .map(format_rfc3339)
                        .unwrap_or_else(|| "never".into())
                ),
                karpenter_core::disruption::Method::Drift
                | karpenter_core::disruption::Method::StaticDrift => node
                    .drifted
                    .as_ref()
                    .map(|d| {
                        format!(
                            "drifted ({}) since {}",
                            d.reason,
                            format_rfc3339(d.since_ms)
                        )
                    })
                    .unwrap_or_else(|| "drifted".into()),
                karpenter_core::disruption::Method::MultiNodeConsolidation
                | karpenter_core::disruption::Method::SingleNodeConsolidation => format!(
                    "underutilized: its {} pod(s) fit on the rest of the cluster{} for ${:.4}/h less",
                    node.reschedulable().count(),
                    if r.replacements.is_empty() {
                        ""
                    } else {
                        " and a cheaper replacement"
                    },
                    r.savings
                ),
            };
            if candidate {
                writeln!(
                    out,
                    "  why: {why}; {} pod(s) moved; budget left in its pool then: {}",
                    r.moved.len(),
                    r.allowed
                        .get(&node.nodepool)
                        .map(ToString::to_string)
                        .unwrap_or_else(|| "-".into())
                )?;
            }
        }
        for p in &phases {
            if let DomainEvent::DisruptionProgressed { phase, .. } = &p.event {
                let text = match phase {
                    Phase::Abandoned(why) => format!("given up: {why}"),
                    phase => phase.name().to_owned(),
                };
                writeln!(
                    out,
                    "{} [{}]   command {}: {text}",
                    format_rfc3339(p.recorded_at_ms),
                    p.seq,
                    r.command
                )?;
            }
        }
    }
    Ok(())
}

/// The disruption command that launched `nodeclaim` as a replacement, if one did.
pub fn replaced_by(journal: &Journal<DomainEvent>, nodeclaim: &str) -> anyhow::Result<Option<u64>> {
    for envelope in journal.read_from(0) {
        if let DomainEvent::DisruptionDecided(r) = envelope?.event
            && r.replacements.iter().any(|n| n == nodeclaim)
        {
            return Ok(Some(r.command));
        }
    }
    Ok(None)
}
