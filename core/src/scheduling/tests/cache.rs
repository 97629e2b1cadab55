//! Rounds over a [`PoolCache`] decide as rounds without one, and reuse what an earlier round
//! over the same NodePools and catalogs worked out.

use super::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// A run of rounds sharing one cache, over a tainted pool with limits and a plain one,
    /// with and without zone spreads, decides every round as a round without the cache does,
    /// including after an offering became unavailable (a new instance type in the catalog).
    #[test]
    fn cached_rounds_decide_as_uncached_ones(
        rounds in prop::collection::vec(arb_mixed_pods(40), 1..4),
        unavailable in any::<bool>(),
    ) {
        let mut limited = pool("limited");
        limited.weight = 10;
        limited.limits.resources.insert(ResourceName::Cpu, 12_000);
        let pools = vec![limited, pool("default")];
        let cache = PoolCache::default();
        for (n, pods) in rounds.into_iter().enumerate() {
            let mut round = input(pods, pools.clone());
            if unavailable && n > 0 {
                let types = &mut round.nodepools[1].instance_types;
                let mut changed = (*types[0]).clone();
                changed.offerings[0].available = false;
                types[0] = Arc::new(changed);
            }
            prop_assert_eq!(solve_cached(&round, &cache), solve(&round));
        }
    }
}

/// The same NodePools over the same catalog reuse their catalog; a changed instance type or
/// DaemonSet makes another, and the cache keeps both.
#[test]
fn rounds_over_the_same_catalog_share_it() {
    let pools = vec![pool("default")];
    let cache = PoolCache::default();
    let round = input(pods("a", 5, 1000, 1), pools.clone());
    solve_cached(&round, &cache);
    assert_eq!(cache.len(), 1);
    let again = input(pods("b", 7, 500, 2), pools.clone());
    solve_cached(&again, &cache);
    assert_eq!(cache.len(), 1, "same pool, same catalog");
    let mut changed = again.clone();
    changed.nodepools[0].instance_types[0] = it("m.large", 2, 8, 0.11);
    solve_cached(&changed, &cache);
    assert_eq!(cache.len(), 2, "a changed instance type is another catalog");
    let mut daemons = again.clone();
    daemons.daemonsets = pods("ds", 1, 100, 0);
    assert_eq!(solve_cached(&daemons, &cache), solve(&daemons));
    assert_eq!(cache.len(), 3, "DaemonSets change what a pool's types hold");
    solve_cached(&again, &cache);
    assert_eq!(cache.len(), 3);
}
