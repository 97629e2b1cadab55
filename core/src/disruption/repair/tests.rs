//! Node repair, each test naming the case of upstream's `node/health` suite (or the
//! issue's expectation) it paraphrases.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::disruption::test_support::{NOW, node, nodes_budget, snapshot};
use crate::events::NodeClaimState;

const MIN: i64 = 60_000;

fn unhealthy(mut n: NodeSnapshot, type_: &str, status: &str, for_minutes: i64) -> NodeSnapshot {
    n.conditions.push(NodeCondition {
        type_: type_.into(),
        status: status.into(),
        since_ms: NOW - for_minutes * MIN,
    });
    n
}

fn pool_of(n: usize) -> Vec<NodeSnapshot> {
    (0..n)
        .map(|i| node(&format!("n{i}"), "p", vec![]))
        .collect()
}

/// "should delete nodes that are unhealthy by the cloud provider", for each AWS policy.
#[test]
fn a_node_unhealthy_past_its_toleration_is_repaired() {
    for (type_, status, minutes) in [
        ("Ready", "False", 31),
        ("Ready", "Unknown", 31),
        ("AcceleratedHardwareReady", "False", 11),
        ("StorageReady", "False", 31),
        ("NetworkingReady", "False", 31),
        ("KernelReady", "False", 31),
        ("ContainerRuntimeReady", "False", 31),
    ] {
        let mut nodes = pool_of(9);
        nodes.push(unhealthy(node("sick", "p", vec![]), type_, status, minutes));
        let plan = plan(&snapshot(nodes), &AWS_POLICIES);
        assert_eq!(plan.repair.len(), 1, "{type_}={status}");
        assert_eq!(plan.repair[0].nodeclaim, "sick");
        assert_eq!(plan.repair[0].condition, type_);
    }
}

/// "should not delete node when health duration is not reached", "... when unhealthy type
/// does not match", "... when health status does not match".
#[test]
fn a_node_not_due_or_not_matching_a_policy_is_left_alone() {
    let cases = [
        ("Ready", "False", 20),
        ("AcceleratedHardwareReady", "False", 9),
        ("FakeHealthyNode", "False", 60),
        ("Ready", "True", 60),
        ("StorageReady", "Unknown", 60),
    ];
    for (type_, status, minutes) in cases {
        let nodes = vec![unhealthy(node("a", "p", vec![]), type_, status, minutes)];
        let plan = plan(&snapshot(nodes), &AWS_POLICIES);
        assert!(plan.repair.is_empty(), "{type_}={status} for {minutes}m");
    }
    // Not due yet: the pass says when it will be.
    let nodes = vec![unhealthy(node("a", "p", vec![]), "Ready", "False", 20)];
    assert_eq!(
        plan(&snapshot(nodes), &AWS_POLICIES).next_due_ms,
        Some(NOW + 10 * MIN)
    );
}

/// "should not reconcile when a node has deletion timestamp set".
#[test]
fn a_node_being_deleted_is_not_repaired_again() {
    let mut sick = unhealthy(node("a", "p", vec![]), "Ready", "Unknown", 45);
    sick.state = NodeClaimState::Draining;
    assert!(plan(&snapshot(vec![sick]), &AWS_POLICIES).repair.is_empty());
}

/// "should not respect node disruption budgets" and "should not respect do-not-disrupt on
/// node": repair is forceful.
#[test]
fn repair_ignores_budgets_and_do_not_disrupt() {
    let mut sick = unhealthy(node("a", "p", vec![]), "Ready", "False", 45);
    sick.do_not_disrupt = true;
    let mut s = snapshot(vec![sick]);
    nodes_budget(&mut s, "p", "0");
    assert_eq!(plan(&s, &AWS_POLICIES).repair.len(), 1);
}

/// 2 of 10 nodes NotReady are repaired (20 % of 10 is 2); 4 of 10 are blocked, every due
/// node reported (`NodeRepairBlocked`); 1 of 3 is allowed (20 % of 3 rounds up to 1).
#[test]
fn repair_stops_when_more_than_a_fifth_of_the_pool_is_unhealthy() {
    let with_sick = |total: usize, sick: usize| {
        let mut nodes = pool_of(total - sick);
        nodes.extend((0..sick).map(|i| {
            unhealthy(
                node(&format!("sick{i}"), "p", vec![]),
                "Ready",
                "Unknown",
                40,
            )
        }));
        plan(&snapshot(nodes), &AWS_POLICIES)
    };
    assert_eq!(with_sick(10, 2).repair.len(), 2);
    let blocked = with_sick(10, 4);
    assert!(blocked.repair.is_empty());
    assert_eq!(blocked.blocked.len(), 4);
    assert!(
        blocked.blocked[0]
            .message
            .starts_with("more than 20% nodes are unhealthy in the nodepool"),
        "{}",
        blocked.blocked[0].message
    );
    assert_eq!(with_sick(3, 1).repair.len(), 1);
    assert_eq!(allowed_unhealthy(3), 1);
    assert_eq!(allowed_unhealthy(10), 2);
    assert_eq!(allowed_unhealthy(0), 0);
}

/// Unhealthy nodes not yet due still count against their pool's health, and each pool is
/// judged alone.
#[test]
fn pools_are_judged_alone_and_young_unhealthy_nodes_count() {
    let mut nodes = pool_of(8);
    nodes.push(unhealthy(node("due", "p", vec![]), "Ready", "False", 40));
    nodes.push(unhealthy(node("young", "p", vec![]), "Ready", "False", 1));
    nodes.push(unhealthy(node("young2", "p", vec![]), "Ready", "False", 1));
    // 3 of 11 unhealthy > 3 allowed? 20 % of 11 rounds up to 3: allowed.
    assert_eq!(
        plan(&snapshot(nodes.clone()), &AWS_POLICIES).repair.len(),
        1
    );
    nodes.push(unhealthy(node("young3", "p", vec![]), "Ready", "False", 1));
    // 4 of 12 > 3: blocked.
    assert!(
        plan(&snapshot(nodes.clone()), &AWS_POLICIES)
            .repair
            .is_empty()
    );
    // Another pool's healthy nodes do not dilute it.
    nodes.extend((0..20).map(|i| node(&format!("q{i}"), "q", vec![])));
    assert!(plan(&snapshot(nodes), &AWS_POLICIES).repair.is_empty());
}

/// A pass decided again from its snapshot (`journal verify`) repairs as the live pass did:
/// the snapshot records the gate's policies with their tolerations.
#[test]
fn a_snapshot_records_the_repair_policies_a_pass_decided_with() {
    let mut nodes = pool_of(9);
    nodes.push(unhealthy(node("sick", "p", vec![]), "Ready", "Unknown", 3));
    let mut s = snapshot(nodes);
    // The gate off: nothing recorded, nothing repaired.
    assert!(
        crate::disruption::pass::run(&s, None)
            .repair
            .repair
            .is_empty()
    );
    // On, with every toleration 2 minutes (as a test's settings shorten them).
    let short: Vec<RepairPolicy> = AWS_POLICIES
        .iter()
        .map(|p| RepairPolicy {
            toleration: std::time::Duration::from_secs(120),
            ..*p
        })
        .collect();
    s.repair = Some(recorded(&short));
    assert_eq!(of_snapshot(&s).unwrap(), short);
    let again = crate::disruption::pass::run(&s, None);
    assert_eq!(again.repair.repair.len(), 1);
    assert_eq!(again.repair.repair[0].nodeclaim, "sick");
    // AWS's own tolerations: 3 minutes is not 30.
    s.repair = Some(recorded(&AWS_POLICIES));
    assert!(
        crate::disruption::pass::run(&s, None)
            .repair
            .repair
            .is_empty()
    );
}
