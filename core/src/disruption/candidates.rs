//! Which nodes a method may disrupt, filtered as upstream filters candidates: the NodeClaim
//! has an initialized node, is not being deleted or held by a command, has no pods nominated
//! to it, its NodePool exists (static NodePools' nodes only for static drift), neither it nor its Node says `karpenter.sh/do-not-disrupt`,
//! no pod on it is protected by an active `do-not-disrupt` annotation, and every pod that
//! would have to move may be evicted under its PodDisruptionBudgets.
//!
//! Consolidation also leaves a node alone while a pod that would move has siblings (pods
//! of the same controller) the scheduler is still provisioning for: the workload is
//! scaling out, and moving its replicas now only churns what the next nodes will settle.
//! Upstream has no such rule; there a node that has been quiet for `consolidateAfter` is
//! consolidated even while its Deployment's other replicas wait for nodes, which is how its
//! performance suite reports pods disrupted during scale-out. Siblings found unschedulable
//! do not count, so a replica that fits nowhere never blocks consolidation for good.
//!
//! Eventual methods (drift) may take a node whose pods would block a graceful one when its
//! NodeClaim has a terminationGracePeriod: the drain waits for those pods until then.

use std::collections::BTreeMap;

use super::{Method, NodeSnapshot, Snapshot};
use crate::events::NodeClaimState;
use crate::model::drain::do_not_disrupt;

/// Why a node is not a candidate. `Display` is the message of the `DisruptionBlocked`
/// Event where one is due.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCandidate {
    /// Not registered or not initialized yet.
    #[error("node is not initialized")]
    NotInitialized,
    /// Being drained or terminated already.
    #[error("node is deleting or marked for deletion")]
    Deleting,
    /// A disruption command in flight holds it.
    #[error("node is part of a disruption command in flight")]
    InCommand,
    /// Pods nominated to it have not bound yet.
    #[error("node is nominated for pending pods")]
    Nominated,
    /// Its NodePool is gone.
    #[error("NodePool {0} not found")]
    NoNodePool(String),
    /// Its NodePool is static (only static drift replaces its nodes), or, for static drift,
    /// it is not.
    #[error("NodePool {0} is not disrupted by this method (static NodePools only by static drift)")]
    OtherMethod(String),
    /// `karpenter.sh/do-not-disrupt` on the Node or NodeClaim.
    #[error("disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation")]
    Annotated,
    /// A pod protected by `karpenter.sh/do-not-disrupt`.
    #[error("pod {0} has \"karpenter.sh/do-not-disrupt\" annotation")]
    ProtectedPod(String),
    /// A pod that would move has siblings still being provisioned for.
    #[error("pod {pod} has pending siblings of {owner} still being provisioned for")]
    ScalingOut {
        /// Pod `namespace/name`.
        pod: String,
        /// Its controller, `Kind/name`.
        owner: String,
    },
    /// A PodDisruptionBudget allows no eviction of a pod now.
    #[error("pdb {pdb} prevents pod evictions")]
    Pdb {
        /// The PDB, `namespace/name`.
        pdb: String,
    },
    /// A pod selected by more than one PodDisruptionBudget, which the Eviction API refuses.
    #[error(
        "pod {pod} is selected by multiple PodDisruptionBudgets ({pdbs}), which the Eviction API refuses"
    )]
    MultiplePdbs {
        /// Pod `namespace/name`.
        pod: String,
        /// The PDBs.
        pdbs: String,
    },
}

impl NotCandidate {
    /// Whether a `DisruptionBlocked` Event says so (as upstream's, only for what a person can
    /// change: annotations and PDBs).
    pub fn reported(&self) -> bool {
        matches!(
            self,
            NotCandidate::Annotated
                | NotCandidate::ProtectedPod(_)
                | NotCandidate::Pdb { .. }
                | NotCandidate::MultiplePdbs { .. }
        )
    }
}

/// Whether `node` may be disrupted by `method` now, or why not.
pub fn check(snapshot: &Snapshot, node: &NodeSnapshot, method: Method) -> Result<(), NotCandidate> {
    if node.deleting() {
        return Err(NotCandidate::Deleting);
    }
    if node.state != NodeClaimState::Initialized || node.node.is_none() {
        return Err(NotCandidate::NotInitialized);
    }
    if node.command.is_some() {
        return Err(NotCandidate::InCommand);
    }
    if node.nominated {
        return Err(NotCandidate::Nominated);
    }
    let Some(pool) = snapshot.pool(&node.nodepool) else {
        return Err(NotCandidate::NoNodePool(node.nodepool.clone()));
    };
    if pool.is_static() != (method == Method::StaticDrift) {
        return Err(NotCandidate::OtherMethod(node.nodepool.clone()));
    }
    if node.do_not_disrupt {
        return Err(NotCandidate::Annotated);
    }
    // Pods that block only until the terminationGracePeriod ends the drain do not block an
    // eventual method.
    if method.eventual() && node.termination_grace_period.is_some() {
        return Ok(());
    }
    for pod in &node.pods {
        let protected = pod.do_not_disrupt.as_deref().is_some_and(|value| {
            // An unreadable value protects nothing, as upstream (which reports it).
            do_not_disrupt(value, pod.created_ms, snapshot.now_ms).unwrap_or(false)
        });
        if protected {
            return Err(NotCandidate::ProtectedPod(pod.pod.key()));
        }
    }
    if matches!(
        method,
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
    ) && !snapshot.scaling_out.is_empty()
    {
        let scaling = node
            .reschedulable()
            .find(|p| (p.pod.owner_key()).is_some_and(|key| snapshot.scaling_out.contains(&key)));
        if let Some(p) = scaling {
            return Err(NotCandidate::ScalingOut {
                pod: p.pod.key(),
                owner: p.pod.owner.clone().unwrap_or_default(),
            });
        }
    }
    pdbs_allow(
        node.reschedulable().map(|p| (p.pod.key(), &p.pdbs)),
        &snapshot.pdbs,
    )
}

/// Whether every pod may be evicted now: each is selected by at most one PDB, and that PDB
/// allows an eviction.
fn pdbs_allow<'a>(
    pods: impl Iterator<Item = (String, &'a Vec<String>)>,
    allowed: &BTreeMap<String, i32>,
) -> Result<(), NotCandidate> {
    for (pod, pdbs) in pods {
        match pdbs.as_slice() {
            [] => {}
            [pdb] => {
                if allowed.get(pdb).copied().unwrap_or(0) <= 0 {
                    return Err(NotCandidate::Pdb { pdb: pdb.clone() });
                }
            }
            many => {
                return Err(NotCandidate::MultiplePdbs {
                    pod,
                    pdbs: many.join(", "),
                });
            }
        }
    }
    Ok(())
}

/// Every candidate of `method`, in snapshot order, and the nodes that are not, with why.
pub fn split(
    snapshot: &Snapshot,
    method: Method,
) -> (Vec<&NodeSnapshot>, Vec<(&NodeSnapshot, NotCandidate)>) {
    let mut candidates = Vec::new();
    let mut blocked = Vec::new();
    for node in &snapshot.nodes {
        match check(snapshot, node, method) {
            Ok(()) => candidates.push(node),
            Err(why) => blocked.push((node, why)),
        }
    }
    (candidates, blocked)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::disruption::CommandRole;
    use crate::disruption::test_support::{NOW, node, pod, snapshot};

    #[test]
    fn only_initialized_idle_unprotected_nodes_of_existing_pools_are_candidates() {
        let mut s = snapshot(vec![node("ok", "default", vec![])]);
        assert_eq!(check(&s, &s.nodes[0], Method::Emptiness), Ok(()));
        type Change = fn(&mut NodeSnapshot);
        let cases: Vec<(Change, NotCandidate)> = vec![
            (
                |n| n.state = NodeClaimState::Registered,
                NotCandidate::NotInitialized,
            ),
            (|n| n.node = None, NotCandidate::NotInitialized),
            (
                |n| n.state = NodeClaimState::Draining,
                NotCandidate::Deleting,
            ),
            (
                |n| n.command = Some(CommandRole::Replacement),
                NotCandidate::InCommand,
            ),
            (|n| n.nominated = true, NotCandidate::Nominated),
            (
                |n| n.nodepool = "gone".into(),
                NotCandidate::NoNodePool("gone".into()),
            ),
            (|n| n.do_not_disrupt = true, NotCandidate::Annotated),
        ];
        for (change, why) in cases {
            let mut n = s.nodes[0].clone();
            change(&mut n);
            assert_eq!(check(&s, &n, Method::Emptiness), Err(why));
        }
        s.nodes[0].pods.push(pod("web-1", true));
        assert_eq!(check(&s, &s.nodes[0], Method::Emptiness), Ok(()));
    }

    #[test]
    fn protected_pods_block_until_their_annotation_expires() {
        let mut protected = pod("db-0", true);
        protected.do_not_disrupt = Some("true".into());
        let s = snapshot(vec![node("n", "default", vec![protected.clone()])]);
        let why = check(&s, &s.nodes[0], Method::Emptiness).unwrap_err();
        assert_eq!(why, NotCandidate::ProtectedPod("default/db-0".into()));
        assert!(why.reported());
        assert_eq!(
            why.to_string(),
            "pod default/db-0 has \"karpenter.sh/do-not-disrupt\" annotation"
        );
        // A duration protects while the pod is younger than it.
        protected.do_not_disrupt = Some("10m".into());
        protected.created_ms = Some(NOW - 5 * 60_000);
        let s = snapshot(vec![node("n", "default", vec![protected.clone()])]);
        assert!(check(&s, &s.nodes[0], Method::Emptiness).is_err());
        protected.created_ms = Some(NOW - 11 * 60_000);
        let s = snapshot(vec![node("n", "default", vec![protected.clone()])]);
        assert_eq!(check(&s, &s.nodes[0], Method::Emptiness), Ok(()));
        // An unreadable value protects nothing.
        protected.do_not_disrupt = Some("forever".into());
        let s = snapshot(vec![node("n", "default", vec![protected])]);
        assert_eq!(check(&s, &s.nodes[0], Method::Emptiness), Ok(()));
    }

    #[test]
    fn pdbs_must_allow_every_eviction() {
        let mut guarded = pod("web-1", true);
        guarded.pdbs = vec!["default/web".into()];
        let mut s = snapshot(vec![node("n", "default", vec![guarded.clone()])]);
        s.pdbs.insert("default/web".into(), 0);
        let why = check(&s, &s.nodes[0], Method::Emptiness).unwrap_err();
        assert_eq!(why.to_string(), "pdb default/web prevents pod evictions");
        s.pdbs.insert("default/web".into(), 1);
        assert_eq!(check(&s, &s.nodes[0], Method::Emptiness), Ok(()));
        // Two PDBs on one pod: the Eviction API refuses it.
        s.nodes[0].pods[0].pdbs.push("default/all".into());
        s.pdbs.insert("default/all".into(), 5);
        assert!(matches!(
            check(&s, &s.nodes[0], Method::Emptiness),
            Err(NotCandidate::MultiplePdbs { .. })
        ));
        // A pod that does not move (a DaemonSet's) is not evicted by disruption.
        s.nodes[0].pods[0].reschedulable = false;
        assert_eq!(check(&s, &s.nodes[0], Method::Emptiness), Ok(()));
    }

    #[test]
    fn consolidation_leaves_pods_whose_workload_is_scaling_out() {
        let mut web = pod("web-1", true);
        web.pod.owner = Some("ReplicaSet/web".into());
        let mut s = snapshot(vec![node("n", "default", vec![web, pod("solo", true)])]);
        let consolidate = [
            Method::SingleNodeConsolidation,
            Method::MultiNodeConsolidation,
        ];
        for method in consolidate {
            assert_eq!(check(&s, &s.nodes[0], method), Ok(()));
        }
        s.scaling_out.insert("default/ReplicaSet/api".into());
        assert_eq!(
            check(&s, &s.nodes[0], Method::SingleNodeConsolidation),
            Ok(())
        );
        // The same controller in another namespace is another workload.
        s.scaling_out.insert("other/ReplicaSet/web".into());
        assert_eq!(
            check(&s, &s.nodes[0], Method::SingleNodeConsolidation),
            Ok(())
        );
        s.scaling_out.insert("default/ReplicaSet/web".into());
        for method in consolidate {
            let why = check(&s, &s.nodes[0], method).unwrap_err();
            assert_eq!(
                why.to_string(),
                "pod default/web-1 has pending siblings of ReplicaSet/web still being provisioned for"
            );
            assert!(!why.reported());
        }
        // Drift still replaces the node, and a pod that would not move does not count.
        assert_eq!(check(&s, &s.nodes[0], Method::Drift), Ok(()));
        s.nodes[0].pods[0].reschedulable = false;
        assert_eq!(
            check(&s, &s.nodes[0], Method::SingleNodeConsolidation),
            Ok(())
        );
    }

    #[test]
    fn drift_takes_blocked_nodes_when_a_grace_period_bounds_the_drain() {
        let mut protected = pod("db-0", true);
        protected.do_not_disrupt = Some("true".into());
        let mut s = snapshot(vec![node("n", "default", vec![protected])]);
        assert!(check(&s, &s.nodes[0], Method::Drift).is_err());
        s.nodes[0].termination_grace_period = Some(std::time::Duration::from_secs(600));
        assert_eq!(check(&s, &s.nodes[0], Method::Drift), Ok(()));
        assert!(check(&s, &s.nodes[0], Method::Emptiness).is_err());
        // Still never an annotated node.
        s.nodes[0].do_not_disrupt = true;
        assert_eq!(
            check(&s, &s.nodes[0], Method::Drift),
            Err(NotCandidate::Annotated)
        );
    }
}
