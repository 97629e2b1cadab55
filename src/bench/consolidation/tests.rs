#![allow(clippy::unwrap_used)]

use super::*;
use crate::bench::benchmark_input;

#[test]
fn both_searches_keep_every_pod_placed_and_every_constraint_near_the_bound() {
    let input = benchmark_input(1000).unwrap();
    let case = run_case(
        "1000",
        &input,
        CaseOptions {
            seed: 7,
            baseline: true,
            baseline_limit: None,
            spot_to_spot: false,
        },
    )
    .unwrap();
    assert!(case.nodes > 100, "{} nodes", case.nodes);
    assert!(
        case.pods > 400 && case.pods < 600,
        "{} pods left",
        case.pods
    );
    let balanced = case.balanced.as_ref().unwrap();
    for run in [&case.ours, balanced, case.upstream.as_ref().unwrap()] {
        assert_eq!(run.fleet.pods(), case.pods);
        assert_eq!(run.fleet.violations(), Vec::<String>::new());
        assert!(run.after < case.before, "{} >= {}", run.after, case.before);
        assert!(run.after >= case.bound - 1e-6);
        assert!(
            run.after <= 1.10 * case.bound,
            "{} vs bound {}",
            run.after,
            case.bound
        );
        assert!(run.commands.values().sum::<usize>() > 0);
        assert!(run.first.is_some());
    }
    // Balanced moves fewer pods than consolidating for any saving, and saves most of what
    // it saves.
    let saved = |run: &Run| case.before - run.after;
    assert!(
        balanced.moved < case.ours.moved,
        "balanced moved {} pods, ours {}",
        balanced.moved,
        case.ours.moved
    );
    assert!(
        saved(balanced) > 0.5 * saved(&case.ours),
        "balanced saved {} of {}",
        saved(balanced),
        saved(&case.ours)
    );
}

#[test]
fn a_search_past_its_time_limit_stops_and_says_so() {
    let fleet = Fleet::packed(&benchmark_input(50).unwrap()).unwrap();
    let run = consolidate(fleet.clone(), Search::Upstream, Some(Duration::ZERO)).unwrap();
    assert!(run.capped);
    assert_eq!(run.commands.values().sum::<usize>(), 0);
    assert_eq!(run.fleet.pods(), fleet.pods());
    assert!(!consolidate(fleet, Search::Cluster, None).unwrap().capped);
}

#[test]
fn the_checker_sees_a_broken_placement() {
    let input = benchmark_input(50).unwrap();
    let mut fleet = Fleet::packed(&input).unwrap();
    assert_eq!(fleet.violations(), Vec::<String>::new());
    // Every pod on one node: more than it has, and hostname anti-affinity broken.
    let pods: Vec<Pod> = fleet
        .nodes
        .values_mut()
        .flat_map(|n| std::mem::take(&mut n.pods))
        .collect();
    let first = fleet.nodes.values_mut().next().unwrap();
    first.pods = pods;
    let broken = fleet.violations();
    assert!(
        broken.iter().any(|v| v.contains("request more")),
        "{broken:?}"
    );
    assert!(broken.iter().any(|v| v.contains(" beside ")), "{broken:?}");
}

#[test]
fn the_same_seed_deletes_the_same_pods() {
    let mut a = Draws::new(3);
    let mut b = Draws::new(3);
    let first: Vec<bool> = (0..64).map(|_| a.coin()).collect();
    let second: Vec<bool> = (0..64).map(|_| b.coin()).collect();
    assert_eq!(first, second);
    let heads = first.iter().filter(|h| **h).count();
    assert!((16..=48).contains(&heads), "{heads} of 64");
}

#[test]
fn the_aws_case_packs_with_the_built_in_general_purpose_pool() {
    let input = aws_input(50).unwrap();
    assert_eq!(input.nodepools.len(), 1);
    assert_eq!(input.nodepools[0].name, AWS_NODEPOOL);
    let fleet = Fleet::packed(&input).unwrap();
    assert_eq!(fleet.pods(), 50);
    assert_eq!(fleet.violations(), Vec::<String>::new());
    for node in fleet.nodes.values() {
        let family = &node.offering.instance_type[..1];
        assert!(
            ["c", "m", "r"].contains(&family),
            "{} is outside the pool's families",
            node.offering.instance_type
        );
    }
}
