//! What draining a node does with each of its pods, and in which order, as upstream drains:
//! four tiers, each finished before the next starts.

use k8s_openapi::api::core::v1::Pod as KubePod;

use crate::vocab::duration::parse_duration;
use crate::vocab::labels;

/// Drain tiers in the order they are emptied: ordinary workloads first, so that critical
/// pods and DaemonSets (logging, networking) keep serving them until they are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DrainTier {
    /// Neither critical nor a DaemonSet's.
    NonCritical,
    /// A DaemonSet's, not critical.
    NonCriticalDaemon,
    /// `system-cluster-critical` or `system-node-critical`, not a DaemonSet's.
    Critical,
    /// Critical and a DaemonSet's.
    CriticalDaemon,
}

/// What a drain does with one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainAction {
    /// Evict it (through the Eviction API, so PodDisruptionBudgets hold) in its tier.
    Evict(DrainTier),
    /// Leave it, but wait for it to go: `karpenter.sh/do-not-disrupt` protects it (until the
    /// NodeClaim's terminationGracePeriod runs out).
    WaitFor(DrainTier),
    /// Not drained: why.
    Skip(&'static str),
}

/// Priority classes whose pods drain last.
const CRITICAL_PRIORITY_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];

/// A `karpenter.sh/do-not-disrupt` value that is neither `"true"` nor a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}={value:?} is neither \"true\" nor a duration like \"5m\"",
    labels::DO_NOT_DISRUPT
)]
pub struct InvalidDoNotDisrupt {
    /// The value.
    pub value: String,
}

/// Whether a `karpenter.sh/do-not-disrupt` value protects a pod created at `created_ms`, at
/// `now_ms`: `"true"` always, a duration while the pod is younger than it; `Err` for a value
/// that is neither (upstream ignores it, with an `InvalidDoNotDisruptAnnotation` event).
pub fn do_not_disrupt(
    value: &str,
    created_ms: Option<i64>,
    now_ms: i64,
) -> Result<bool, InvalidDoNotDisrupt> {
    if value == "true" {
        return Ok(true);
    }
    let duration = parse_duration(value).map_err(|_| InvalidDoNotDisrupt {
        value: value.to_owned(),
    })?;
    let age_ms = created_ms.map_or(0, |c| now_ms.saturating_sub(c));
    Ok(u128::try_from(age_ms).unwrap_or(0) < duration.as_millis())
}

/// What draining does with `pod` at `now_ms`.
pub fn drain_action(pod: &KubePod, now_ms: i64) -> DrainAction {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return DrainAction::Skip("finished");
    }
    let owners = meta.owner_references.iter().flatten();
    let mirror = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
        || owners.clone().any(|o| o.kind == "Node");
    if mirror {
        return DrainAction::Skip("a static pod's mirror");
    }
    let tolerates_disrupted = spec
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let key_matches = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(key) => key == labels::DISRUPTED_TAINT,
            };
            let effect_matches = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            key_matches && effect_matches
        });
    if tolerates_disrupted {
        return DrainAction::Skip("tolerates karpenter.sh/disrupted, so it would come back");
    }
    let daemon = owners.clone().any(|o| o.kind == "DaemonSet");
    let critical = spec
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|p| CRITICAL_PRIORITY_CLASSES.contains(&p));
    let tier = match (critical, daemon) {
        (false, false) => DrainTier::NonCritical,
        (false, true) => DrainTier::NonCriticalDaemon,
        (true, false) => DrainTier::Critical,
        (true, true) => DrainTier::CriticalDaemon,
    };
    let created_ms = meta
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond());
    let protected = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
        .is_some_and(|v| do_not_disrupt(v, created_ms, now_ms).unwrap_or(false));
    if protected {
        DrainAction::WaitFor(tier)
    } else {
        DrainAction::Evict(tier)
    }
}

/// The tier a drain is at: the first that still has a pod to evict or wait for; `None` once
/// the node is drained.
pub fn current_tier(actions: &[DrainAction]) -> Option<DrainTier> {
    actions
        .iter()
        .filter_map(|a| match a {
            DrainAction::Evict(t) | DrainAction::WaitFor(t) => Some(*t),
            DrainAction::Skip(_) => None,
        })
        .min()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::model::time::parse_rfc3339_ms;
    use crate::test_support::overlay;

    const NOW: i64 = 1_800_000_000_000;

    fn pod(extra: serde_json::Value) -> KubePod {
        let mut value = json!({
            "metadata": {"name": "p", "namespace": "default", "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        });
        overlay(&mut value, &extra);
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn pods_drain_in_four_tiers() {
        let daemon = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}});
        let critical = json!({"spec": {"priorityClassName": "system-node-critical"}});
        let mut both = daemon.clone();
        overlay(&mut both, &critical);
        let tiers: Vec<DrainAction> = [json!({}), daemon, critical, both]
            .into_iter()
            .map(|extra| drain_action(&pod(extra), NOW))
            .collect();
        assert_eq!(
            tiers,
            vec![
                DrainAction::Evict(DrainTier::NonCritical),
                DrainAction::Evict(DrainTier::NonCriticalDaemon),
                DrainAction::Evict(DrainTier::Critical),
                DrainAction::Evict(DrainTier::CriticalDaemon),
            ]
        );
        assert_eq!(current_tier(&tiers), Some(DrainTier::NonCritical));
        assert_eq!(current_tier(&tiers[2..]), Some(DrainTier::Critical));
        assert_eq!(current_tier(&[DrainAction::Skip("x")]), None);
    }

    #[test]
    fn finished_mirror_and_tolerating_pods_are_skipped() {
        for extra in [
            json!({"status": {"phase": "Succeeded"}}),
            json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}),
            json!({"spec": {"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}]}}),
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        ] {
            assert!(
                matches!(drain_action(&pod(extra.clone()), NOW), DrainAction::Skip(_)),
                "{extra}"
            );
        }
        // Tolerating another taint, or only NoExecute, does not skip it.
        let other = json!({"spec": {"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoExecute"}]}});
        assert_eq!(
            drain_action(&pod(other), NOW),
            DrainAction::Evict(DrainTier::NonCritical)
        );
    }

    #[test]
    fn do_not_disrupt_protects_for_good_or_for_a_while() {
        let annotated = |value: &str| {
            pod(json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": value}}}))
        };
        assert_eq!(
            drain_action(&annotated("true"), NOW),
            DrainAction::WaitFor(DrainTier::NonCritical)
        );
        let created = parse_rfc3339_ms("2027-01-15T08:00:00Z").unwrap();
        assert_eq!(
            drain_action(&annotated("5m"), created + 60_000),
            DrainAction::WaitFor(DrainTier::NonCritical)
        );
        assert_eq!(
            drain_action(&annotated("5m"), created + 600_000),
            DrainAction::Evict(DrainTier::NonCritical)
        );
        assert_eq!(
            drain_action(&annotated("soon"), NOW),
            DrainAction::Evict(DrainTier::NonCritical)
        );
        assert!(do_not_disrupt("soon", None, NOW).is_err());
        assert_eq!(do_not_disrupt("false", None, NOW).map_err(|_| ()), Err(()));
    }
}
