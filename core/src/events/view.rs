//! [`ClusterView`]: the state `journal replay`, a restart and the journal keeper rebuild by
//! folding the events, and [`NodeClaimView`], the one fold of a NodeClaim's lifecycle.

use std::collections::BTreeMap;

use karpenter_journal::{Envelope, JournalError, Projection, RawRecord};
use serde::{Deserialize, Serialize};

use super::{DomainEvent, NodeClaimPlan, NodeClaimState, disruption};
use crate::ports::Instance;
use crate::scheduling::InstanceTypeOption;

/// A NodeClaim as replay sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeClaimView {
    /// NodePool.
    pub nodepool: String,
    /// Lifecycle state.
    pub state: NodeClaimState,
    /// The instance, once launched.
    pub instance: Option<Instance>,
    /// Node name, once registered.
    pub node: Option<String>,
    /// Pods planned onto it.
    pub planned_pods: usize,
    /// The round that planned it.
    pub round: u64,
    /// How it ended, once terminated.
    pub ended: Option<String>,
    /// The idempotency token of its launch, once the intent was recorded.
    #[serde(default)]
    pub client_token: Option<String>,
    /// Candidate instance types of its plan, cheapest first (for a relaunch).
    #[serde(default)]
    pub instance_types: Vec<InstanceTypeOption>,
    /// Pods planned onto it.
    #[serde(default)]
    pub pods: Vec<String>,
    /// Planned without its minValues (BestEffort).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub min_values_relaxed: bool,
    /// Why it is being drained or terminated, once it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl NodeClaimView {
    /// A NodeClaim as its round planned it.
    pub fn planned(plan: &NodeClaimPlan) -> NodeClaimView {
        NodeClaimView {
            nodepool: plan.nodepool.clone(),
            state: NodeClaimState::Pending,
            instance: None,
            node: None,
            planned_pods: plan.pods.len(),
            round: plan.round,
            ended: None,
            client_token: None,
            instance_types: plan.instance_types.clone(),
            pods: plan.pods.clone(),
            min_values_relaxed: plan.min_values_relaxed,
            reason: None,
        }
    }

    /// The one fold of a NodeClaim's lifecycle: replay ([`ClusterView`]) and the live
    /// NodeClaim actor both change a NodeClaim only through it. Events about other
    /// entities, and events that change no state, leave it as it is; an ended NodeClaim
    /// stays ended.
    pub fn apply(&mut self, event: &DomainEvent) {
        if self.state == NodeClaimState::Terminated {
            return;
        }
        match event {
            DomainEvent::LaunchRequested { client_token, .. } => {
                self.client_token = Some(client_token.clone());
            }
            DomainEvent::NodeClaimLaunched { instance, .. } => {
                self.state = NodeClaimState::Launched;
                self.instance = Some((**instance).clone());
            }
            DomainEvent::NodeClaimRegistered { node, .. } => {
                self.state = NodeClaimState::Registered;
                self.node = Some(node.clone());
            }
            DomainEvent::NodeClaimInitialized { .. } => self.state = NodeClaimState::Initialized,
            DomainEvent::NodeClaimDraining { reason, .. } => {
                self.state = NodeClaimState::Draining;
                self.reason = Some(reason.clone());
            }
            DomainEvent::NodeClaimTerminating { reason, .. } => {
                self.state = NodeClaimState::Terminating;
                self.reason = Some(reason.clone());
            }
            DomainEvent::NodeClaimTerminated { reason, .. } => {
                self.state = NodeClaimState::Terminated;
                self.ended = Some(reason.clone());
                // Only a relaunch needs the candidates; the journal keeps them for `explain`.
                self.instance_types = Vec::new();
            }
            DomainEvent::NodePoolObserved { .. }
            | DomainEvent::PodPending { .. }
            | DomainEvent::PodBound { .. }
            | DomainEvent::PodDeleted { .. }
            | DomainEvent::NominationExpired { .. }
            | DomainEvent::NominationsChecked(_)
            | DomainEvent::RoundCompleted(_)
            | DomainEvent::InstanceTypesObserved { .. }
            | DomainEvent::NodeClaimPlanned(_)
            | DomainEvent::LaunchFailed { .. }
            | DomainEvent::InterruptionReceived { .. }
            | DomainEvent::InterruptionMessage { .. }
            | DomainEvent::InstanceGarbageCollected { .. }
            | DomainEvent::DisruptionDecided(_)
            | DomainEvent::DisruptionProgressed { .. }
            | DomainEvent::JournalTrimmed { .. }
            | DomainEvent::JournalShipped { .. }
            | DomainEvent::HistoryTakenOver(_) => {}
        }
    }
}

/// The state `journal replay` rebuilds: NodePools, NodeClaims and pending pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// NodePools by name, with their weight.
    pub nodepools: BTreeMap<String, i32>,
    /// NodeClaims by name (terminated ones included).
    pub nodeclaims: BTreeMap<String, NodeClaimView>,
    /// Pending pods by UID (`namespace/name`).
    pub pending: BTreeMap<String, String>,
    /// Bound pods by UID, with their node.
    pub bound: BTreeMap<String, String>,
    /// `namespace/name` of the pending and bound pods, where the journal recorded it (what
    /// a restarted simulation recreates them as).
    #[serde(default)]
    pub names: BTreeMap<String, String>,
    /// Last round number.
    pub last_round: u64,
    /// Disruption commands by number, as they stand (ended ones included).
    #[serde(default)]
    pub disruptions: BTreeMap<u64, disruption::Command>,
    /// The highest disruption command number seen (ended commands are forgotten after
    /// [`ENDED_KEPT_MS`], their numbers are not).
    #[serde(default)]
    pub last_disruption: u64,
    /// The instance-type sets the journal holds, by digest: where and when rounds used them.
    #[serde(default)]
    pub catalogs: BTreeMap<String, CatalogUse>,
    /// The catalogs of the last round that recorded its input (a round that repeats it used
    /// the same).
    #[serde(default)]
    pub round_catalogs: Vec<String>,
    /// When each terminated NodeClaim ended (journal clock, ms).
    #[serde(default)]
    pub ended_at_ms: BTreeMap<String, i64>,
    /// When ended NodeClaims and commands were last forgotten (journal clock, ms).
    #[serde(default)]
    pub pruned_at_ms: i64,
}

/// Terminated NodeClaims and ended disruption commands stay in the view this long (journal
/// clock) after they end, so a long-running controller's view, and its snapshots, stay the
/// size of its live fleet.
pub const ENDED_KEPT_MS: i64 = 24 * 3600 * 1000;

/// How often the view forgets what ended more than [`ENDED_KEPT_MS`] ago.
const PRUNE_EVERY_MS: i64 = 3600 * 1000;

/// Where the journal holds an instance-type set and when rounds last referred to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogUse {
    /// The sequence number of its newest `InstanceTypesObserved` record.
    pub recorded_seq: u64,
    /// The sequence number of the last round that used it (its record, if none did).
    pub last_used_seq: u64,
    /// When that was (journal clock, ms).
    pub last_used_ms: i64,
}

impl ClusterView {
    /// NodeClaims not terminated.
    pub fn live_nodeclaims(&self) -> impl Iterator<Item = (&String, &NodeClaimView)> {
        self.nodeclaims
            .iter()
            .filter(|(_, c)| c.state != NodeClaimState::Terminated)
    }

    /// NodeClaims whose launch intent (`LaunchRequested`) is recorded and that have not
    /// ended: each may own an instance, whatever the cloud's listing says of it.
    pub fn open_launches(&self) -> std::collections::BTreeSet<String> {
        self.live_nodeclaims()
            .filter(|(_, c)| c.client_token.is_some())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Disruption commands that have not ended (to finish or roll back after a restart).
    pub fn disruptions_in_flight(&self) -> impl Iterator<Item = &disruption::Command> {
        self.disruptions.values().filter(|c| !c.phase.ended())
    }

    /// The last disruption command's number (0 when none was decided).
    pub fn last_disruption(&self) -> u64 {
        let kept = self.disruptions.keys().next_back().copied().unwrap_or(0);
        kept.max(self.last_disruption)
    }

    /// The catalogs whose newest record is at or before `cut` that must outlive a cut there:
    /// those a round or disruption decision after `cut` used, and those the scheduler takes
    /// as recorded (`remembered`: it will refer to them without recording them again). By
    /// digest, with that record's sequence number.
    pub fn catalogs_to_carry(
        &self,
        cut: u64,
        remembered: &std::collections::BTreeSet<String>,
    ) -> Vec<(String, u64)> {
        self.catalogs
            .iter()
            .filter(|(digest, u)| {
                u.recorded_seq <= cut && (u.last_used_seq > cut || remembered.contains(*digest))
            })
            .map(|(digest, u)| (digest.clone(), u.recorded_seq))
            .collect()
    }

    /// The catalogs rounds used within `within_ms` of `now_ms`, with when they were last used:
    /// what a restarted scheduler may take as recorded.
    pub fn recent_catalogs(&self, now_ms: i64, within_ms: i64) -> BTreeMap<String, i64> {
        self.catalogs
            .iter()
            .filter(|(_, u)| u.last_used_ms >= now_ms - within_ms)
            .map(|(digest, u)| (digest.clone(), u.last_used_ms))
            .collect()
    }

    /// Folds a record as read from the journal. An `InstanceTypesObserved` payload (megabytes
    /// of instance types, of which the view keeps only where they are) is not decoded; any
    /// other is, as [`Projection::apply`] would be given it.
    pub fn apply_raw(&mut self, raw: RawRecord) -> Result<(), JournalError> {
        if DomainEvent::is_catalog_record(&raw, &raw.name) {
            self.catalog_recorded(&raw.name, raw.seq, raw.recorded_at_ms);
            self.prune(raw.recorded_at_ms);
        } else if let Some(envelope) = karpenter_journal::decode_record::<DomainEvent>(raw)? {
            self.apply(&envelope);
        }
        Ok(())
    }

    fn catalog_recorded(&mut self, digest: &str, seq: u64, at_ms: i64) {
        self.catalogs.insert(
            digest.to_owned(),
            CatalogUse {
                recorded_seq: seq,
                last_used_seq: seq,
                last_used_ms: at_ms,
            },
        );
    }

    /// Forgets NodeClaims and disruption commands that ended more than [`ENDED_KEPT_MS`]
    /// before `now_ms`, at most once per [`PRUNE_EVERY_MS`].
    fn prune(&mut self, now_ms: i64) {
        if now_ms - self.pruned_at_ms < PRUNE_EVERY_MS {
            return;
        }
        self.pruned_at_ms = now_ms;
        let horizon = now_ms - ENDED_KEPT_MS;
        let ended_at = &mut self.ended_at_ms;
        self.nodeclaims.retain(|name, _| {
            let keep = ended_at.get(name).is_none_or(|ended| *ended >= horizon);
            if !keep {
                ended_at.remove(name);
            }
            keep
        });
        self.last_disruption = self.last_disruption();
        self.disruptions
            .retain(|_, c| !c.phase.ended() || c.started_ms >= horizon);
    }

    /// $/h of the launched, not yet terminated instances.
    pub fn cost_per_hour(&self) -> f64 {
        crate::model::total_price(
            self.live_nodeclaims()
                .filter_map(|(_, c)| c.instance.as_ref().map(|i| i.price)),
        )
    }
}

impl Projection<DomainEvent> for ClusterView {
    const SNAPSHOT_VERSION: u16 = 1;

    fn apply(&mut self, envelope: &Envelope<DomainEvent>) {
        match &envelope.event {
            DomainEvent::NodePoolObserved {
                nodepool, weight, ..
            } => {
                self.nodepools.insert(nodepool.clone(), *weight);
            }
            DomainEvent::PodPending { uid, pod, .. } => {
                self.bound.remove(uid);
                self.pending.insert(uid.clone(), pod.clone());
                self.names.insert(uid.clone(), pod.clone());
            }
            DomainEvent::PodBound { uid, node, pod } => {
                self.pending.remove(uid);
                self.bound.insert(uid.clone(), node.clone());
                if let Some(pod) = pod {
                    self.names.insert(uid.clone(), pod.clone());
                }
            }
            DomainEvent::PodDeleted { uid } => {
                self.pending.remove(uid);
                self.bound.remove(uid);
                self.names.remove(uid);
            }
            DomainEvent::RoundCompleted(r) => {
                self.last_round = r.round;
                if let Some(input) = &r.input {
                    self.round_catalogs =
                        input.nodepools.iter().map(|p| p.catalog.clone()).collect();
                }
                let at = (envelope.seq, envelope.recorded_at_ms);
                use_catalogs(&mut self.catalogs, &self.round_catalogs, at);
            }
            DomainEvent::InstanceTypesObserved { digest, .. } => {
                self.catalog_recorded(digest, envelope.seq, envelope.recorded_at_ms);
            }
            DomainEvent::JournalTrimmed { through, .. } => {
                self.catalogs.retain(|_, u| u.recorded_seq > *through);
            }
            DomainEvent::NodeClaimPlanned(plan) => {
                self.nodeclaims
                    .insert(plan.nodeclaim.clone(), NodeClaimView::planned(plan));
            }
            DomainEvent::LaunchRequested { nodeclaim, .. }
            | DomainEvent::NodeClaimLaunched { nodeclaim, .. }
            | DomainEvent::NodeClaimRegistered { nodeclaim, .. }
            | DomainEvent::NodeClaimInitialized { nodeclaim }
            | DomainEvent::NodeClaimDraining { nodeclaim, .. }
            | DomainEvent::NodeClaimTerminating { nodeclaim, .. }
            | DomainEvent::NodeClaimTerminated { nodeclaim, .. } => {
                if let Some(c) = self.nodeclaims.get_mut(nodeclaim) {
                    c.apply(&envelope.event);
                    if c.state == NodeClaimState::Terminated {
                        self.ended_at_ms
                            .entry(nodeclaim.clone())
                            .or_insert(envelope.recorded_at_ms);
                    }
                }
            }
            DomainEvent::DisruptionDecided(record) => {
                if let Some(base) = record.input.as_ref().and_then(|i| i.base.as_ref()) {
                    let used = base.nodepools.iter().map(|p| &p.catalog);
                    let at = (envelope.seq, envelope.recorded_at_ms);
                    use_catalogs(&mut self.catalogs, used, at);
                }
                self.disruptions.insert(
                    record.command,
                    disruption::Command::started(record, envelope.recorded_at_ms),
                );
            }
            DomainEvent::DisruptionProgressed { command, phase } => {
                if let Some(c) = self.disruptions.get_mut(command) {
                    c.phase = phase.clone();
                }
            }
            DomainEvent::InterruptionReceived { .. }
            | DomainEvent::NominationExpired { .. }
            | DomainEvent::NominationsChecked(_)
            | DomainEvent::InterruptionMessage { .. }
            | DomainEvent::InstanceGarbageCollected { .. }
            | DomainEvent::LaunchFailed { .. }
            | DomainEvent::JournalShipped { .. }
            | DomainEvent::HistoryTakenOver(_) => {}
        }
        self.prune(envelope.recorded_at_ms);
    }
}

/// Marks these catalogs used by the record at `(seq, recorded_at_ms)`.
fn use_catalogs<'a>(
    catalogs: &mut BTreeMap<String, CatalogUse>,
    digests: impl IntoIterator<Item = &'a String>,
    (seq, at_ms): (u64, i64),
) {
    for digest in digests {
        if let Some(u) = catalogs.get_mut(digest) {
            u.last_used_seq = seq;
            u.last_used_ms = at_ms;
        }
    }
}

#[cfg(test)]
mod tests;
