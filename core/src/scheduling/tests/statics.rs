//! Static NodePools in a round, each test naming the case of upstream's static provisioning
//! suite (`pkg/controllers/static/provisioning/suite_test.go`) it paraphrases.

use super::*;

fn static_pool(name: &str, replicas: i64, nodes: i64, node_limit: Option<i64>) -> StaticPool {
    let mut template = pool(name);
    template.node_count = nodes;
    template.limits.nodes = node_limit;
    StaticPool { template, replicas }
}

fn with_static(pods: Vec<Pod>, statics: Vec<StaticPool>) -> SchedulingInput {
    SchedulingInput {
        static_pools: statics,
        ..input(pods, vec![pool("dynamic")])
    }
}

fn static_claims_of<'a>(result: &'a SchedulingResult, pool: &str) -> Vec<&'a PlannedNodeClaim> {
    result
        .new_claims
        .iter()
        .filter(|c| c.nodepool == pool)
        .collect()
}

/// "should create nodeclaims when current node count is less than desired replicas" and
/// "should create additional nodeclaims to reach desired replicas".
#[test]
fn a_static_pool_short_of_its_replicas_gets_what_it_lacks() {
    let result = solve(&with_static(Vec::new(), vec![static_pool("s", 2, 0, None)]));
    assert_eq!(static_claims_of(&result, "s").len(), 2);
    let result = solve(&with_static(Vec::new(), vec![static_pool("s", 3, 1, None)]));
    let claims = static_claims_of(&result, "s");
    assert_eq!(claims.len(), 2);
    // No pods, the pool's requirements, every type it allows, cheapest offering first.
    assert!(claims[0].pods.is_empty());
    assert_eq!(claims[0].instance_types[0].name.as_str(), "m.large");
    assert_eq!(
        claims[0].instance_types[0].capacity_type,
        CapacityType::Spot
    );
    assert_eq!(claims[0].instance_types.len(), catalog().len());
}

/// "should return early if current node count exceeds desired replicas", "should handle
/// zero replicas" and "should not create additional nodeclaims" (NodeClaims not launched
/// yet count).
#[test]
fn a_static_pool_at_or_over_its_replicas_gets_nothing() {
    for (replicas, nodes) in [(1, 2), (0, 0), (3, 3)] {
        let result = solve(&with_static(
            Vec::new(),
            vec![static_pool("s", replicas, nodes, None)],
        ));
        assert!(
            result.new_claims.is_empty(),
            "{replicas} replicas, {nodes} nodes"
        );
    }
}

/// "should not create additional nodeclaims when node limits are reached" and "should
/// reserve nodepool nodecount during provisioning" (replicas 15 with limit 10 gives 10).
#[test]
fn a_static_pool_stops_at_its_node_limit() {
    let at_limit = static_pool("s", 3, 1, Some(1));
    assert!(at_limit.at_node_limit());
    assert!(
        solve(&with_static(Vec::new(), vec![at_limit]))
            .new_claims
            .is_empty()
    );
    let result = solve(&with_static(
        Vec::new(),
        vec![static_pool("s", 15, 3, Some(10))],
    ));
    assert_eq!(static_claims_of(&result, "s").len(), 7);
}

/// "should respect nodepool template specifications": a static NodeClaim launches only as
/// types and offerings its pool's requirements allow.
#[test]
fn a_static_nodeclaim_keeps_to_its_pools_requirements() {
    let mut pool = static_pool("s", 1, 0, None);
    let requirements = &mut pool.template.requirements;
    requirements.add(
        "karpenter.k8s.aws/instance-family",
        Requirement::is_in(["c"]),
    );
    requirements.add(labels::CAPACITY_TYPE, Requirement::is_in(["on-demand"]));
    requirements.add(labels::ZONE, Requirement::is_in(["b"]));
    let result = solve(&with_static(Vec::new(), vec![pool]));
    let claims = static_claims_of(&result, "s");
    let options: Vec<(&str, &str, CapacityType)> = claims[0]
        .instance_types
        .iter()
        .map(|o| (&*o.name, &*o.zone, o.capacity_type))
        .collect();
    assert_eq!(options, vec![("c.xlarge", "b", CapacityType::OnDemand)]);
}

/// Pending pods are never planned onto a static pool's new NodeClaims, even when only the
/// static pool could take them (upstream's provisioner leaves static pools out).
#[test]
fn pods_are_never_planned_into_a_static_pool() {
    let mut input = with_static(pods("web", 3, 1000, 1), vec![static_pool("s", 2, 0, None)]);
    input.nodepools.clear();
    let result = solve(&input);
    assert_eq!(result.unschedulable.len(), 3);
    assert!(result.new_claims.iter().all(|c| c.pods.is_empty()));
    assert_eq!(result.new_claims.len(), 2);
}

/// The static pools' NodeClaims come after the pods', pool by pool in name order, so a
/// replay names them alike.
#[test]
fn static_nodeclaims_follow_the_pods_ones_in_pool_order() {
    let input = with_static(
        pods("web", 2, 1000, 1),
        vec![static_pool("z", 1, 0, None), static_pool("a", 1, 0, None)],
    );
    let result = solve(&input);
    let pools: Vec<&str> = result
        .new_claims
        .iter()
        .map(|c| c.nodepool.as_str())
        .collect();
    assert_eq!(pools, vec!["dynamic", "a", "z"]);
}
