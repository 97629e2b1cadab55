//! Registration and initialization of a NodeClaim's Node, as upstream does them: what the
//! Node must look like once registered, and whether it has initialized.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::NodeClaim;
use crate::model::ResourceName;
use crate::model::quantity::Quantity;
use crate::vocab::labels;

/// The Node as registration leaves it: the fields to write, whole.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredNode {
    /// The Node's labels, the NodeClaim's laid over them, and `karpenter.sh/registered`.
    pub labels: BTreeMap<String, String>,
    /// The Node's annotations, the NodeClaim's laid over them.
    pub annotations: BTreeMap<String, String>,
    /// The Node's taints with the NodeClaim's added (its startup taints only at the first
    /// registration: whatever removes them must not see them come back), without
    /// `karpenter.sh/unregistered`.
    pub taints: Vec<Taint>,
    /// The Node's finalizers with `karpenter.sh/termination`.
    pub finalizers: Vec<String>,
    /// The Node's owner references with the NodeClaim's.
    pub owner_references: Vec<OwnerReference>,
    /// The Node came up without the `karpenter.sh/unregistered` taint (and was never
    /// registered): its startup configuration lacks it, so pods may have landed before the
    /// sync (upstream emits `UnregisteredTaintMissing`).
    pub unregistered_taint_missing: bool,
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect && a.value == b.value
}

/// What registering `node` for `claim` makes of it.
pub fn register(claim: &NodeClaim, node: &Node) -> RegisteredNode {
    let meta = &node.metadata;
    let already = meta
        .labels
        .as_ref()
        .is_some_and(|l| l.get(labels::REGISTERED).is_some_and(|v| v == "true"));
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let unregistered_taint_missing =
        !already && !taints.iter().any(|t| t.key == labels::UNREGISTERED_TAINT);
    let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
    let sync_taints = claim_labels
        .get(labels::DO_NOT_SYNC_TAINTS)
        .is_none_or(|v| v != "true");
    if sync_taints {
        let startup = claim.spec.startup_taints.iter().filter(|_| !already);
        for taint in claim.spec.taints.iter().chain(startup) {
            if !taints.iter().any(|t| same_taint(t, taint)) {
                taints.push(taint.clone());
            }
        }
    }
    taints.retain(|t| t.key != labels::UNREGISTERED_TAINT);
    let mut node_labels = meta.labels.clone().unwrap_or_default();
    node_labels.extend(claim_labels);
    node_labels.insert(labels::REGISTERED.to_owned(), "true".to_owned());
    let mut annotations = meta.annotations.clone().unwrap_or_default();
    annotations.extend(claim.metadata.annotations.clone().unwrap_or_default());
    let mut finalizers = meta.finalizers.clone().unwrap_or_default();
    if !finalizers
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
    }
    let owner = OwnerReference {
        api_version: "karpenter.sh/v1".to_owned(),
        kind: "NodeClaim".to_owned(),
        name: claim.metadata.name.clone().unwrap_or_default(),
        uid: claim.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };
    let mut owner_references = meta.owner_references.clone().unwrap_or_default();
    owner_references.retain(|o| o.uid != owner.uid);
    owner_references.push(owner);
    RegisteredNode {
        labels: node_labels,
        annotations,
        taints,
        finalizers,
        owner_references,
        unregistered_taint_missing,
    }
}

/// Why a registered Node has not initialized yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInitialized {
    /// Its `Ready` condition is not `True`.
    #[error("node is not Ready")]
    NotReady,
    /// A startup taint of the NodeClaim is still on it.
    #[error("startup taint {0:?} is still on the node")]
    StartupTaint(String),
    /// A taint that goes away on its own once the node is up is still on it.
    #[error("ephemeral taint {0:?} is still on the node")]
    EphemeralTaint(String),
    /// An extended resource the instance type has is not in the node's allocatable yet (its
    /// device plugin has not registered).
    #[error("resource {0:?} is not registered in the node's allocatable")]
    ResourceNotRegistered(String),
}

/// Whether `node` has initialized for `claim`, as upstream decides: Ready, none of the
/// NodeClaim's startup taints nor a known ephemeral taint left, and every extended resource
/// the NodeClaim's capacity lists present (non-zero) in the node's allocatable.
pub fn initialized(claim: &NodeClaim, node: &Node) -> Result<(), NotInitialized> {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return Err(NotInitialized::NotReady);
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if let Some(t) = claim
        .spec
        .startup_taints
        .iter()
        .find(|s| taints.iter().any(|t| same_taint(t, s)))
    {
        return Err(NotInitialized::StartupTaint(t.key.clone()));
    }
    if let Some(t) = taints
        .iter()
        .find(|t| labels::EPHEMERAL_TAINT_KEYS.contains(&t.key.as_str()))
    {
        return Err(NotInitialized::EphemeralTaint(t.key.clone()));
    }
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let capacity = claim.status.as_ref().map(|s| &s.capacity);
    let basic = [
        ResourceName::Cpu,
        ResourceName::Memory,
        ResourceName::Pods,
        ResourceName::EphemeralStorage,
    ];
    for (name, quantity) in capacity.into_iter().flatten() {
        if basic.iter().any(|b| b.as_str() == name) || !positive(&quantity.0) {
            continue;
        }
        let present = allocatable
            .and_then(|a| a.get(name))
            .is_some_and(|q| positive(&q.0));
        if !present {
            return Err(NotInitialized::ResourceNotRegistered(name.clone()));
        }
    }
    Ok(())
}

fn positive(quantity: &str) -> bool {
    Quantity::parse(quantity).is_ok_and(|q| q.units_ceil() > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::test_support::overlay;

    fn claim(extra: serde_json::Value) -> NodeClaim {
        let mut value = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "general-abcde", "uid": "claim-uid",
                "labels": {"karpenter.sh/nodepool": "general", "team": "web"},
                "annotations": {"karpenter.sh/nodepool-hash": "1"},
            },
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "cni-not-ready", "effect": "NoSchedule"}],
            },
            "status": {"capacity": {"cpu": "4", "nvidia.com/gpu": "1"}},
        });
        overlay(&mut value, &extra);
        serde_json::from_value(value).unwrap()
    }

    fn node(extra: serde_json::Value) -> Node {
        let mut value = json!({
            "metadata": {"name": "ip-10-0-0-1", "labels": {"kubernetes.io/hostname": "ip-10-0-0-1"}},
            "spec": {"providerID": "aws:///us-west-2a/i-1", "taints": [
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
            ]},
        });
        overlay(&mut value, &extra);
        serde_json::from_value(value).unwrap()
    }

    fn keys(taints: &[Taint]) -> Vec<&str> {
        taints.iter().map(|t| t.key.as_str()).collect()
    }

    #[test]
    fn registration_syncs_the_claim_onto_its_node() {
        let registered = register(&claim(json!({})), &node(json!({})));
        assert_eq!(registered.labels["team"], "web");
        assert_eq!(registered.labels[labels::REGISTERED], "true");
        assert_eq!(registered.labels["kubernetes.io/hostname"], "ip-10-0-0-1");
        assert_eq!(registered.annotations["karpenter.sh/nodepool-hash"], "1");
        assert_eq!(keys(&registered.taints), vec!["dedicated", "cni-not-ready"]);
        assert_eq!(registered.finalizers, vec![labels::TERMINATION_FINALIZER]);
        assert_eq!(registered.owner_references[0].kind, "NodeClaim");
        assert_eq!(registered.owner_references[0].uid, "claim-uid");
        assert!(!registered.unregistered_taint_missing);
    }

    #[test]
    fn startup_taints_are_not_restored_once_registered_and_sync_can_be_declined() {
        let registered_node = node(json!({
            "metadata": {"labels": {"karpenter.sh/registered": "true"}, "finalizers": ["karpenter.sh/termination"]},
            "spec": {"taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]},
        }));
        let again = register(&claim(json!({})), &registered_node);
        assert_eq!(keys(&again.taints), vec!["dedicated"]);
        assert_eq!(again.finalizers.len(), 1);
        assert!(!again.unregistered_taint_missing);
        let declined = register(
            &claim(json!({"metadata": {"labels": {labels::DO_NOT_SYNC_TAINTS: "true"}}})),
            &node(json!({})),
        );
        assert!(declined.taints.is_empty());
    }

    #[test]
    fn a_node_without_the_unregistered_taint_is_reported() {
        let bare = node(json!({"spec": {"taints": []}}));
        assert!(register(&claim(json!({})), &bare).unregistered_taint_missing);
    }

    #[test]
    fn initialization_waits_for_ready_taints_and_devices() {
        let ready = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "4", "nvidia.com/gpu": "1"},
        }, "spec": {"taints": []}});
        let claim = claim(json!({}));
        assert_eq!(initialized(&claim, &node(ready.clone())), Ok(()));
        assert_eq!(
            initialized(&claim, &node(json!({"spec": {"taints": []}}))),
            Err(NotInitialized::NotReady)
        );
        let mut startup = ready.clone();
        startup["spec"]["taints"] = json!([{"key": "cni-not-ready", "effect": "NoSchedule"}]);
        assert_eq!(
            initialized(&claim, &node(startup)),
            Err(NotInitialized::StartupTaint("cni-not-ready".into()))
        );
        let mut ephemeral = ready.clone();
        ephemeral["spec"]["taints"] =
            json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]);
        assert_eq!(
            initialized(&claim, &node(ephemeral)),
            Err(NotInitialized::EphemeralTaint(
                "node.kubernetes.io/not-ready".into()
            ))
        );
        let mut no_gpu = ready;
        no_gpu["status"]["allocatable"] = json!({"cpu": "4", "nvidia.com/gpu": "0"});
        assert_eq!(
            initialized(&claim, &node(no_gpu)),
            Err(NotInitialized::ResourceNotRegistered(
                "nvidia.com/gpu".into()
            ))
        );
    }
}
