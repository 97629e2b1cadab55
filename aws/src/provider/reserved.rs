//! The provider's bookkeeping of capacity reservations between two descriptions of them:
//! which reservation an instance runs in, launches made into one, and reservations EC2 said
//! were full. What reservations exist and how they are offered is in
//! [`crate::reservations`].

use std::collections::BTreeSet;

use karpenter_core::model::{Reservation, ReservationKind};
use karpenter_core::ports::{CloudError, CloudProvider, InstanceState};
use tracing::warn;

use super::AwsCloud;
use crate::ec2::InstanceInfo;
use crate::selection::FleetPlan;

impl AwsCloud {
    /// The cluster's running instances in a Capacity Block one of the node classes selects
    /// that is expiring ([`CapacityReservationInfo::expiring`](crate::reservations::CapacityReservationInfo::expiring)).
    /// Classes that cannot be resolved now are passed over (their blocks are looked at again
    /// in a minute).
    pub(super) async fn instances_in_expiring_blocks(&self) -> Result<Vec<String>, CloudError> {
        let now = super::now_ms();
        let mut expiring = BTreeSet::new();
        for name in self.node_class_names() {
            match self.resolve(&name).await {
                Ok(resolved) => expiring.extend(
                    (resolved.capacity_reservations.iter())
                        .filter(|r| r.expiring(now))
                        .map(|r| r.id.clone()),
                ),
                Err(error) => {
                    warn!(nodeclass = %name, %error, "Cannot resolve the EC2NodeClass to look for expiring Capacity Blocks.")
                }
            }
        }
        if expiring.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .list()
            .await?
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .filter(|i| (i.reservation.as_ref()).is_some_and(|r| expiring.contains(&r.id)))
            .map(|i| i.id)
            .collect())
    }

    /// The reservation an instance runs in, as rounds count it: a Capacity Block's, or an
    /// ODCR one of the node classes selects. An on-demand instance EC2 placed in some other
    /// `open` reservation is on-demand to karpenter-rs, as the NodeClaim that launched it
    /// asked.
    pub(super) fn reservation_of(&self, info: &InstanceInfo) -> Option<Reservation> {
        let (id, block) = info.capacity_reservation.as_ref()?;
        if *block {
            return Some(Reservation {
                id: id.clone(),
                kind: ReservationKind::CapacityBlock,
            });
        }
        let resolved = self.resolved.lock().ok()?;
        resolved
            .values()
            .flat_map(|entry| entry.resolved.capacity_reservations.iter())
            .find(|r| &r.id == id)
            .map(|r| r.reservation())
    }

    /// One instance launched into `reservation`: it takes one fewer until described again.
    pub(super) fn launched_into(&self, reservation: &Reservation) {
        if let Ok(mut usage) = self.reservation_use.lock() {
            usage.launched(&reservation.id);
        }
    }

    /// CreateFleet refused the plan's override for (`instance_type`, `zone`) with a
    /// capacity error: its reservation takes nothing more until it is described again.
    pub(super) fn reservation_failed(
        &self,
        plan: &FleetPlan,
        instance_type: &str,
        zone: &str,
        code: &str,
    ) {
        let reservation = plan
            .overrides
            .iter()
            .find(|o| o.instance_type == instance_type && o.zone == zone)
            .and_then(|o| o.reservation.as_ref());
        match (reservation, self.reservation_use.lock()) {
            (Some(reservation), Ok(mut usage)) => {
                warn!(reservation = %reservation.id, %instance_type, %zone, %code, "Capacity reservation refused a launch; not offered again until it is described again.");
                usage.exhausted(&reservation.id);
            }
            _ => {
                warn!(%instance_type, %zone, %code, "A reserved launch failed for an override the plan does not name.")
            }
        }
    }
}
