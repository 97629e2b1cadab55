//! Drift the core judges from data it is given (the NodePool's static and requirements drift
//! is `api::nodeclaim::drift`; the node class's is the cloud's, `CloudProvider::drift`):
//! `InstanceTypeNotFound`, when the instance type a node runs as, or its offering (zone and
//! capacity type), is no longer in the catalog. As upstream, only nodes older than an hour
//! are judged, so a catalog that has not caught up with a fresh launch drifts nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::model::InstanceType;
use crate::ports::{Drift, Instance};

/// How old a node must be before its instance type's absence counts as drift.
pub const INSTANCE_TYPE_GRACE: Duration = Duration::from_secs(3600);

/// `InstanceTypeNotFound` when `instance` (launched at `launched_ms`) is older than
/// [`INSTANCE_TYPE_GRACE`] and its type or offering is missing from `catalog`.
pub fn instance_type_not_found(
    instance: &Instance,
    catalog: &[Arc<InstanceType>],
    launched_ms: i64,
    now_ms: i64,
) -> Option<Drift> {
    let grace = i64::try_from(INSTANCE_TYPE_GRACE.as_millis()).unwrap_or(i64::MAX);
    if now_ms.saturating_sub(launched_ms) < grace {
        return None;
    }
    let Some(instance_type) = catalog.iter().find(|t| t.name == instance.instance_type) else {
        return Some(Drift {
            reason: "InstanceTypeNotFound".into(),
            message: format!(
                "instance type {} is no longer offered for this NodePool",
                instance.instance_type
            ),
        });
    };
    let offered = instance_type
        .offerings
        .iter()
        .any(|o| o.zone == instance.zone && o.capacity_type == instance.capacity_type);
    (!offered).then(|| Drift {
        reason: "InstanceTypeNotFound".into(),
        message: format!(
            "{} is no longer offered as {} in {}",
            instance.instance_type, instance.capacity_type, instance.zone
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::test_support::catalog_type;
    use crate::model::CapacityType;
    use crate::ports::InstanceState;

    fn instance(instance_type: &str, zone: &str) -> Instance {
        Instance {
            id: "i-1".into(),
            provider_id: "aws:///a/i-1".into(),
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type: CapacityType::OnDemand,
            price: 0.1,
            image_id: "ami-1".into(),
            nodeclaim: "c".into(),
            nodepool: "p".into(),
            state: InstanceState::Running,
            launched_at_ms: None,
        }
    }

    #[test]
    fn a_type_or_offering_gone_drifts_only_nodes_older_than_an_hour() {
        let catalog = vec![catalog_type("m5.large", "us-west-2a")];
        let hour = 3_600_000;
        assert_eq!(
            instance_type_not_found(&instance("m5.large", "us-west-2a"), &catalog, 0, 2 * hour),
            None
        );
        let gone =
            instance_type_not_found(&instance("c5.large", "us-west-2a"), &catalog, 0, 2 * hour)
                .map(|d| d.reason);
        assert_eq!(gone.as_deref(), Some("InstanceTypeNotFound"));
        let zone_gone =
            instance_type_not_found(&instance("m5.large", "us-west-2b"), &catalog, 0, 2 * hour);
        assert!(zone_gone.is_some_and(|d| d.message.contains("us-west-2b")));
        // Younger than an hour: not judged.
        assert_eq!(
            instance_type_not_found(
                &instance("c5.large", "us-west-2a"),
                &catalog,
                hour,
                2 * hour - 1
            ),
            None
        );
    }
}
