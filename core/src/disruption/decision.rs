//! What a disruption method decides ([`Decision`]) and reports ([`Blocked`]), and what every
//! method's simulations leave out: shared by the pass, consolidation and validation.

use std::collections::BTreeSet;

use super::candidates::NotCandidate;
use super::simulation::Simulation;
use super::{CommandRole, Method, NodeSnapshot, Snapshot};
use crate::scheduling::PlannedNodeClaim;

/// A command a pass decided.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The method.
    pub method: Method,
    /// The NodeClaims to disrupt, in the order chosen.
    pub candidates: Vec<String>,
    /// New NodeClaims to launch (and wait for) before the candidates drain.
    pub replacements: Vec<PlannedNodeClaim>,
    /// The simulation that showed the candidates' pods fit, when their pods had to move.
    pub simulation: Option<Simulation>,
    /// $/h the candidates cost less what the replacements would.
    pub savings: f64,
    /// A consolidation command's scores in the Balanced NodePools it takes nodes of (it
    /// passed each).
    pub scores: Vec<super::balanced::Score>,
}

/// A node a method wanted and could not take, with why (a `DisruptionBlocked` Event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// NodeClaim.
    pub nodeclaim: String,
    /// Its node.
    pub node: Option<String>,
    /// Why.
    pub message: String,
}

/// A node a method wants but may not take: reported when a person can do something about it.
pub fn blocked(node: &NodeSnapshot, why: &NotCandidate) -> Option<Blocked> {
    why.reported().then(|| Blocked {
        nodeclaim: node.nodeclaim.clone(),
        node: node.node.clone(),
        message: format!("Cannot disrupt NodeClaim: {why}"),
    })
}

/// Nodes and NodeClaims on their way out (deleting, held by a command as candidates, or
/// expiring now): not in a simulated cluster.
pub fn leaving(snapshot: &Snapshot, expiring: &BTreeSet<&str>) -> BTreeSet<String> {
    snapshot
        .nodes
        .iter()
        .filter(|n| {
            n.deleting()
                || n.command == Some(CommandRole::Candidate)
                || expiring.contains(n.nodeclaim.as_str())
        })
        .flat_map(|n| n.node.iter().cloned().chain([n.nodeclaim.clone()]))
        .collect()
}

/// What a method found: its command, how many candidates it had, the nodes it reports
/// blocked, and the simulations it ran.
pub(super) type MethodResult = (Option<Decision>, usize, Vec<Blocked>, usize);

/// The NodeClaims of `nodes`.
pub(super) fn names(nodes: &[&NodeSnapshot]) -> Vec<String> {
    nodes.iter().map(|n| n.nodeclaim.clone()).collect()
}

/// What the NodeClaims named cost together ($/h).
pub(super) fn price(snapshot: &Snapshot, names: &[String]) -> f64 {
    snapshot
        .nodes
        .iter()
        .filter(|n| names.contains(&n.nodeclaim))
        .map(|n| n.price)
        .sum()
}
