//! `karpenter migrate`: reads a cluster, changes nothing.
//! - `from-karpenter --dry-run`: its NodePools, EC2NodeClasses, NodeClaims and unschedulable
//!   pods, and what taking it over would do ([`karpenter_core::migration`]);
//! - `from-cluster-autoscaler`: its Nodes, for the NodePools that would cover its node groups
//!   ([`karpenter_core::migration::cluster_autoscaler`]).

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::api::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_core::migration::cluster_autoscaler::NodeFacts;
use karpenter_core::migration::{FromKarpenter, from_karpenter};
use kube::{Api, Client};

/// Whether kube-scheduler marked the pod Unschedulable and it is bound nowhere.
fn unschedulable(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    let marked = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    !bound && marked && pod.metadata.deletion_timestamp.is_none()
}

/// Reads what the takeover depends on and plans it.
pub async fn plan_from_karpenter(client: &Client) -> anyhow::Result<FromKarpenter> {
    let params = Default::default();
    let pools = Api::<NodePool>::all(client.clone())
        .list(&params)
        .await
        .context("cannot list NodePools (are karpenter.sh/v1 CRDs installed?)")?
        .items;
    let classes = Api::<EC2NodeClass>::all(client.clone())
        .list(&params)
        .await
        .context("cannot list EC2NodeClasses (are karpenter.k8s.aws/v1 CRDs installed?)")?
        .items;
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&params)
        .await
        .context("cannot list NodeClaims")?
        .items;
    let pending = Api::<Pod>::all(client.clone())
        .list(&params)
        .await
        .context("cannot list pods")?
        .items
        .iter()
        .filter(|p| unschedulable(p))
        .count();
    Ok(from_karpenter(&pools, &classes, &claims, pending))
}

/// What a proposal reads of a Node.
pub fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: node.metadata.labels.clone().unwrap_or_default(),
        taints: node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(karpenter_core::model::Taint::from).collect())
            .unwrap_or_default(),
        os_image: node
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.os_image.clone()),
        provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
    }
}

/// Every Node of the cluster, as a proposal reads them.
pub async fn nodes(client: &Client) -> anyhow::Result<Vec<NodeFacts>> {
    Ok(Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .context("cannot list Nodes")?
        .items
        .iter()
        .map(node_facts)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_read_with_its_labels_taints_and_os_image() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ip-1", "labels": {"eks.amazonaws.com/nodegroup": "general"}},
            "spec": {"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}],
                "providerID": "aws:///us-west-2a/i-0123456789abcdef0"},
            "status": {"nodeInfo": {"osImage": "Amazon Linux 2023.6.20241031", "architecture": "amd64",
                "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
                "kubeletVersion": "", "machineID": "", "operatingSystem": "linux", "systemUUID": ""}}
        }))
        .unwrap();
        let facts = node_facts(&node);
        assert_eq!(facts.labels["eks.amazonaws.com/nodegroup"], "general");
        assert_eq!(facts.taints[0].key, "dedicated");
        assert_eq!(
            facts.os_image.as_deref(),
            Some("Amazon Linux 2023.6.20241031")
        );
        assert_eq!(
            facts.provider_id.as_deref(),
            Some("aws:///us-west-2a/i-0123456789abcdef0")
        );
    }
}
