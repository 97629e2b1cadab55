//! `karpenter migrate from-karpenter --dry-run`: reads the cluster's NodePools,
//! EC2NodeClasses, NodeClaims and unschedulable pods, and says what taking it over would do
//! ([`karpenter_core::migration`]). Only reads.

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use karpenter_core::api::{EC2NodeClass, NodeClaim, NodePool};
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
