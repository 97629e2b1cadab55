#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use super::*;
use crate::disruption::consolidation::command::{self, Settings};
use crate::disruption::simulation::{self, Rest};
use crate::disruption::test_support::{base, node};
use crate::model::Pod;
use crate::model::pod::PodAffinityTerm;
use crate::scheduling::PodLabels;

const GIB: i64 = 1 << 30;

fn moving(uid: &str, cpu: i64) -> crate::disruption::PodSnapshot {
    let mut p = crate::disruption::test_support::pod(uid, true);
    p.pod = Pod::simple(uid, cpu * 1000, cpu * GIB);
    p
}

/// A pod labelled `app` that keeps away from every other pod labelled `app`, per node.
fn lonely(mut p: crate::disruption::PodSnapshot, app: &str) -> crate::disruption::PodSnapshot {
    p.pod.labels.insert("app".into(), app.into());
    p.pod.pod_affinity.push(PodAffinityTerm {
        topology_key: labels::HOSTNAME.into(),
        selector: [("app".to_owned(), app.to_owned())].into(),
        expressions: Vec::new(),
        namespaces: Vec::new(),
        all_namespaces: false,
        namespace_selector: None,
        anti: true,
    });
    p
}

fn holding(input: &mut SchedulingInput, name: &str, pods: &[PodLabels], used_cpu: i64) {
    let n = input.existing.iter_mut().find(|n| n.name == name).unwrap();
    let n = Arc::make_mut(n);
    n.requested = Resources::cpu_memory(used_cpu * 1000, used_cpu * GIB);
    n.pods = pods.to_vec();
}

#[test]
fn a_pod_with_room_elsewhere_costs_nothing_and_one_without_needs_a_cheaper_type() {
    // The candidate's own node (full) and a spare with 2 vCPUs free.
    let input = base("default", &[("node-a", 0), ("spare", 2)]);
    let none = BTreeSet::new();
    let mut prospects = Prospects::new(&input, &none, false);
    let fits = node("a", "default", vec![moving("p", 1)]);
    assert_eq!(prospects.floor(&fits), 0.0);
    assert!(prospects.hopeless(&fits).is_none());
    // 3 vCPUs fit on no other node: they need the 8-vCPU type at $0.20.
    let mut big = node("a", "default", vec![moving("q", 3)]);
    assert!((prospects.floor(&big) - 0.20).abs() < 1e-12);
    big.price = 0.20;
    let why = prospects.hopeless(&big).unwrap();
    assert!(why.to_string().contains("$0.2000/h"), "{why}");
    big.price = 0.25;
    assert!(prospects.hopeless(&big).is_none());
    // The pod's own node never counts as room for it.
    let input = base("default", &[("node-a", 4)]);
    let mut prospects = Prospects::new(&input, &none, false);
    assert!((prospects.floor(&fits) - 0.05).abs() < 1e-12);
}

#[test]
fn hostname_anti_affinity_takes_a_node_away_both_ways() {
    let mut input = base("default", &[("node-a", 0), ("spare", 4)]);
    let web: PodLabels = (
        "default".into(),
        [("app".to_owned(), "web".to_owned())].into(),
    );
    holding(&mut input, "spare", &[web], 0);
    let none = BTreeSet::new();
    let mut prospects = Prospects::new(&input, &none, false);
    // The moving pod repels the web pod already on the spare.
    let candidate = node("a", "default", vec![lonely(moving("p", 1), "web")]);
    assert!(prospects.floor(&candidate) > 0.0);
    // Another app may join.
    let other = node("a", "default", vec![lonely(moving("p", 1), "db")]);
    assert_eq!(prospects.floor(&other), 0.0);
    // A pod on the spare repels the moving pod.
    let term = lonely(moving("x", 1), "web").pod.pod_affinity[0].clone();
    Arc::make_mut(&mut input.existing[1])
        .anti_affinity
        .push(("default".into(), term));
    let mut prospects = Prospects::new(&input, &none, false);
    let mut plain = moving("p", 1);
    plain.pod.labels.insert("app".into(), "web".into());
    assert!(prospects.floor(&node("a", "default", vec![plain])) > 0.0);
    // A term over namespaces a selector picks is not known here: it rules nothing out.
    let mut doubtful = lonely(moving("p", 1), "web");
    doubtful.pod.pod_affinity[0].namespace_selector = Some(crate::model::pod::NamespaceSelector {
        match_labels: [("team".to_owned(), "a".to_owned())].into(),
        expressions: Vec::new(),
    });
    Arc::make_mut(&mut input.existing[1]).anti_affinity.clear();
    let mut prospects = Prospects::new(&input, &none, false);
    assert_eq!(prospects.floor(&node("a", "default", vec![doubtful])), 0.0);
}

#[test]
fn a_spot_candidate_without_spot_to_spot_is_floored_at_on_demand() {
    let mut input = base("default", &[("node-a", 0)]);
    for t in &mut input.nodepools[0].instance_types {
        let t = Arc::make_mut(t);
        let mut spot = t.offerings[0].clone();
        spot.capacity_type = CapacityType::Spot;
        spot.price /= 4.0;
        t.offerings.push(spot);
    }
    let mut candidate = node("a", "default", vec![moving("p", 1)]);
    candidate.offering.as_mut().unwrap().capacity_type = CapacityType::Spot;
    let none = BTreeSet::new();
    let floor = Prospects::new(&input, &none, false).floor(&candidate);
    assert!((floor - 0.05).abs() < 1e-12, "{floor}");
    let floor = Prospects::new(&input, &none, true).floor(&candidate);
    assert!((floor - 0.0125).abs() < 1e-12, "{floor}");
}

/// Whether a simulation of removing `candidate` alone allows a command.
fn simulation_allows(input: &SchedulingInput, candidate: &NodeSnapshot) -> bool {
    let none = BTreeSet::new();
    let rest = Rest {
        leaving: &none,
        closed: &none,
        pools: None,
    };
    let simulation = simulation::run(input, &[candidate], rest);
    let settings = Settings {
        spot_to_spot: false,
    };
    command::decide(&[candidate], simulation.outcome(), input, settings).is_ok()
}

const APPS: [&str; 3] = ["web", "db", "cache"];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Whatever the cluster, a candidate ruled out without a simulation is one the
    /// simulation refuses too. Spares: (vCPUs, vCPUs used, app of the pod there); moving
    /// pods: (vCPUs, the app it keeps away from, if any).
    #[test]
    fn a_candidate_ruled_out_is_one_the_simulation_refuses(
        spares in proptest::collection::vec((1i64..=4, 0i64..=4, 0usize..3), 1..5),
        pods in proptest::collection::vec((1i64..=3, proptest::option::of(0usize..3)), 1..4),
        price in proptest::sample::select(vec![0.04, 0.05, 0.10, 0.20, 0.30]),
    ) {
        let names: Vec<String> = (0..spares.len()).map(|i| format!("spare-{i}")).collect();
        let mut nodes: Vec<(&str, i64)> = vec![("node-a", 0)];
        nodes.extend(names.iter().zip(&spares).map(|(n, (cpu, _, _))| (n.as_str(), *cpu)));
        let mut input = base("default", &nodes);
        for (name, (cpu, used, app)) in names.iter().zip(&spares) {
            let used = (*used).min(*cpu);
            let labels: PodLabels =
                ("default".into(), [("app".to_owned(), APPS[*app].to_owned())].into());
            let pods = if used > 0 { vec![labels] } else { Vec::new() };
            holding(&mut input, name, &pods, used);
        }
        let pods = pods
            .iter()
            .enumerate()
            .map(|(i, (cpu, away))| {
                let p = moving(&format!("p{i}"), *cpu);
                match away {
                    Some(app) => lonely(p, APPS[*app]),
                    None => p,
                }
            })
            .collect();
        let mut candidate = node("a", "default", pods);
        candidate.price = price;
        let none = BTreeSet::new();
        if let Some(why) = Prospects::new(&input, &none, false).hopeless(&candidate) {
            proptest::prop_assert!(
                !simulation_allows(&input, &candidate),
                "ruled out ({}) but the simulation allows a command",
                why
            );
        }
    }
}

/// The property above is not vacuous: it meets candidates ruled out and candidates kept.
#[test]
fn the_generated_clusters_meet_both_kinds() {
    let mut input = base("default", &[("node-a", 0), ("spare", 1)]);
    holding(&mut input, "spare", &[], 0);
    let none = BTreeSet::new();
    let mut prospects = Prospects::new(&input, &none, false);
    let mut ruled_out = node("a", "default", vec![moving("p", 3)]);
    ruled_out.price = 0.20;
    assert!(prospects.hopeless(&ruled_out).is_some());
    assert!(!simulation_allows(&input, &ruled_out));
    let kept = node("a", "default", vec![moving("p", 1)]);
    assert!(prospects.hopeless(&kept).is_none());
    assert!(simulation_allows(&input, &kept));
}

#[test]
fn packable_keeps_the_candidates_whose_pods_fit_the_room_the_others_leave() {
    let a = node("a", "default", vec![moving("a0", 1)]);
    let b = node("b", "default", vec![moving("b0", 1)]);
    let c = node("c", "default", vec![moving("c0", 1)]);
    let none = BTreeSet::new();
    let chosen = |nodes: &[(&str, i64)]| -> Vec<String> {
        let input = base("default", nodes);
        Prospects::new(&input, &none, false)
            .packable(&[&a, &b, &c])
            .iter()
            .map(|n| n.nodeclaim.clone())
            .collect()
    };
    // Three candidates of one 1-vCPU pod each; the only room elsewhere is 2 vCPUs on the
    // spare (the candidates' own nodes are full).
    let spare = [("node-a", 0), ("node-b", 0), ("node-c", 0), ("spare", 2)];
    assert_eq!(chosen(&spare), ["a", "b"]);
    // With 2 vCPUs free on a candidate's own node instead, a node that takes pods is no
    // longer free to go: a goes onto the spare, b onto c, and c stays.
    let own = [("node-a", 0), ("node-b", 0), ("node-c", 2), ("spare", 1)];
    assert_eq!(chosen(&own), ["a", "b"]);
}
