//! Version 1 of the stored event schema: the payloads journals written since the first
//! release hold, as JSON objects tagged by `type`.
//!
//! These types are the journal format, kept apart from the domain types they convert to
//! (`convert.rs`), so the scheduler, the model and the ports can change without changing
//! what is on disk. Never change a field here: a version 1 payload must decode the same
//! forever (`tests/golden/events-v1*.jsonl`). Adding an optional field (with
//! `#[serde(default)]`) or a new event type is additive; anything else is a version 2 with
//! its own module and an upcast from this one.

pub mod history;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Labels by key.
pub type Labels = BTreeMap<String, String>;

/// Every stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    /// A NodePool was seen.
    NodePoolObserved {
        /// Name.
        nodepool: String,
        /// Weight.
        weight: i32,
        /// Template hash.
        hash: String,
    },
    /// A pod became pending.
    PodPending {
        /// UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// Requests as Kubernetes quantities.
        requests: BTreeMap<String, String>,
    },
    /// A pod was bound.
    PodBound {
        /// UID.
        uid: String,
        /// Node.
        node: String,
        /// `namespace/name` (added after the first release).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<String>,
    },
    /// A pod was deleted.
    PodDeleted {
        /// UID.
        uid: String,
    },
    /// A nomination expired.
    NominationExpired {
        /// UID.
        uid: String,
        /// NodeClaim.
        nodeclaim: String,
        /// Its node.
        node: String,
    },
    /// A scheduling round finished.
    RoundCompleted(Box<RoundRecord>),
    /// A nomination check and what it decided (added after the first release).
    NominationsChecked(Box<NominationRecord>),
    /// A set of instance types, by digest.
    InstanceTypesObserved {
        /// Digest.
        digest: String,
        /// The types.
        instance_types: Vec<InstanceType>,
    },
    /// A round planned a NodeClaim.
    NodeClaimPlanned(Box<NodeClaimPlan>),
    /// Write-ahead of a launch.
    LaunchRequested {
        /// NodeClaim.
        nodeclaim: String,
        /// Idempotency token.
        client_token: String,
    },
    /// The cloud launched an instance.
    NodeClaimLaunched {
        /// NodeClaim.
        nodeclaim: String,
        /// The instance.
        instance: Box<Instance>,
    },
    /// A launch failed.
    LaunchFailed {
        /// NodeClaim.
        nodeclaim: String,
        /// What the cloud said.
        reason: String,
        /// Offerings without capacity.
        unavailable: Vec<OfferingKey>,
    },
    /// The node joined.
    NodeClaimRegistered {
        /// NodeClaim.
        nodeclaim: String,
        /// Node.
        node: String,
    },
    /// The node became Ready.
    NodeClaimInitialized {
        /// NodeClaim.
        nodeclaim: String,
    },
    /// An interruption notice arrived.
    InterruptionReceived {
        /// NodeClaim.
        nodeclaim: String,
        /// Instance id.
        instance_id: String,
        /// Kind.
        kind: InterruptionKind,
    },
    /// Draining began.
    NodeClaimDraining {
        /// NodeClaim.
        nodeclaim: String,
        /// Why.
        reason: String,
    },
    /// Termination began.
    NodeClaimTerminating {
        /// NodeClaim.
        nodeclaim: String,
        /// Why.
        reason: String,
    },
    /// The NodeClaim is gone.
    NodeClaimTerminated {
        /// NodeClaim.
        nodeclaim: String,
        /// Why.
        reason: String,
    },
    /// An interruption queue message.
    InterruptionMessage {
        /// Queue.
        queue: String,
        /// Message id.
        message_id: String,
        /// What it was.
        outcome: MessageOutcome,
        /// Kind, for notices.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<InterruptionKind>,
        /// Instances named.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        instance_ids: Vec<String>,
        /// Why ignored or rejected.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        detail: String,
    },
    /// An instance nobody owns was terminated.
    InstanceGarbageCollected {
        /// Instance id.
        instance_id: String,
        /// NodeClaim in its tags.
        nodeclaim: String,
        /// Why.
        reason: String,
    },
    /// A disruption command was decided.
    DisruptionDecided(Box<DisruptionRecord>),
    /// A disruption command entered a phase.
    DisruptionProgressed {
        /// Command number.
        command: u64,
        /// `Terminating`, `Done` or `Abandoned`.
        phase: String,
        /// Why, for `Abandoned`.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        detail: String,
    },
    /// History up to a sequence number was removed.
    JournalTrimmed {
        /// Last sequence number removed.
        through: u64,
        /// Events removed.
        events: u64,
        /// Bytes removed.
        bytes: u64,
    },
    /// Records up to a sequence number were stored in the history store.
    JournalShipped {
        /// Last sequence number stored.
        through: u64,
        /// Segments stored.
        segments: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// A process took the stored history over.
    HistoryTakenOver(Box<history::Takeover>),
}

/// A NodeClaim as a round planned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeClaimPlan {
    /// Name.
    pub nodeclaim: String,
    /// NodePool.
    pub nodepool: String,
    /// Round.
    pub round: u64,
    /// Pod UIDs.
    pub pods: Vec<String>,
    /// Requests as Kubernetes quantities.
    pub requests: BTreeMap<String, String>,
    /// Launch options, cheapest first.
    pub instance_types: Vec<InstanceTypeOption>,
    /// Planned without its minValues.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub min_values_relaxed: bool,
}

/// A launch option.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceTypeOption {
    /// Instance type.
    pub name: String,
    /// $/h.
    pub price: f64,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
}

/// What a round decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// Round number.
    pub round: u64,
    /// Pods considered.
    pub pods: u64,
    /// `(uid, node)`.
    pub bindings: Vec<(String, String)>,
    /// NodeClaims planned.
    pub nodeclaims: Vec<String>,
    /// `(uid, reason)`.
    pub unschedulable: Vec<(String, String)>,
    /// Microseconds.
    pub duration_us: u64,
    /// The input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Box<RoundInput>>,
    /// The round whose input this one repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<u64>,
}

/// A round's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundInput {
    /// Pending pods.
    pub pods: Vec<Pod>,
    /// NodePools.
    pub nodepools: Vec<PoolInput>,
    /// Existing nodes and launched NodeClaims.
    pub existing: Vec<ExistingNode>,
    /// DaemonSet pod templates.
    pub daemonsets: Vec<Pod>,
    /// Preference policy.
    #[serde(default)]
    pub preference_policy: PreferencePolicy,
    /// minValues policy.
    #[serde(default)]
    pub min_values_policy: MinValuesPolicy,
    /// Namespace labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespace_labels: BTreeMap<String, Labels>,
}

/// A NodePool in a round's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolInput {
    /// Name.
    pub name: String,
    /// Weight.
    pub weight: i32,
    /// Requirements.
    pub requirements: Vec<Requirement>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Limits.
    pub limits: Limits,
    /// Usage.
    pub usage: Quantities,
    /// Nodes counted against the node limit.
    pub node_count: i64,
    /// Digest of its instance types.
    pub catalog: String,
    /// `spec.replicas` of a static NodePool; absent for a dynamic one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

/// Limits of a NodePool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Per resource.
    pub resources: BTreeMap<ResourceName, i64>,
    /// Per extended resource, by its Kubernetes name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, i64>,
    /// Nodes.
    pub nodes: Option<i64>,
}

/// A resource, by the name version 1 keys limits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum ResourceName {
    Cpu,
    Memory,
    Pods,
    EphemeralStorage,
    NvidiaGpu,
    AmdGpu,
    Neuron,
    NeuronCore,
    Gaudi,
    Efa,
    PodEni,
    PrivateIpv4,
}

/// Resource amounts as Kubernetes quantities, in the order they were written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Quantities(pub Vec<(String, String)>);

impl Serialize for Quantities {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Quantities {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Quantities;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of resource names to quantities")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, String>()? {
                    out.push(entry);
                }
                Ok(Quantities(out))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// One node selector requirement (bounds are extra entries on the same key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: Operator,
    /// Values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// minValues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

/// A requirement operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Operator {
    Gte,
    Lte,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// A taint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
    /// Effect.
    pub effect: String,
}

/// A toleration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Toleration {
    /// Key.
    pub key: String,
    /// `Exists` operator.
    pub exists: bool,
    /// Value.
    pub value: String,
    /// Effect.
    pub effect: String,
}

/// A pod as a round saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// Effective requests.
    pub requests: Quantities,
    /// Node selector.
    pub node_selector: Vec<Requirement>,
    /// Required node affinity terms.
    pub affinity_terms: Vec<Vec<Requirement>>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints.
    #[serde(default)]
    pub spread: Vec<TopologySpread>,
    /// Required pod affinity and anti-affinity.
    #[serde(default)]
    pub pod_affinity: Vec<PodAffinityTerm>,
    /// Preferred node affinity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_affinity: Vec<(i32, Vec<Requirement>)>,
    /// Preferred pod affinity and anti-affinity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_pod_affinity: Vec<(i32, PodAffinityTerm)>,
    /// Requirements its volumes add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_requirements: Vec<Vec<Requirement>>,
    /// Volumes it needs attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_attachments: Vec<VolumeAttachment>,
    /// Why no node can take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    /// Host ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// Constraints not modelled.
    pub unsupported: Vec<String>,
    /// Resources no instance type provides.
    pub unknown_resources: Vec<String>,
    /// Priority.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// `controller.kubernetes.io/pod-deletion-cost`.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub deletion_cost: i32,
    /// Its controller, `Kind/name`; absent when it has none (or was recorded before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

/// A topology spread constraint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologySpread {
    /// Key.
    pub topology_key: String,
    /// maxSkew.
    pub max_skew: i64,
    /// matchLabels.
    pub selector: Labels,
    /// matchExpressions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
    /// ScheduleAnyway.
    pub schedule_anyway: bool,
    /// minDomains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<i64>,
    /// nodeAffinityPolicy Ignore.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_node_affinity: bool,
    /// nodeTaintsPolicy Honor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub honor_node_taints: bool,
}

/// A pod affinity or anti-affinity term.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodAffinityTerm {
    /// Key.
    pub topology_key: String,
    /// matchLabels.
    pub selector: Labels,
    /// matchExpressions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
    /// Namespaces.
    pub namespaces: Vec<String>,
    /// Every namespace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_namespaces: bool,
    /// namespaceSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Anti-affinity.
    pub anti: bool,
}

/// A namespace selector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespaceSelector {
    /// matchLabels.
    pub match_labels: Labels,
    /// matchExpressions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
}

/// A label selector expression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectorExpression {
    /// Key.
    pub key: String,
    /// Operator.
    pub operator: SelectorOperator,
    /// Values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A label selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A host port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPort {
    /// Host IP.
    pub ip: String,
    /// Protocol.
    pub protocol: String,
    /// Port.
    pub port: i32,
}

/// A volume attached through a CSI driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeAttachment {
    /// Driver.
    pub driver: String,
    /// Volume.
    pub volume: String,
}

/// A node (or launched NodeClaim) a round could bind to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExistingNode {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable.
    pub allocatable: Quantities,
    /// Requested.
    pub requested: Quantities,
    /// Its pods' namespaces and labels.
    #[serde(default)]
    pub pods: Vec<(String, Labels)>,
    /// Its pods' required anti-affinity, with their namespaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anti_affinity: Vec<(String, PodAffinityTerm)>,
    /// Host ports bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// CSI attach limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attach_limits: BTreeMap<String, i64>,
    /// Volumes attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached: Vec<VolumeAttachment>,
}

/// The preference policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum PreferencePolicy {
    #[default]
    Respect,
    Ignore,
}

/// The minValues policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum MinValuesPolicy {
    #[default]
    Strict,
    BestEffort,
}

/// An instance type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceType {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Labels,
    /// Capacity.
    pub capacity: Quantities,
    /// Overhead.
    pub overhead: Quantities,
    /// Offerings.
    pub offerings: Vec<Offering>,
}

/// An offering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offering {
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// $/h.
    pub price: f64,
    /// Available.
    pub available: bool,
    /// The NodeOverlay that set the price (added with NodeOverlay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<String>,
    /// A reserved offering's reservation and how many it still takes (added with reserved
    /// capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<ReservedCapacity>,
}

/// A capacity reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// Id, `cr-…`.
    pub id: String,
    /// Kind.
    pub kind: ReservationKind,
}

/// A reservation's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum ReservationKind {
    #[serde(rename = "default")]
    Default,
    #[serde(rename = "capacity-block")]
    CapacityBlock,
}

/// A reserved offering's reservation and remaining count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservedCapacity {
    /// The reservation.
    pub reservation: Reservation,
    /// Instances it still takes.
    pub remaining: u32,
}

/// A capacity type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum CapacityType {
    #[serde(rename = "reserved")]
    Reserved,
    #[serde(rename = "spot")]
    Spot,
    #[serde(rename = "on-demand")]
    OnDemand,
}

/// An instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    /// Id.
    pub id: String,
    /// Provider id.
    pub provider_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
    /// $/h.
    pub price: f64,
    /// Image.
    pub image_id: String,
    /// NodeClaim.
    pub nodeclaim: String,
    /// NodePool.
    pub nodepool: String,
    /// State.
    pub state: InstanceState,
    /// Launch time, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launched_at_ms: Option<i64>,
    /// Where the price came from (added with regional prices and NodeOverlay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_source: Option<String>,
    /// The capacity reservation it runs in (added with reserved capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<Reservation>,
}

/// An instance's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum InstanceState {
    Running,
    ShuttingDown,
    Terminated,
}

/// An offering that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OfferingKey {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: CapacityType,
}

/// A kind of interruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum InterruptionKind {
    SpotInterrupted,
    ScheduledChange,
    InstanceStopped,
    InstanceTerminated,
    RebalanceRecommendation,
    /// Added with reserved capacity.
    CapacityBlockExpiring,
}

/// What a queue message was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum MessageOutcome {
    Notice,
    Ignored,
    Malformed,
}

/// A disruption command as decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisruptionRecord {
    /// Command number.
    pub command: u64,
    /// `Emptiness` or `Drift`.
    pub method: String,
    /// The NodeClaims disrupted.
    pub candidates: Vec<Member>,
    /// The NodeClaims launched first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacements: Vec<String>,
    /// UIDs of the pods that move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moved: Vec<String>,
    /// $/h saved.
    pub savings: f64,
    /// Per NodePool, the nodes its budgets still allowed.
    pub allowed: BTreeMap<String, u64>,
    /// What it was decided from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Box<DisruptionInput>>,
}

/// A NodeClaim of a command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// NodeClaim.
    pub nodeclaim: String,
    /// Its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// What a disruption pass decided from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisruptionInput {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// The scheduling round the simulation started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<RoundInput>,
    /// The candidates the single-node search before could not consolidate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unconsolidatable: Vec<String>,
}

/// Everything a disruption pass reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Now, ms since the Unix epoch.
    pub now_ms: i64,
    /// NodePools' disruption settings.
    pub pools: Vec<PoolPolicy>,
    /// NodeClaims.
    pub nodes: Vec<NodeSnapshot>,
    /// PodDisruptionBudgets with the evictions each allows.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pdbs: BTreeMap<String, i32>,
    /// The `SpotToSpotConsolidation` feature gate; absent is off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot_to_spot: bool,
    /// The `StaticCapacity` feature gate; absent is off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub static_capacity: bool,
    /// Nodes and NodeClaims hosting CapacityBuffers' virtual pods; absent is none.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub buffered: BTreeSet<String>,
    /// The `NodeRepair` gate's policies (`Type=Status` → toleration ms); absent is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<BTreeMap<String, u64>>,
    /// Workloads (`namespace/Kind/name`) with pods still being provisioned for; absent is
    /// none.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub scaling_out: BTreeSet<String>,
}

/// A NodePool's disruption settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolPolicy {
    /// Name.
    pub name: String,
    /// Budgets.
    pub budgets: Vec<Budget>,
    /// `consolidateAfter` in ms; absent is `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after_ms: Option<u64>,
    /// `consolidationPolicy`.
    pub consolidation_policy: String,
    /// `spec.replicas` of a static NodePool; absent for a dynamic one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// `spec.limits.nodes`; absent when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_limit: Option<i64>,
}

/// A disruption budget as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Count or percentage.
    pub nodes: String,
    /// Cron schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Window length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Reasons (`Empty`, `Drifted`, `Underutilized`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// A NodeClaim as a disruption pass saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// NodeClaim.
    pub nodeclaim: String,
    /// NodePool.
    pub nodepool: String,
    /// Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Lifecycle state (`Initialized`, …).
    pub state: String,
    /// Node Ready.
    pub ready: bool,
    /// `Candidate` or `Replacement` of a command in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Pods nominated to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nominated: bool,
    /// `karpenter.sh/do-not-disrupt` on the Node or NodeClaim.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub do_not_disrupt: bool,
    /// Created, ms.
    pub created_ms: i64,
    /// Initialized, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized_ms: Option<i64>,
    /// Last pod event, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_ms: Option<i64>,
    /// `expireAfter` in ms; absent is `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after_ms: Option<u64>,
    /// `terminationGracePeriod` in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_ms: Option<u64>,
    /// The `Drifted` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted: Option<DriftMark>,
    /// $/h.
    pub price: f64,
    /// Its instance's type, zone and capacity type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offering: Option<OfferingKey>,
    /// Pods bound to its node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<BoundPod>,
    /// Its node's conditions a repair policy matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<NodeCondition>,
}

/// A node condition and since when it held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeCondition {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Status.
    pub status: String,
    /// Its last transition, ms.
    pub since_ms: i64,
}

/// A `Drifted` condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftMark {
    /// Reason.
    pub reason: String,
    /// Since, ms.
    pub since_ms: i64,
}

/// A pod bound to a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundPod {
    /// Node.
    pub node: String,
    /// The pod.
    pub pod: Pod,
    /// It would have to move.
    pub reschedulable: bool,
    /// Its `karpenter.sh/do-not-disrupt` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub do_not_disrupt: Option<String>,
    /// Created, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<i64>,
    /// PodDisruptionBudgets selecting it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pdbs: Vec<String>,
}

/// A nomination check and what it decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NominationRecord {
    /// Now, ms.
    pub at_ms: i64,
    /// The nomination window, ms.
    pub window_ms: i64,
    /// The nodes the check looked at.
    pub nodes: Vec<NodeFacts>,
    /// Launched NodeClaims with nominated pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<NominatedClaim>,
    /// Pods left to kube-scheduler on running nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<LeftPod>,
    /// Pods in flight elsewhere.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_flight_elsewhere: bool,
    /// Waits that ran out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expired: Vec<Expired>,
    /// NodeClaims' clocks after the check, ms.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub open_since: BTreeMap<String, i64>,
    /// Left pods' clocks after the check, ms.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub left_since: BTreeMap<String, i64>,
}

/// A node as a nomination check saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeFacts {
    /// Name.
    pub name: String,
    /// Provider id.
    pub provider_id: String,
    /// Ready.
    pub ready: bool,
    /// Cordoned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,
    /// Taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// A launched NodeClaim with nominated pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NominatedClaim {
    /// NodeClaim.
    pub nodeclaim: String,
    /// Its instance's provider id.
    pub provider_id: String,
    /// Pods nominated to it, with their tolerations.
    pub pods: Vec<(String, Vec<Toleration>)>,
    /// Its clock before the check, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_since_ms: Option<i64>,
}

/// A pod left to kube-scheduler on a running node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeftPod {
    /// UID.
    pub uid: String,
    /// Node.
    pub node: String,
    /// Its clock before the check, ms.
    pub since_ms: i64,
}

/// A wait that ran out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expired {
    /// Pod UID.
    pub uid: String,
    /// NodeClaim; empty for a pod left on a running node.
    pub nodeclaim: String,
    /// Node.
    pub node: String,
}
