//! Node repair (upstream's `node.health` controller, gate `NodeRepair`), decided in each
//! disruption pass: a node whose condition has matched one of the cloud provider's repair
//! policies for the policy's toleration is deleted forcefully — outside budgets, whatever
//! `karpenter.sh/do-not-disrupt` says, its drain not waiting for PodDisruptionBudgets (its
//! terminationGracePeriod is taken as ended, as upstream's termination-timestamp annotation
//! of now does) — and its pods are replaced as any pending pods. Unless more of its
//! NodePool's nodes than 20 % (rounded up) match a policy at all: then nothing of the pool
//! is repaired and each due node gets a `NodeRepairBlocked` Event, as a fleet-wide problem
//! (a bad image, a zone down) is not one that deleting nodes fixes.
//!
//! AWS's policies ([`AWS_POLICIES`]): `Ready` `False` or `Unknown` for 30 minutes,
//! `AcceleratedHardwareReady` `False` for 10 minutes, and `StorageReady`,
//! `NetworkingReady`, `KernelReady` or `ContainerRuntimeReady` `False` for 30 minutes (the
//! last five are the node monitoring agent's). The adapters report only conditions some
//! policy matches ([`watched`]), with when they last changed.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{NodeSnapshot, Snapshot};
pub use crate::ports::NodeCondition;

/// The reason repaired NodeClaims are disrupted with (upstream's `UnhealthyReason`): a
/// forceful one.
pub const REASON: &str = crate::lifecycle::nodeclaim::disruption::FORCEFUL_REASON;

/// The share of a NodePool's nodes that may be unhealthy before repair stops.
pub const ALLOWED_UNHEALTHY_PERCENT: u64 = 20;

/// A condition a node must not hold for longer than `toleration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    /// Condition type.
    pub condition: &'static str,
    /// Its unhealthy status.
    pub status: &'static str,
    /// How long it may hold before the node is repaired.
    pub toleration: Duration,
}

const fn policy(condition: &'static str, status: &'static str, minutes: u64) -> RepairPolicy {
    RepairPolicy {
        condition,
        status,
        toleration: Duration::from_secs(minutes * 60),
    }
}

/// The AWS provider's repair policies.
pub const AWS_POLICIES: [RepairPolicy; 7] = [
    policy("Ready", "False", 30),
    policy("Ready", "Unknown", 30),
    policy("AcceleratedHardwareReady", "False", 10),
    policy("StorageReady", "False", 30),
    policy("NetworkingReady", "False", 30),
    policy("KernelReady", "False", 30),
    policy("ContainerRuntimeReady", "False", 30),
];

/// `policies` as a snapshot records them: `Type=Status` → toleration in ms.
pub fn recorded(policies: &[RepairPolicy]) -> BTreeMap<String, u64> {
    policies
        .iter()
        .map(|p| {
            let ms = u64::try_from(p.toleration.as_millis()).unwrap_or(u64::MAX);
            (format!("{}={}", p.condition, p.status), ms)
        })
        .collect()
}

/// The policies a snapshot recorded (those of [`AWS_POLICIES`] it names, with its
/// tolerations); `None` when the gate was off.
pub fn of_snapshot(snapshot: &Snapshot) -> Option<Vec<RepairPolicy>> {
    let recorded = snapshot.repair.as_ref()?;
    Some(
        AWS_POLICIES
            .iter()
            .filter_map(|p| {
                let ms = recorded.get(&format!("{}={}", p.condition, p.status))?;
                Some(RepairPolicy {
                    toleration: Duration::from_millis(*ms),
                    ..*p
                })
            })
            .collect(),
    )
}

/// Whether a node condition of `type_` at `status` matches one of the AWS policies (the
/// only conditions the adapters report).
pub fn watched(type_: &str, status: &str) -> bool {
    AWS_POLICIES
        .iter()
        .any(|p| p.condition == type_ && p.status == status)
}

/// A node to repair now.
#[derive(Debug, Clone, PartialEq)]
pub struct Repair {
    /// Its NodeClaim.
    pub nodeclaim: String,
    /// Its NodePool.
    pub nodepool: String,
    /// The condition that made it due (`Ready`, …), for the metric's `condition` label.
    pub condition: String,
    /// Its status.
    pub status: String,
}

/// A node due for repair that its NodePool's health holds back (`NodeRepairBlocked`).
#[derive(Debug, Clone, PartialEq)]
pub struct RepairBlocked {
    /// Its NodeClaim.
    pub nodeclaim: String,
    /// Its node.
    pub node: Option<String>,
    /// Its NodePool.
    pub nodepool: String,
    /// Why (upstream's words).
    pub message: String,
}

/// What repair decided in a pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepairPlan {
    /// Nodes to delete forcefully now.
    pub repair: Vec<Repair>,
    /// Nodes due whose NodePool has too many unhealthy nodes.
    pub blocked: Vec<RepairBlocked>,
    /// When the next node becomes due (ms), if one is unhealthy but not due yet.
    pub next_due_ms: Option<i64>,
}

/// The policy `condition` matches, if any.
fn matching(policies: &[RepairPolicy], condition: &NodeCondition) -> Option<RepairPolicy> {
    policies
        .iter()
        .find(|p| p.condition == condition.type_ && p.status == condition.status)
        .copied()
}

/// The node's unhealthy condition closest to (or furthest past) its toleration, with when
/// it is due.
fn due<'a>(policies: &[RepairPolicy], node: &'a NodeSnapshot) -> Option<(&'a NodeCondition, i64)> {
    node.conditions
        .iter()
        .filter_map(|c| {
            let policy = matching(policies, c)?;
            let toleration = i64::try_from(policy.toleration.as_millis()).unwrap_or(i64::MAX);
            Some((c, c.since_ms.saturating_add(toleration)))
        })
        .min_by_key(|(c, at)| (*at, c.type_.clone()))
}

/// How many of a pool's `total` nodes may be unhealthy: 20 %, rounded up.
pub fn allowed_unhealthy(total: usize) -> usize {
    (total * ALLOWED_UNHEALTHY_PERCENT as usize).div_ceil(100)
}

/// Repair over `snapshot`: nodes with a Node (not being deleted already) whose policy's
/// toleration has passed are repaired, unless their pool has more unhealthy nodes than
/// [`allowed_unhealthy`] of its nodes.
pub fn plan(snapshot: &Snapshot, policies: &[RepairPolicy]) -> RepairPlan {
    let mut out = RepairPlan::default();
    // Per pool: its nodes, and how many of them match a policy at all.
    let mut health: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for node in snapshot.nodes.iter().filter(|n| n.node.is_some()) {
        let entry = health.entry(node.nodepool.as_str()).or_default();
        entry.0 += 1;
        if node
            .conditions
            .iter()
            .any(|c| matching(policies, c).is_some())
        {
            entry.1 += 1;
        }
    }
    for node in snapshot.nodes.iter().filter(|n| n.node.is_some()) {
        let Some((condition, at)) = due(policies, node) else {
            continue;
        };
        if node.deleting() {
            continue;
        }
        if snapshot.now_ms < at {
            out.next_due_ms = Some(out.next_due_ms.map_or(at, |n| n.min(at)));
            continue;
        }
        let (total, unhealthy) = health
            .get(node.nodepool.as_str())
            .copied()
            .unwrap_or_default();
        if unhealthy > allowed_unhealthy(total) {
            out.blocked.push(RepairBlocked {
                nodeclaim: node.nodeclaim.clone(),
                node: node.node.clone(),
                nodepool: node.nodepool.clone(),
                message: format!(
                    "more than {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the nodepool ({unhealthy} of {total})"
                ),
            });
            continue;
        }
        out.repair.push(Repair {
            nodeclaim: node.nodeclaim.clone(),
            nodepool: node.nodepool.clone(),
            condition: condition.type_.clone(),
            status: condition.status.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests;
