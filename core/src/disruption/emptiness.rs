//! The Emptiness method (reason `Empty`), as upstream's `emptiness.go`: every candidate with
//! no pod that would have to move and a True `Consolidatable` condition (so not under
//! `consolidateAfter: Never`), in one command, as many per pool as its budget allows. A node
//! hosting CapacityBuffers' virtual pods is not empty: it is the headroom they keep.

use std::collections::{BTreeMap, BTreeSet};

use super::budgets;
use super::candidates;
use super::consolidation::condition::Consolidatable;
use super::decision::{Decision, MethodResult, blocked, names, price};
use super::{Method, NodeSnapshot, Snapshot};

/// Runs the method: `conditions` are the NodeClaims' `Consolidatable` conditions, `expiring`
/// the NodeClaims expiring this pass, `budget` what each pool's `Empty` budgets still allow.
pub(super) fn method(
    snapshot: &Snapshot,
    conditions: &BTreeMap<String, Consolidatable>,
    expiring: &BTreeSet<&str>,
    budget: &mut BTreeMap<String, usize>,
) -> MethodResult {
    let wanted = |n: &NodeSnapshot| {
        !expiring.contains(n.nodeclaim.as_str())
            && n.reschedulable().next().is_none()
            && !snapshot.buffered.contains(&n.nodeclaim)
            && !n
                .node
                .as_ref()
                .is_some_and(|node| snapshot.buffered.contains(node))
            && conditions.get(&n.nodeclaim).is_some_and(|c| c.is_true())
    };
    let mut eligible = Vec::new();
    let mut reported = Vec::new();
    for node in snapshot.nodes.iter().filter(|n| wanted(n)) {
        match candidates::check(snapshot, node, Method::Emptiness) {
            Ok(()) => eligible.push(node),
            Err(why) => reported.extend(blocked(node, &why)),
        }
    }
    let chosen = names(&budgets::within(eligible.iter().copied(), budget));
    let command = (!chosen.is_empty()).then(|| Decision {
        method: Method::Emptiness,
        savings: price(snapshot, &chosen),
        candidates: chosen,
        replacements: Vec::new(),
        simulation: None,
        scores: Vec::new(),
    });
    (command, eligible.len(), reported, 0)
}
