//! Static NodePools (`spec.replicas`) in disruption, as upstream's `staticdrift.go` and
//! static deprovisioning controller, under the `StaticCapacity` gate
//! ([`Snapshot::static_capacity`]). Emptiness, drift and consolidation leave their nodes
//! alone either way ([`super::candidates::check`]); expiration and interruption take them as any node,
//! and the next round launches what the pool is then short of
//! ([`crate::scheduling::statics`]).
//!
//! - **StaticDrift** ([`drift_method`], reason `Drifted`, before Drift): a static pool's
//!   drifted candidates, oldest drift first, each replaced by a NodeClaim of the pool's
//!   template (launched and initialized before the candidate drains), as many as its
//!   `Drifted` budget allows and its node limit leaves room to stage; none while the pool
//!   has more nodes than replicas (scale down first). At the node limit the candidates are
//!   reported blocked. One pool's command per pass.
//! - **Scale down** ([`overprovisioned`]): a static pool whose running NodeClaims (not being
//!   deleted, not held by a command as candidates) outnumber its replicas loses the excess
//!   at once, as upstream deletes them (outside budgets; each drain still waits for
//!   PodDisruptionBudgets until its terminationGracePeriod): NodeClaims not launched yet
//!   first, then empty nodes, then the rest with nodes holding a pod under
//!   `karpenter.sh/do-not-disrupt` last, cheapest to disrupt first.

use std::collections::{BTreeMap, BTreeSet};

use super::candidates;
use super::consolidation::greedy::disruption_cost;
use super::decision::{Blocked, Decision, MethodResult, blocked, price};
use super::{CommandRole, Method, NodeSnapshot, Snapshot};
use crate::events::NodeClaimState;
use crate::model::drain::do_not_disrupt;
use crate::scheduling::SchedulingInput;
use crate::scheduling::statics::template_claim;

/// The reason a static pool's excess NodeClaims are deleted with (upstream's
/// `TerminationReason`).
pub const SCALE_DOWN_REASON: &str = "overprovisioned";

/// Why a static pool at its node limit replaces nothing (upstream's words).
pub const AT_NODE_LIMIT: &str =
    "static NodePool is at its node limit and cannot stage a replacement";

/// Runs StaticDrift: `base` holds the static pools' templates (without it, or without a
/// pool's template, nothing is replaced), `decide` whether a command may still be chosen,
/// `budget` what each pool's `Drifted` budgets still allow.
pub(super) fn drift_method(
    snapshot: &Snapshot,
    expiring: &BTreeSet<&str>,
    base: Option<&SchedulingInput>,
    decide: bool,
    budget: &mut BTreeMap<String, usize>,
) -> MethodResult {
    if !snapshot.static_capacity {
        return (None, 0, Vec::new(), 0);
    }
    let mut by_pool: BTreeMap<&str, Vec<&NodeSnapshot>> = BTreeMap::new();
    let mut reported = Vec::new();
    let statics = snapshot.pools.iter().filter(|p| p.is_static());
    let static_names: BTreeSet<&str> = statics.map(|p| p.name.as_str()).collect();
    let drifted = snapshot.nodes.iter().filter(|n| {
        n.drifted.is_some()
            && static_names.contains(n.nodepool.as_str())
            && !expiring.contains(n.nodeclaim.as_str())
    });
    for node in drifted {
        match candidates::check(snapshot, node, Method::StaticDrift) {
            Ok(()) => by_pool.entry(&node.nodepool).or_default().push(node),
            Err(why) => reported.extend(blocked(node, &why)),
        }
    }
    let eligible = by_pool.values().map(Vec::len).sum();
    if !decide {
        return (None, eligible, reported, 0);
    }
    for (pool_name, mut nodes) in by_pool {
        let Some(pool) = snapshot.pool(pool_name) else {
            continue;
        };
        let replicas = pool.replicas.unwrap_or(0);
        let left = budget.get(pool_name).copied().unwrap_or(0);
        let of_pool: Vec<&NodeSnapshot> = snapshot
            .nodes
            .iter()
            .filter(|n| n.nodepool == pool_name)
            .collect();
        let staying = of_pool.iter().filter(|n| !n.deleting()).count();
        if left == 0 || i64::try_from(staying).unwrap_or(i64::MAX) > replicas {
            continue;
        }
        super::drift::oldest_drift_first(&mut nodes);
        let wanted = left.min(nodes.len());
        let room = pool.node_limit.map_or(usize::MAX, |limit| {
            usize::try_from(limit.saturating_sub(of_pool.len() as i64)).unwrap_or(0)
        });
        let allowed = wanted.min(room);
        if allowed == 0 {
            reported.extend(nodes.iter().take(wanted).map(|n| Blocked {
                nodeclaim: n.nodeclaim.clone(),
                node: n.node.clone(),
                message: format!("Cannot disrupt NodeClaim: {AT_NODE_LIMIT}"),
            }));
            continue;
        }
        let template = base.and_then(|b| {
            b.static_pools
                .iter()
                .find(|s| s.template.name == pool_name)
                .and_then(|s| template_claim(&s.template))
        });
        let Some(replacement) = template else {
            continue;
        };
        let chosen: Vec<String> = nodes
            .iter()
            .take(allowed)
            .map(|n| n.nodeclaim.clone())
            .collect();
        if let Some(left) = budget.get_mut(pool_name) {
            *left -= chosen.len();
        }
        let replacements = vec![replacement; chosen.len()];
        let cost: f64 = replacements
            .iter()
            .filter_map(|c| c.instance_types.first())
            .map(|o| o.price)
            .sum();
        let command = Decision {
            method: Method::StaticDrift,
            savings: price(snapshot, &chosen) - cost,
            candidates: chosen,
            replacements,
            simulation: None,
            scores: Vec::new(),
        };
        return (Some(command), eligible, reported, 0);
    }
    (None, eligible, reported, 0)
}

/// Whether a pass over `snapshot` needs the scheduler's next round for static drift: a
/// static pool has a drifted node that is not being deleted.
pub fn needs_base(snapshot: &Snapshot) -> bool {
    snapshot.static_capacity
        && snapshot.nodes.iter().any(|n| {
            n.drifted.is_some()
                && !n.deleting()
                && snapshot.pool(&n.nodepool).is_some_and(|p| p.is_static())
        })
}

/// The static pools with fewer NodeClaims (deleting ones included) than replicas and room
/// under their node limit: the scheduler's next round launches what they lack.
pub fn short(snapshot: &Snapshot) -> Vec<String> {
    if !snapshot.static_capacity {
        return Vec::new();
    }
    snapshot
        .pools
        .iter()
        .filter(|p| {
            let have = snapshot
                .nodes
                .iter()
                .filter(|n| n.nodepool == p.name)
                .count() as i64;
            p.replicas.is_some_and(|r| have < r) && p.node_limit.is_none_or(|l| have < l)
        })
        .map(|p| p.name.clone())
        .collect()
}

/// The NodeClaims static pools have beyond their replicas, to delete now (reason
/// `overprovisioned`), pool by pool in name order.
pub fn overprovisioned(snapshot: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    if !snapshot.static_capacity {
        return out;
    }
    for pool in snapshot.pools.iter().filter(|p| p.is_static()) {
        let replicas = usize::try_from(pool.replicas.unwrap_or(0)).unwrap_or(0);
        let running: Vec<&NodeSnapshot> = snapshot
            .nodes
            .iter()
            .filter(|n| n.nodepool == pool.name)
            .filter(|n| !n.deleting() && n.command != Some(CommandRole::Candidate))
            .collect();
        let excess = running.len().saturating_sub(replicas);
        if excess == 0 {
            continue;
        }
        // A command's replacement is left to its command.
        let mut order: Vec<&NodeSnapshot> = running
            .into_iter()
            .filter(|n| n.command.is_none())
            .collect();
        order.sort_by(|a, b| {
            rank(snapshot, a)
                .partial_cmp(&rank(snapshot, b))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.nodeclaim.cmp(&b.nodeclaim))
        });
        out.extend(order.iter().take(excess).map(|n| n.nodeclaim.clone()));
    }
    out
}

/// Where a node comes in scale down, lowest first: (not launched yet → 0, empty → 1, the
/// rest → 2; a pod under an active `do-not-disrupt` → 1 more; disruption cost).
fn rank(snapshot: &Snapshot, node: &NodeSnapshot) -> (u8, u8, f64) {
    if node.state == NodeClaimState::Pending {
        return (0, 0, 0.0);
    }
    let protected = node.pods.iter().any(|p| {
        p.do_not_disrupt
            .as_deref()
            .is_some_and(|v| do_not_disrupt(v, p.created_ms, snapshot.now_ms).unwrap_or(false))
    });
    let empty = node.reschedulable().next().is_none();
    let class = if empty && !protected { 1 } else { 2 };
    (
        class,
        u8::from(protected),
        disruption_cost(node, snapshot.now_ms),
    )
}

#[cfg(test)]
mod tests;
