//! Topology: spread constraints over any key, pod affinity and anti-affinity both ways, the
//! domains each counts, and pods that follow their affinity targets.

use super::*;

#[test]
fn zone_spread_pins_claims_to_zones_and_balances_them() {
    let result = solve(&input(web(5, labels::ZONE, false), vec![pool("default")]));
    assert_all_placed(&result);
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for claim in &result.new_claims {
        *per_zone.entry(zone_of(claim)).or_default() += claim.pods.len();
    }
    assert_eq!(per_zone, [("a".to_owned(), 3), ("b".to_owned(), 2)].into());
    assert_eq!(
        result.new_claims.len(),
        2,
        "pods of one zone share a NodeClaim"
    );
}

#[test]
fn existing_pods_count_towards_the_skew() {
    let mut round = input(web(1, labels::ZONE, false), vec![pool("default")]);
    let app: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
    round.existing.push(std::sync::Arc::new(ExistingNode {
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        name: "full-node-in-a".into(),
        labels: [(labels::ZONE.to_owned(), "a".to_owned())].into(),
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(1000, 4 * GIB).with(ResourceName::Pods, 10),
        requested: Resources::cpu_memory(1000, 0),
        pods: vec![("default".into(), app.clone()), ("default".into(), app)],
    }));
    let result = solve(&round);
    assert_eq!(zone_of(&result.new_claims[0]), "b");
}

#[test]
fn hostname_spread_puts_one_pod_per_node() {
    let result = solve(&input(
        web(3, labels::HOSTNAME, false),
        vec![pool("default")],
    ));
    assert_eq!(result.new_claims.len(), 3);
    assert!(result.new_claims.iter().all(|c| c.pods.len() == 1));
    // Pods without the label are not counted and share a node.
    let mut others = pods("other", 2, 100, 1);
    others[0]
        .spread
        .push(spread(labels::HOSTNAME, "web", false));
    others[1]
        .spread
        .push(spread(labels::HOSTNAME, "web", false));
    assert_eq!(
        solve(&input(others, vec![pool("default")]))
            .new_claims
            .len(),
        1
    );
}

#[test]
fn zone_self_affinity_keeps_a_group_in_one_zone() {
    let group = labelled(
        "g",
        6,
        ("my-affinity", "a"),
        Some(term(labels::ZONE, ("my-affinity", "a"), false)),
    );
    // Hostname spread forces several NodeClaims, so the zone must be chosen consistently.
    let group: Vec<Pod> = group
        .into_iter()
        .map(|mut p| {
            p.spread.push(spread(labels::HOSTNAME, "none", false));
            p
        })
        .collect();
    let result = solve(&input(group, vec![pool("default")]));
    assert_all_placed(&result);
    let zones: std::collections::BTreeSet<String> = result.new_claims.iter().map(zone_of).collect();
    assert_eq!(zones.len(), 1, "{zones:?}");
}

#[test]
fn hostname_anti_affinity_puts_one_matching_pod_per_node() {
    let nginx = labelled(
        "nginx",
        3,
        ("app", "nginx"),
        Some(term(labels::HOSTNAME, ("app", "nginx"), true)),
    );
    let others = pods("other", 2, 100, 1);
    let result = solve(&input([nginx, others].concat(), vec![pool("default")]));
    assert_all_placed(&result);
    assert_eq!(result.new_claims.len(), 3);
    for claim in &result.new_claims {
        assert_eq!(
            claim.pods.iter().filter(|p| p.starts_with("nginx")).count(),
            1,
            "{:?}",
            claim.pods
        );
    }
}

#[test]
fn zone_anti_affinity_avoids_zones_with_matching_pods() {
    let mut round = input(
        labelled(
            "web",
            1,
            ("app", "db-client"),
            Some(term(labels::ZONE, ("app", "db"), true)),
        ),
        vec![pool("default")],
    );
    round.existing.push(std::sync::Arc::new(ExistingNode {
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        name: "db-node".into(),
        labels: [(labels::ZONE.to_owned(), "a".to_owned())].into(),
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(8000, 32 * GIB).with(ResourceName::Pods, 50),
        requested: Resources::ZERO,
        pods: vec![(
            "default".into(),
            [("app".to_owned(), "db".to_owned())].into(),
        )],
    }));
    let result = solve(&round);
    assert!(
        result.bindings.is_empty(),
        "the db node is in the forbidden zone"
    );
    assert_eq!(zone_of(&result.new_claims[0]), "b");
}

#[test]
fn hostname_affinity_joins_the_node_of_a_matching_pod_or_waits() {
    let cache_node = ExistingNode {
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        name: "cache-node".into(),
        labels: [(labels::ZONE.to_owned(), "a".to_owned())].into(),
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(2000, 8 * GIB).with(ResourceName::Pods, 50),
        requested: Resources::ZERO,
        pods: vec![(
            "default".into(),
            [("app".to_owned(), "cache".to_owned())].into(),
        )],
    };
    let near = labelled(
        "near",
        3,
        ("app", "web"),
        Some(term(labels::HOSTNAME, ("app", "cache"), false)),
    );
    let mut round = input(near, vec![pool("default")]);
    round.existing.push(std::sync::Arc::new(cache_node));
    let result = solve(&round);
    assert_eq!(
        result.bindings.len(),
        3,
        "all fit next to the cache: {:?}",
        result.unschedulable
    );
    // Affinity to pods that do not exist (and do not match the pod itself) cannot be met.
    let lonely = labelled(
        "lonely",
        1,
        ("app", "web"),
        Some(term(labels::ZONE, ("app", "missing"), false)),
    );
    let result = solve(&input(lonely, vec![pool("default")]));
    assert!(
        result.unschedulable[0]
            .reason
            .starts_with("no topology.kubernetes.io/zone satisfies"),
        "{}",
        result.unschedulable[0].reason
    );
}

#[test]
fn anti_affinity_with_match_expressions_keeps_matching_pods_apart() {
    use crate::model::pod::{SelectorExpression, SelectorOperator};
    let apart = labelled("web", 3, ("app", "web"), None)
        .into_iter()
        .map(|mut p| {
            p.pod_affinity.push(crate::model::pod::PodAffinityTerm {
                topology_key: labels::HOSTNAME.into(),
                selector: BTreeMap::new(),
                expressions: vec![SelectorExpression {
                    key: "app".into(),
                    operator: SelectorOperator::In,
                    values: vec!["web".into(), "api".into()],
                }],
                namespaces: Vec::new(),
                all_namespaces: false,
                namespace_selector: None,
                anti: true,
            });
            p
        })
        .collect::<Vec<_>>();
    // Pods the expression does not select may share their nodes.
    let others = labelled("batch", 3, ("app", "batch"), None);
    let result = solve(&input([apart, others].concat(), vec![pool("default")]));
    assert_all_placed(&result);
    assert_eq!(result.new_claims.len(), 3, "{:?}", result.new_claims);
    for claim in &result.new_claims {
        assert_eq!(
            claim.pods.iter().filter(|p| p.starts_with("web")).count(),
            1
        );
    }
}

#[test]
fn pods_stay_off_nodes_whose_pods_repel_them() {
    let avoid_web = term(labels::HOSTNAME, ("app", "web"), true);
    // An existing node with room, holding a pod that will not share a node with web pods.
    let mut round = input(
        labelled("web", 2, ("app", "web"), None),
        vec![pool("default")],
    );
    round.existing = vec![ExistingNode {
        anti_affinity: vec![("default".into(), avoid_web.clone())],
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        name: "node-a".into(),
        labels: [(labels::ZONE.to_owned(), "a".to_owned())].into(),
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(8000, 32 * GIB).with(ResourceName::Pods, 110),
        requested: Resources::ZERO,
        pods: vec![(
            "default".into(),
            [("app".to_owned(), "db".to_owned())].into(),
        )],
    }]
    .into_iter()
    .map(std::sync::Arc::new)
    .collect();
    let result = solve(&round);
    assert!(result.bindings.is_empty(), "{:?}", result.bindings);
    assert_eq!(result.new_claims.len(), 1);
    // The same within a round: the database pod, placed first as the larger, keeps the web
    // pods off its NodeClaim although it has room.
    let mut db = labelled("db", 1, ("app", "db"), Some(avoid_web));
    db[0].requests.set(ResourceName::Cpu, 2000);
    let round = input(
        [db, labelled("web", 2, ("app", "web"), None)].concat(),
        vec![pool("default")],
    );
    let result = solve(&round);
    assert_all_placed(&result);
    for claim in &result.new_claims {
        let has = |prefix: &str| claim.pods.iter().any(|p| p.starts_with(prefix));
        assert!(!(has("db") && has("web")), "{:?}", claim.pods);
    }
}

#[test]
fn min_domains_counts_missing_domains_as_empty() {
    // Two zones but minDomains 3: the global minimum stays 0, so each zone takes maxSkew.
    let mut pods = web(4, labels::ZONE, false);
    for p in &mut pods {
        p.spread[0].min_domains = Some(3);
    }
    let result = solve(&input(pods, vec![pool("default")]));
    assert_eq!(placed_pods(&result), 2);
    assert_eq!(result.unschedulable.len(), 2);
    let zones: BTreeSet<String> = result.new_claims.iter().map(zone_of).collect();
    assert_eq!(zones.len(), 2, "one pod per zone");
    // With as many domains as minDomains asks for, spreading goes on as usual.
    let mut pods = web(4, labels::ZONE, false);
    for p in &mut pods {
        p.spread[0].min_domains = Some(2);
    }
    let result = solve(&input(pods, vec![pool("default")]));
    assert_eq!(placed_pods(&result), 4, "{:?}", result.unschedulable);
}

#[test]
fn pools_a_pod_cannot_use_add_no_domains_until_their_nodes_exist() {
    // The pod can only use zone a; a tainted pool it does not tolerate offers zone b too.
    let mut tainted = zone_pool("tainted", &["a", "b"]);
    tainted.taints = vec![Taint::new("dedicated", "x", "NoSchedule")];
    let round = |honor: bool, tainted_node_in_b: bool| {
        let mut pods = web(3, labels::ZONE, false);
        for p in &mut pods {
            p.spread[0].honor_node_taints = honor;
        }
        let mut round = input(pods, vec![zone_pool("default", &["a"]), tainted.clone()]);
        if tainted_node_in_b {
            let mut node = empty_node("tainted-b", "b");
            node.taints = tainted.taints.clone();
            round.existing.push(std::sync::Arc::new(node));
        }
        round
    };
    // Zone b is no domain while no node is there: kube-scheduler would not count it either.
    assert_eq!(placed_pods(&solve(&round(false, false))), 3);
    // Once a tainted node exists in b, it counts under nodeTaintsPolicy Ignore (the
    // default) and holds zone a to one pod...
    let ignored = solve(&round(false, true));
    assert_eq!(placed_pods(&ignored), 1);
    assert!(
        ignored.unschedulable[0].reason.contains("topology spread"),
        "{:?}",
        ignored.unschedulable
    );
    // ...and not under Honor.
    let honored = solve(&round(true, true));
    assert_eq!(placed_pods(&honored), 3, "{:?}", honored.unschedulable);
}

#[test]
fn node_affinity_policy_decides_whether_excluded_nodes_count() {
    let round = |ignore: bool| {
        let mut pods = web(2, labels::ZONE, false);
        for p in &mut pods {
            p.node_selector.add(labels::ZONE, Requirement::is_in(["a"]));
            p.spread[0].ignore_node_affinity = ignore;
        }
        let mut round = input(pods, vec![pool("default")]);
        round
            .existing
            .push(std::sync::Arc::new(empty_node("node-b", "b")));
        round
    };
    // Honor (the default): the node in zone b does not count, so zone a takes both.
    assert_eq!(placed_pods(&solve(&round(false))), 2);
    // Ignore: it counts and holds no pod, so zone a takes one.
    assert_eq!(placed_pods(&solve(&round(true))), 1);
}

#[test]
fn a_spread_that_does_not_select_its_own_pod_does_not_count_it() {
    // A database pod sits in zone a, none in zone b. A web pod spreads against database
    // pods only, so going to zone a leaves the skew at 1 (web pods are not counted).
    let mut round = input(
        web(1, labels::ZONE, false),
        vec![zone_pool("default", &["a"])],
    );
    for p in &mut round.pods {
        p.spread[0].selector = [("app".to_owned(), "db".to_owned())].into();
    }
    let mut db_node = empty_node("full-node-in-a", "a");
    db_node.pods = vec![db_pod()];
    round.existing = vec![db_node, empty_node("node-b", "b")]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let result = solve(&round);
    assert_eq!(placed_pods(&result), 1, "{:?}", result.unschedulable);
    assert_eq!(zone_of(&result.new_claims[0]), "a");
}

#[test]
fn spread_over_any_node_label_uses_the_values_the_pools_offer() {
    const FAMILY: &str = "karpenter.k8s.aws/instance-family";
    let result = solve(&input(web(4, FAMILY, false), vec![pool("default")]));
    assert_all_placed(&result);
    // Families m and c take two pods each; the GPU family g is no domain for these pods.
    let mut per_family: BTreeMap<String, usize> = BTreeMap::new();
    for claim in &result.new_claims {
        let family = claim
            .requirements
            .get(FAMILY)
            .and_then(|r| r.values())
            .unwrap();
        assert_eq!(family.len(), 1, "{:?}", claim.requirements);
        let family = family.iter().next().unwrap().clone();
        for option in &claim.instance_types {
            assert!(
                option.name.starts_with(&format!("{family}.")),
                "{}",
                option.name
            );
        }
        *per_family.entry(family).or_default() += claim.pods.len();
    }
    assert_eq!(
        per_family,
        [("c".to_owned(), 2), ("m".to_owned(), 2)].into()
    );
    // A label no pool offers is no domain at all: nothing can satisfy the spread.
    let result = solve(&input(
        web(1, "example.com/rack", false),
        vec![pool("default")],
    ));
    assert_eq!(result.unschedulable.len(), 1);
}

#[test]
fn zone_affinity_over_a_template_label_follows_the_pool_value() {
    // Pools labelled team=a and team=b; a pod with affinity on `team` to a db pod joins the
    // pool whose team the db pod's node has.
    let team = |value: &str| {
        let mut p = pool(&format!("team-{value}"));
        p.requirements.add("team", Requirement::is_in([value]));
        p
    };
    let mut web_pod = labelled(
        "web",
        1,
        ("app", "web"),
        Some(term("team", ("app", "db"), false)),
    );
    web_pod[0].requests.set(ResourceName::Cpu, 100);
    let mut round = input(web_pod, vec![team("a"), team("b")]);
    let mut db_node = empty_node("db-node", "a");
    db_node.labels = [("team".to_owned(), "b".to_owned())].into();
    db_node.pods = vec![db_pod()];
    round.existing.push(std::sync::Arc::new(db_node));
    let result = solve(&round);
    assert_all_placed(&result);
    assert_eq!(result.new_claims[0].nodepool, "team-b");
}

#[test]
fn pods_stay_out_of_zones_whose_pods_repel_them() {
    let avoid_web = term(labels::ZONE, ("app", "web"), true);
    let mut round = input(
        labelled("web", 2, ("app", "web"), None),
        vec![pool("default")],
    );
    let mut db_node = roomy_node("db-node", "a");
    db_node.pods = vec![db_pod()];
    db_node.anti_affinity = vec![("default".into(), avoid_web.clone())];
    round.existing.push(std::sync::Arc::new(db_node));
    let result = solve(&round);
    assert!(result.bindings.is_empty(), "{:?}", result.bindings);
    assert_all_placed(&result);
    for claim in &result.new_claims {
        assert_eq!(zone_of(claim), "b");
    }
    // The same within a round: the database pod is placed first and keeps web pods out of
    // its zone.
    let mut db = labelled("db", 1, ("app", "db"), Some(avoid_web));
    db[0].requests.set(ResourceName::Cpu, 2000);
    let result = solve(&input(
        [db, labelled("web", 2, ("app", "web"), None)].concat(),
        vec![pool("default")],
    ));
    assert_all_placed(&result);
    let zone_holding = |prefix: &str| -> BTreeSet<String> {
        result
            .new_claims
            .iter()
            .filter(|c| c.pods.iter().any(|p| p.starts_with(prefix)))
            .map(zone_of)
            .collect()
    };
    assert_eq!(zone_holding("db").len(), 1);
    assert!(zone_holding("db").is_disjoint(&zone_holding("web")));
    // With both zones repelling, web pods cannot be placed, and the reason says why.
    let mut round = round.clone();
    let mut in_b = (*round.existing[0]).clone();
    in_b.name = "db-node-b".into();
    in_b.labels = [(labels::ZONE.to_owned(), "b".to_owned())].into();
    round.existing.push(std::sync::Arc::new(in_b));
    let result = solve(&round);
    assert_eq!(result.unschedulable.len(), 2);
    assert!(
        result.unschedulable[0]
            .reason
            .contains("topology.kubernetes.io/zone"),
        "{}",
        result.unschedulable[0].reason
    );
}

#[test]
fn namespace_selectors_pick_namespaces_by_their_labels() {
    // Database pods in namespaces x (team a) and y (team b), each on a node with room. A web
    // pod keeps off nodes with database pods of team a's namespaces only.
    let mut avoid = term(labels::HOSTNAME, ("app", "db"), true);
    avoid.namespace_selector = Some(crate::model::pod::NamespaceSelector {
        match_labels: [("team".to_owned(), "a".to_owned())].into(),
        expressions: Vec::new(),
    });
    let mut round = input(
        labelled("web", 1, ("app", "web"), Some(avoid)),
        vec![pool("default")],
    );
    round.namespace_labels = [
        ("x".to_owned(), [("team".to_owned(), "a".to_owned())].into()),
        ("y".to_owned(), [("team".to_owned(), "b".to_owned())].into()),
    ]
    .into();
    let db_node = |name: &str, namespace: &str| {
        let mut node = roomy_node(name, "a");
        node.pods = vec![(namespace.into(), db_pod().1)];
        node
    };
    round.existing = vec![db_node("node-x", "x"), db_node("node-y", "y")]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let result = solve(&round);
    assert_eq!(result.bindings.len(), 1, "{:?}", result);
    assert_eq!(result.bindings[0].node, "node-y");
    // A selector matching no namespace selects no pod: the first node is fine.
    round.namespace_labels.clear();
    let result = solve(&round);
    assert_eq!(result.bindings[0].node, "node-x");
}

#[test]
fn affinity_followers_placed_before_their_target_join_it_once_it_is_placed() {
    // The followers are larger, so they come first and find no target; they go to the back
    // of the queue and follow the target once it is placed, in the same round.
    let target = labelled("target", 1, ("app", "target"), None)
        .into_iter()
        .map(|mut p| {
            p.requests = Resources::cpu_memory(100, GIB).with(ResourceName::Pods, 1);
            p
        });
    let followers = labelled(
        "follower",
        10,
        ("app", "follower"),
        Some(term(labels::ZONE, ("app", "target"), false)),
    )
    .into_iter()
    .map(|mut p| {
        // Hostname spread: several NodeClaims, each of which must be in the target's zone.
        p.spread.push(spread(labels::HOSTNAME, "follower", false));
        p
    });
    let round = input(
        target.chain(followers).collect(),
        vec![three_zone_pool("default")],
    );
    let result = solve(&round);
    assert_all_placed(&result);
    let per_zone = pods_per_zone(&result);
    assert_eq!(per_zone.len(), 1, "{per_zone:?}");
    assert_eq!(per_zone.values().sum::<usize>(), 11);
    // Upstream's ordering and ours both put the target anywhere; without the queue the
    // followers ahead of it were all unschedulable.
    assert!(result.new_claims.len() >= 10);
}

#[test]
fn a_follower_whose_target_never_comes_stays_unschedulable_after_one_more_cycle() {
    let followers = labelled(
        "follower",
        3,
        ("app", "follower"),
        Some(term(labels::ZONE, ("app", "missing"), false)),
    );
    let result = solve(&input(followers, vec![three_zone_pool("default")]));
    assert_eq!(result.unschedulable.len(), 3);
    assert!(
        result.unschedulable[0]
            .reason
            .starts_with("no topology.kubernetes.io/zone satisfies"),
        "{}",
        result.unschedulable[0].reason
    );
}

#[test]
fn a_preferred_node_affinity_does_not_narrow_the_domains_a_spread_counts() {
    // Upstream's expectation: six pods spread over three zones (maxSkew 1) that prefer two of
    // them land 2/2/2; the preference must not shrink the zones the skew is counted over.
    let mut preferred = Requirements::new();
    preferred.add(labels::ZONE, Requirement::is_in(["a", "b"]));
    let pods: Vec<Pod> = web(6, labels::ZONE, false)
        .into_iter()
        .map(|mut p| {
            p.preferred_node_affinity.push((10, preferred.clone()));
            p
        })
        .collect();
    let result = solve(&input(pods, vec![three_zone_pool("default")]));
    assert_all_placed(&result);
    let expected: BTreeMap<String, usize> =
        [("a".into(), 2), ("b".into(), 2), ("c".into(), 2)].into();
    assert_eq!(pods_per_zone(&result), expected);

    // One preferred zone: it takes what the skew allows, the rest go where they must.
    let mut only_a = Requirements::new();
    only_a.add(labels::ZONE, Requirement::is_in(["a"]));
    let pods: Vec<Pod> = web(3, labels::ZONE, false)
        .into_iter()
        .map(|mut p| {
            p.preferred_node_affinity.push((10, only_a.clone()));
            p
        })
        .collect();
    let result = solve(&input(pods, vec![three_zone_pool("default")]));
    assert_all_placed(&result);
    let expected: BTreeMap<String, usize> =
        [("a".into(), 1), ("b".into(), 1), ("c".into(), 1)].into();
    assert_eq!(pods_per_zone(&result), expected);

    // A required node affinity does narrow them: two zones, three pods each.
    let pods: Vec<Pod> = web(6, labels::ZONE, false)
        .into_iter()
        .map(|mut p| {
            p.affinity_terms.push(preferred.clone());
            p
        })
        .collect();
    let result = solve(&input(pods, vec![three_zone_pool("default")]));
    assert_all_placed(&result);
    let expected: BTreeMap<String, usize> = [("a".into(), 3), ("b".into(), 3)].into();
    assert_eq!(pods_per_zone(&result), expected);
}

#[test]
fn node_selectors_limit_the_domains_a_spread_counts() {
    // Five pods selecting zone a and ten selecting zone b each count only their own zone.
    let mut pods = web(15, labels::ZONE, false);
    for (i, p) in pods.iter_mut().enumerate() {
        let zone = if i < 5 { "a" } else { "b" };
        p.node_selector
            .add(labels::ZONE, Requirement::is_in([zone]));
    }
    let round = input(pods, vec![three_zone_pool("default")]);
    let result = solve(&round);
    assert_all_placed(&result);
    let expected: BTreeMap<String, usize> = [("a".into(), 5), ("b".into(), 10)].into();
    assert_eq!(web_per_zone(&round, &result), expected);
}

#[test]
fn a_pod_whose_required_affinity_excludes_the_fullest_zones_opens_the_empty_one() {
    // Three web pods already run in each of zones a and b. A pod that may only go to b or c
    // counts those two: c is emptiest, so it goes there, though a, b and c together skew by
    // three; five more pods free to go anywhere then even the zones out at 4/4/4.
    let web_pod = || -> PodLabels {
        (
            "default".into(),
            [("app".to_owned(), "web".to_owned())].into(),
        )
    };
    let node = |name: &str, zone: &str| ExistingNode {
        pods: vec![web_pod(), web_pod(), web_pod()],
        requested: Resources::cpu_memory(1500, 3 * GIB),
        ..roomy_node(name, zone)
    };
    let mut pods = web(6, labels::ZONE, false);
    let mut b_or_c = Requirements::new();
    b_or_c.add(labels::ZONE, Requirement::is_in(["b", "c"]));
    pods[0].affinity_terms.push(b_or_c);
    let mut round = input(pods, vec![three_zone_pool("default")]);
    round.existing = vec![node("node-a", "a"), node("node-b", "b")]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let result = solve(&round);
    assert_all_placed(&result);
    let expected: BTreeMap<String, usize> =
        [("a".into(), 4), ("b".into(), 4), ("c".into(), 4)].into();
    assert_eq!(web_per_zone(&round, &result), expected);
}

/// A cordoned node (as a round sees it: Kubernetes' unschedulable taint) takes no pods, but
/// its pods still count for zone spread, as kube-scheduler counts them: two web pods on a
/// cordoned node in zone a let two more go to the node in zone b. Counting zone a as empty
/// would send the second to a new node in zone a, which kube-scheduler then refuses to
/// fill while the cordoned pods are there (the kill campaign found pods stuck that way).
#[test]
fn pods_on_a_cordoned_node_count_for_spread_but_it_takes_none() {
    let web_pod: PodLabels = (
        "default".into(),
        [("app".to_owned(), "web".to_owned())].into(),
    );
    let mut cordoned = roomy_node("cordoned-a", "a");
    cordoned.taints.push(crate::model::Taint::new(
        labels::UNSCHEDULABLE_TAINT,
        "",
        "NoSchedule",
    ));
    cordoned.pods = vec![web_pod.clone(), web_pod];
    let mut run = input(web(2, labels::ZONE, false), vec![pool("default")]);
    run.existing = vec![Arc::new(cordoned), Arc::new(roomy_node("open-b", "b"))];
    let result = solve(&run);
    assert_all_placed(&result);
    assert!(result.new_claims.is_empty(), "{:?}", result.new_claims);
    assert_eq!(result.bindings.len(), 2);
    assert!(
        result.bindings.iter().all(|b| b.node == "open-b"),
        "{:?}",
        result.bindings
    );
}
