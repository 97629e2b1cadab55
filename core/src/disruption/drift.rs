//! Drift, as upstream's `drift.go` and the drift it judges itself.
//!
//! - The **Drift method** (reason `Drifted`, [`method`]): candidates whose `Drifted`
//!   condition is True, oldest drift first; the empty ones all at once within budgets, else
//!   the first whose pods fit on the rest of the cluster plus replacements
//!   ([`super::simulation`]), alone. A drifted node whose pods fit nowhere is reported
//!   (`DisruptionBlocked`) and skipped.
//! - **`InstanceTypeNotFound`** ([`instance_type_not_found`]), the drift the core judges from
//!   data it is given (the NodePool's static and requirements drift is
//!   `api::nodeclaim::drift`; the node class's is the cloud's, `CloudProvider::drift`): the
//!   instance type a node runs as, or its offering (zone and capacity type), is no longer in
//!   the catalog. As upstream, only nodes older than an hour are judged, so a catalog that
//!   has not caught up with a fresh launch drifts nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::budgets;
use super::candidates;
use super::decision::{Blocked, Decision, MethodResult, blocked, leaving, names, price};
use super::simulation::{self, Outcome, Rest};
use super::{Method, NodeSnapshot, Snapshot};
use crate::model::InstanceType;
use crate::ports::{Drift, Instance};
use crate::scheduling::{PoolCache, PreparedPools, SchedulingInput};

/// How old a node must be before its instance type's absence counts as drift.
pub const INSTANCE_TYPE_GRACE: Duration = Duration::from_secs(3600);

/// `InstanceTypeNotFound` when `instance` (launched at `launched_ms`) is older than
/// [`INSTANCE_TYPE_GRACE`] and its type or offering is missing from `catalog`.
pub fn instance_type_not_found(
    instance: &Instance,
    catalog: &[Arc<InstanceType>],
    launched_ms: i64,
    now_ms: i64,
) -> Option<Drift> {
    let grace = i64::try_from(INSTANCE_TYPE_GRACE.as_millis()).unwrap_or(i64::MAX);
    if now_ms.saturating_sub(launched_ms) < grace {
        return None;
    }
    let Some(instance_type) = catalog.iter().find(|t| t.name == instance.instance_type) else {
        return Some(Drift {
            reason: "InstanceTypeNotFound".into(),
            message: format!(
                "instance type {} is no longer offered for this NodePool",
                instance.instance_type
            ),
        });
    };
    let offered = instance_type
        .offerings
        .iter()
        .any(|o| o.zone == instance.zone && o.capacity_type == instance.capacity_type);
    (!offered).then(|| Drift {
        reason: "InstanceTypeNotFound".into(),
        message: format!(
            "{} is no longer offered as {} in {}",
            instance.instance_type, instance.capacity_type, instance.zone
        ),
    })
}

/// Sorts `nodes` oldest drift first; the name breaks ties, so the order is the same in any
/// replay.
pub(super) fn oldest_drift_first(nodes: &mut [&NodeSnapshot]) {
    nodes.sort_by(|a, b| {
        let since = |n: &NodeSnapshot| n.drifted.as_ref().map_or(i64::MAX, |d| d.since_ms);
        since(a)
            .cmp(&since(b))
            .then_with(|| a.nodeclaim.cmp(&b.nodeclaim))
    });
}

/// Runs the method: `expiring` are the NodeClaims expiring this pass, `base` what the
/// scheduler's next round would see (its NodePools prepared from `cache` where it has them),
/// `decide` whether a command may still be chosen (an earlier method had none), `budget`
/// what each pool's `Drifted` budgets still allow.
pub(super) fn method(
    snapshot: &Snapshot,
    expiring: &BTreeSet<&str>,
    (base, cache): (Option<&SchedulingInput>, Option<&PoolCache>),
    decide: bool,
    budget: &mut BTreeMap<String, usize>,
) -> MethodResult {
    let mut eligible = Vec::new();
    let mut reported = Vec::new();
    for node in snapshot
        .nodes
        .iter()
        .filter(|n| n.drifted.is_some() && !expiring.contains(n.nodeclaim.as_str()))
    {
        match candidates::check(snapshot, node, Method::Drift) {
            Ok(()) => eligible.push(node),
            Err(why) => reported.extend(blocked(node, &why)),
        }
    }
    oldest_drift_first(&mut eligible);
    if !decide {
        return (None, eligible.len(), reported, 0);
    }
    let empty = names(&budgets::within(
        eligible
            .iter()
            .copied()
            .filter(|n| n.reschedulable().next().is_none()),
        budget,
    ));
    if !empty.is_empty() {
        let command = Decision {
            method: Method::Drift,
            savings: price(snapshot, &empty),
            candidates: empty,
            replacements: Vec::new(),
            simulation: None,
            scores: Vec::new(),
        };
        return (Some(command), eligible.len(), reported, 0);
    }
    let Some(base) = base else {
        return (None, eligible.len(), reported, 0);
    };
    let mut simulations = 0;
    let leaving = leaving(snapshot, expiring);
    let closed = BTreeSet::new();
    // Prepared for the first simulation, shared by the others.
    let mut pools = None;
    for node in &eligible {
        if budget.get(&node.nodepool).copied().unwrap_or(0) == 0 {
            continue;
        }
        simulations += 1;
        let rest = Rest {
            leaving: &leaving,
            closed: &closed,
            pools: Some(pools.get_or_insert_with(|| PreparedPools::new(base, cache))),
        };
        let simulation = simulation::run(base, &[node], rest);
        match simulation.outcome() {
            Outcome::Fits { replacements } => {
                let cost: f64 = replacements
                    .iter()
                    .filter_map(|c| c.instance_types.first())
                    .map(|o| o.price)
                    .sum();
                let command = Decision {
                    method: Method::Drift,
                    candidates: vec![node.nodeclaim.clone()],
                    savings: node.price - cost,
                    replacements,
                    simulation: Some(simulation),
                    scores: Vec::new(),
                };
                return (Some(command), eligible.len(), reported, simulations);
            }
            Outcome::Blocked(pods) => {
                let keys: BTreeMap<&str, String> = node
                    .pods
                    .iter()
                    .map(|p| (p.pod.uid.as_str(), p.pod.key()))
                    .collect();
                let (uid, why) = &pods[0];
                let pod = keys
                    .get(uid.as_str())
                    .cloned()
                    .unwrap_or_else(|| uid.clone());
                reported.push(Blocked {
                    nodeclaim: node.nodeclaim.clone(),
                    node: node.node.clone(),
                    message: format!(
                        "Cannot disrupt NodeClaim: scheduling simulation failed to schedule {} pod(s); {pod}: {why}",
                        pods.len()
                    ),
                });
            }
        }
    }
    (None, eligible.len(), reported, simulations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::test_support::catalog_type;
    use crate::model::CapacityType;
    use crate::ports::InstanceState;

    fn instance(instance_type: &str, zone: &str) -> Instance {
        Instance {
            id: "i-1".into(),
            provider_id: "aws:///a/i-1".into(),
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type: CapacityType::OnDemand,
            price: 0.1,
            image_id: "ami-1".into(),
            nodeclaim: "c".into(),
            nodepool: "p".into(),
            state: InstanceState::Running,
            launched_at_ms: None,
            price_source: None,
            reservation: None,
        }
    }

    #[test]
    fn a_type_or_offering_gone_drifts_only_nodes_older_than_an_hour() {
        let catalog = vec![catalog_type("m5.large", "us-west-2a")];
        let hour = 3_600_000;
        assert_eq!(
            instance_type_not_found(&instance("m5.large", "us-west-2a"), &catalog, 0, 2 * hour),
            None
        );
        let gone =
            instance_type_not_found(&instance("c5.large", "us-west-2a"), &catalog, 0, 2 * hour)
                .map(|d| d.reason);
        assert_eq!(gone.as_deref(), Some("InstanceTypeNotFound"));
        let zone_gone =
            instance_type_not_found(&instance("m5.large", "us-west-2b"), &catalog, 0, 2 * hour);
        assert!(zone_gone.is_some_and(|d| d.message.contains("us-west-2b")));
        // Younger than an hour: not judged.
        assert_eq!(
            instance_type_not_found(
                &instance("c5.large", "us-west-2a"),
                &catalog,
                hour,
                2 * hour - 1
            ),
            None
        );
    }
}
