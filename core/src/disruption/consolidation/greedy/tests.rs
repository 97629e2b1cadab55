#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::disruption::consolidation::command::Action;
use crate::disruption::simulation::Rest;
use crate::disruption::test_support::{MIN, NOW, base, node, pod};
use crate::model::{Pod, ResourceName, Resources};

fn with_pods(name: &str, pool: &str, pods: usize) -> NodeSnapshot {
    let pods = (0..pods)
        .map(|i| pod(&format!("{name}-{i}"), true))
        .collect();
    node(name, pool, pods)
}

/// No node closed to moved pods.
static OPEN: BTreeSet<String> = BTreeSet::new();
/// No Balanced pool.
static NO_BALANCED_POOL: Balance = Balance::none();

fn context<'a>(base: &'a SchedulingInput, leaving: &'a BTreeSet<String>) -> Context<'a> {
    Context {
        base,
        rest: Rest {
            leaving,
            closed: &OPEN,
            pools: None,
        },
        settings: Settings::default(),
        balance: &NO_BALANCED_POOL,
        deadline: None,
    }
}

#[test]
fn disruption_cost_counts_moving_pods_and_the_life_left() {
    let three = with_pods("a", "p", 3);
    let one = with_pods("b", "p", 1);
    let mut expiring = with_pods("c", "p", 3);
    expiring.expire_after = Some(Duration::from_secs(2 * 3600));
    assert!((disruption_cost(&one, NOW) - (1.0 - 1.0 / 720.0)).abs() < 1e-9);
    assert!((disruption_cost(&expiring, NOW) - 1.5).abs() < 1e-9);
    let mut never = with_pods("d", "p", 2);
    never.expire_after = None;
    assert!((disruption_cost(&never, NOW) - 2.0).abs() < 1e-9);
    let order: Vec<&str> = by_disruption_cost(&[&three, &one, &expiring, &never], NOW)
        .iter()
        .map(|n| n.nodeclaim.as_str())
        .collect();
    assert_eq!(order, ["b", "c", "d", "a"]);
    // Past its expiry it costs nothing.
    let mut old = with_pods("e", "p", 3);
    old.created_ms = NOW - 721 * 60 * MIN;
    assert_eq!(disruption_cost(&old, NOW), 0.0);
}

#[test]
fn multi_node_takes_the_longest_prefix_one_command_can_take() {
    // Three nodes of one pod each, and a spare node with room for two of them.
    let input = base(
        "p",
        &[("node-a", 2), ("node-b", 2), ("node-c", 2), ("spare", 2)],
    );
    let (a, b, c) = (
        with_pods("a", "p", 1),
        with_pods("b", "p", 1),
        with_pods("c", "p", 1),
    );
    let leaving = BTreeSet::new();
    let search = multi_node(&context(&input, &leaving), &[&a, &b, &c]);
    let found = search.found.unwrap();
    // Two fit on the spare (a delete); all three need one small node besides ($0.05/h for
    // $0.30/h), which is still one command, and the longer.
    assert_eq!(found.candidates, ["a", "b", "c"]);
    let Action::Replace(claim) = &found.consolidation.action else {
        panic!("{:?}", found.consolidation)
    };
    assert_eq!(claim.instance_types[0].name.as_str(), "small");
    assert!((found.consolidation.savings - 0.25).abs() < 1e-9);
    assert_eq!(search.simulations, 2);
    let two = multi_node(&context(&input, &leaving), &[&a, &b])
        .found
        .unwrap();
    assert_eq!(two.consolidation.action, Action::Delete);
    // Fewer than two candidates is single-node's job.
    assert!(
        multi_node(&context(&input, &leaving), &[&a])
            .found
            .is_none()
    );
}

#[test]
fn nothing_is_found_where_no_command_saves_and_one_node_alone_may_be_replaced() {
    // No room anywhere: each 1-vCPU pod needs a new node, and nodes at $0.05/h are as cheap
    // as the cheapest type, alone or together.
    let mut input = base("p", &[("node-a", 1), ("node-b", 1), ("node-c", 1)]);
    for n in &mut input.existing {
        // Each is full with its own pod.
        std::sync::Arc::make_mut(n).requested =
            Resources::cpu_memory(1000, 1 << 30).with(ResourceName::Pods, 1);
    }
    let cheap = |name: &str| {
        let mut n = with_pods(name, "p", 1);
        n.price = 0.05;
        n
    };
    let (a, b, c) = (cheap("a"), cheap("b"), cheap("c"));
    let leaving = BTreeSet::new();
    let ctx = context(&input, &leaving);
    let multi = multi_node(&ctx, &[&a, &b, &c]);
    assert!(multi.found.is_none(), "{:?}", multi.found);
    assert_eq!(multi.simulations, 1);
    let single = single_node(&ctx, &[&a, &b, &c]);
    assert!(single.found.is_none());
    assert_eq!(single.simulations, 3);
    assert!(
        single
            .unconsolidatable
            .iter()
            .all(|(_, why)| *why == Unconsolidatable::NotCheaper),
        "{:?}",
        single.unconsolidatable
    );

    // At $0.10/h, one alone is replaced by the $0.05/h type.
    let dear = with_pods("a", "p", 1);
    let single = single_node(&ctx, &[&dear, &b]);
    let found = single.found.unwrap();
    assert_eq!(found.candidates, ["a"]);
    let Action::Replace(claim) = &found.consolidation.action else {
        panic!("{:?}", found.consolidation)
    };
    assert_eq!(claim.instance_types[0].name.as_str(), "small");
    assert!((found.consolidation.savings - 0.05).abs() < 1e-9);
}

#[test]
fn single_node_lets_pools_take_turns_and_says_why_each_failure_failed() {
    let mut input = base("p1", &[("node-x1", 2), ("node-x2", 2), ("spare", 4)]);
    let mut second = input.nodepools[0].clone();
    second.name = "p2".into();
    input.nodepools.push(second);
    let mut x1 = with_pods("x1", "p1", 1);
    x1.pods[0].pod = Pod::simple("huge", 100_000, 1 << 30);
    let x2 = with_pods("x2", "p1", 1);
    let y1 = with_pods("y1", "p2", 1);
    let leaving = BTreeSet::new();
    let search = single_node(&context(&input, &leaving), &[&x1, &x2, &y1]);
    let found = search.found.unwrap();
    assert_eq!(found.candidates, ["y1"]);
    assert_eq!(found.consolidation.action, Action::Delete);
    assert_eq!(search.simulations, 2);
    assert_eq!(search.unconsolidatable.len(), 1);
    assert_eq!(search.unconsolidatable[0].0, "x1");
    assert!(matches!(
        search.unconsolidatable[0].1,
        Unconsolidatable::PodsWouldNotSchedule { .. }
    ));
}
