//! The part of kube-controller-manager's node lifecycle controller a heartbeat needs: a Node
//! whose Lease in `kube-node-lease` has not been renewed for the monitor grace period
//! (kube-controller-manager's `--node-monitor-grace-period`, 40 s by default) has every
//! condition its kubelet reports set to `Unknown` (reason `NodeStatusUnknown`, "Kubelet
//! stopped posting node status.", the transition at that moment) and gets the
//! `node.kubernetes.io/unreachable` taint with both effects. Nodes without a Lease (those a
//! test registers itself) are left alone, as are Nodes already marked; a renewed Lease is
//! the kubelet's to report Ready again. Evictions the `NoExecute` taint would cause (the
//! taint manager) are not done.

use std::time::Duration;

use serde_json::{Value, json};

use crate::patch::merge;
use crate::resources::NODES;
use crate::store::Store;

/// The conditions a kubelet reports, which the controller sets to `Unknown`.
const KUBELET_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// The taint a Node whose kubelet stopped reporting gets.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// When the Lease of `node` was last renewed, if it has one.
fn renewed(store: &Store, leases: usize, node: &str) -> Option<jiff::Timestamp> {
    let lease = store.get(leases, "kube-node-lease", node).ok()?;
    lease["spec"]["renewTime"].as_str()?.parse().ok()
}

/// Whether the Node's `Ready` condition is `Unknown` already.
fn marked(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "Unknown")
    })
}

/// `node` as the controller leaves it once its kubelet stopped reporting at `now`.
fn unreachable(node: &Value, now: &str) -> Value {
    let mut out = node.clone();
    let mut conditions: Vec<Value> = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for type_ in KUBELET_CONDITIONS {
        let unknown = json!({
            "type": type_,
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastTransitionTime": now,
        });
        match conditions.iter_mut().find(|c| c["type"] == type_) {
            Some(c) => merge(c, &unknown),
            None if type_ == "Ready" => conditions.push(unknown),
            None => {}
        }
    }
    out["status"]["conditions"] = Value::Array(conditions);
    let mut taints: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for effect in ["NoSchedule", "NoExecute"] {
        if !taints
            .iter()
            .any(|t| t["key"] == UNREACHABLE_TAINT && t["effect"] == effect)
        {
            taints.push(json!({"key": UNREACHABLE_TAINT, "effect": effect, "timeAdded": now}));
        }
    }
    out["spec"]["taints"] = Value::Array(taints);
    out
}

/// Marks, at `now`, every Node whose Lease is older than `grace`.
pub fn check(store: &mut Store, now: jiff::Timestamp, grace: Duration) {
    let Some(leases) = store.find("coordination.k8s.io", "v1", "leases") else {
        return;
    };
    let grace = jiff::SignedDuration::try_from(grace).unwrap_or(jiff::SignedDuration::MAX);
    let stamp = now.to_string();
    let nodes = store.in_namespace(NODES, "");
    for node in nodes {
        let Some(name) = node["metadata"]["name"].as_str().map(str::to_owned) else {
            continue;
        };
        let Some(last) = renewed(store, leases, &name) else {
            continue;
        };
        if marked(&node) || now.duration_since(last) <= grace {
            continue;
        }
        let updated = unreachable(&node, &stamp);
        // The status, then (read again, as its version moved) the taints: the main
        // resource leaves status alone.
        let written = store
            .replace(NODES, "", &name, updated.clone(), true, Default::default())
            .and_then(|_| store.get(NODES, "", &name))
            .and_then(|mut fresh| {
                fresh["spec"]["taints"] = updated["spec"]["taints"].clone();
                store.replace(NODES, "", &name, fresh, false, Default::default())
            });
        if let Err(error) = written {
            tracing::warn!(node = %name, %error, "node lifecycle stand-in: marking the Node unreachable failed");
            continue;
        }
        tracing::info!(node = %name, "node lifecycle stand-in: the Node's kubelet stopped posting status; marked Unknown");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_whose_kubelet_stopped_reporting_is_unknown_and_tainted() {
        let node = json!({"metadata": {"name": "n"}, "spec": {}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "KernelReady", "status": "True"}
        ]}});
        let marked_node = unreachable(&node, "2026-01-01T01:00:00Z");
        assert!(marked(&marked_node));
        let conditions = marked_node["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions[0]["reason"], "NodeStatusUnknown");
        assert_eq!(conditions[0]["lastTransitionTime"], "2026-01-01T01:00:00Z");
        // A condition its kubelet does not report is not the controller's.
        assert_eq!(conditions[1]["status"], "True");
        let taints = marked_node["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 2);
        assert!(taints.iter().all(|t| t["key"] == UNREACHABLE_TAINT));
    }
}
