#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::*;
use crate::api::nodepool::ConsolidationPolicy;
use crate::disruption::pass::{self, Options};
use crate::disruption::test_support::{MIN, NOW, base, node, nodes_budget, pod, snapshot};
use crate::model::{Pod, ResourceName, Resources};

fn with_pods(name: &str, pods: usize) -> NodeSnapshot {
    let pods = (0..pods)
        .map(|i| pod(&format!("{name}-{i}"), true))
        .collect();
    node(name, "default", pods)
}

fn options(search: Search) -> Options<'static> {
    Options {
        search,
        timeouts: false,
        ..Options::default()
    }
}

/// Room for `free` vCPUs on each of `spares`, and the candidates' own nodes.
fn cluster(candidates: &[&str], spares: &[(&str, i64)]) -> SchedulingInput {
    let mut nodes: Vec<(String, i64)> = candidates
        .iter()
        .map(|c| (format!("node-{c}"), 0))
        .collect();
    nodes.extend(spares.iter().map(|(n, cpu)| ((*n).to_owned(), *cpu)));
    let named: Vec<(&str, i64)> = nodes.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    base("default", &named)
}

#[test]
fn underutilized_nodes_are_deleted_together_when_their_pods_fit_elsewhere() {
    let mut s = snapshot(vec![
        with_pods("a", 1),
        with_pods("b", 1),
        with_pods("c", 1),
    ]);
    nodes_budget(&mut s, "default", "100%");
    // Room for three one-vCPU pods elsewhere: all three go in one command, one simulation.
    let input = cluster(&["a", "b", "c"], &[("spare", 3)]);
    let result = pass::run_with(&s, Some(&input), options(Search::Cluster));
    let command = result.command.unwrap();
    assert_eq!(command.method, Method::MultiNodeConsolidation);
    assert!(command.replacements.is_empty());
    assert_eq!(command.candidates.len(), 3);
    assert!((command.savings - 0.30).abs() < 1e-9);
    assert_eq!(result.eligible[&Method::MultiNodeConsolidation], 3);
    assert_eq!(result.simulations, 1);
    // With room for two, the third pod needs a new node: one small node for three is
    // still a command (a replace), and cheaper.
    let input = cluster(&["a", "b", "c"], &[("spare", 2)]);
    let command = pass::run_with(&s, Some(&input), options(Search::Cluster))
        .command
        .unwrap();
    assert_eq!(command.candidates.len(), 3);
    assert_eq!(command.replacements.len(), 1);
    assert!((command.savings - 0.25).abs() < 1e-9);
}

#[test]
fn a_node_alone_is_replaced_by_a_cheaper_one() {
    // One pod on a $0.10/h node, no room elsewhere: the 2-vCPU $0.05/h type replaces it.
    let s = snapshot(vec![with_pods("a", 1)]);
    let input = cluster(&["a"], &[]);
    let command = pass::run(&s, Some(&input)).command.unwrap();
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    assert_eq!(command.candidates, ["a"]);
    assert_eq!(command.replacements.len(), 1);
    assert_eq!(
        command.replacements[0].instance_types[0].name.as_str(),
        "small"
    );
    assert!((command.savings - 0.05).abs() < 1e-9);
}

#[test]
fn candidates_need_the_policy_the_condition_pods_and_a_known_offering() {
    let mut s = snapshot(vec![
        with_pods("busy", 1),
        with_pods("empty", 0),
        with_pods("unknown", 1),
        with_pods("young", 1),
    ]);
    s.nodes[2].offering = None;
    s.pools[0].consolidate_after = Some(Duration::from_secs(30 * 60));
    s.nodes[3].initialized_ms = Some(NOW - 5 * MIN);
    let conditions = s
        .nodes
        .iter()
        .map(|n| {
            (
                n.nodeclaim.clone(),
                crate::disruption::consolidation::condition::of(&s, n),
            )
        })
        .collect();
    let expiring = BTreeSet::new();
    let budget = BTreeMap::new();
    let inputs = Inputs {
        snapshot: &s,
        conditions: &conditions,
        expiring: &expiring,
        base: None,
        budget: &budget,
        decide: true,
        search: Search::Cluster,
        timeouts: false,
        consolidated: None,
        unconsolidatable: &BTreeSet::new(),
        cache: None,
        catalogs: None,
    };
    let (found, blocked) = candidates(&inputs);
    let names: Vec<&str> = found.iter().map(|n| n.nodeclaim.as_str()).collect();
    assert_eq!(names, ["busy"]);
    assert!(blocked.is_empty());
    // The young node takes no moved pods.
    let closed = closed(&s);
    assert!(closed.contains("young") && closed.contains("node-young"));
    assert!(!closed.contains("busy"));
    // WhenEmpty and Never pools have no consolidation candidates.
    for (policy, after) in [
        (ConsolidationPolicy::WhenEmpty, Some(Duration::ZERO)),
        (ConsolidationPolicy::WhenEmptyOrUnderutilized, None),
    ] {
        s.pools[0].policy = policy;
        s.pools[0].consolidate_after = after;
        assert!(!may_consolidate(&s));
    }
}

#[test]
fn young_nodes_are_no_destination() {
    let mut s = snapshot(vec![with_pods("a", 1), with_pods("young", 1)]);
    s.pools[0].consolidate_after = Some(Duration::from_secs(10 * 60));
    s.nodes[0].initialized_ms = Some(NOW - 60 * MIN);
    s.nodes[1].initialized_ms = Some(NOW - MIN);
    // The only room is on the young node: a is replaced, not deleted onto it.
    let input = cluster(&["a"], &[("node-young", 2)]);
    let command = pass::run(&s, Some(&input)).command.unwrap();
    assert_eq!(command.candidates, ["a"]);
    assert_eq!(command.replacements.len(), 1);
    // Once it is old enough, a's pod moves there.
    s.nodes[1].initialized_ms = Some(NOW - 30 * MIN);
    let command = pass::run(&s, Some(&input)).command.unwrap();
    assert!(command.replacements.is_empty());
}

#[test]
fn budgets_cut_the_candidates_and_earlier_methods_go_first() {
    let mut s = snapshot((0..10).map(|i| with_pods(&format!("n{i}"), 1)).collect());
    let names: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let input = cluster(&refs, &[("spare", 16)]);
    // 10 % of 10: one node.
    let command = pass::run(&s, Some(&input)).command.unwrap();
    assert_eq!(command.candidates.len(), 1);
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    nodes_budget(&mut s, "default", "5");
    let command = pass::run(&s, Some(&input)).command.unwrap();
    assert_eq!(command.candidates.len(), 5);
    assert_eq!(command.method, Method::MultiNodeConsolidation);
    // An empty node goes first, by emptiness.
    s.nodes[3].pods.clear();
    let command = pass::run(&s, Some(&input)).command.unwrap();
    assert_eq!(command.method, Method::Emptiness);
}

#[test]
fn both_searches_agree_where_the_answer_is_plain_and_ours_reaches_past_a_stuck_node() {
    // The cheapest node to disrupt (one pod) has a pod nothing can hold; upstream's prefix
    // search starts with it and finds no multi-node command, ours drops it.
    let mut stuck = with_pods("a", 1);
    stuck.pods[0].pod = Pod::simple("huge", 100_000, 1 << 30);
    let mut s = snapshot(vec![stuck, with_pods("b", 2), with_pods("c", 2)]);
    nodes_budget(&mut s, "default", "100%");
    let input = cluster(&["a", "b", "c"], &[("spare", 4)]);
    let ours = pass::run_with(&s, Some(&input), options(Search::Cluster))
        .command
        .unwrap();
    assert_eq!(ours.method, Method::MultiNodeConsolidation);
    let mut taken = ours.candidates.clone();
    taken.sort();
    assert_eq!(taken, ["b", "c"]);
    let upstream = pass::run_with(&s, Some(&input), options(Search::Upstream));
    let command = upstream.command.unwrap();
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    assert_eq!(command.candidates.len(), 1);
    assert!(
        upstream.unconsolidatable.iter().any(|(n, _)| n == "a"),
        "{:?}",
        upstream.unconsolidatable
    );
}

#[test]
fn a_pass_tries_what_the_last_one_could_not_consolidate_after_the_others() {
    // One node may go at a time; "a" holds a pod no type holds, "b" and "c" one small pod
    // each that the spare takes.
    let mut stuck = with_pods("a", 1);
    stuck.pods[0].pod = Pod::simple("huge", 100_000, 1 << 30);
    let s = snapshot(vec![stuck, with_pods("b", 1), with_pods("c", 1)]);
    let input = cluster(&["a", "b", "c"], &[("spare", 4)]);
    let first = pass::run_with(&s, Some(&input), options(Search::Cluster));
    let taken = first.command.unwrap().candidates;
    assert_eq!(taken.len(), 1);
    // It took the first it tried: nothing to try last next time.
    assert_eq!(first.unconsolidatable_next, Some(BTreeSet::new()));
    // Told that the one it took was refused last time, it takes the other.
    let refused: BTreeSet<String> = taken.iter().cloned().collect();
    let second = pass::run_with(
        &s,
        Some(&input),
        Options {
            unconsolidatable: &refused,
            ..options(Search::Cluster)
        },
    );
    let other = second.command.unwrap().candidates;
    assert_eq!(other.len(), 1);
    // What it was told of and did not reach stays to be tried last.
    let next = second.unconsolidatable_next.unwrap();
    assert_eq!(next, refused);
    assert_ne!(other, taken);
    assert_ne!(other[0], "a");
    // Only the order changes: with nothing else to take, it takes what it was told of.
    let all: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let s_one = snapshot(vec![with_pods("b", 1)]);
    let input_one = cluster(&["b"], &[("spare", 4)]);
    let third = pass::run_with(
        &s_one,
        Some(&input_one),
        Options {
            unconsolidatable: &all,
            ..options(Search::Cluster)
        },
    );
    assert_eq!(third.command.unwrap().candidates, ["b"]);
    // A search that takes nothing remembers what it tried.
    let mut stuck = with_pods("a", 1);
    stuck.pods[0].pod = Pod::simple("huge", 100_000, 1 << 30);
    let alone = pass::run_with(
        &snapshot(vec![stuck]),
        Some(&cluster(&["a"], &[])),
        options(Search::Cluster),
    );
    assert!(alone.command.is_none());
    assert_eq!(alone.unconsolidatable_next, Some(["a".to_owned()].into()));
}

#[test]
fn the_cluster_order_puts_the_most_saved_per_moved_pod_first() {
    let mut dear = with_pods("dear", 2);
    dear.price = 0.40;
    let cheap = with_pods("cheap", 2);
    let mut expiring = with_pods("expiring", 4);
    expiring.created_ms = NOW - 720 * 60 * MIN;
    let order: Vec<&str> = cluster_order(&[&cheap, &dear, &expiring], NOW)
        .iter()
        .map(|n| n.nodeclaim.as_str())
        .collect();
    assert_eq!(order, ["expiring", "dear", "cheap"]);
    // Requests do not enter the order; only pods and price do.
    let mut big = with_pods("big", 2);
    big.pods[0].pod.requests = Resources::cpu_memory(4000, 1 << 30).with(ResourceName::Pods, 1);
    let order = cluster_order(&[&big, &cheap], NOW);
    assert_eq!(order[0].nodeclaim, "big");
}

/// A Balanced pool refuses a replace whose pods are dear to evict (a critical pod weighs 10)
/// and takes it when they are not; the search's memory of finding nothing does not outlive
/// a change of policy.
#[test]
fn a_balanced_pool_refuses_a_move_not_worth_its_disruption() {
    let mut s = snapshot(vec![with_pods("a", 1), with_pods("b", 1)]);
    s.nodes[1].do_not_disrupt = true;
    s.nodes[0].pods[0].pod.priority = 2_000_000_000;
    s.pools[0].policy = ConsolidationPolicy::Balanced;
    let input = cluster(&["a", "b"], &[]);
    let refused = pass::run_with(&s, Some(&input), options(Search::Cluster));
    assert!(refused.command.is_none());
    let (name, why) = &refused.unconsolidatable[0];
    assert_eq!(name, "a");
    // A delete would pass (half the pool's cost for 11 of its 13), so it is simulated; the
    // replace it allows saves a quarter for 11 of 13.
    assert_eq!(refused.simulations, 1);
    assert_eq!(
        why.to_string(),
        "Balanced consolidation: score 0.30 < threshold 0.50 in NodePool default (savings 25.0%, disruption 84.6%)"
    );
    // Beside a dearer node, not even deleting it would pass (a quarter of the pool's cost
    // for 11 of 13), and nothing is simulated.
    let mut dearer = s.clone();
    dearer.nodes[1].price = 0.30;
    let unsimulated = pass::run_with(&dearer, Some(&input), options(Search::Cluster));
    assert!(unsimulated.command.is_none());
    assert_eq!(unsimulated.simulations, 0);
    assert!(
        unsimulated.unconsolidatable[0]
            .1
            .to_string()
            .contains("score 0.30 < threshold 0.50"),
        "{:?}",
        unsimulated.unconsolidatable
    );
    let nothing = refused.consolidated.unwrap();
    // The same cluster under WhenEmptyOrUnderutilized is searched again, not skipped.
    s.pools[0].policy = ConsolidationPolicy::WhenEmptyOrUnderutilized;
    let eager = pass::run_with(
        &s,
        Some(&input),
        Options {
            consolidated: Some(nothing),
            ..options(Search::Cluster)
        },
    );
    let command = eager.command.unwrap();
    assert_eq!(command.candidates, ["a"]);
    assert!(command.scores.is_empty(), "not a Balanced pool");
    // Balanced with a pod of default priority: half the price saved for half the
    // disruption, score 1.
    s.pools[0].policy = ConsolidationPolicy::Balanced;
    s.nodes[0].pods[0].pod.priority = 0;
    let approved = pass::run_with(&s, Some(&input), options(Search::Cluster));
    let command = approved.command.unwrap();
    assert_eq!(command.candidates, ["a"]);
    assert_eq!(command.scores.len(), 1);
    assert!(command.scores[0].approved(), "{}", command.scores[0]);
}
