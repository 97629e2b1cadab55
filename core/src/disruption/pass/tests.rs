#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::disruption::test_support::{MIN, NOW, base, node, nodes_budget, pod, snapshot};
use crate::disruption::{CommandRole, DriftMark, NodeSnapshot, candidates};
use crate::events::NodeClaimState;

fn drifted(mut n: NodeSnapshot, since_ms: i64) -> NodeSnapshot {
    n.drifted = Some(DriftMark {
        reason: "NodePoolDrifted".into(),
        since_ms,
    });
    n
}

#[test]
fn empty_consolidatable_nodes_go_together_within_budgets() {
    let mut s = snapshot(
        (0..30)
            .map(|i| {
                let pods = if i % 3 == 0 {
                    vec![pod(&format!("p{i}"), true)]
                } else {
                    Vec::new()
                };
                node(&format!("n{i:02}"), "default", pods)
            })
            .collect(),
    );
    // 10 % of 30 nodes: 3.
    let result = run(&s, None);
    let command = result.command.unwrap();
    assert_eq!(command.method, Method::Emptiness);
    assert_eq!(command.candidates, ["n01", "n02", "n04"]);
    assert_eq!(result.eligible[&Method::Emptiness], 20);
    assert!((command.savings - 0.30).abs() < 1e-9);
    // Two nodes already disrupting use two of the three up.
    s.nodes[0].state = NodeClaimState::Draining;
    s.nodes[3].ready = false;
    let command = run(&s, None).command.unwrap();
    assert_eq!(command.candidates, ["n01"]);
    // A DaemonSet's pod does not make a node busy.
    nodes_budget(&mut s, "default", "100%");
    s.nodes[1].pods.push(pod("ds", false));
    assert!(
        run(&s, None)
            .command
            .unwrap()
            .candidates
            .contains(&"n01".to_owned())
    );
}

/// Upstream: "skipped for nodes hosting CapacityBuffer virtual pods" (emptiness with
/// `Cluster.bufferPodCounts`).
#[test]
fn emptiness_leaves_nodes_hosting_buffer_pods_alone() {
    let mut s = snapshot(vec![
        node("a", "default", vec![]),
        node("b", "default", vec![]),
        node("c", "default", vec![]),
    ]);
    nodes_budget(&mut s, "default", "100%");
    let node_of_b = s.nodes[1].node.clone().unwrap();
    s.buffered = [node_of_b, "c".to_owned()].into();
    let command = run(&s, None).command.unwrap();
    assert_eq!(command.method, Method::Emptiness);
    assert_eq!(command.candidates, ["a"]);
}

#[test]
fn emptiness_waits_for_consolidate_after_and_never_means_never() {
    let mut s = snapshot(vec![node("a", "default", vec![])]);
    s.pools[0].consolidate_after = Some(Duration::from_secs(600));
    s.nodes[0].last_pod_event_ms = Some(NOW - 5 * MIN);
    let result = run(&s, None);
    assert!(result.command.is_none());
    assert_eq!(
        result.consolidatable["a"],
        Consolidatable::From(NOW + 5 * MIN)
    );
    s.now_ms = NOW + 5 * MIN;
    assert_eq!(run(&s, None).command.unwrap().candidates, ["a"]);
    s.pools[0].consolidate_after = None;
    assert!(run(&s, None).command.is_none());
}

#[test]
fn expired_nodeclaims_go_whatever_the_budgets_and_use_them_up() {
    let mut s = snapshot(vec![
        node("old", "default", vec![pod("p", true)]),
        node("empty", "default", vec![]),
    ]);
    s.nodes[0].created_ms = NOW - 721 * 60 * MIN;
    s.nodes[0].do_not_disrupt = true;
    nodes_budget(&mut s, "default", "1");
    let result = run(&s, None);
    assert_eq!(result.expired, ["old"]);
    // The one node the budget allows is the expiring one.
    assert!(result.command.is_none());
    s.nodes[0].expire_after = None;
    assert!(run(&s, None).expired.is_empty());
}

#[test]
fn drift_takes_empty_nodes_first_then_one_that_fits_elsewhere() {
    let mut s = snapshot(vec![
        drifted(
            node("busy-old", "default", vec![pod("p1", true)]),
            NOW - 30 * MIN,
        ),
        drifted(node("empty", "default", vec![]), NOW - 10 * MIN),
        node("other", "default", vec![]),
    ]);
    // Not consolidatable (consolidateAfter: Never): emptiness leaves them; drift does not.
    s.pools[0].consolidate_after = None;
    nodes_budget(&mut s, "default", "100%");
    let command = run(&s, None).command.unwrap();
    assert_eq!(
        (command.method, command.candidates.as_slice()),
        (Method::Drift, ["empty".to_owned()].as_slice())
    );
    // Without the empty one: the busy node, once a simulation shows its pod fits.
    s.nodes.remove(1);
    assert!(run(&s, None).command.is_none(), "no simulation, no command");
    let room = base("default", &[("node-other", 4)]);
    let command = run(&s, Some(&room)).command.unwrap();
    assert_eq!(command.candidates, ["busy-old"]);
    assert!(command.replacements.is_empty(), "fits on node-other");
    assert!(command.simulation.is_some());
    // No room anywhere and no pool that can launch: blocked, and said so.
    let mut full = base("default", &[]);
    full.nodepools.clear();
    let result = run(&s, Some(&full));
    assert!(result.command.is_none());
    assert_eq!(result.blocked.len(), 1);
    assert!(
        result.blocked[0]
            .message
            .contains("scheduling simulation failed to schedule 1 pod(s); default/p1"),
        "{}",
        result.blocked[0].message
    );
    // A pool that can launch: a replacement.
    let command = run(&s, Some(&base("default", &[]))).command.unwrap();
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(command.replacements[0].pods, ["p1"]);
    assert_eq!(
        command.replacements[0].instance_types[0].name.as_str(),
        "small"
    );
}

#[test]
fn drift_goes_oldest_first_one_at_a_time() {
    let mut s = snapshot(vec![
        drifted(node("b", "default", vec![pod("pb", true)]), NOW - 10 * MIN),
        drifted(node("a", "default", vec![pod("pa", true)]), NOW - 20 * MIN),
        drifted(node("c", "default", vec![pod("pc", true)]), NOW - 20 * MIN),
    ]);
    nodes_budget(&mut s, "default", "100%");
    let room = base("default", &[]);
    let command = run(&s, Some(&room)).command.unwrap();
    assert_eq!(command.candidates, ["a"]);
    // With "a" held by a command, the next is "c" (same age, then by name).
    s.nodes[1].command = Some(CommandRole::Candidate);
    assert_eq!(run(&s, Some(&room)).command.unwrap().candidates, ["c"]);
    // A budget of 1 with one node disrupting: nothing more.
    nodes_budget(&mut s, "default", "1");
    assert!(run(&s, Some(&room)).command.is_none());
}

#[test]
fn protected_nodes_are_reported_only_when_a_method_wants_them() {
    let mut busy = pod("db", true);
    busy.do_not_disrupt = Some("true".into());
    let s = snapshot(vec![
        node("empty-annotated", "default", vec![]),
        node("busy", "default", vec![busy.clone()]),
        drifted(node("drifted-busy", "default", vec![busy]), NOW - MIN),
    ]);
    let mut s2 = s.clone();
    s2.nodes[0].do_not_disrupt = true;
    // Consolidation wants no busy node under WhenEmpty.
    s2.pools[0].policy = crate::api::nodepool::ConsolidationPolicy::WhenEmpty;
    let blocked = |s: &Snapshot| -> Vec<String> {
        run(s, Some(&base("default", &[])))
            .blocked
            .iter()
            .map(|b| b.nodeclaim.clone())
            .collect()
    };
    assert_eq!(blocked(&s2), ["empty-annotated", "drifted-busy"]);
    let result = run(&s2, Some(&base("default", &[])));
    assert!(result.blocked[1].message.contains("do-not-disrupt"));
    // Under WhenEmptyOrUnderutilized it does, and each node is reported once.
    s2.pools[0].policy = crate::api::nodepool::ConsolidationPolicy::WhenEmptyOrUnderutilized;
    assert_eq!(blocked(&s2), ["empty-annotated", "drifted-busy", "busy"]);
}

#[test]
fn an_unreadable_budget_allows_nothing_and_is_reported() {
    let mut s = snapshot(vec![node("a", "default", vec![])]);
    nodes_budget(&mut s, "default", "lots");
    let result = run(&s, None);
    assert!(result.command.is_none());
    assert_eq!(result.budget_errors.len(), 1);
    assert_eq!(
        result.allowed[&("default".to_owned(), DisruptionReason::Empty)],
        0
    );
}

fn arb_node(i: usize) -> impl Strategy<Value = NodeSnapshot> {
    (0u8..6, any::<bool>(), any::<bool>(), 0u8..3).prop_map(move |(state, ready, empty, pool)| {
        let pods = if empty {
            Vec::new()
        } else {
            vec![pod(&format!("p{i}"), true)]
        };
        let mut n = node(&format!("n{i:03}"), &format!("pool{pool}"), pods);
        n.ready = ready;
        n.state = match state {
            0 => NodeClaimState::Registered,
            1 => NodeClaimState::Draining,
            2 => NodeClaimState::Terminating,
            _ => NodeClaimState::Initialized,
        };
        if n.state == NodeClaimState::Registered {
            n.initialized_ms = None;
        }
        if state == 5 {
            n.drifted = Some(DriftMark {
                reason: "AMIDrift".into(),
                since_ms: NOW - i as i64,
            });
        }
        n
    })
}

proptest! {
    /// Whatever the cluster and budgets, a pass never takes a pool past its budget: the
    /// nodes disrupting after its command (and its expirations) are at most what the
    /// budgets allow, or what was disrupting already.
    #[test]
    fn a_pass_never_exceeds_a_budget(
        nodes in (1usize..40).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>()),
        budgets in proptest::collection::vec((0usize..5, any::<bool>()), 3),
    ) {
        let mut s = snapshot(nodes);
        for (i, (count, percent)) in budgets.iter().enumerate() {
            let value = if *percent { format!("{}%", count * 20) } else { count.to_string() };
            nodes_budget(&mut s, &format!("pool{i}"), &value);
        }
        let room = base("pool0", &[]);
        let result = run(&s, Some(&room));
        let counts = pool_counts(&s);
        let taken: Vec<&String> = result.command.iter().flat_map(|c| c.candidates.iter()).collect();
        for pool in &s.pools {
            let before = counts.get(&pool.name).copied().unwrap_or_default();
            let reason = result.command.as_ref().map_or(DisruptionReason::Empty, |c| c.method.reason());
            let (allowed, _) = budgets::allowed(&pool.budgets, reason, before.total, NOW);
            let after = before.disrupting
                + s.nodes
                    .iter()
                    .filter(|n| n.nodepool == pool.name && !n.disrupting() && n.initialized_ms.is_some())
                    .filter(|n| taken.contains(&&n.nodeclaim))
                    .count();
            prop_assert!(after <= allowed.max(before.disrupting), "{} {after} > {allowed}", pool.name);
        }
        // No node is taken twice, and none that is not a candidate.
        let unique: BTreeSet<&String> = taken.iter().copied().collect();
        prop_assert_eq!(unique.len(), taken.len());
        for name in taken {
            let n = s.nodes.iter().find(|n| &n.nodeclaim == name).unwrap();
            let method = result.command.as_ref().unwrap().method;
            prop_assert!(candidates::check(&s, n, method).is_ok());
        }
    }
}
