//! What disruption records: the data a pass decides from ([`Snapshot`]), the commands it
//! decides ([`DisruptionRecord`], [`Command`]) and where a command is ([`Phase`]). The
//! decisions themselves are `crate::disruption`'s; these types sit with the events so the
//! journal, replay and `journal verify` can hold them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{NodeClaimState, RoundInput};
use crate::api::nodepool::{Budget, ConsolidationPolicy, DisruptionReason};
use crate::ports::{BoundPod, OfferingKey};

/// A NodePool's disruption settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolPolicy {
    /// Name.
    pub name: String,
    /// `spec.disruption.budgets`.
    pub budgets: Vec<Budget>,
    /// `spec.disruption.consolidateAfter`; `None` is `Never`.
    pub consolidate_after: Option<Duration>,
    /// `spec.disruption.consolidationPolicy`.
    pub policy: ConsolidationPolicy,
    /// `spec.replicas`: a static NodePool keeps this many nodes (`None`: a dynamic one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// `spec.limits.nodes`, the only limit a static NodePool may set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_limit: Option<i64>,
}

impl PoolPolicy {
    /// The settings of `pool`.
    pub fn of(pool: &crate::api::NodePool) -> PoolPolicy {
        let disruption = &pool.spec.disruption;
        PoolPolicy {
            name: pool.metadata.name.clone().unwrap_or_default(),
            budgets: disruption.budgets.clone(),
            consolidate_after: disruption.consolidate_after.0,
            policy: disruption.consolidation_policy,
            replicas: pool.spec.replicas,
            node_limit: pool.node_limit(),
        }
    }

    /// Whether it is a static NodePool (`spec.replicas` set).
    pub fn is_static(&self) -> bool {
        self.replicas.is_some()
    }
}

/// Why a NodeClaim drifted, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DriftMark {
    /// Upstream's reason (`NodePoolDrifted`, `AMIDrift`, …).
    pub reason: String,
    /// When the `Drifted` condition turned True (ms since the Unix epoch).
    pub since_ms: i64,
}

/// A pod bound to a node, as disruption needs to know it: what the cluster port reports.
pub type PodSnapshot = BoundPod;

/// A NodeClaim and its node, as a pass sees them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSnapshot {
    /// NodeClaim name.
    pub nodeclaim: String,
    /// NodePool name.
    pub nodepool: String,
    /// Node name, once registered.
    pub node: Option<String>,
    /// Lifecycle state.
    pub state: NodeClaimState,
    /// The Node's Ready condition is True.
    pub ready: bool,
    /// What a disruption command in flight holds it as, if one does.
    pub command: Option<CommandRole>,
    /// Pods the scheduler nominated to it have not bound yet.
    pub nominated: bool,
    /// `karpenter.sh/do-not-disrupt: "true"` on its Node or NodeClaim.
    pub do_not_disrupt: bool,
    /// When it was created (ms since the Unix epoch).
    pub created_ms: i64,
    /// When it initialized, if it did.
    pub initialized_ms: Option<i64>,
    /// When a pod last bound to or left its node, if one did.
    pub last_pod_event_ms: Option<i64>,
    /// Its `expireAfter`; `None` is `Never`.
    pub expire_after: Option<Duration>,
    /// Its `terminationGracePeriod`, if set.
    pub termination_grace_period: Option<Duration>,
    /// Its `Drifted` condition, when True.
    pub drifted: Option<DriftMark>,
    /// What its instance costs (USD/hour), once launched.
    pub price: f64,
    /// Its instance's type, zone and capacity type, once launched.
    pub offering: Option<OfferingKey>,
    /// Pods bound to its node.
    pub pods: Vec<PodSnapshot>,
    /// Its node's conditions a repair policy matches (`Ready` `Unknown`, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::ports::NodeCondition>,
}

impl NodeSnapshot {
    /// The pods that would have to move.
    pub fn reschedulable(&self) -> impl Iterator<Item = &PodSnapshot> {
        self.pods.iter().filter(|p| p.reschedulable)
    }

    /// Being drained or terminated already.
    pub fn deleting(&self) -> bool {
        self.state >= NodeClaimState::Draining
    }

    /// Counts against its pool's budgets as disrupting: being deleted, held by a command
    /// as a candidate (marked for deletion), or NotReady.
    pub fn disrupting(&self) -> bool {
        self.deleting() || !self.ready || self.command == Some(CommandRole::Candidate)
    }
}

/// What a command in flight holds a NodeClaim as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CommandRole {
    /// It is being disrupted.
    Candidate,
    /// It was launched to take a candidate's pods.
    Replacement,
}

/// Everything a pass decides from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Now (ms since the Unix epoch).
    pub now_ms: i64,
    /// The NodePools.
    pub pools: Vec<PoolPolicy>,
    /// Every NodeClaim not terminated, in name order.
    pub nodes: Vec<NodeSnapshot>,
    /// PodDisruptionBudgets (`namespace/name`) with the evictions each allows now.
    pub pdbs: BTreeMap<String, i32>,
    /// The `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot: bool,
    /// The `StaticCapacity` feature gate: static NodePools are scaled and drift-replaced
    /// (their nodes are left to no other method either way, as upstream).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub static_capacity: bool,
    /// Nodes and NodeClaims the scheduler's last round found hosting CapacityBuffers'
    /// virtual pods: Emptiness leaves them alone.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub buffered: BTreeSet<String>,
    /// The `NodeRepair` gate, when on: each repair policy (`Type=Status`) with its
    /// toleration in ms, so a pass is decided again with the repairs it planned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<BTreeMap<String, u64>>,
    /// Workloads (`namespace/Kind/name` of their pods' controller) the scheduler is still
    /// provisioning for: pods pending or nominated to NodeClaims on their way up, that no
    /// round found unschedulable. Consolidation moves none of their pods meanwhile.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub scaling_out: BTreeSet<String>,
}

impl Snapshot {
    /// A NodePool's settings.
    pub fn pool(&self, name: &str) -> Option<&PoolPolicy> {
        self.pools.iter().find(|p| p.name == name)
    }
}

/// A method of disruption, in the order a pass tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Method {
    /// Empty nodes, all at once within budgets.
    Emptiness,
    /// Drifted nodes of static NodePools, each replaced by a node of its pool's template.
    StaticDrift,
    /// Drifted nodes: empty ones at once, then one at a time with replacements.
    Drift,
    /// Several underutilized nodes deleted, or replaced by one cheaper node, together.
    MultiNodeConsolidation,
    /// One underutilized node deleted or replaced by a cheaper one.
    SingleNodeConsolidation,
}

impl Method {
    /// Every method, in the order a pass tries them.
    pub const ALL: [Method; 5] = [
        Method::Emptiness,
        Method::StaticDrift,
        Method::Drift,
        Method::MultiNodeConsolidation,
        Method::SingleNodeConsolidation,
    ];

    /// The budget reason it is limited by.
    pub fn reason(self) -> DisruptionReason {
        match self {
            Method::Emptiness => DisruptionReason::Empty,
            Method::Drift | Method::StaticDrift => DisruptionReason::Drifted,
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                DisruptionReason::Underutilized
            }
        }
    }

    /// Upstream's `consolidation_type` label of decision metrics (empty for drift).
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Method::Emptiness => "empty",
            Method::Drift | Method::StaticDrift => "",
            Method::MultiNodeConsolidation => "multi",
            Method::SingleNodeConsolidation => "single",
        }
    }

    /// Whether it is a consolidation method, whose commands wait for validation.
    pub fn consolidates(self) -> bool {
        self.reason() == DisruptionReason::Underutilized
    }

    /// Upstream's name, for metrics (`decision` and `reason` labels).
    pub fn as_str(self) -> &'static str {
        reason_label(self.reason())
    }

    /// The name the journal stores.
    pub fn name(self) -> &'static str {
        match self {
            Method::Emptiness => "Emptiness",
            Method::StaticDrift => "StaticDrift",
            Method::Drift => "Drift",
            Method::MultiNodeConsolidation => "MultiNodeConsolidation",
            Method::SingleNodeConsolidation => "SingleNodeConsolidation",
        }
    }

    /// Reads [`Method::name`].
    pub fn parse(text: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == text)
    }

    /// Eventual methods may take nodes whose pods block a graceful disruption, when the
    /// NodeClaim's terminationGracePeriod bounds how long they can hold it.
    pub fn eventual(self) -> bool {
        matches!(self, Method::Drift | Method::StaticDrift)
    }
}

/// The label upstream's metrics give a disruption reason.
pub fn reason_label(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => "empty",
        DisruptionReason::Drifted => "drifted",
        DisruptionReason::Underutilized => "underutilized",
    }
}

/// The reason as the `DisruptionReason` condition and budgets spell it.
pub fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => "Empty",
        DisruptionReason::Drifted => "Drifted",
        DisruptionReason::Underutilized => "Underutilized",
    }
}

/// A NodeClaim a command disrupts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Member {
    /// NodeClaim.
    pub nodeclaim: String,
    /// Its node.
    pub node: Option<String>,
}

/// Where a command is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Candidates tainted; replacements launching or initializing.
    WaitingReadiness,
    /// Candidates deleted; draining and terminating.
    Terminating,
    /// Every candidate is gone.
    Done,
    /// Given up, taints taken back: why.
    Abandoned(String),
}

impl Phase {
    /// Whether the command is over.
    pub fn ended(&self) -> bool {
        matches!(self, Phase::Done | Phase::Abandoned(_))
    }

    /// Its name, as the journal stores it.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::WaitingReadiness => "WaitingReadiness",
            Phase::Terminating => "Terminating",
            Phase::Done => "Done",
            Phase::Abandoned(_) => "Abandoned",
        }
    }

    /// Reads [`Phase::name`] (with the detail an `Abandoned` phase carries).
    pub fn parse(name: &str, detail: &str) -> Option<Phase> {
        Some(match name {
            "WaitingReadiness" => Phase::WaitingReadiness,
            "Terminating" => Phase::Terminating,
            "Done" => Phase::Done,
            "Abandoned" => Phase::Abandoned(detail.to_owned()),
            _ => return None,
        })
    }
}

/// A command in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// Its number, increasing.
    pub id: u64,
    /// The method that decided it.
    pub method: Method,
    /// The NodeClaims it disrupts.
    pub candidates: Vec<Member>,
    /// The NodeClaims launched to take their pods.
    pub replacements: Vec<String>,
    /// Where it is.
    pub phase: Phase,
    /// When it started (ms since the Unix epoch).
    pub started_ms: i64,
    /// The wait for replacements has been reported.
    pub waiting_reported: bool,
}

impl Command {
    /// The reason its budget and its candidates' condition name.
    pub fn reason(&self) -> DisruptionReason {
        self.method.reason()
    }

    /// The command a record starts, at `started_ms`.
    pub fn started(record: &DisruptionRecord, started_ms: i64) -> Command {
        Command {
            id: record.command,
            method: record.method,
            candidates: record.candidates.clone(),
            replacements: record.replacements.clone(),
            phase: Phase::WaitingReadiness,
            started_ms,
            waiting_reported: false,
        }
    }
}

/// What a pass decided from, for `journal verify` to decide again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DisruptionInput {
    /// The snapshot.
    pub snapshot: Snapshot,
    /// What the scheduler's next round would have seen, for the simulation (its instance
    /// types are the catalogs its pools name).
    pub base: Option<RoundInput>,
    /// The candidates the single-node search before it could not consolidate (tried
    /// last: [`crate::disruption::pass::Options::unconsolidatable`]).
    pub unconsolidatable: BTreeSet<String>,
}

/// A disruption command as decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DisruptionRecord {
    /// The command's number.
    pub command: u64,
    /// The method.
    pub method: Method,
    /// The NodeClaims it disrupts, with their nodes.
    pub candidates: Vec<Member>,
    /// The NodeClaims it launches first (each also recorded as planned).
    pub replacements: Vec<String>,
    /// UIDs of the pods that move.
    pub moved: Vec<String>,
    /// $/h the candidates cost less what the replacements would.
    pub savings: f64,
    /// Per NodePool, how many more nodes its budgets allowed for the reason at that moment.
    pub allowed: BTreeMap<String, usize>,
    /// What it was decided from.
    pub input: Option<Box<DisruptionInput>>,
}
