//! A run's figures read from its journal alone, the same way for any journal, so two runs
//! (a recorded one and its what-if replay) are measured alike: $/h over time and in total,
//! nodes, pod pending latency, NodeClaims, disruptions.

use std::collections::BTreeMap;

use karpenter_core::events::DomainEvent;
use karpenter_journal::Journal;

use super::timeline::{Timeline, timeline};

/// What a journal says a run cost and did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// The series, sampled every [`super::EVERY_MS`].
    pub timeline: Timeline,
    /// Journal time covered, seconds.
    pub seconds: f64,
    /// Dollars spent: $/h integrated over the run.
    pub dollars: f64,
    /// Mean $/h over the run.
    pub mean_cost_per_hour: f64,
    /// $/h at the end.
    pub end_cost_per_hour: f64,
    /// Mean instances running.
    pub mean_nodes: f64,
    /// Most instances running at once.
    pub peak_nodes: usize,
    /// Pod pending → bound latency, seconds: p50.
    pub pending_p50: f64,
    /// p99.
    pub pending_p99: f64,
    /// Pods that were bound.
    pub pods_bound: usize,
    /// Pods pending at the end.
    pub pods_pending_at_end: usize,
    /// NodeClaims launched.
    pub nodeclaims_launched: u64,
    /// NodeClaims drained, by reason.
    pub disrupted: BTreeMap<String, u64>,
    /// Disruption commands by method.
    pub commands: BTreeMap<String, u64>,
}

/// Reads `journal`'s figures.
pub fn summary(journal: &Journal<DomainEvent>) -> anyhow::Result<Summary> {
    let timeline = timeline(journal, super::EVERY_MS)?;
    let mut pending_since: BTreeMap<String, i64> = BTreeMap::new();
    let mut latencies: Vec<f64> = Vec::new();
    let mut launched = 0;
    for envelope in journal.read_from(timeline.first_seq) {
        let envelope = envelope?;
        let at = envelope.recorded_at_ms;
        match envelope.event {
            DomainEvent::PodPending { uid, .. } => {
                pending_since.entry(uid).or_insert(at);
            }
            DomainEvent::PodBound { uid, .. } => {
                if let Some(since) = pending_since.remove(&uid) {
                    latencies.push((at - since) as f64 / 1000.0);
                }
            }
            DomainEvent::PodDeleted { uid } => {
                pending_since.remove(&uid);
            }
            DomainEvent::NodeClaimLaunched { .. } => launched += 1,
            _ => {}
        }
    }
    latencies.sort_by(f64::total_cmp);
    let (disruptions, _) = crate::report::run::journaled(journal)?;
    let points = &timeline.points;
    // Each point's $/h and nodes hold until the next point.
    let (mut dollars, mut node_seconds) = (0.0, 0.0);
    for pair in points.windows(2) {
        let hours = (pair[1].at_ms - pair[0].at_ms) as f64 / 3_600_000.0;
        dollars += pair[0].cost_per_hour * hours;
        node_seconds += pair[0].nodes.values().sum::<usize>() as f64 * hours * 3600.0;
    }
    let seconds = timeline.span_ms() as f64 / 1000.0;
    let last = points.last();
    Ok(Summary {
        seconds,
        dollars,
        mean_cost_per_hour: if seconds > 0.0 {
            dollars / (seconds / 3600.0)
        } else {
            last.map_or(0.0, |p| p.cost_per_hour)
        },
        end_cost_per_hour: last.map_or(0.0, |p| p.cost_per_hour),
        mean_nodes: if seconds > 0.0 {
            node_seconds / seconds
        } else {
            0.0
        },
        peak_nodes: points
            .iter()
            .map(|p| p.nodes.values().sum::<usize>())
            .max()
            .unwrap_or(0),
        pending_p50: crate::report::run::percentile(&latencies, 50.0),
        pending_p99: crate::report::run::percentile(&latencies, 99.0),
        pods_bound: latencies.len(),
        pods_pending_at_end: last.map_or(0, |p| p.pods_pending),
        nodeclaims_launched: launched,
        disrupted: disruptions.by_reason,
        commands: disruptions.commands,
        timeline,
    })
}
