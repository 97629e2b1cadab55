//! How nodes are taken away on whole simulated runs: Balanced consolidation against
//! WhenEmptyOrUnderutilized.

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
