//! Static NodePools in a disruption pass, each test naming the upstream case it paraphrases
//! (`pkg/controllers/static/deprovisioning/suite_test.go`, `staticdrift` in
//! `pkg/controllers/disruption/suite_test.go`).
#![allow(clippy::unwrap_used)]

use super::*;
use crate::disruption::pass;
use crate::disruption::test_support::{NOW, base, node, nodes_budget, pod, snapshot};
use crate::events::disruption::DriftMark;
use crate::scheduling::StaticPool;

/// `nodes` in a static pool `s` of `replicas`.
fn static_snapshot(replicas: i64, nodes: Vec<NodeSnapshot>) -> Snapshot {
    let mut s = snapshot(nodes);
    for p in s.pools.iter_mut().filter(|p| p.name == "s") {
        p.replicas = Some(replicas);
    }
    s
}

fn drifted(mut n: NodeSnapshot, since_ms: i64) -> NodeSnapshot {
    n.drifted = Some(DriftMark {
        reason: "NodePoolDrifted".into(),
        since_ms,
    });
    n
}

/// The scheduler's next round with static pool `s` in it.
fn with_static(replicas: i64) -> SchedulingInput {
    let mut input = base("dynamic", &[]);
    let mut template = input.nodepools[0].clone();
    template.name = "s".into();
    input.static_pools.push(StaticPool { template, replicas });
    input
}

/// "should terminate excess nodeclaims when current count exceeds desired replicas" and
/// "should handle zero replicas by terminating all nodeclaims".
#[test]
fn a_static_pool_over_its_replicas_loses_the_excess_at_once() {
    let nodes = |n: usize| {
        (0..n)
            .map(|i| node(&format!("n{i}"), "s", vec![]))
            .collect()
    };
    assert_eq!(overprovisioned(&static_snapshot(2, nodes(4))).len(), 2);
    assert_eq!(overprovisioned(&static_snapshot(0, nodes(3))).len(), 3);
    assert!(overprovisioned(&static_snapshot(3, nodes(2))).is_empty());
    // Outside budgets: a budget of 0 holds nothing back.
    let mut s = static_snapshot(0, nodes(3));
    nodes_budget(&mut s, "s", "0");
    assert_eq!(overprovisioned(&s).len(), 3);
}

/// "should only consider running nodeclaims and not deleting nodeclaims".
#[test]
fn nodeclaims_being_deleted_do_not_count_as_running() {
    let mut nodes: Vec<NodeSnapshot> = (0..4)
        .map(|i| node(&format!("n{i}"), "s", vec![]))
        .collect();
    for n in nodes.iter_mut().take(3) {
        n.state = NodeClaimState::Draining;
    }
    assert!(overprovisioned(&static_snapshot(1, nodes)).is_empty());
}

/// "should prioritize nodeclaims that have unresolved providerID", "should prioritize
/// empty nodes (with only daemonset pods) for termination" and the "scales down in
/// disruption cost order" table (DaemonSet-only first, then fewest pods, do-not-disrupt
/// last).
#[test]
fn scale_down_takes_unlaunched_then_empty_then_cheapest_to_disrupt() {
    let mut unlaunched = node("a-unlaunched", "s", vec![]);
    unlaunched.state = NodeClaimState::Pending;
    unlaunched.node = None;
    let daemons_only = node("b-ds", "s", vec![pod("ds", false)]);
    let low = node("c-low", "s", vec![pod("l", true)]);
    let high = node("d-high", "s", vec![pod("h1", true), pod("h2", true)]);
    let mut protected_pod = pod("dnd", true);
    protected_pod.do_not_disrupt = Some("true".into());
    let dnd = node("e-dnd", "s", vec![protected_pod]);
    let all = vec![dnd, high, low, daemons_only, unlaunched];
    let order = |replicas| overprovisioned(&static_snapshot(replicas, all.clone()));
    assert_eq!(order(4), vec!["a-unlaunched"]);
    assert_eq!(order(3), vec!["a-unlaunched", "b-ds"]);
    assert_eq!(order(1), vec!["a-unlaunched", "b-ds", "c-low", "d-high"]);
    assert_eq!(order(0).last().map(String::as_str), Some("e-dnd"));
}

/// Dynamic pools are never scaled down this way; static pools' nodes are left alone by
/// emptiness and consolidation (upstream's `ShouldDisrupt` of each method).
#[test]
fn static_nodes_are_not_emptied_or_consolidated() {
    let s = static_snapshot(1, vec![node("empty", "s", vec![])]);
    let result = pass::run(&s, Some(&with_static(1)));
    assert!(result.command.is_none(), "{:?}", result.command);
    assert!(result.overprovisioned.is_empty());
    let dynamic = snapshot(vec![node("a", "d", vec![]), node("b", "d", vec![])]);
    assert!(overprovisioned(&dynamic).is_empty());
}

/// StaticDrift: "should replace drifted static nodes with a node of the pool's template",
/// one per drifted candidate within the Drifted budget, before Drift.
#[test]
fn a_drifted_static_node_is_replaced_from_its_pools_template() {
    let mut s = static_snapshot(
        3,
        vec![
            drifted(node("n0", "s", vec![pod("p", true)]), NOW - 2_000),
            drifted(node("n1", "s", vec![]), NOW - 1_000),
            node("n2", "s", vec![]),
        ],
    );
    nodes_budget(&mut s, "s", "1");
    let result = pass::run(&s, Some(&with_static(3)));
    let command = result.command.expect("a StaticDrift command");
    assert_eq!(command.method, Method::StaticDrift);
    // Oldest drift first, as many as the budget allows, each with a replacement.
    assert_eq!(command.candidates, vec!["n0"]);
    assert_eq!(command.replacements.len(), 1);
    assert!(command.replacements[0].pods.is_empty());
    assert_eq!(command.replacements[0].nodepool, "s");
    assert_eq!(result.eligible[&Method::StaticDrift], 2);
    // Without the pool's template (no round to read it from), nothing is replaced.
    assert!(pass::run(&s, None).command.is_none());
}

/// StaticDrift: "should not disrupt drifted static nodes until scale down is complete".
#[test]
fn static_drift_waits_for_scale_down() {
    let s = static_snapshot(
        1,
        vec![
            drifted(node("n0", "s", vec![]), NOW - 1_000),
            node("n1", "s", vec![]),
        ],
    );
    let result = pass::run(&s, Some(&with_static(1)));
    assert!(result.command.is_none());
    assert_eq!(result.overprovisioned.len(), 1);
}

/// StaticDrift at the node limit: "static NodePool is at its node limit and cannot stage a
/// replacement" (a DisruptionBlocked Event), nothing replaced.
#[test]
fn a_static_pool_at_its_node_limit_reports_its_drifted_nodes_blocked() {
    let mut s = static_snapshot(
        2,
        vec![
            drifted(node("n0", "s", vec![]), NOW - 1_000),
            node("n1", "s", vec![]),
        ],
    );
    s.pools[0].node_limit = Some(2);
    let result = pass::run(&s, Some(&with_static(2)));
    assert!(result.command.is_none());
    assert_eq!(result.blocked.len(), 1);
    assert!(result.blocked[0].message.contains(AT_NODE_LIMIT));
    // Room for one more: replaced.
    s.pools[0].node_limit = Some(3);
    assert!(pass::run(&s, Some(&with_static(2))).command.is_some());
}

/// A drifted node of a dynamic pool is Drift's, not StaticDrift's.
#[test]
fn drift_takes_dynamic_pools_nodes_and_static_drift_static_ones() {
    let s = snapshot(vec![drifted(
        node("d0", "d", vec![pod("p", true)]),
        NOW - 1_000,
    )]);
    let result = pass::run(&s, Some(&base("d", &[])));
    assert_eq!(result.command.map(|c| c.method), Some(Method::Drift));
    assert_eq!(result.eligible[&Method::StaticDrift], 0);
}

/// A static pool with fewer NodeClaims than replicas, and room under its node limit, is
/// short (the scheduler is told); deleting NodeClaims still count until gone.
#[test]
fn a_pool_below_its_replicas_is_short_until_its_node_limit() {
    let mut deleting = node("n1", "s", vec![]);
    deleting.state = NodeClaimState::Draining;
    let mut s = static_snapshot(3, vec![node("n0", "s", vec![]), deleting]);
    assert_eq!(short(&s), vec!["s"]);
    s.pools[0].node_limit = Some(2);
    assert!(short(&s).is_empty());
    s.pools[0].node_limit = None;
    s.pools[0].replicas = Some(2);
    assert!(short(&s).is_empty());
}
