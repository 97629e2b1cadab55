//! Disruption, decided without I/O: which nodes leave, why, and how many at once.
//!
//! A pass of the disruption actor gathers a [`Snapshot`] (every NodeClaim with its node,
//! pods and PodDisruptionBudgets, every NodePool's disruption settings) and hands it to
//! [`pass::run`], which returns what to do: NodeClaims whose `expireAfter` has passed (deleted
//! forcefully, outside budgets, as upstream's expiration controller does), and at most one
//! command from the first method that has one, in upstream's order — emptiness, then drift
//! (static drift is a method of static NodePools, which karpenter-rs refuses; consolidation
//! of non-empty nodes is not built yet). What a command then goes through (taints,
//! replacements, waiting for them, draining) is [`orchestration`].
//!
//! - [`budgets`]: `spec.disruption.budgets`, cron windows included.
//! - [`candidates`]: which nodes may be disrupted at all, and why not.
//! - [`consolidatable`]: the NodeClaim `Consolidatable` condition.
//! - [`simulation`]: whether a candidate's pods fit on the rest of the cluster, and on which
//!   new NodeClaims.
//! - [`pass`]: the methods and the pass.
//! - [`orchestration`]: a command from its taints to its end.

pub mod budgets;
pub mod candidates;
pub mod consolidatable;
pub mod orchestration;
pub mod pass;
pub mod simulation;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::nodepool::{Budget, ConsolidationPolicy, DisruptionReason};
use crate::events::NodeClaimState;

/// A NodePool's disruption settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPolicy {
    /// Name.
    pub name: String,
    /// `spec.disruption.budgets`.
    pub budgets: Vec<Budget>,
    /// `spec.disruption.consolidateAfter`; `None` is `Never`.
    pub consolidate_after: Option<Duration>,
    /// `spec.disruption.consolidationPolicy`.
    pub policy: ConsolidationPolicy,
}

/// Why a NodeClaim drifted, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftMark {
    /// Upstream's reason (`NodePoolDrifted`, `AMIDrift`, …).
    pub reason: String,
    /// When the `Drifted` condition turned True (ms since the Unix epoch).
    pub since_ms: i64,
}

/// A pod bound to a node, as disruption needs to know it: what the cluster port reports.
pub type PodSnapshot = crate::ports::BoundPod;

/// A NodeClaim and its node, as a pass sees them.
#[derive(Debug, Clone, PartialEq)]
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
    /// Pods bound to its node.
    pub pods: Vec<PodSnapshot>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandRole {
    /// It is being disrupted.
    Candidate,
    /// It was launched to take a candidate's pods.
    Replacement,
}

/// Everything a pass decides from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Now (ms since the Unix epoch).
    pub now_ms: i64,
    /// The NodePools.
    pub pools: Vec<PoolPolicy>,
    /// Every NodeClaim not terminated, in name order.
    pub nodes: Vec<NodeSnapshot>,
    /// PodDisruptionBudgets (`namespace/name`) with the evictions each allows now.
    pub pdbs: BTreeMap<String, i32>,
}

impl Snapshot {
    /// A NodePool's settings.
    pub fn pool(&self, name: &str) -> Option<&PoolPolicy> {
        self.pools.iter().find(|p| p.name == name)
    }
}

/// A method of disruption, in the order a pass tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    /// Empty nodes, all at once within budgets.
    Emptiness,
    /// Drifted nodes: empty ones at once, then one at a time with replacements.
    Drift,
}

impl Method {
    /// The budget reason it is limited by.
    pub fn reason(self) -> DisruptionReason {
        match self {
            Method::Emptiness => DisruptionReason::Empty,
            Method::Drift => DisruptionReason::Drifted,
        }
    }

    /// Upstream's name, for metrics (`decision` and `reason` labels).
    pub fn as_str(self) -> &'static str {
        reason_label(self.reason())
    }

    /// Eventual methods may take nodes whose pods block a graceful disruption, when the
    /// NodeClaim's terminationGracePeriod bounds how long they can hold it.
    pub fn eventual(self) -> bool {
        matches!(self, Method::Drift)
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

#[cfg(test)]
pub(crate) mod test_support;
