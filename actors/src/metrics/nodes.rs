//! Per-node gauges under upstream's names and labels: what each node can hold
//! (`karpenter_nodes_allocatable`) and what its pods and DaemonSet pods ask of it
//! (`karpenter_nodes_total_pod_requests`, `karpenter_nodes_total_daemon_requests`), each
//! labelled with the node's pool, instance type, capacity type, zone, architecture and OS,
//! as the dashboards filter them. Refreshed from the whole list of nodes at once, so a node
//! that left loses its series at the next refresh.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use karpenter_core::model::ResourceName;
use karpenter_core::ports::NodeInfo;
use karpenter_core::vocab::labels;

use super::{Labels, register, resource_value};

/// The nodepool label of a node no NodePool owns, as upstream writes it.
pub const NO_NODEPOOL: &str = "N/A";

/// Metric labels taken from the node's own labels.
const NODE_LABELS: [(&str, &str); 5] = [
    ("arch", labels::ARCH),
    ("capacity_type", labels::CAPACITY_TYPE),
    ("instance_type", labels::INSTANCE_TYPE),
    ("os", labels::OS),
    ("zone", labels::ZONE),
];

/// Resources every node reports; others only where it has some.
const ALWAYS: [ResourceName; 4] = [
    ResourceName::Cpu,
    ResourceName::Memory,
    ResourceName::Pods,
    ResourceName::EphemeralStorage,
];

type FloatGauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// The three per-node families and the label sets last written.
#[derive(Default)]
pub(super) struct NodeGauges {
    allocatable: FloatGauges,
    pod_requests: FloatGauges,
    daemon_requests: FloatGauges,
    written: Mutex<BTreeSet<Labels>>,
}

impl NodeGauges {
    pub(super) fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "karpenter_nodes_allocatable",
            "Node allocatable by resource type (CPU in cores).",
            self.allocatable.clone(),
        );
        register(
            registry,
            "karpenter_nodes_total_pod_requests",
            "Resources requested by the non-DaemonSet pods bound to a node (CPU in cores).",
            self.pod_requests.clone(),
        );
        register(
            registry,
            "karpenter_nodes_total_daemon_requests",
            "Resources requested by the DaemonSet pods bound to a node (CPU in cores).",
            self.daemon_requests.clone(),
        );
    }

    /// Every node's series as `nodes` says now; series of nodes not in it are removed.
    pub(super) fn set(&self, nodes: &[NodeInfo]) {
        // A poisoned lock only means a refresh panicked half-way; the next one rewrites all.
        let mut written = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut now = BTreeSet::new();
        for node in nodes {
            let pods = node.requested.sub(&node.daemon_requested);
            for r in resources(node) {
                let key = series_labels(node, r);
                self.allocatable
                    .get_or_create(&key)
                    .set(resource_value(r, node.allocatable.get(r)));
                self.pod_requests
                    .get_or_create(&key)
                    .set(resource_value(r, pods.get(r).max(0)));
                self.daemon_requests
                    .get_or_create(&key)
                    .set(resource_value(r, node.daemon_requested.get(r)));
                now.insert(key);
            }
        }
        for gone in written.difference(&now) {
            self.allocatable.remove(gone);
            self.pod_requests.remove(gone);
            self.daemon_requests.remove(gone);
        }
        *written = now;
    }
}

/// The resource types a node's series cover.
fn resources(node: &NodeInfo) -> impl Iterator<Item = ResourceName> + '_ {
    let extended = [ResourceName::NvidiaGpu]
        .into_iter()
        .filter(|r| node.allocatable.get(*r) > 0 || node.requested.get(*r) > 0);
    ALWAYS.into_iter().chain(extended)
}

/// `node_name`, `nodepool`, `resource_type` and the node's well-known labels.
fn series_labels(node: &NodeInfo, resource: ResourceName) -> Labels {
    let nodepool = node
        .labels
        .get(labels::NODEPOOL)
        .map_or(NO_NODEPOOL, String::as_str);
    let mut out: Labels = vec![
        ("node_name".to_owned(), node.name.clone()),
        ("nodepool".to_owned(), nodepool.to_owned()),
        ("resource_type".to_owned(), resource.as_str().to_owned()),
    ];
    for (label, key) in NODE_LABELS {
        let value = node.labels.get(key).cloned().unwrap_or_default();
        out.push((label.to_owned(), value));
    }
    out
}
