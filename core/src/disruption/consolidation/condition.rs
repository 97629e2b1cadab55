//! The NodeClaim `Consolidatable` condition, as upstream sets it: True once its NodePool's
//! `consolidateAfter` has passed since a pod last bound to or left its node (or, when none
//! has, since it initialized); absent before then, before it initializes, and whenever
//! `consolidateAfter` is `Never`.

use std::time::Duration;

use crate::disruption::{NodeSnapshot, Snapshot};

/// The condition's type.
pub const CONDITION: &str = "Consolidatable";

/// What the condition is for one NodeClaim now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consolidatable {
    /// True.
    Yes,
    /// Absent until then (ms since the Unix epoch): look again at that moment.
    From(i64),
    /// Absent: not initialized, or `consolidateAfter: Never`.
    No,
}

impl Consolidatable {
    /// Whether the condition is True.
    pub fn is_true(self) -> bool {
        self == Consolidatable::Yes
    }
}

/// `node`'s condition in `snapshot`, under its pool's `consolidateAfter`.
pub fn of(snapshot: &Snapshot, node: &NodeSnapshot) -> Consolidatable {
    let after = snapshot
        .pool(&node.nodepool)
        .and_then(|p| p.consolidate_after);
    consolidatable(
        after,
        node.initialized_ms,
        node.last_pod_event_ms,
        snapshot.now_ms,
    )
}

/// The condition for a NodeClaim initialized at `initialized_ms` whose node last saw a pod
/// come or go at `last_pod_event_ms`, under `consolidate_after` (`None` is `Never`).
pub fn consolidatable(
    consolidate_after: Option<Duration>,
    initialized_ms: Option<i64>,
    last_pod_event_ms: Option<i64>,
    now_ms: i64,
) -> Consolidatable {
    let (Some(after), Some(initialized)) = (consolidate_after, initialized_ms) else {
        return Consolidatable::No;
    };
    let since = last_pod_event_ms.unwrap_or(initialized);
    let at = since.saturating_add(i64::try_from(after.as_millis()).unwrap_or(i64::MAX));
    if now_ms >= at {
        Consolidatable::Yes
    } else {
        Consolidatable::From(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn consolidate_after_counts_from_the_last_pod_event_or_initialization() {
        let after = Some(Duration::from_secs(300));
        assert_eq!(consolidatable(after, None, None, 0), Consolidatable::No);
        assert_eq!(
            consolidatable(None, Some(0), None, 99 * MIN),
            Consolidatable::No
        );
        assert_eq!(
            consolidatable(after, Some(0), None, 4 * MIN),
            Consolidatable::From(5 * MIN)
        );
        assert_eq!(
            consolidatable(after, Some(0), None, 5 * MIN),
            Consolidatable::Yes
        );
        assert_eq!(
            consolidatable(after, Some(0), Some(3 * MIN), 5 * MIN),
            Consolidatable::From(8 * MIN)
        );
        assert!(consolidatable(after, Some(0), Some(3 * MIN), 8 * MIN).is_true());
        // 0s: at once.
        assert!(consolidatable(Some(Duration::ZERO), Some(7), None, 7).is_true());
    }
}
