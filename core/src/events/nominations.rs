//! What the journal records of a nomination check (`NominationsChecked`): what the
//! scheduler checked and what it decided; the decision is
//! `provisioning::nominations::check`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Taint, Toleration};
use crate::ports::NodeInfo;

/// A node as a check needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFacts {
    /// Node name.
    pub name: String,
    /// Provider id (how a NodeClaim's instance finds its node).
    pub provider_id: String,
    /// Ready condition.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// Taints.
    pub taints: Vec<Taint>,
}

impl NodeFacts {
    /// The facts of `node`.
    pub fn of(node: &NodeInfo) -> NodeFacts {
        NodeFacts {
            name: node.name.clone(),
            provider_id: node.provider_id.clone(),
            ready: node.ready,
            unschedulable: node.unschedulable,
            taints: node.taints.clone(),
        }
    }
}

/// A pod nominated to a NodeClaim, with what decides whether its node may take it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NominatedPod {
    /// UID.
    pub uid: String,
    /// Its tolerations.
    pub tolerations: Vec<Toleration>,
}

/// A launched NodeClaim with pods nominated to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NominatedClaim {
    /// NodeClaim name.
    pub nodeclaim: String,
    /// Its instance's provider id.
    pub provider_id: String,
    /// The pods nominated to it.
    pub pods: Vec<NominatedPod>,
    /// Since when its node has been open to them (journal clock, ms), if it was at the last
    /// check.
    pub open_since_ms: Option<i64>,
}

/// A pod a round left to kube-scheduler on a running node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftPod {
    /// UID.
    pub uid: String,
    /// The node.
    pub node: String,
    /// Since when its clock runs (journal clock, ms).
    pub since_ms: i64,
}

/// What one check decides from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NominationCheck {
    /// Now (journal clock, ms).
    pub at_ms: i64,
    /// The nomination window (ms).
    pub window_ms: i64,
    /// The nodes the claims and left pods refer to (others are left out).
    pub nodes: Vec<NodeFacts>,
    /// Launched NodeClaims with nominated pods.
    pub claims: Vec<NominatedClaim>,
    /// Pods left to kube-scheduler on running nodes.
    pub left: Vec<LeftPod>,
    /// Whether pods are in flight other than those nominated to `claims`: nominated to
    /// NodeClaims not launched yet, or moving onto replacements.
    pub in_flight_elsewhere: bool,
}

/// A wait that ran out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Expired {
    /// Pod UID.
    pub uid: String,
    /// The NodeClaim it was nominated to; empty for a pod left on a running node.
    pub nodeclaim: String,
    /// The node.
    pub node: String,
}

/// What a check decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NominationOutcome {
    /// Waits that ran out: nominations first, in the order of the check's claims, then left
    /// pods by UID.
    pub expired: Vec<Expired>,
    /// The clocks of NodeClaims whose node is open, after the check.
    pub open_since: BTreeMap<String, i64>,
    /// The clocks of left pods still waiting, after the check.
    pub left_since: BTreeMap<String, i64>,
}

/// A check and what it decided, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NominationRecord {
    /// What it decided from.
    pub check: NominationCheck,
    /// What it decided.
    pub outcome: NominationOutcome,
}
