//! Whether a pod is one the autoscaler provisions capacity for, as upstream decides it.

use k8s_openapi::api::core::v1::Pod as KubePod;

/// Why a pod is not one the autoscaler provisions capacity for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotProvisionable {
    /// Already bound to a node (`spec.nodeName`).
    #[error("bound to a node")]
    Bound,
    /// kube-scheduler has not reported it unschedulable (`PodScheduled=False`, reason
    /// `Unschedulable`): it may still fit existing nodes.
    #[error("kube-scheduler has not marked it Unschedulable")]
    NotUnschedulable,
    /// Nominated to a node (`status.nominatedNodeName`): it is preempting pods there.
    #[error("nominated to a node, preempting pods there")]
    Preempting,
    /// Owned by a DaemonSet, which places it on nodes itself.
    #[error("owned by a DaemonSet")]
    DaemonSet,
    /// Owned by a Node (a static pod's mirror).
    #[error("owned by a Node")]
    NodeOwned,
    /// Being deleted, or already finished (`Succeeded`/`Failed`).
    #[error("terminating or finished")]
    Terminating,
    /// Its node affinity asks for nodes without `karpenter.sh/nodepool`: not ours to serve.
    #[error("opted out (requires karpenter.sh/nodepool DoesNotExist)")]
    OptedOut,
}

/// Whether the autoscaler provisions for this pod, as upstream decides it: kube-scheduler
/// found no node for it, it is unbound and not preempting, not a DaemonSet's or a node's, not
/// terminating, and not opted out by a `karpenter.sh/nodepool DoesNotExist` requirement.
pub fn provisionable(pod: &KubePod) -> Result<(), NotProvisionable> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    if spec
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return Err(NotProvisionable::Bound);
    }
    if pod.metadata.deletion_timestamp.is_some()
        || status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
    {
        return Err(NotProvisionable::Terminating);
    }
    if status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return Err(NotProvisionable::Preempting);
    }
    for owner in pod.metadata.owner_references.iter().flatten() {
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("apps/v1", "DaemonSet") => return Err(NotProvisionable::DaemonSet),
            ("v1", "Node") => return Err(NotProvisionable::NodeOwned),
            _ => {}
        }
    }
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    if !unschedulable {
        return Err(NotProvisionable::NotUnschedulable);
    }
    let opted_out = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|required| {
            // Opted out when every alternative term excludes NodePool nodes.
            !required.node_selector_terms.is_empty()
                && required.node_selector_terms.iter().all(|term| {
                    term.match_expressions.iter().flatten().any(|e| {
                        e.key == crate::vocab::labels::NODEPOOL && e.operator == "DoesNotExist"
                    })
                })
        });
    if opted_out {
        return Err(NotProvisionable::OptedOut);
    }
    Ok(())
}
