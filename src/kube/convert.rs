//! Kubernetes objects into the actors' terms, pure: nodes with what their pods use, the pods a
//! drain still has to deal with, the storage objects a pod's volumes name. The watchers and
//! the [`Cluster`](karpenter_core::ports::Cluster) implementation call these on what their
//! caches hold.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod as KubePod, Taint as KubeTaint,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_core::model::drain::{DrainAction, current_tier, drain_action};
use karpenter_core::model::pod::{label_selector_matches, pod_requests};
use karpenter_core::model::volumes::{StorageView, volume_attachments};
use karpenter_core::model::{Pod, Resources, Taint};
use karpenter_core::ports::{BoundPod, NodeInfo, PodToDrain};
use karpenter_core::vocab::labels;

/// Whether a pod still holds its node's resources: bound and neither finished nor gone.
pub fn occupies_node(pod: &KubePod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}

/// The node a pod is bound to.
pub fn node_of(pod: &KubePod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// The Node's provider id, when it has one.
pub fn provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
}

/// Whether the Node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The node's conditions node repair watches (`Ready` `Unknown`, …), with their last
/// transition (a condition without one counts from the epoch: long enough ago).
pub fn repair_conditions(node: &Node) -> Vec<karpenter_core::ports::NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| karpenter_core::disruption::repair::watched(&c.type_, &c.status))
        .map(|c| karpenter_core::ports::NodeCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            since_ms: c
                .last_transition_time
                .as_ref()
                .map_or(0, |t| t.0.as_millisecond()),
        })
        .collect()
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t: &KubeTaint| Taint::from(t))
        .collect()
}

/// The node as the scheduler sees it: its allocatable, labels and taints, and what the pods
/// bound to it request, select, bind and attach. Pods whose requests cannot be read count
/// as requesting nothing (kube-scheduler rejected them already; they are not ours to
/// judge), and CSI attach limits come from the node's CSINode.
pub fn node_info(
    node: &Node,
    pods: &[&KubePod],
    storage: &StorageView,
    csinode: Option<&CSINode>,
) -> NodeInfo {
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| {
            Resources::from_quantities(a.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
                .map(|(r, _)| r)
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let mut info = NodeInfo {
        name: node.metadata.name.clone().unwrap_or_default(),
        provider_id: provider_id(node).unwrap_or_default().to_owned(),
        labels: node.metadata.labels.clone().unwrap_or_default(),
        taints: taints(node),
        allocatable,
        requested: Resources::ZERO,
        daemon_requested: Resources::ZERO,
        pods: Vec::new(),
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        ready: is_ready(node),
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
    };
    for pod in pods.iter().filter(|p| occupies_node(p)) {
        if let Ok((requests, _)) = pod_requests(pod) {
            info.requested = info.requested.add(&requests);
            if owned_by_daemonset(pod) {
                info.daemon_requested = info.daemon_requested.add(&requests);
            }
        }
        if let Ok(model) = Pod::try_from(*pod) {
            info.anti_affinity
                .extend(karpenter_core::scheduling::anti_affinity_of(&model));
            info.host_ports.extend(model.host_ports.iter().cloned());
            info.pods.push((model.namespace, model.labels));
        }
        info.attached.extend(volume_attachments(pod, storage));
    }
    for driver in csinode.into_iter().flat_map(|c| c.spec.drivers.iter()) {
        if let Some(count) = driver.allocatable.as_ref().and_then(|a| a.count) {
            info.attach_limits
                .insert(driver.name.clone(), i64::from(count));
        }
    }
    info
}

/// What draining a node still has to deal with at `now_ms`, given the pods bound to it: the
/// current tier's pods to evict, and those to wait for (protected by
/// `karpenter.sh/do-not-disrupt`, or already terminating after an eviction).
pub fn pods_to_drain(pods: &[&KubePod], now_ms: i64) -> Vec<PodToDrain> {
    let actions: Vec<DrainAction> = pods.iter().map(|p| drain_action(p, now_ms)).collect();
    let Some(tier) = current_tier(&actions) else {
        return Vec::new();
    };
    pods.iter()
        .zip(&actions)
        .filter_map(|(pod, action)| {
            let wait = match action {
                DrainAction::Evict(t) if *t == tier => false,
                DrainAction::WaitFor(t) if *t == tier => true,
                _ => return None,
            };
            Some(PodToDrain {
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                wait: wait || pod.metadata.deletion_timestamp.is_some(),
            })
        })
        .collect()
}

/// Whether a DaemonSet owns the pod.
fn owned_by_daemonset(pod: &KubePod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
}

/// A pod bound to `node` as disruption sees it at `now_ms`: `model` is the pod as a round
/// would place it (or why it cannot be read: then it is `blocked`, and no simulation moves
/// it); it would have to move unless a drain leaves it (finished, mirror, tolerating the
/// disrupted taint), it belongs to a DaemonSet, or it is terminating already.
pub fn bound_pod(
    pod: &KubePod,
    node: &str,
    model: Result<Pod, String>,
    pdbs: &[&PodDisruptionBudget],
    now_ms: i64,
) -> BoundPod {
    let meta = &pod.metadata;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let model = model.unwrap_or_else(|error| {
        let mut blocked = Pod::simple(meta.uid.as_deref().unwrap_or_default(), 0, 0);
        blocked.namespace = namespace.clone();
        blocked.name = meta.name.clone().unwrap_or_default();
        blocked.blocked = Some(error);
        blocked
    });
    let reschedulable = !owned_by_daemonset(pod)
        && meta.deletion_timestamp.is_none()
        && !matches!(drain_action(pod, now_ms), DrainAction::Skip(_));
    let labels = meta.labels.clone().unwrap_or_default();
    let selecting = pdbs
        .iter()
        .filter(|pdb| pdb.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter(
            |pdb| match pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) {
                // A PDB without a selector selects nothing; one that cannot be read is taken
                // to select the pod, so it blocks rather than lets through.
                None => false,
                Some(selector) => label_selector_matches(selector, &labels).unwrap_or(true),
            },
        )
        .map(|pdb| pdb_key(pdb))
        .collect();
    BoundPod {
        node: node.to_owned(),
        pod: model,
        reschedulable,
        do_not_disrupt: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
            .cloned(),
        created_ms: meta
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        pdbs: selecting,
    }
}

/// A PDB's `namespace/name`.
pub fn pdb_key(pdb: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        pdb.metadata.namespace.as_deref().unwrap_or_default(),
        pdb.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The evictions a PDB allows now (`status.disruptionsAllowed`; none before its controller
/// has written a status).
pub fn pdb_allowed(pdb: &PodDisruptionBudget) -> i32 {
    pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed)
}

/// Whether an object is annotated `karpenter.sh/do-not-disrupt: "true"`.
pub fn protected(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
        .is_some_and(|v| v == "true")
}

/// The storage objects a pod's volumes name (its claims, their volumes and classes), looked
/// up with `claim`, `volume` and `class`; a name not found is left out, which the volume
/// topology reads as missing.
pub fn storage_for(
    pod: &KubePod,
    claim: impl Fn(&str, &str) -> Option<PersistentVolumeClaim>,
    volume: impl Fn(&str) -> Option<PersistentVolume>,
    class: impl Fn(&str) -> Option<StorageClass>,
) -> StorageView {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut view = StorageView::default();
    let names = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
        });
    for name in names {
        let Some(pvc) = claim(&namespace, &name) else {
            continue;
        };
        let spec = pvc.spec.as_ref();
        if let Some(pv) = spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty())
            .and_then(&volume)
        {
            let pv_class = pv.spec.as_ref().and_then(|s| s.storage_class_name.clone());
            if let Some(sc) = pv_class.as_deref().and_then(&class) {
                view.classes.insert(pv_class.unwrap_or_default(), sc);
            }
            view.volumes
                .insert(pv.metadata.name.clone().unwrap_or_default(), pv);
        }
        if let Some(class_name) = spec.and_then(|s| s.storage_class_name.clone())
            && let Some(sc) = class(&class_name)
        {
            view.classes.insert(class_name, sc);
        }
        view.claims.insert((namespace.clone(), name), pvc);
    }
    view
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn pod(value: serde_json::Value) -> KubePod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn disruption_sees_which_pods_move_and_which_pdbs_select_them() {
        let pdb = |name: &str, selector: serde_json::Value, allowed: i32| -> PodDisruptionBudget {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"selector": selector},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
            }))
            .unwrap()
        };
        let web = pdb("web", json!({"matchLabels": {"app": "web"}}), 1);
        let all = pdb("all", json!({}), 0);
        let mut none = pdb("none", json!({}), 3);
        none.spec.as_mut().unwrap().selector = None;
        let mut elsewhere = pdb("other-ns", json!({}), 3);
        elsewhere.metadata.namespace = Some("kube-system".into());
        let pdbs = [&web, &all, &none, &elsewhere];
        let running = pod(json!({
            "metadata": {"name": "web-1", "namespace": "default", "uid": "u1", "labels": {"app": "web"},
                         "annotations": {"karpenter.sh/do-not-disrupt": "10m"},
                         "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }));
        let bound = bound_pod(&running, "n1", Err("unreadable".into()), &pdbs, 0);
        assert!(bound.reschedulable);
        assert_eq!(bound.pdbs, ["default/web", "default/all"]);
        assert_eq!(bound.do_not_disrupt.as_deref(), Some("10m"));
        assert_eq!(bound.created_ms, Some(1_800_000_000_000));
        assert_eq!(bound.pod.blocked.as_deref(), Some("unreadable"));
        assert_eq!((pdb_allowed(&web), pdb_allowed(&all)), (1, 0));
        // DaemonSet pods and terminating pods stay or go with the node.
        let mut daemon = running.clone();
        daemon.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "x"}),
            )
            .unwrap(),
        ]);
        assert!(!bound_pod(&daemon, "n1", Ok(Pod::simple("u1", 1, 1)), &[], 0).reschedulable);
        let mut leaving = running;
        leaving.metadata.deletion_timestamp = leaving.metadata.creation_timestamp.clone();
        assert!(!bound_pod(&leaving, "n1", Ok(Pod::simple("u1", 1, 1)), &[], 0).reschedulable);
    }

    #[test]
    fn a_node_counts_what_its_running_pods_request() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "us-west-2a"}},
            "spec": {"providerID": "aws:///us-west-2a/i-1", "taints": [{"key": "a", "value": "b", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .unwrap();
        let running = pod(json!({
            "metadata": {"name": "a", "namespace": "web", "uid": "u1", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
        }));
        let finished = pod(json!({
            "metadata": {"name": "b", "namespace": "web", "uid": "u2"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
            "status": {"phase": "Succeeded"}
        }));
        let csinode: CSINode = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}}]}
        }))
        .unwrap();
        let logs = pod(json!({
            "metadata": {"name": "logs-x", "namespace": "kube-system", "uid": "u3",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logs", "uid": "d"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
        }));
        let info = node_info(
            &node,
            &[&running, &finished, &logs],
            &StorageView::default(),
            Some(&csinode),
        );
        assert_eq!(info.provider_id, "aws:///us-west-2a/i-1");
        assert!(info.ready);
        assert_eq!(info.taints.len(), 1);
        let pods = karpenter_core::model::ResourceName::Pods;
        assert_eq!(
            info.requested,
            Resources::cpu_memory(600, (1 << 30) + (128 << 20)).with(pods, 2)
        );
        assert_eq!(
            info.daemon_requested,
            Resources::cpu_memory(100, 128 << 20).with(pods, 1)
        );
        assert_eq!(
            info.allocatable
                .get(karpenter_core::model::ResourceName::Cpu),
            3920
        );
        assert_eq!(info.pods.len(), 2);
        assert_eq!(info.host_ports.len(), 1);
        assert_eq!(info.attach_limits["ebs.csi.aws.com"], 25);
    }

    #[test]
    fn a_drain_lists_only_the_current_tier() {
        let ordinary = pod(
            json!({"metadata": {"name": "web", "namespace": "d", "uid": "1"}, "spec": {"containers": []}}),
        );
        let daemon = pod(
            json!({"metadata": {"name": "ds", "namespace": "d", "uid": "2",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "x"}]}, "spec": {"containers": []}}),
        );
        let protected = pod(
            json!({"metadata": {"name": "p", "namespace": "d", "uid": "3",
            "annotations": {"karpenter.sh/do-not-disrupt": "true"}}, "spec": {"containers": []}}),
        );
        let leaving = pod(
            json!({"metadata": {"name": "l", "namespace": "d", "uid": "4",
            "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": []}}),
        );
        let listed = pods_to_drain(&[&ordinary, &daemon, &protected, &leaving], 0);
        let names: Vec<(&str, bool)> = listed.iter().map(|p| (p.name.as_str(), p.wait)).collect();
        assert_eq!(names, vec![("web", false), ("p", true), ("l", true)]);
        // Once the ordinary tier is gone the DaemonSet's pod is next; then nothing.
        let listed = pods_to_drain(&[&daemon], 0);
        assert_eq!(listed.len(), 1);
        assert!(!listed[0].wait);
        assert!(pods_to_drain(&[], 0).is_empty());
    }

    #[test]
    fn storage_follows_claims_to_volumes_and_classes() {
        let p = pod(
            json!({"metadata": {"name": "db", "namespace": "d"}, "spec": {"containers": [],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "gone", "persistentVolumeClaim": {"claimName": "missing"}}]}}),
        );
        let pvc: PersistentVolumeClaim =
            serde_json::from_value(json!({"metadata": {"name": "data", "namespace": "d"},
            "spec": {"volumeName": "pv-1", "storageClassName": "gp3"}}))
            .unwrap();
        let pv: PersistentVolume = serde_json::from_value(
            json!({"metadata": {"name": "pv-1"}, "spec": {"storageClassName": "gp3"}}),
        )
        .unwrap();
        let sc: StorageClass = serde_json::from_value(
            json!({"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"}),
        )
        .unwrap();
        let view = storage_for(
            &p,
            |ns, name| (ns == "d" && name == "data").then(|| pvc.clone()),
            |name| (name == "pv-1").then(|| pv.clone()),
            |name| (name == "gp3").then(|| sc.clone()),
        );
        assert_eq!(view.claims.len(), 1);
        assert_eq!(view.volumes.len(), 1);
        assert_eq!(view.classes.len(), 1);
    }
}
