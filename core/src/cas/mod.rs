//! A model of Cluster Autoscaler's decisions, to run a workload under the node groups it
//! would have had and compare the bill (`simulate --cluster-autoscaler`, `journal whatif
//! --cluster-autoscaler`).
//!
//! What it models, with Cluster Autoscaler's defaults:
//! - **Node groups** ([`NodeGroup`]): one instance type and capacity type each, fixed zones,
//!   labels and taints, a minimum and a maximum size (an Auto Scaling group).
//! - **Scale-up** ([`scale_up`]), every scan (10 s): the pending pods that would not fit on
//!   the nodes there are or on the way are packed onto new nodes of each group alone (the
//!   binpacking estimator); the expander picks one group (`random` by default,
//!   `least-waste`, `most-pods`) and that group grows by the nodes its packing needed, up to
//!   its maximum. One group per scan; a group whose launch failed is backed off (5 minutes,
//!   doubling to 30).
//! - **Scale-down** ([`ScaleDown`]), in scans without a scale-up and not within 10 minutes
//!   of the last one (`scale-down-delay-after-add`) nor 3 of a failed one: a node whose
//!   requests (DaemonSets included) are under 50 % of its allocatable CPU and memory (GPU
//!   nodes: of their GPUs), whose pods may be evicted (no `do-not-disrupt` or
//!   `safe-to-evict: "false"`, PodDisruptionBudgets allowing) and would all fit on the other
//!   nodes, is unneeded; unneeded for 10 minutes, it is removed: up to 10 empty nodes at
//!   once, one non-empty node drained at a time, never below the group's minimum.
//!
//! Where it is kinder to Cluster Autoscaler than a real one: a group's new nodes land in the
//! zones the packing chose (as if every group were split per zone and balanced), and a
//! launch is known to fail at once (a real one waits for the Auto Scaling group, up to
//! `max-node-provision-time`). So the comparison errs in Cluster Autoscaler's favour.

mod groups;
mod scale_down;
mod scale_up;

pub use groups::{DerivedGroup, GroupsError, NodeGroup, derive_groups, groups_yaml, parse_groups};
pub use scale_down::{Candidate, NodeFacts, Removal, ScaleDown, ScaleDownInput};
pub use scale_up::{Expander, GroupOption, ScaleUp, ScaleUpInput, scale_up, upcoming_node};

use std::time::Duration;

/// Cluster Autoscaler's timing and thresholds (its flags' defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CasSettings {
    /// `--scan-interval`.
    pub scan_interval: Duration,
    /// `--scale-down-unneeded-time`.
    pub unneeded_time: Duration,
    /// `--scale-down-delay-after-add`.
    pub delay_after_add: Duration,
    /// `--scale-down-delay-after-failure`.
    pub delay_after_failure: Duration,
    /// `--scale-down-utilization-threshold`.
    pub utilization_threshold: f64,
    /// `--scale-down-gpu-utilization-threshold`.
    pub gpu_utilization_threshold: f64,
    /// `--max-empty-bulk-delete` / `--max-scale-down-parallelism`.
    pub max_empty_bulk_delete: usize,
    /// `--max-drain-parallelism`.
    pub max_drain_parallelism: usize,
    /// `--max-pod-eviction-time`: a drain whose pods cannot all be evicted by then fails.
    pub max_pod_eviction_time: Duration,
    /// `--initial-node-group-backoff-duration`.
    pub initial_backoff: Duration,
    /// `--max-node-group-backoff-duration`.
    pub max_backoff: Duration,
}

impl Default for CasSettings {
    fn default() -> Self {
        CasSettings {
            scan_interval: Duration::from_secs(10),
            unneeded_time: Duration::from_secs(600),
            delay_after_add: Duration::from_secs(600),
            delay_after_failure: Duration::from_secs(180),
            utilization_threshold: 0.5,
            gpu_utilization_threshold: 0.5,
            max_empty_bulk_delete: 10,
            max_drain_parallelism: 1,
            max_pod_eviction_time: Duration::from_secs(120),
            initial_backoff: Duration::from_secs(300),
            max_backoff: Duration::from_secs(1800),
        }
    }
}

/// Counts `pod` as bound to `node`: its requests, its labels (for topology spread), its
/// required anti-affinity and its host ports.
fn place(node: &mut crate::scheduling::ExistingNode, pod: &crate::model::Pod) {
    node.requested = node.requested.add(&pod.requests);
    node.pods.push((pod.namespace.clone(), pod.labels.clone()));
    node.anti_affinity
        .extend(crate::scheduling::anti_affinity_of(pod));
    node.host_ports.extend(pod.host_ports.iter().cloned());
}

#[cfg(test)]
mod tests;
