//! Domain events: the past-tense facts every actor appends to the journal, and
//! [`ClusterView`], the state `journal replay` (and a restart) rebuilds by folding them.
//!
//! What the journal stores is not these types but their stored form ([`stored`]), versioned
//! apart from the domain so the domain can change without breaking recorded journals.

use std::collections::BTreeMap;

use karpenter_journal::{EntityRef, JournalEvent};
use serde::{Deserialize, Serialize};

use crate::model::{InstanceType, Pod, Requirements, Resources, Taint};
use crate::ports::{Instance, InterruptionKind, OfferingKey};
use crate::scheduling::{
    ExistingNode, InstanceTypeOption, Limits, MinValuesPolicy, NodePoolTemplate, PreferencePolicy,
    SchedulingInput, StaticPool,
};

/// A NodeClaim's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeClaimState {
    /// Planned; the launch intent may have been recorded.
    Pending,
    /// The cloud launched an instance.
    Launched,
    /// Its node joined the cluster.
    Registered,
    /// Its node is Ready and its startup taints are gone.
    Initialized,
    /// Being drained before termination.
    Draining,
    /// The instance is being terminated.
    Terminating,
    /// Gone.
    Terminated,
}

/// A NodeClaim as a scheduling round planned it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeClaimPlan {
    /// NodeClaim name.
    pub nodeclaim: String,
    /// NodePool name.
    pub nodepool: String,
    /// The round that planned it.
    pub round: u64,
    /// UIDs of the pods planned onto it.
    pub pods: Vec<String>,
    /// Requests of those pods plus daemonset overhead (Kubernetes quantities).
    pub requests: BTreeMap<String, String>,
    /// Candidate instance types, cheapest first, with the offering each would use.
    pub instance_types: Vec<InstanceTypeOption>,
    /// Planned with fewer distinct values than a requirement's minValues (BestEffort); the
    /// NodeClaim is annotated `karpenter.sh/nodeclaim-min-values-relaxed: "true"`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub min_values_relaxed: bool,
}

/// A NodePool as a round saw it; its instance types are the catalog recorded under `catalog`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolInput {
    /// Name.
    pub name: String,
    /// Weight.
    pub weight: i32,
    /// Requirements.
    pub requirements: Requirements,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Limits.
    pub limits: Limits,
    /// Usage counted against limits.
    pub usage: Resources,
    /// Nodes counted against the node limit.
    pub node_count: i64,
    /// Digest of the instance types (an `InstanceTypesObserved` event holds them).
    pub catalog: String,
    /// `spec.replicas` of a static NodePool (the round launches what it is short of and
    /// plans no pod onto a new node of it); `None` for a dynamic one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

/// Everything a round's decisions depend on, so `journal verify` can run it again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundInput {
    /// Pending pods.
    pub pods: Vec<Pod>,
    /// NodePools.
    pub nodepools: Vec<PoolInput>,
    /// Existing nodes and launched NodeClaims.
    pub existing: Vec<ExistingNode>,
    /// DaemonSet pod templates.
    pub daemonsets: Vec<Pod>,
    /// The preference policy of the round.
    #[serde(default)]
    pub preference_policy: PreferencePolicy,
    /// The minValues policy of the round.
    #[serde(default)]
    pub min_values_policy: MinValuesPolicy,
    /// Labels of the cluster's namespaces (for pod affinity namespace selectors).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
}

impl RoundInput {
    /// Records `input`, whose NodePools' instance types (the dynamic ones', then the static
    /// ones', as [`SchedulingInput::all_pools`] lists them) are stored under `catalogs[i]`.
    pub fn record(input: &SchedulingInput, catalogs: &[String]) -> Self {
        RoundInput {
            pods: input.pods.clone(),
            nodepools: input
                .all_pools()
                .zip(catalogs)
                .map(|((p, replicas), catalog)| PoolInput {
                    name: p.name.clone(),
                    weight: p.weight,
                    requirements: p.requirements.clone(),
                    taints: p.taints.clone(),
                    limits: p.limits.clone(),
                    usage: p.usage,
                    node_count: p.node_count,
                    catalog: catalog.clone(),
                    replicas,
                })
                .collect(),
            existing: input.existing.iter().map(|n| (**n).clone()).collect(),
            daemonsets: input.daemonsets.clone(),
            preference_policy: input.preference_policy,
            min_values_policy: input.min_values_policy,
            namespace_labels: input.namespace_labels.clone(),
        }
    }

    /// Rebuilds the input; `None` when a catalog is missing from `catalogs`.
    pub fn rebuild(
        &self,
        catalogs: &BTreeMap<String, Vec<std::sync::Arc<InstanceType>>>,
    ) -> Option<SchedulingInput> {
        let mut nodepools = Vec::new();
        let mut static_pools = Vec::new();
        for p in &self.nodepools {
            let template = NodePoolTemplate {
                name: p.name.clone(),
                weight: p.weight,
                requirements: p.requirements.clone(),
                taints: p.taints.clone(),
                startup_taints: Vec::new(),
                instance_types: catalogs.get(&p.catalog)?.clone(),
                limits: p.limits.clone(),
                usage: p.usage,
                node_count: p.node_count,
            };
            match p.replicas {
                Some(replicas) => static_pools.push(StaticPool { template, replicas }),
                None => nodepools.push(template),
            }
        }
        Some(SchedulingInput {
            pods: self.pods.clone(),
            nodepools,
            static_pools,
            existing: self
                .existing
                .iter()
                .cloned()
                .map(std::sync::Arc::new)
                .collect(),
            daemonsets: self.daemonsets.clone(),
            preference_policy: self.preference_policy,
            min_values_policy: self.min_values_policy,
            namespace_labels: self.namespace_labels.clone(),
        })
    }
}

/// Digest identifying a set of instance types (with their offerings and availability): the
/// [`type_digest`]s of its types, in order, hashed.
pub fn catalog_digest(types: &[std::sync::Arc<InstanceType>]) -> String {
    catalog_digest_of(types.iter().map(|t| type_digest(t)))
}

/// [`catalog_digest`] from its types' [`type_digest`]s (which a caller may keep per type:
/// a catalog changes a few types at a time, and digesting one means serializing it).
pub fn catalog_digest_of(digests: impl IntoIterator<Item = u64>) -> String {
    let mut hash = crate::model::Fnv1a::default();
    for digest in digests {
        hash.write(&digest.to_le_bytes());
    }
    format!("{:016x}", hash.finish())
}

/// Digest of one instance type as it is stored.
pub fn type_digest(t: &InstanceType) -> u64 {
    let mut hash = crate::model::Fnv1a::default();
    hash.write(&stored::instance_type_bytes(t));
    hash.finish()
}

/// What one scheduling round decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundRecord {
    /// Round number, increasing.
    pub round: u64,
    /// Pods considered.
    pub pods: usize,
    /// Pods bound to existing nodes, as `(uid, node)`.
    pub bindings: Vec<(String, String)>,
    /// NodeClaims planned.
    pub nodeclaims: Vec<String>,
    /// Pods left pending, as `(uid, reason)`.
    pub unschedulable: Vec<(String, String)>,
    /// Time the round took to compute, in microseconds.
    pub duration_us: u64,
    /// The inputs, for `journal verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Box<RoundInput>>,
    /// The earlier round whose recorded input this round's equals: then the input is not
    /// recorded again and the decisions are that round's (a round is a function of its
    /// input). Pods waiting for capacity nobody offers are planned again every 10 s; while
    /// nothing changes, each retry costs the journal a few hundred bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<u64>,
}

/// Every fact the actors record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum DomainEvent {
    /// A NodePool was seen (created or changed).
    NodePoolObserved {
        /// Name.
        nodepool: String,
        /// Weight.
        weight: i32,
        /// Hash of its template (drift detection).
        hash: String,
    },
    /// A pod became pending and provisionable.
    PodPending {
        /// UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// Effective requests (Kubernetes quantities).
        requests: BTreeMap<String, String>,
    },
    /// A pod was bound to a node.
    PodBound {
        /// UID.
        uid: String,
        /// Node name.
        node: String,
        /// `namespace/name` (absent in journals written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<String>,
    },
    /// A pod was deleted.
    PodDeleted {
        /// UID.
        uid: String,
    },
    /// kube-scheduler did not bind a nominated pod to its NodeClaim's Node within the
    /// nomination window though the Node was Ready, schedulable and tolerated: the pod is
    /// pending again and planned afresh. Also recorded (with no NodeClaim) for a pod rounds
    /// left to kube-scheduler on a running node that did not get it within the window: that
    /// node is refused to the pod from then on.
    NominationExpired {
        /// UID.
        uid: String,
        /// The NodeClaim it was nominated to; empty for a running node rounds left it to.
        nodeclaim: String,
        /// That NodeClaim's Node.
        node: String,
    },
    /// The scheduler checked how long pods have waited for the nodes rounds found for them,
    /// and what it decided (recorded whenever a clock ran, so `journal verify` decides it
    /// again; each wait that ran out is also a `NominationExpired`).
    NominationsChecked(Box<nominations::NominationRecord>),
    /// A scheduling round finished.
    RoundCompleted(Box<RoundRecord>),
    /// A set of instance types rounds refer to by digest (recorded once per change).
    InstanceTypesObserved {
        /// Digest, as in `PoolInput::catalog`.
        digest: String,
        /// The instance types (shared with the scheduler's catalog, not copied).
        instance_types: Vec<std::sync::Arc<InstanceType>>,
    },
    /// A round planned a NodeClaim.
    NodeClaimPlanned(Box<NodeClaimPlan>),
    /// Write-ahead: the NodeClaim is about to call the cloud with this token. Flushed before
    /// the call, so a restart can tell a launch that may have happened from one that did not.
    LaunchRequested {
        /// NodeClaim name.
        nodeclaim: String,
        /// Idempotency token given to the cloud.
        client_token: String,
    },
    /// The cloud launched the NodeClaim's instance.
    NodeClaimLaunched {
        /// NodeClaim name.
        nodeclaim: String,
        /// The instance.
        instance: Box<Instance>,
    },
    /// The launch failed.
    LaunchFailed {
        /// NodeClaim name.
        nodeclaim: String,
        /// What the cloud said.
        reason: String,
        /// Offerings found without capacity.
        unavailable: Vec<OfferingKey>,
    },
    /// The NodeClaim's node joined the cluster.
    NodeClaimRegistered {
        /// NodeClaim name.
        nodeclaim: String,
        /// Node name.
        node: String,
    },
    /// The NodeClaim's node became Ready.
    NodeClaimInitialized {
        /// NodeClaim name.
        nodeclaim: String,
    },
    /// An interruption notice arrived for the NodeClaim's instance.
    InterruptionReceived {
        /// NodeClaim name.
        nodeclaim: String,
        /// Instance id.
        instance_id: String,
        /// Kind of notice.
        kind: InterruptionKind,
    },
    /// The NodeClaim's node is being drained.
    NodeClaimDraining {
        /// NodeClaim name.
        nodeclaim: String,
        /// Why.
        reason: String,
    },
    /// The NodeClaim's instance is being terminated (or, when it never launched, its object
    /// released), for `reason`.
    NodeClaimTerminating {
        /// NodeClaim name.
        nodeclaim: String,
        /// Why.
        reason: String,
    },
    /// The NodeClaim is gone (instance terminated, finalizer removed).
    NodeClaimTerminated {
        /// NodeClaim name.
        nodeclaim: String,
        /// Why it ended.
        reason: String,
    },
    /// A message from an interruption queue, recorded before it is acted on and deleted.
    InterruptionMessage {
        /// Queue name.
        queue: String,
        /// The queue's message id.
        message_id: String,
        /// What the message was.
        outcome: MessageOutcome,
        /// Kind of notice, for notices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<InterruptionKind>,
        /// Instances it names.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        instance_ids: Vec<String>,
        /// Why it was ignored or rejected.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        detail: String,
    },
    /// The garbage collector terminated an instance no NodeClaim owns.
    InstanceGarbageCollected {
        /// Instance id.
        instance_id: String,
        /// The NodeClaim named in its tags.
        nodeclaim: String,
        /// Why it was collected.
        reason: String,
    },
    /// A disruption command was decided; its replacements are recorded as planned right
    /// after it. Recorded (durably) before anything is tainted or launched.
    DisruptionDecided(Box<disruption::DisruptionRecord>),
    /// A disruption command entered a phase: its candidates are being deleted
    /// (`Terminating`), are gone (`Done`), or it was given up and its taints taken back
    /// (`Abandoned`, with why).
    DisruptionProgressed {
        /// The command's number.
        command: u64,
        /// The phase it entered.
        phase: disruption::Phase,
    },
    /// The journal keeper removed the history up to and including `through` (retention),
    /// after a snapshot that covers it.
    JournalTrimmed {
        /// The last sequence number removed.
        through: u64,
        /// Events removed.
        events: u64,
        /// Bytes of event records removed.
        bytes: u64,
    },
    /// The journal shipper stored the records up to and including `through` in the history
    /// store (`--journal-bucket`).
    JournalShipped {
        /// The last sequence number the store holds.
        through: u64,
        /// Segments stored by the pass.
        segments: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// This process took the stored history over (a new leader, a rescheduled pod).
    HistoryTakenOver(Box<history::Takeover>),
}

/// What an interruption queue message turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageOutcome {
    /// A notice about instances, routed to their NodeClaims.
    Notice,
    /// Well-formed but asks for nothing.
    Ignored,
    /// Unparsable or of an unsupported kind.
    Malformed,
}

/// The entity kind `InstanceTypesObserved` records are about (named by their digest).
const INSTANCE_TYPES_KIND: &str = "InstanceTypes";

impl DomainEvent {
    /// Whether a stored record, read without decoding its payload, is the
    /// `InstanceTypesObserved` record of the instance types with this digest.
    pub fn is_catalog_record(raw: &karpenter_journal::RawRecord, digest: &str) -> bool {
        raw.event_type == "InstanceTypesObserved"
            && raw.kind == INSTANCE_TYPES_KIND
            && raw.name == digest
    }

    /// The stored type name.
    pub fn type_name(&self) -> &'static str {
        match self {
            DomainEvent::NodePoolObserved { .. } => "NodePoolObserved",
            DomainEvent::PodPending { .. } => "PodPending",
            DomainEvent::PodBound { .. } => "PodBound",
            DomainEvent::PodDeleted { .. } => "PodDeleted",
            DomainEvent::NominationExpired { .. } => "NominationExpired",
            DomainEvent::NominationsChecked(_) => "NominationsChecked",
            DomainEvent::RoundCompleted(_) => "RoundCompleted",
            DomainEvent::InstanceTypesObserved { .. } => "InstanceTypesObserved",
            DomainEvent::NodeClaimPlanned(_) => "NodeClaimPlanned",
            DomainEvent::LaunchRequested { .. } => "LaunchRequested",
            DomainEvent::NodeClaimLaunched { .. } => "NodeClaimLaunched",
            DomainEvent::LaunchFailed { .. } => "LaunchFailed",
            DomainEvent::NodeClaimRegistered { .. } => "NodeClaimRegistered",
            DomainEvent::NodeClaimInitialized { .. } => "NodeClaimInitialized",
            DomainEvent::InterruptionReceived { .. } => "InterruptionReceived",
            DomainEvent::NodeClaimDraining { .. } => "NodeClaimDraining",
            DomainEvent::NodeClaimTerminating { .. } => "NodeClaimTerminating",
            DomainEvent::NodeClaimTerminated { .. } => "NodeClaimTerminated",
            DomainEvent::InterruptionMessage { .. } => "InterruptionMessage",
            DomainEvent::InstanceGarbageCollected { .. } => "InstanceGarbageCollected",
            DomainEvent::DisruptionDecided(_) => "DisruptionDecided",
            DomainEvent::DisruptionProgressed { .. } => "DisruptionProgressed",
            DomainEvent::JournalTrimmed { .. } => "JournalTrimmed",
            DomainEvent::JournalShipped { .. } => "JournalShipped",
            DomainEvent::HistoryTakenOver(_) => "HistoryTakenOver",
        }
    }
}

impl JournalEvent for DomainEvent {
    const SCHEMA_VERSION: u16 = stored::CURRENT;

    fn event_type(&self) -> &str {
        self.type_name()
    }

    fn entity(&self) -> EntityRef {
        match self {
            DomainEvent::NodePoolObserved { nodepool, .. } => {
                EntityRef::new("NodePool", nodepool.clone())
            }
            DomainEvent::PodPending { uid, .. }
            | DomainEvent::PodBound { uid, .. }
            | DomainEvent::PodDeleted { uid }
            | DomainEvent::NominationExpired { uid, .. } => EntityRef::new("Pod", uid.clone()),
            DomainEvent::RoundCompleted(r) => EntityRef::new("Round", r.round.to_string()),
            DomainEvent::NominationsChecked(r) => {
                EntityRef::new("Nominations", r.check.at_ms.to_string())
            }
            DomainEvent::InstanceTypesObserved { digest, .. } => {
                EntityRef::new(INSTANCE_TYPES_KIND, digest.clone())
            }
            DomainEvent::NodeClaimPlanned(p) => EntityRef::new("NodeClaim", p.nodeclaim.clone()),
            DomainEvent::LaunchRequested { nodeclaim, .. }
            | DomainEvent::NodeClaimLaunched { nodeclaim, .. }
            | DomainEvent::LaunchFailed { nodeclaim, .. }
            | DomainEvent::NodeClaimRegistered { nodeclaim, .. }
            | DomainEvent::NodeClaimInitialized { nodeclaim }
            | DomainEvent::InterruptionReceived { nodeclaim, .. }
            | DomainEvent::NodeClaimDraining { nodeclaim, .. }
            | DomainEvent::NodeClaimTerminating { nodeclaim, .. }
            | DomainEvent::NodeClaimTerminated { nodeclaim, .. } => {
                EntityRef::new("NodeClaim", nodeclaim.clone())
            }
            DomainEvent::InterruptionMessage { queue, .. } => {
                EntityRef::new("Queue", queue.clone())
            }
            DomainEvent::InstanceGarbageCollected { instance_id, .. } => {
                EntityRef::new("Instance", instance_id.clone())
            }
            DomainEvent::DisruptionDecided(r) => {
                EntityRef::new("Disruption", r.command.to_string())
            }
            DomainEvent::DisruptionProgressed { command, .. } => {
                EntityRef::new("Disruption", command.to_string())
            }
            DomainEvent::JournalTrimmed { .. } => EntityRef::new("Journal", "retention"),
            DomainEvent::JournalShipped { .. } => EntityRef::new("Journal", "shipping"),
            DomainEvent::HistoryTakenOver(_) => EntityRef::new("Journal", "history"),
        }
    }

    fn to_payload(&self) -> Result<Vec<u8>, serde_json::Error> {
        stored::encode(self)
    }

    fn from_payload(
        event_type: &str,
        schema_version: u16,
        payload: &[u8],
    ) -> Result<Option<Self>, String> {
        stored::decode(event_type, schema_version, payload)
    }
}

pub mod disruption;
pub mod history;
pub mod nominations;
pub mod stored;
mod view;

pub use view::{CatalogUse, ClusterView, NodeClaimView};
#[cfg(test)]
mod tests;
