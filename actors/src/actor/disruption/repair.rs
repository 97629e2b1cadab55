//! Node repair as a pass carries it out (`NodeRepair` gate): each node the pass found due is
//! told to disrupt itself forcefully (reason `unhealthy`, once), counted in
//! `karpenter_nodeclaims_unhealthy_disrupted_total` by condition, NodePool, capacity type and
//! image; each due node its NodePool's health holds back gets a `NodeRepairBlocked` Event on
//! its Node, its NodeClaim and its NodePool, as upstream publishes it (deduplicated as
//! `DisruptionBlocked`).

use karpenter_core::disruption::repair::{AWS_POLICIES, REASON, RepairPlan, RepairPolicy};
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::ports::EventObject;
use tracing::{info, warn};

use super::{DisruptionState, Gathered, fresh_report};
use crate::actor::Settings;

/// The cloud's repair policies, each toleration replaced by the settings' when they set one.
pub(super) fn policies(settings: &Settings) -> Vec<RepairPolicy> {
    AWS_POLICIES
        .iter()
        .map(|p| RepairPolicy {
            toleration: settings.repair_toleration.unwrap_or(p.toleration),
            ..*p
        })
        .collect()
}

impl DisruptionState {
    /// Carries out a pass's repair plan.
    pub(super) fn repair(&mut self, gathered: &Gathered, plan: &RepairPlan) {
        let snapshot = &gathered.snapshot;
        for repair in &plan.repair {
            if !self.expiring.insert(repair.nodeclaim.clone()) {
                continue;
            }
            info!(nodeclaim = %repair.nodeclaim, nodepool = %repair.nodepool, condition = %repair.condition, status = %repair.status, "Node unhealthy past its repair policy; deleting it forcefully.");
            let node = snapshot
                .nodes
                .iter()
                .find(|n| n.nodeclaim == repair.nodeclaim);
            let capacity_type = node
                .and_then(|n| n.offering.as_ref())
                .map_or("", |o| o.capacity_type.as_str());
            let image = gathered
                .images
                .get(&repair.nodeclaim)
                .map_or("", String::as_str);
            self.ctx.metrics.unhealthy_disrupted(
                &repair.condition,
                &repair.nodepool,
                capacity_type,
                image,
            );
            self.tell(
                &repair.nodeclaim,
                Input::Disrupt {
                    reason: REASON.into(),
                },
            );
        }
        for blocked in &plan.blocked {
            if !fresh_report(
                &self.repair_blocked,
                &blocked.nodeclaim,
                &blocked.message,
                snapshot.now_ms,
            ) {
                continue;
            }
            warn!(nodeclaim = %blocked.nodeclaim, nodepool = %blocked.nodepool, message = %blocked.message, "Node repair blocked.");
            let objects = (blocked.node.iter().map(|n| EventObject::Node(n.clone()))).chain([
                EventObject::NodeClaim(blocked.nodeclaim.clone()),
                EventObject::NodePool(blocked.nodepool.clone()),
            ]);
            for object in objects {
                self.ctx
                    .cluster
                    .emit_event(&object, "NodeRepairBlocked", &blocked.message);
            }
            self.repair_blocked.insert(
                blocked.nodeclaim.clone(),
                (blocked.message.clone(), snapshot.now_ms),
            );
        }
        let live: std::collections::BTreeSet<&String> =
            snapshot.nodes.iter().map(|n| &n.nodeclaim).collect();
        self.repair_blocked.retain(|n, _| live.contains(n));
    }
}
