//! What a round relaxes, and in which order: preferences (upstream's order), ScheduleAnyway
//! spreads, PreferNoSchedule taints, and minValues under BestEffort.

use super::*;

#[test]
fn do_not_schedule_is_kept_and_schedule_anyway_relaxed() {
    // Zone a has a full node without matching pods, zone b two matching pods; the pool can
    // only create nodes in b. maxSkew 1 allows only zone a, where nothing fits.
    let app: BTreeMap<String, String> = [("app".to_owned(), "web".to_owned())].into();
    let node =
        |name: &str, zone: &str, pods: Vec<(String, BTreeMap<String, String>)>| ExistingNode {
            anti_affinity: Vec::new(),
            host_ports: Vec::new(),
            attach_limits: BTreeMap::new(),
            attached: Vec::new(),
            name: name.into(),
            labels: [(labels::ZONE.to_owned(), zone.to_owned())].into(),
            taints: Vec::new(),
            allocatable: Resources::cpu_memory(600, 4 * GIB).with(ResourceName::Pods, 10),
            requested: Resources::cpu_memory(600, 0),
            pods,
        };
    let mut only_b = pool("only-b");
    only_b
        .requirements
        .add(labels::ZONE, Requirement::is_in(["b"]));
    for (anyway, placed) in [(false, false), (true, true)] {
        let mut round = input(web(1, labels::ZONE, anyway), vec![only_b.clone()]);
        round
            .existing
            .push(std::sync::Arc::new(node("full-in-a", "a", Vec::new())));
        round.existing.push(std::sync::Arc::new(node(
            "busy-in-b",
            "b",
            vec![
                ("default".into(), app.clone()),
                ("default".into(), app.clone()),
            ],
        )));
        let result = solve(&round);
        assert_eq!(
            result.unschedulable.is_empty(),
            placed,
            "anyway={anyway}: {:?}",
            result.unschedulable
        );
        if placed {
            assert_eq!(zone_of(&result.new_claims[0]), "b");
        } else {
            let reason = &result.unschedulable[0].reason;
            assert!(reason.contains("nodepool \"only-b\""), "{reason}");
        }
    }
}

#[test]
fn preferences_are_honoured_where_they_can_be_and_relaxed_in_order() {
    let result = solve(&input(nginx_with_preferences(4), vec![pool("default")]));
    assert_all_placed(&result);
    // The zone anti-affinity (heaviest) gives way first; the node affinity to zone b and the
    // node anti-affinity hold: one node per pod, all in zone b.
    assert_eq!(result.new_claims.len(), 4, "{:?}", result.new_claims);
    for claim in &result.new_claims {
        assert_eq!(zone_of(claim), "b");
    }
}

#[test]
fn an_unsatisfiable_preferred_node_affinity_is_relaxed() {
    let mut zone_z = Requirements::new();
    zone_z.add(labels::ZONE, Requirement::is_in(["z"]));
    let mut pod = Pod::simple("p", 500, GIB);
    pod.preferred_node_affinity.push((50, zone_z));
    let result = solve(&input(vec![pod], vec![pool("default")]));
    assert_all_placed(&result);
    assert_eq!(result.new_claims.len(), 1);
}

#[test]
fn ignored_preferences_leave_pods_free_to_share() {
    let mut round = input(nginx_with_preferences(4), vec![pool("default")]);
    round.preference_policy = PreferencePolicy::Ignore;
    let result = solve(&round);
    assert_all_placed(&result);
    assert_eq!(result.new_claims.len(), 1, "{:?}", result.new_claims);
    // Respected, the same pods cost more (a node each), and the bound knows it.
    round.preference_policy = PreferencePolicy::Respect;
    let respected = solve(&round);
    assert!(respected.new_capacity_cost() > result.new_capacity_cost());
    let bound = bound::cost_lower_bound(&round).unwrap();
    assert!(respected.new_capacity_cost() >= bound - 1e-9);
    assert_eq!(bound::forced_nodes(&round), 4);
}

#[test]
fn prefer_no_schedule_taints_are_avoided_until_nothing_else_fits() {
    let mut soft = pool("soft");
    soft.weight = 10;
    soft.taints = vec![Taint::new("spare", "", "PreferNoSchedule")];
    let mut plain = pool("plain");
    plain.requirements.add(
        "karpenter.k8s.aws/instance-family",
        Requirement::is_in(["m"]),
    );
    // The heavier pool carries the soft taint: the pod goes to the other one.
    let result = solve(&input(pods("p", 1, 500, 1), vec![soft.clone(), plain]));
    assert_eq!(result.new_claims.len(), 1);
    assert_eq!(result.new_claims[0].nodepool, "plain");
    // When the other pool cannot take it, the soft taint is tolerated after all.
    let mut full = pool("plain");
    full.limits.resources.insert(ResourceName::Cpu, 0);
    let result = solve(&input(pods("p", 1, 500, 1), vec![soft, full]));
    assert_all_placed(&result);
    assert_eq!(result.new_claims[0].nodepool, "soft");
}

#[test]
fn best_effort_launches_without_min_values_only_when_nothing_else_places_the_pod() {
    // A 3-CPU pod leaves 3 ordinary types: minValues 4 cannot be kept.
    let mut round = input(pods("p", 1, 3000, 1), vec![min_types_pool(4)]);
    let strict = solve(&round);
    assert_eq!(strict.unschedulable.len(), 1);
    assert!(strict.unschedulable[0].reason.contains("minValues 4"));
    round.min_values_policy = MinValuesPolicy::BestEffort;
    let relaxed = solve(&round);
    assert!(
        relaxed.unschedulable.is_empty(),
        "{:?}",
        relaxed.unschedulable
    );
    assert!(relaxed.new_claims[0].min_values_relaxed);
    // Pods that fit with minValues kept are placed as under Strict, not relaxed.
    let mut round = input(pods("p", 1, 1500, 1), vec![min_types_pool(4)]);
    round.min_values_policy = MinValuesPolicy::BestEffort;
    let kept = solve(&round);
    assert!(!kept.new_claims[0].min_values_relaxed);
    assert!(kept.new_claims[0].instance_types.len() >= 4);
}
