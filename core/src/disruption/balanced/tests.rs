#![allow(clippy::unwrap_used)]

use super::*;
use crate::api::nodepool::ConsolidationPolicy;
use crate::disruption::test_support::{node, pod, snapshot};

/// A node of `pool` at `price` $/day (any unit: scores are ratios) with `pods` default pods
/// and one pod per entry of `heavy` with that deletion cost.
fn priced(name: &str, pool: &str, price: f64, pods: usize, heavy: &[i32]) -> NodeSnapshot {
    let mut all: Vec<_> = (0..pods)
        .map(|i| pod(&format!("{name}-{i}"), true))
        .collect();
    for (i, cost) in heavy.iter().enumerate() {
        let mut p = pod(&format!("{name}-heavy-{i}"), true);
        p.pod.deletion_cost = *cost;
        all.push(p);
    }
    let mut n = node(name, pool, all);
    n.price = price;
    n
}

/// `nodes` in a snapshot whose pools named in `balanced` have the Balanced policy.
fn balance(nodes: &[NodeSnapshot], balanced: &[&str]) -> Balance {
    let mut s = snapshot(nodes.to_vec());
    for p in &mut s.pools {
        if balanced.contains(&p.name.as_str()) {
            p.policy = ConsolidationPolicy::Balanced;
        }
    }
    Balance::new(&s)
}

fn only<'a>(scores: &'a [Score], pool: &str) -> &'a Score {
    scores.iter().find(|s| s.nodepool == pool).unwrap()
}

/// The design's example pool: eight m7i.xlarge ($4.84/day) and two m7i.2xlarge ($9.68),
/// `pods[i]` default pods on node i.
fn example(pods: [usize; 10]) -> Vec<NodeSnapshot> {
    (0..10)
        .map(|i| {
            let price = if i < 8 { 4.84 } else { 9.68 };
            priced(&format!("n{i}"), "default", price, pods[i], &[])
        })
        .collect()
}

/// Upstream's balanced_test "computeNodePoolTotals: should produce totals from ALL
/// candidates": each node adds its price, and 1 plus one per pod that would move.
#[test]
fn totals_count_every_launched_node_of_the_pool() {
    let mut nodes: Vec<_> = (0..5)
        .map(|i| priced(&format!("a{i}"), "a", 4.84, 1, &[]))
        .collect();
    // A node being deleted and one not launched count for nothing.
    let mut deleting = priced("gone", "a", 4.84, 1, &[]);
    deleting.state = crate::events::NodeClaimState::Draining;
    let mut unlaunched = priced("new", "a", 0.0, 0, &[]);
    unlaunched.offering = None;
    nodes.extend([deleting, unlaunched, priced("b0", "b", 1.0, 1, &[])]);
    let b = balance(&nodes, &["a"]);
    let totals = b.totals("a").unwrap();
    assert!((totals.cost - 5.0 * 4.84).abs() < 1e-9);
    assert_eq!(totals.disruption, 10.0);
    // Pools of another policy are not scored.
    assert_eq!(b.totals("b"), None);
}

/// Upstream's "floors a negative pod cost at 0 so one pod cannot discount the base".
#[test]
fn a_pod_of_negative_cost_weighs_nothing() {
    let n = priced("n", "default", 1.0, 0, &[-2_000_000_000]);
    assert_eq!(reschedule_cost(&n), 1.0);
    let heavy = priced("h", "default", 1.0, 1, &[i32::MAX]);
    // 1 for the node, 1 for the default pod, 10 (clamped) for the heavy one.
    assert_eq!(reschedule_cost(&heavy), 12.0);
}

/// Upstream's "should approve a delete command for a single Balanced NodePool": ten equal
/// nodes of one pod each; deleting one saves 10 % for 10 % of the disruption, score 1.
#[test]
fn deleting_one_of_ten_equal_nodes_scores_one() {
    let nodes: Vec<_> = (0..10)
        .map(|i| priced(&format!("n{i}"), "default", 4.84, 1, &[]))
        .collect();
    let b = balance(&nodes, &["default"]);
    let scores = b.scores(&[&nodes[0]], 4.84);
    assert!((only(&scores, "default").score() - 1.0).abs() < 1e-9);
    assert_eq!(b.approve(&[&nodes[0]], 4.84), Ok(()));
}

/// The design's examples ("Oversized Node (approved)", "Marginal Move (rejected)",
/// "Well-Packed Node (rejected)"), with the per-node base of 1 upstream's code adds.
#[test]
fn the_design_examples_decide_as_upstream() {
    let nodes = example([9, 9, 9, 9, 9, 8, 9, 9, 6, 3]);
    let b = balance(&nodes, &["default"]);
    // m7i.2xlarge with 3 pods replaced by an m7i.large ($2.42): saves 7.26.
    let oversized = &nodes[9];
    let s = &b.scores(&[oversized], 9.68 - 2.42)[0];
    assert!(s.approved(), "{s}");
    assert!(s.score() > 2.5, "{s}");
    // m7i.xlarge with 8 pods replaced by an m7i.large: saves 2.42 for 9 of 90.
    let marginal = &nodes[5];
    let s = &b.scores(&[marginal], 4.84 - 2.42)[0];
    assert!(!s.approved(), "{s}");
    assert!((s.score() - (2.42 / 58.08) / (9.0 / 90.0)).abs() < 1e-9);
    let why = b.approve(&[marginal], 2.42).unwrap_err().to_string();
    assert!(
        why.starts_with(
            "score 0.42 < threshold 0.50 in NodePool default (savings 4.2%, disruption 10.0%)"
        ),
        "{why}"
    );
    // Replaced by its own type: nothing saved, never approved.
    assert!(b.approve(&[marginal], 0.0).is_err());
    assert!(b.approve(&[marginal], -1.0).is_err());
}

/// The design's "Uniform Pool Replace": in a pool of equal nodes a replace passes when it
/// saves at least half the node's price (k = 2 is the boundary), and not below.
#[test]
fn in_a_uniform_pool_a_replace_must_save_half() {
    let nodes: Vec<_> = (0..10)
        .map(|i| priced(&format!("n{i}"), "default", 4.0, 8, &[]))
        .collect();
    let b = balance(&nodes, &["default"]);
    assert_eq!(b.approve(&[&nodes[0]], 2.0), Ok(()));
    assert!(b.approve(&[&nodes[0]], 1.9).is_err());
}

/// The design's "Heterogeneous Disruption Cost": two nodes saving the same, one running
/// pods with `pod-deletion-cost: 2147483647` (each weighs 10): that one is refused, and it
/// is refused before any simulation (its best move, a delete, cannot pass).
#[test]
fn pods_dear_to_evict_keep_their_node() {
    let mut nodes = example([9, 9, 9, 9, 9, 9, 9, 9, 0, 0]);
    nodes[8] = priced("a", "default", 4.84, 4, &[]);
    nodes[9] = priced("b", "default", 4.84, 1, &[i32::MAX; 3]);
    let b = balance(&nodes, &["default"]);
    assert_eq!(b.approve(&[&nodes[8]], 4.84), Ok(()));
    assert!(b.approve(&[&nodes[9]], 4.84).is_err());
    assert!(b.may_pass(&nodes[9]).is_err());
    assert_eq!(b.may_pass(&nodes[8]), Ok(()));
}

/// Upstream's "should skip non-Balanced pools and approve unconditionally" and "should
/// attribute savings proportionally in cross-NodePool scenarios".
#[test]
fn only_balanced_pools_score_and_share_the_savings() {
    let mut nodes: Vec<_> = (0..5)
        .map(|i| priced(&format!("b{i}"), "balanced", 4.84, 1, &[]))
        .collect();
    nodes.extend((0..5).map(|i| priced(&format!("e{i}"), "other", 4.84, 1, &[])));
    let none = balance(&nodes, &[]);
    assert_eq!(none.approve(&[&nodes[0], &nodes[5]], 0.0), Ok(()));
    let b = balance(&nodes, &["balanced"]);
    let scores = b.scores(&[&nodes[0], &nodes[5]], 9.68);
    assert_eq!(scores.len(), 1);
    // Half the savings are the Balanced pool's: 4.84 of 24.2 against 2 of 10.
    assert!((only(&scores, "balanced").score() - 1.0).abs() < 1e-9);
}

/// Upstream's "AllPoolsMustApprove: should reject when any Balanced pool rejects".
#[test]
fn every_balanced_pool_must_approve() {
    let mut nodes: Vec<_> = (0..10)
        .map(|i| priced(&format!("a{i}"), "a", 4.84, 1, &[]))
        .collect();
    nodes.push(priced("heavy", "b", 1.0, 40, &[i32::MAX; 10]));
    nodes.push(priced("light", "b", 3.0, 1, &[]));
    let b = balance(&nodes, &["a", "b"]);
    let (a, heavy) = (&nodes[0], &nodes[10]);
    let scores = b.scores(&[a, heavy], 4.84 + 1.0);
    assert!(only(&scores, "a").approved());
    assert!(!only(&scores, "b").approved());
    let why = b.approve(&[a, heavy], 5.84).unwrap_err().to_string();
    assert!(why.contains("in NodePool b"), "{why}");
}
