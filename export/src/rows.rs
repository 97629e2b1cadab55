//! The tables, read from the journal's events in one pass ([`Projector`]): pure, no files.
//!
//! Times are the journal's (`recorded_at_ms`, UTC). The export covers the events it is
//! given: a NodeClaim running when they start counts from their first event, one running
//! when they end until their last, so the fleet's dollars and the NodeClaims' costs add
//! up to the same figure over the same span.

use std::collections::BTreeMap;

use karpenter_core::events::disruption::{DisruptionRecord, Phase, reason_name};
use karpenter_core::events::{ClusterView, DomainEvent, NodeClaimPlan};
use karpenter_journal::Envelope;

/// A NodeClaim's life.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeClaimRow {
    /// Its name.
    pub nodeclaim: String,
    /// Its NodePool.
    pub nodepool: String,
    /// The scheduling round that planned it (none for a disruption's replacement).
    pub round: Option<u64>,
    /// The disruption command it replaces candidates of.
    pub replacement_for: Option<u64>,
    /// Pods planned onto it.
    pub pods_planned: u64,
    /// When it was first seen (planned, or running when the export's events start).
    pub first_seen_at: i64,
    /// When it was planned.
    pub planned_at: Option<i64>,
    /// When the cloud launched its instance.
    pub launched_at: Option<i64>,
    /// When its node registered.
    pub registered_at: Option<i64>,
    /// When its node became Ready.
    pub initialized_at: Option<i64>,
    /// When it started draining.
    pub draining_at: Option<i64>,
    /// When it was gone.
    pub terminated_at: Option<i64>,
    /// The instance.
    pub instance_id: Option<String>,
    /// Its instance type.
    pub instance_type: Option<String>,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: Option<String>,
    /// Its zone.
    pub zone: Option<String>,
    /// $/h.
    pub price_per_hour: Option<f64>,
    /// Launch attempts that failed.
    pub launch_failures: u64,
    /// The disruption command that removed it.
    pub disruption_command: Option<u64>,
    /// That command's reason (`Empty`, `Underutilized`, `Drifted`).
    pub disruption_reason: Option<String>,
    /// Why it drained (a disruption's method, an interruption, an expiry, …).
    pub drain_reason: Option<String>,
    /// Why it ended.
    pub end_reason: Option<String>,
    /// Hours its instance ran within the export's span.
    pub running_hours: f64,
    /// `price_per_hour × running_hours`.
    pub cost: f64,
}

/// One wait of a pod: from pending to bound, deleted, or the end of the events.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodRow {
    /// UID.
    pub uid: String,
    /// `namespace/name`.
    pub pod: String,
    /// When it became pending.
    pub pending_at: i64,
    /// When it was bound.
    pub bound_at: Option<i64>,
    /// When it was deleted while pending.
    pub deleted_at: Option<i64>,
    /// `bound`, `deleted` or `pending` (still, at the end).
    pub outcome: String,
    /// Seconds it waited.
    pub wait_seconds: f64,
    /// The node it was bound to.
    pub node: Option<String>,
    /// That node's NodeClaim.
    pub nodeclaim: Option<String>,
    /// Whether that NodeClaim was planned for this pod.
    pub new_node: bool,
    /// Rounds that placed it, planned a NodeClaim for it or left it unschedulable.
    pub rounds: u64,
    /// The last reason a round gave for leaving it unschedulable.
    pub last_unschedulable: Option<String>,
    /// Nominations to a NodeClaim that kube-scheduler did not honour in time.
    pub nominations_expired: u64,
    /// Why it waited that long, in one line.
    pub why: String,
}

/// A disruption command.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DisruptionRow {
    /// Its number.
    pub command: u64,
    /// When it was decided.
    pub decided_at: i64,
    /// `Emptiness`, `Drift`, `MultiNodeConsolidation`, …
    pub method: String,
    /// `Empty`, `Underutilized` or `Drifted`.
    pub reason: String,
    /// NodeClaims it disrupts.
    pub candidates: u64,
    /// Their names, comma-separated.
    pub candidate_nodeclaims: String,
    /// What they cost, $/h.
    pub candidates_cost_per_hour: f64,
    /// NodeClaims it launched first.
    pub replacements: u64,
    /// Pods it moved.
    pub pods_moved: u64,
    /// $/h the candidates cost less what the replacements would, as decided.
    pub savings_per_hour: f64,
    /// `Done`, `Abandoned`, or the phase it was in when the events end.
    pub outcome: String,
    /// Why it was abandoned.
    pub abandoned_because: Option<String>,
    /// When it ended.
    pub ended_at: Option<i64>,
}

/// A scheduling round.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoundRow {
    /// Its number.
    pub round: u64,
    /// When it finished.
    pub at: i64,
    /// Pods it considered.
    pub pods: u64,
    /// Pods it bound to running nodes.
    pub bound_to_running: u64,
    /// NodeClaims it planned.
    pub nodeclaims: u64,
    /// Pods it left unschedulable.
    pub unschedulable: u64,
    /// How long it took to compute, µs.
    pub duration_us: u64,
    /// $/h of the NodeClaims it planned (each at its cheapest option).
    pub cost_per_hour: f64,
    /// $/h first-fit decreasing would have planned (solved again from its recorded input).
    pub ffd_cost_per_hour: Option<f64>,
    /// The lower bound no plan can beat, $/h (the LP relaxation of its recorded input).
    pub bound_per_hour: Option<f64>,
}

/// A stretch of time over which the fleet's running instances did not change.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetRow {
    /// Start (inclusive).
    pub from_at: i64,
    /// End (exclusive).
    pub to_at: i64,
    /// Its length.
    pub seconds: f64,
    /// $/h of the running instances.
    pub cost_per_hour: f64,
    /// Running instances.
    pub nodes: u64,
    /// Of them, spot.
    pub spot_nodes: u64,
    /// Of them, on-demand.
    pub on_demand_nodes: u64,
    /// Of them, reserved.
    pub reserved_nodes: u64,
}

/// Every table of one journal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tables {
    /// NodeClaims.
    pub nodeclaims: Vec<NodeClaimRow>,
    /// Pod waits.
    pub pods: Vec<PodRow>,
    /// Disruption commands.
    pub disruptions: Vec<DisruptionRow>,
    /// Scheduling rounds.
    pub rounds: Vec<RoundRow>,
    /// The fleet over time, split at midnight UTC.
    pub fleet: Vec<FleetRow>,
    /// The first and last event's times.
    pub span: Option<(i64, i64)>,
}

/// A pod's current wait.
#[derive(Debug, Default)]
struct Waiting {
    row: PodRow,
    /// The NodeClaim last planned for it.
    planned: Option<String>,
}

/// Reads events into [`Tables`].
#[derive(Debug, Default)]
pub struct Projector {
    claims: BTreeMap<String, NodeClaimRow>,
    /// Running instances: price and capacity type.
    running: BTreeMap<String, (f64, String)>,
    node_claims: BTreeMap<String, String>,
    waiting: BTreeMap<String, Waiting>,
    names: BTreeMap<String, String>,
    pods: Vec<PodRow>,
    disruptions: BTreeMap<u64, DisruptionRow>,
    /// Replacement NodeClaim → its command.
    replacing: BTreeMap<String, u64>,
    rounds: Vec<RoundRow>,
    /// Per round, the cheapest option's $/h of each NodeClaim it planned.
    planned_cost: BTreeMap<u64, Vec<f64>>,
    fleet: Vec<FleetRow>,
    /// Where the current fleet stretch started.
    stretch_from: Option<i64>,
    span: Option<(i64, i64)>,
}

const DAY_MS: i64 = 86_400_000;
const HOUR_MS: f64 = 3_600_000.0;

impl Projector {
    /// A projector for events that follow `view` (the state a trimmed journal starts
    /// from), the first of them at `at_ms`.
    pub fn after(view: &ClusterView, at_ms: i64) -> Projector {
        let mut out = Projector::default();
        for (name, claim) in view.live_nodeclaims() {
            let mut row = NodeClaimRow {
                nodeclaim: name.clone(),
                nodepool: claim.nodepool.clone(),
                round: (claim.round > 0).then_some(claim.round),
                pods_planned: claim.planned_pods as u64,
                first_seen_at: at_ms,
                ..NodeClaimRow::default()
            };
            if let Some(instance) = &claim.instance {
                fill_instance(&mut row, instance);
                out.running.insert(
                    name.clone(),
                    (instance.price, instance.capacity_type.to_string()),
                );
            }
            if let Some(node) = &claim.node {
                out.node_claims.insert(node.clone(), name.clone());
            }
            out.claims.insert(name.clone(), row);
        }
        for (uid, pod) in &view.pending {
            out.start_wait(uid, pod, at_ms);
        }
        out.names = view.names.clone();
        out
    }

    /// Reads one event.
    pub fn observe(&mut self, envelope: &Envelope<DomainEvent>) {
        let at = envelope.recorded_at_ms;
        self.span = Some(match self.span {
            Some((first, _)) => (first, at),
            None => (at, at),
        });
        self.stretch_from.get_or_insert(at);
        match &envelope.event {
            DomainEvent::PodPending { uid, pod, .. } => {
                self.names.insert(uid.clone(), pod.clone());
                self.start_wait(uid, pod, at);
            }
            DomainEvent::PodBound { uid, node, .. } => self.bound(uid, node, at),
            DomainEvent::PodDeleted { uid } => {
                if let Some(mut waiting) = self.waiting.remove(uid) {
                    waiting.row.deleted_at = Some(at);
                    waiting.row.outcome = "deleted".into();
                    self.end_wait(waiting, at);
                }
            }
            DomainEvent::NominationExpired { uid, .. } => {
                if let Some(waiting) = self.waiting.get_mut(uid) {
                    waiting.row.nominations_expired += 1;
                }
            }
            DomainEvent::RoundCompleted(record) => self.round(record, at),
            DomainEvent::NodeClaimPlanned(plan) => self.planned(plan, at),
            DomainEvent::NodeClaimLaunched {
                nodeclaim,
                instance,
            } => {
                let row = self.claim(nodeclaim, at);
                row.launched_at = Some(at);
                fill_instance(row, instance);
                let price = (instance.price, instance.capacity_type.to_string());
                self.fleet_changes(at);
                self.running.insert(nodeclaim.clone(), price);
            }
            DomainEvent::LaunchFailed { nodeclaim, .. } => {
                self.claim(nodeclaim, at).launch_failures += 1;
            }
            DomainEvent::NodeClaimRegistered { nodeclaim, node } => {
                self.claim(nodeclaim, at).registered_at = Some(at);
                self.node_claims.insert(node.clone(), nodeclaim.clone());
            }
            DomainEvent::NodeClaimInitialized { nodeclaim } => {
                self.claim(nodeclaim, at).initialized_at = Some(at);
            }
            DomainEvent::NodeClaimDraining { nodeclaim, reason } => {
                let row = self.claim(nodeclaim, at);
                row.draining_at.get_or_insert(at);
                row.drain_reason.get_or_insert_with(|| reason.clone());
            }
            DomainEvent::NodeClaimTerminated { nodeclaim, reason } => {
                let row = self.claim(nodeclaim, at);
                row.terminated_at = Some(at);
                row.end_reason = Some(reason.clone());
                if self.running.contains_key(nodeclaim) {
                    self.fleet_changes(at);
                    self.running.remove(nodeclaim);
                }
            }
            DomainEvent::DisruptionDecided(record) => self.decided(record, at),
            DomainEvent::DisruptionProgressed { command, phase } => {
                if let Some(row) = self.disruptions.get_mut(command) {
                    row.outcome = phase.name().to_owned();
                    if phase.ended() {
                        row.ended_at = Some(at);
                    }
                    if let Phase::Abandoned(why) = phase {
                        row.abandoned_because = Some(why.clone());
                    }
                }
            }
            DomainEvent::NodePoolObserved { .. }
            | DomainEvent::NominationsChecked(_)
            | DomainEvent::InstanceTypesObserved { .. }
            | DomainEvent::LaunchRequested { .. }
            | DomainEvent::InterruptionReceived { .. }
            | DomainEvent::NodeClaimTerminating { .. }
            | DomainEvent::InterruptionMessage { .. }
            | DomainEvent::InstanceGarbageCollected { .. }
            | DomainEvent::JournalTrimmed { .. }
            | DomainEvent::JournalShipped { .. }
            | DomainEvent::HistoryTakenOver(_) => {}
        }
    }

    /// The tables, closing what is still open at the last event.
    pub fn finish(mut self) -> Tables {
        let Some((first, last)) = self.span else {
            return Tables::default();
        };
        self.fleet_changes(last);
        for (_, waiting) in std::mem::take(&mut self.waiting) {
            let mut waiting = waiting;
            waiting.row.outcome = "pending".into();
            self.end_wait(waiting, last);
        }
        let mut nodeclaims: Vec<NodeClaimRow> = self.claims.into_values().collect();
        for row in &mut nodeclaims {
            if let Some(price) = row.price_per_hour {
                let from = row.launched_at.unwrap_or(first).max(first);
                let to = row.terminated_at.unwrap_or(last).min(last);
                row.running_hours = (to - from).max(0) as f64 / HOUR_MS;
                row.cost = price * row.running_hours;
            }
        }
        for round in &mut self.rounds {
            if let Some(costs) = self.planned_cost.get(&round.round) {
                round.cost_per_hour = karpenter_core::model::total_price(costs.iter().copied());
            }
        }
        nodeclaims
            .sort_by(|a, b| (a.first_seen_at, &a.nodeclaim).cmp(&(b.first_seen_at, &b.nodeclaim)));
        self.pods
            .sort_by(|a, b| (a.pending_at, &a.uid).cmp(&(b.pending_at, &b.uid)));
        Tables {
            nodeclaims,
            pods: self.pods,
            disruptions: self.disruptions.into_values().collect(),
            rounds: self.rounds,
            fleet: self.fleet,
            span: self.span,
        }
    }

    fn planned(&mut self, plan: &NodeClaimPlan, at: i64) {
        let row = self.claims.entry(plan.nodeclaim.clone()).or_default();
        row.nodeclaim = plan.nodeclaim.clone();
        row.nodepool = plan.nodepool.clone();
        row.first_seen_at = at;
        row.planned_at = Some(at);
        row.pods_planned = plan.pods.len() as u64;
        match self.replacing.get(&plan.nodeclaim) {
            Some(command) => row.replacement_for = Some(*command),
            None => {
                row.round = Some(plan.round);
                for uid in &plan.pods {
                    if let Some(waiting) = self.waiting.get_mut(uid) {
                        waiting.row.rounds += 1;
                    }
                }
                if let Some(cheapest) = plan.instance_types.first() {
                    let costs = self.planned_cost.entry(plan.round).or_default();
                    costs.push(cheapest.price);
                }
            }
        }
        for uid in &plan.pods {
            if let Some(waiting) = self.waiting.get_mut(uid) {
                waiting.planned = Some(plan.nodeclaim.clone());
            }
        }
    }

    fn decided(&mut self, record: &DisruptionRecord, at: i64) {
        let reason = reason_name(record.method.reason()).to_owned();
        let candidates_cost = karpenter_core::model::total_price(
            record
                .candidates
                .iter()
                .filter_map(|m| self.claims.get(&m.nodeclaim)?.price_per_hour),
        );
        for member in &record.candidates {
            let row = self.claim(&member.nodeclaim, at);
            row.disruption_command = Some(record.command);
            row.disruption_reason = Some(reason.clone());
        }
        for replacement in &record.replacements {
            self.replacing.insert(replacement.clone(), record.command);
        }
        self.disruptions.insert(
            record.command,
            DisruptionRow {
                command: record.command,
                decided_at: at,
                method: record.method.name().to_owned(),
                reason,
                candidates: record.candidates.len() as u64,
                candidate_nodeclaims: record
                    .candidates
                    .iter()
                    .map(|m| m.nodeclaim.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                candidates_cost_per_hour: candidates_cost,
                replacements: record.replacements.len() as u64,
                pods_moved: record.moved.len() as u64,
                savings_per_hour: record.savings,
                outcome: Phase::WaitingReadiness.name().to_owned(),
                abandoned_because: None,
                ended_at: None,
            },
        );
    }

    fn claim(&mut self, name: &str, at: i64) -> &mut NodeClaimRow {
        self.claims
            .entry(name.to_owned())
            .or_insert_with(|| NodeClaimRow {
                nodeclaim: name.to_owned(),
                first_seen_at: at,
                ..NodeClaimRow::default()
            })
    }

    fn start_wait(&mut self, uid: &str, pod: &str, at: i64) {
        self.waiting
            .entry(uid.to_owned())
            .or_insert_with(|| Waiting {
                row: PodRow {
                    uid: uid.to_owned(),
                    pod: pod.to_owned(),
                    pending_at: at,
                    ..PodRow::default()
                },
                planned: None,
            });
    }

    fn bound(&mut self, uid: &str, node: &str, at: i64) {
        let Some(mut waiting) = self.waiting.remove(uid) else {
            return;
        };
        if let Some(pod) = self.names.get(uid)
            && waiting.row.pod.is_empty()
        {
            waiting.row.pod = pod.clone();
        }
        waiting.row.bound_at = Some(at);
        waiting.row.outcome = "bound".into();
        waiting.row.node = Some(node.to_owned());
        waiting.row.nodeclaim = self.node_claims.get(node).cloned();
        waiting.row.new_node =
            waiting.row.nodeclaim.is_some() && waiting.row.nodeclaim == waiting.planned;
        self.end_wait(waiting, at);
    }

    fn end_wait(&mut self, waiting: Waiting, at: i64) {
        let Waiting { mut row, .. } = waiting;
        row.wait_seconds = (at - row.pending_at).max(0) as f64 / 1000.0;
        row.why = why(
            &row,
            row.nodeclaim.as_deref().and_then(|c| self.claims.get(c)),
        );
        self.pods.push(row);
    }

    fn round(&mut self, record: &karpenter_core::events::RoundRecord, at: i64) {
        let mut seen = std::collections::BTreeSet::new();
        for (uid, _) in &record.bindings {
            seen.insert(uid.as_str());
        }
        for (uid, reason) in &record.unschedulable {
            seen.insert(uid.as_str());
            if let Some(waiting) = self.waiting.get_mut(uid) {
                waiting.row.last_unschedulable = Some(reason.clone());
            }
        }
        for uid in seen {
            if let Some(waiting) = self.waiting.get_mut(uid) {
                waiting.row.rounds += 1;
            }
        }
        self.rounds.push(RoundRow {
            round: record.round,
            at,
            pods: record.pods as u64,
            bound_to_running: record.bindings.len() as u64,
            nodeclaims: record.nodeclaims.len() as u64,
            unschedulable: record.unschedulable.len() as u64,
            duration_us: record.duration_us,
            cost_per_hour: 0.0,
            ffd_cost_per_hour: None,
            bound_per_hour: None,
        });
    }

    /// The running instances change at `at`: the stretch before it ends.
    fn fleet_changes(&mut self, at: i64) {
        let Some(from) = self.stretch_from else {
            return;
        };
        if at > from {
            let cost = karpenter_core::model::total_price(self.running.values().map(|r| r.0));
            let count =
                |capacity: &str| self.running.values().filter(|r| r.1 == capacity).count() as u64;
            let (spot, on_demand, reserved) =
                (count("spot"), count("on-demand"), count("reserved"));
            let mut start = from;
            while start < at {
                let end = at.min((start.div_euclid(DAY_MS) + 1) * DAY_MS);
                self.fleet.push(FleetRow {
                    from_at: start,
                    to_at: end,
                    seconds: (end - start) as f64 / 1000.0,
                    cost_per_hour: cost,
                    nodes: self.running.len() as u64,
                    spot_nodes: spot,
                    on_demand_nodes: on_demand,
                    reserved_nodes: reserved,
                });
                start = end;
            }
        }
        self.stretch_from = Some(at);
    }
}

fn fill_instance(row: &mut NodeClaimRow, instance: &karpenter_core::ports::Instance) {
    row.instance_id = Some(instance.id.clone());
    row.instance_type = Some(instance.instance_type.clone());
    row.capacity_type = Some(instance.capacity_type.to_string());
    row.zone = Some(instance.zone.clone());
    row.price_per_hour = Some(instance.price);
    if row.nodepool.is_empty() {
        row.nodepool = instance.nodepool.clone();
    }
}

/// Why a pod waited, in one line: what the rounds said, and what it waited for.
fn why(row: &PodRow, claim: Option<&NodeClaimRow>) -> String {
    let mut parts = Vec::new();
    if let Some(reason) = &row.last_unschedulable {
        parts.push(format!("unschedulable (last: {reason})"));
    }
    if row.nominations_expired > 0 {
        parts.push(format!(
            "{} nomination(s) not honoured in time",
            row.nominations_expired
        ));
    }
    let after = |at: Option<i64>| at.map(|t| (t - row.pending_at) as f64 / 1000.0);
    match (row.outcome.as_str(), claim) {
        ("bound", Some(claim)) if row.new_node => {
            let mut steps = Vec::new();
            for (what, at) in [
                ("planned", claim.planned_at),
                ("launched", claim.launched_at),
                ("registered", claim.registered_at),
                ("initialized", claim.initialized_at),
            ] {
                if let Some(seconds) = after(at) {
                    steps.push(format!("{what} +{seconds:.0}s"));
                }
            }
            parts.push(format!(
                "waited for a new node: NodeClaim {} ({} {}) {}",
                claim.nodeclaim,
                claim.instance_type.as_deref().unwrap_or("?"),
                claim.capacity_type.as_deref().unwrap_or("?"),
                steps.join(", ")
            ));
        }
        ("bound", _) => parts.push(format!(
            "bound to a running node ({})",
            row.node.as_deref().unwrap_or("?")
        )),
        ("deleted", _) => parts.push("deleted while pending".into()),
        _ => parts.push("still pending when the journal ends".into()),
    }
    parts.join("; ")
}
