//! What a simulation run measured, and how it is printed: the fleet at the end, cost and
//! utilisation over the run, pod latency, what the actors did, and the disruptions by reason.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use karpenter_actors::actor::messages::InterruptionStatus;
use karpenter_core::events::DomainEvent;
use karpenter_core::events::disruption::Phase;
use karpenter_core::model::{ResourceName, Resources};
use karpenter_journal::Journal;
use serde::Serialize;

/// Nodes of one instance type and capacity type at the end of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeGroup {
    /// Instance type.
    pub instance_type: String,
    /// Capacity type.
    pub capacity_type: String,
    /// How many.
    pub count: usize,
    /// Their summed $/h.
    pub cost_per_hour: f64,
}

/// The fleet at a moment of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Simulated seconds since the scenario began.
    pub at_seconds: u64,
    /// $/h of the running instances.
    pub cost_per_hour: f64,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Requested / allocatable CPU on Ready nodes, percent.
    pub cpu_utilisation: f64,
    /// Pods not bound.
    pub pods_pending: usize,
    /// Bytes the journal directory holds on disk (runs that measure their resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_bytes: Option<u64>,
    /// Resident memory of this process, bytes (runs that measure their resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
}

/// What was disrupted, and how disruption commands went.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Disruptions {
    /// NodeClaims drained, by why (`empty`, `drifted`, `expired`, `deleted`,
    /// `spot_interrupted`, …).
    pub by_reason: BTreeMap<String, u64>,
    /// Disruption commands decided, by method.
    pub commands: BTreeMap<String, u64>,
    /// Commands that ended, by outcome (`Done`, `Abandoned`).
    pub outcomes: BTreeMap<String, u64>,
    /// `DisruptionBlocked` Events recorded.
    pub blocked_events: usize,
    /// `NodeRepairBlocked` Events recorded (on Nodes).
    pub repair_blocked_events: usize,
    /// Pods evicted although `karpenter.sh/do-not-disrupt` protected them (must be 0).
    pub protected_evictions: u64,
    /// Pods that went with their node once its terminationGracePeriod ran out.
    pub pods_lost_with_node: u64,
    /// Nodes still marked for disruption (tainted, not draining) at the end that no command
    /// in flight holds (must be 0).
    pub stale_marks: usize,
    /// The longest a node removed as empty stayed empty (initialized, no pod, not held as a
    /// command's replacement) before its drain began, in seconds.
    pub longest_empty_seconds: f64,
    /// Disruption passes run.
    pub passes: u64,
    /// Scheduling simulations those passes ran.
    pub simulations: u64,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Simulated time.
    pub simulated_seconds: u64,
    /// Nodes at the end, by type and capacity type.
    pub nodes: Vec<NodeGroup>,
    /// Running instances at the end.
    pub node_count: usize,
    /// $/h of the running instances.
    pub cost_per_hour: f64,
    /// Requested / allocatable CPU on Ready nodes, percent.
    pub cpu_utilisation: f64,
    /// Requested / allocatable memory on Ready nodes, percent.
    pub memory_utilisation: f64,
    /// Pod pending → bound latency, seconds.
    pub pending_p50: f64,
    /// Pod pending → bound latency, seconds.
    pub pending_p99: f64,
    /// Pods bound during the run.
    pub pods_bound: usize,
    /// Pods still pending at the end.
    pub pods_pending: usize,
    /// Why pods are still pending (the last round's reasons).
    pub unschedulable: BTreeMap<String, String>,
    /// NodeClaims launched (instances created).
    pub nodeclaims_launched: u64,
    /// NodeClaims terminated (instances terminated).
    pub nodeclaims_terminated: u64,
    /// Interruption notices: received, delivered.
    pub interruptions: InterruptionStatus,
    /// Pods evicted while draining, and evictions a PDB refused.
    pub evictions: (u64, u64),
    /// Scheduling rounds.
    pub rounds: u64,
    /// Disruptions.
    pub disruptions: Disruptions,
    /// The fleet once a minute.
    pub samples: Vec<Sample>,
    /// Instances running without a live NodeClaim (must be 0).
    pub leaked_instances: usize,
    /// Actors that failed.
    pub actor_failures: Vec<String>,
    /// Last journal sequence number.
    pub journal_last_seq: u64,
    /// What one scheduling round from scratch would buy for the pods running at the end.
    pub from_scratch: Option<FromScratch>,
    /// Cloud API calls (EC2 only): attempts after the first (backoff), failed attempts.
    pub cloud_retries: (u64, u64),
    /// CapacityBuffers' statuses at the end.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buffers: Vec<BufferLine>,
}

/// A CapacityBuffer's status at the end of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BufferLine {
    /// `namespace/name`.
    pub buffer: String,
    /// `status.replicas`.
    pub replicas: Option<i32>,
    /// `ReadyForProvisioning`: status, reason, message.
    pub ready: (bool, String, String),
    /// `Provisioning`: status, reason, message.
    pub provisioning: Option<(bool, String, String)>,
}

/// One scheduling round from scratch for the pods running at the end: every NodePool as it
/// is, no node yet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FromScratch {
    /// Pods planned (those running that would have to move if their node went).
    pub pods: usize,
    /// Nodes it would launch.
    pub nodes: usize,
    /// $/h of those nodes, each at its cheapest offering.
    pub cost_per_hour: f64,
    /// The round's lower bound on $/h, when it has one.
    pub bound: Option<f64>,
}

/// `requested / allocatable` of one resource, in percent (0 when nothing is allocatable).
pub fn percent(requested: &Resources, allocatable: &Resources, r: ResourceName) -> f64 {
    let a = allocatable.get(r);
    if a == 0 {
        0.0
    } else {
        100.0 * requested.get(r) as f64 / a as f64
    }
}

/// The `p`th percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// `hh:mm:ss`.
pub fn hms(d: Duration) -> String {
    let s = d.as_secs();
    format!("{:02}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60)
}

/// What the journal says about the run's disruptions: NodeClaims drained by reason, commands
/// by method and outcome. Returns them with the last sequence number.
pub fn journaled(journal: &Journal<DomainEvent>) -> anyhow::Result<(Disruptions, u64)> {
    let mut out = Disruptions::default();
    let mut empty = EmptyNodes::default();
    for envelope in journal.read_from(0) {
        let envelope = envelope?;
        let at = envelope.recorded_at_ms;
        match envelope.event {
            DomainEvent::NodeClaimDraining { nodeclaim, reason } => {
                if reason == "empty"
                    && let Some(ms) = empty.drained(&nodeclaim, at)
                {
                    out.longest_empty_seconds = out.longest_empty_seconds.max(ms as f64 / 1000.0);
                }
                *out.by_reason.entry(reason).or_default() += 1;
            }
            DomainEvent::DisruptionDecided(r) => {
                *out.commands.entry(r.method.name().to_owned()).or_default() += 1;
                empty.replacements.insert(r.command, r.replacements.clone());
            }
            DomainEvent::DisruptionProgressed { command, phase } if phase.ended() => {
                let name = match phase {
                    Phase::Abandoned(_) => "Abandoned",
                    _ => "Done",
                };
                *out.outcomes.entry(name.to_owned()).or_default() += 1;
                empty.released(command, at);
            }
            event => empty.observe(&event, at),
        }
    }
    Ok((out, journal.last_seq()?.unwrap_or(0)))
}

/// When each initialized node last became empty, told from the journal's pod events.
#[derive(Debug, Default)]
struct EmptyNodes {
    /// NodeClaim → node.
    nodes: BTreeMap<String, String>,
    /// Node → the pods bound to it.
    pods: BTreeMap<String, std::collections::BTreeSet<String>>,
    /// Pod → its node.
    bound: BTreeMap<String, String>,
    /// Node → since when it has been initialized and empty.
    since: BTreeMap<String, i64>,
    /// Each command's replacements: held by it (not removable) until it ends.
    replacements: BTreeMap<u64, Vec<String>>,
}

impl EmptyNodes {
    fn observe(&mut self, event: &DomainEvent, at: i64) {
        match event {
            DomainEvent::NodeClaimRegistered { nodeclaim, node } => {
                self.nodes.insert(nodeclaim.clone(), node.clone());
            }
            DomainEvent::NodeClaimInitialized { nodeclaim } => {
                if let Some(node) = self.nodes.get(nodeclaim)
                    && self.pods.get(node).is_none_or(|p| p.is_empty())
                {
                    self.since.insert(node.clone(), at);
                }
            }
            DomainEvent::PodBound { uid, node, .. } => {
                self.unbind(uid, at);
                self.pods
                    .entry(node.clone())
                    .or_default()
                    .insert(uid.clone());
                self.bound.insert(uid.clone(), node.clone());
                self.since.remove(node);
            }
            DomainEvent::PodDeleted { uid } | DomainEvent::PodPending { uid, .. } => {
                self.unbind(uid, at);
            }
            _ => {}
        }
    }

    fn unbind(&mut self, uid: &str, at: i64) {
        let Some(node) = self.bound.remove(uid) else {
            return;
        };
        if let Some(pods) = self.pods.get_mut(&node) {
            pods.remove(uid);
            if pods.is_empty() && self.nodes.values().any(|n| *n == node) {
                self.since.insert(node, at);
            }
        }
    }

    /// A command ended: its replacements count as empty only from now on.
    fn released(&mut self, command: u64, at: i64) {
        for claim in self.replacements.remove(&command).unwrap_or_default() {
            if let Some(node) = self.nodes.get(&claim)
                && let Some(since) = self.since.get_mut(node)
            {
                *since = (*since).max(at);
            }
        }
    }

    /// How long the NodeClaim's node had been empty when its drain began, in ms.
    fn drained(&mut self, nodeclaim: &str, at: i64) -> Option<i64> {
        let node = self.nodes.get(nodeclaim)?;
        self.since.remove(node).map(|since| at - since)
    }
}

/// Start, peak and end of one series of samples, for people.
fn start_peak_end(samples: &[Sample], value: impl Fn(&Sample) -> f64, unit: &str) -> String {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return "-".into();
    };
    let peak = samples
        .iter()
        .max_by(|a, b| value(a).total_cmp(&value(b)))
        .unwrap_or(first);
    format!(
        "start {}{unit}, peak {}{unit} at {}, end {}{unit}",
        fmt(value(first)),
        fmt(value(peak)),
        hms(Duration::from_secs(peak.at_seconds)),
        fmt(value(last))
    )
}

fn fmt(v: f64) -> String {
    format!("{v:.2}")
}

/// `3 empty, 2 drifted`, or `none`.
pub fn counts(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "none".into();
    }
    map.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Prints the report for people.
pub fn print_report(report: &Report, journal: &Path) {
    println!(
        "== {} ({} simulated)",
        report.scenario,
        hms(Duration::from_secs(report.simulated_seconds))
    );
    println!(
        "nodes: {}  cost: ${:.2}/h",
        report.node_count, report.cost_per_hour
    );
    for g in &report.nodes {
        println!(
            "  {:>4} × {:<16} {:<9} ${:.3}/h",
            g.count, g.instance_type, g.capacity_type, g.cost_per_hour
        );
    }
    if let Some(scratch) = &report.from_scratch {
        let ratio = if scratch.cost_per_hour > 0.0 {
            format!("{:.3}", report.cost_per_hour / scratch.cost_per_hour)
        } else {
            "-".into()
        };
        println!(
            "from scratch: ${:.2}/h on {} nodes for the {} pods running (bound ${}/h); fleet / from scratch: {ratio}",
            scratch.cost_per_hour,
            scratch.nodes,
            scratch.pods,
            scratch.bound.map_or("-".into(), |b| format!("{b:.2}")),
        );
    }
    println!(
        "utilisation of requests: cpu {:.1}%  memory {:.1}%",
        report.cpu_utilisation, report.memory_utilisation
    );
    println!(
        "over the run: cost ($/h) {}; nodes {}; cpu utilisation (%) {}",
        start_peak_end(&report.samples, |s| s.cost_per_hour, ""),
        start_peak_end(&report.samples, |s| s.nodes as f64, ""),
        start_peak_end(&report.samples, |s| s.cpu_utilisation, ""),
    );
    println!(
        "pod pending latency: p50 {:.0}s  p99 {:.0}s",
        report.pending_p50, report.pending_p99
    );
    println!(
        "pods: {} bound, {} pending",
        report.pods_bound, report.pods_pending
    );
    for b in &report.buffers {
        let state = |c: &(bool, String, String)| {
            format!("{} ({}: {})", if c.0 { "True" } else { "False" }, c.1, c.2)
        };
        println!(
            "capacity buffer {}: {} chunk(s); ReadyForProvisioning {}; Provisioning {}",
            b.buffer,
            b.replicas.map_or("-".into(), |r| r.to_string()),
            state(&b.ready),
            b.provisioning.as_ref().map_or("-".into(), state)
        );
    }
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in report.unschedulable.values() {
        *reasons.entry(reason.as_str()).or_default() += 1;
    }
    for (reason, count) in reasons {
        println!("  {count} pending: {reason}");
    }
    println!(
        "nodeclaims: {} launched, {} terminated; scheduling rounds: {}",
        report.nodeclaims_launched, report.nodeclaims_terminated, report.rounds
    );
    let d = &report.disruptions;
    println!(
        "disruptions: {}; commands: {} ({}); {} DisruptionBlocked event(s); {} passes, {} simulations",
        counts(&d.by_reason),
        counts(&d.commands),
        counts(&d.outcomes),
        d.blocked_events,
        d.passes,
        d.simulations
    );
    if d.repair_blocked_events > 0 {
        println!(
            "  node repair blocked: {} NodeRepairBlocked event(s) on nodes (more than 20% of a NodePool unhealthy)",
            d.repair_blocked_events
        );
    }
    println!(
        "  the longest a node removed as empty stayed empty: {:.0}s",
        d.longest_empty_seconds
    );
    if d.stale_marks > 0 {
        println!(
            "LEFT MARKED: {} node(s) marked for disruption by no command",
            d.stale_marks
        );
    }
    if d.protected_evictions > 0 || d.pods_lost_with_node > 0 {
        println!(
            "  {} do-not-disrupt pod(s) evicted; {} pod(s) went with their node (taken back by the cloud, or out of grace)",
            d.protected_evictions, d.pods_lost_with_node
        );
    }
    println!(
        "interruptions: {} received, {} handled; evictions: {} ({} refused by PDBs)",
        report.interruptions.received,
        report.interruptions.delivered,
        report.evictions.0,
        report.evictions.1
    );
    if report.cloud_retries != (0, 0) {
        println!(
            "cloud API: {} retries after backing off, {} failed attempts",
            report.cloud_retries.0, report.cloud_retries.1
        );
    }
    if report.leaked_instances > 0 {
        println!(
            "LEAKED: {} instance(s) running without a NodeClaim",
            report.leaked_instances
        );
    }
    for failure in &report.actor_failures {
        println!("actor failure: {failure}");
    }
    println!(
        "journal: {} (last seq {})",
        journal.display(),
        report.journal_last_seq
    );
}
