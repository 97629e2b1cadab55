//! How nodes are taken away on whole simulated runs: Balanced consolidation against
//! WhenEmptyOrUnderutilized, a static NodePool scaled and drifted, and unhealthy nodes
//! repaired.

use super::*;

/// The Balanced scenario: a web tier scaled 40 → 90 → 30, a cache of pods dear to restart
/// and low-priority batch pods, on one NodePool.
const BALANCED: &str = include_str!("../../deploy/scenarios/balanced.yaml");

#[test]
fn balanced_consolidation_moves_fewer_pods_for_most_of_the_saving() {
    let balanced = parse(BALANCED, "balanced").unwrap();
    let eager_text = BALANCED.replace(
        "consolidationPolicy: Balanced",
        "consolidationPolicy: WhenEmptyOrUnderutilized",
    );
    assert_ne!(eager_text, BALANCED);
    let eager = parse(&eager_text, "eager").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let with = run(&balanced, &options(dir.path(), "e2e-balanced")).unwrap();
    let without = run(&eager, &options(other.path(), "e2e-eager")).unwrap();
    for report in [&with, &without] {
        assert_eq!(
            (report.pods_bound, report.pods_pending),
            (40, 0),
            "{report:#?}"
        );
        assert!(
            report.disruptions.by_reason.contains_key("underutilized"),
            "{report:#?}"
        );
    }
    // Fewer pods evicted than consolidating for any saving, for most of what it saves.
    assert!(
        with.evictions.0 * 2 < without.evictions.0,
        "Balanced evicted {} pods, WhenEmptyOrUnderutilized {}",
        with.evictions.0,
        without.evictions.0
    );
    assert!(
        with.cost_per_hour <= without.cost_per_hour * 1.1,
        "Balanced ends at ${}/h, WhenEmptyOrUnderutilized at ${}/h",
        with.cost_per_hour,
        without.cost_per_hour
    );
    // Every decision, Balanced scores included, is reproduced from the journal.
    let verified = offerings::karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(verified.contains(" 0 different"), "{verified}");
}

/// The static NodePool scenario: `ingress` (spec.replicas) scaled 3 → 5 → 2 beside a
/// dynamic pool, then its template edited so StaticDrift replaces its nodes.
const STATIC: &str = include_str!("../../deploy/scenarios/static.yaml");

/// Upstream's static provisioning and deprovisioning suites end to end: a static pool keeps
/// exactly its replicas whatever pods need (scaled up by launching what it lacks, down by
/// deleting its emptiest nodes), and its drifted nodes are replaced one at a time
/// (StaticDrift) by nodes of its template.
#[test]
fn a_static_nodepool_keeps_its_replicas_through_scaling_and_drift() {
    let scenario = parse(STATIC, "static").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gated = options(dir.path(), "e2e-static");
    gated.settings.static_capacity = true;
    let report = run(&scenario, &gated).unwrap();
    assert_eq!(
        (report.pods_bound, report.pods_pending),
        (24, 0),
        "{report:#?}"
    );
    // One node of the dynamic pool for the web tier throughout, beside the static ones.
    let nodes_at = |minute: u64| {
        report
            .samples
            .iter()
            .rev()
            .find(|s| s.at_seconds <= minute * 60)
            .map(|s| s.nodes)
    };
    assert_eq!(nodes_at(9), Some(3 + 1), "{:?}", report.samples);
    assert_eq!(nodes_at(24), Some(5 + 1), "{:?}", report.samples);
    assert_eq!(nodes_at(44), Some(2 + 1), "{:?}", report.samples);
    let ingress: usize = (report.nodes.iter())
        .filter(|g| g.instance_type == "c6i.xlarge")
        .map(|g| g.count)
        .sum();
    assert_eq!(ingress, 2, "{:?}", report.nodes);
    let by_reason = &report.disruptions.by_reason;
    assert_eq!(by_reason.get("overprovisioned"), Some(&3), "{by_reason:?}");
    assert_eq!(by_reason.get("drifted"), Some(&2), "{by_reason:?}");
    assert_eq!(report.disruptions.commands.get("StaticDrift"), Some(&2));
    // Every round (static launches included) and command is reproduced from the journal.
    let verified = offerings::karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(verified.contains(" 0 different"), "{verified}");

    // Without the StaticCapacity gate (upstream's default) the static pool provisions
    // nothing: its edge pods wait, and the dynamic pool is not used for them.
    let other = tempfile::tempdir().unwrap();
    let ungated = run(&scenario, &options(other.path(), "e2e-static-off")).unwrap();
    assert_eq!((ungated.pods_bound, ungated.pods_pending), (20, 4));
    assert!(
        ungated
            .nodes
            .iter()
            .all(|g| g.instance_type != "c6i.xlarge")
    );
}

/// The node repair scenario: ten nodes, two of which stop reporting, then four more.
const REPAIR: &str = include_str!("../../deploy/scenarios/repair.yaml");

/// Upstream's node health controller end to end (gate NodeRepair): two of ten nodes
/// NotReady for 30 minutes are deleted forcefully and their pods replaced; four of ten are
/// more than the 20 % a NodePool may have unhealthy, so they are left, reported.
#[test]
fn unhealthy_nodes_are_repaired_unless_a_fifth_of_their_pool_is() {
    let scenario = parse(REPAIR, "repair").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gated = options(dir.path(), "e2e-repair");
    gated.settings.node_repair = true;
    let report = run(&scenario, &gated).unwrap();
    assert_eq!(
        (report.pods_bound, report.pods_pending),
        (10, 0),
        "{report:#?}"
    );
    let by_reason = &report.disruptions.by_reason;
    assert_eq!(by_reason.get("unhealthy"), Some(&2), "{by_reason:?}");
    // Two replaced; the four blocked stay (six healthy nodes beside them).
    assert_eq!(report.nodeclaims_launched, 12);
    assert_eq!(report.node_count, 10);
    assert!(
        report.disruptions.repair_blocked_events >= 4,
        "{:?}",
        report.disruptions
    );
    let verified = offerings::karpenter(&["journal", "verify", dir.path().to_str().unwrap()]);
    assert!(verified.contains(" 0 different"), "{verified}");

    // Without the gate (upstream's default) nothing is repaired.
    let other = tempfile::tempdir().unwrap();
    let ungated = run(&scenario, &options(other.path(), "e2e-repair-off")).unwrap();
    assert_eq!(ungated.disruptions.by_reason.get("unhealthy"), None);
    assert_eq!(ungated.nodeclaims_launched, 10);
}
