//! Scale-down: which nodes are unneeded, and which of those go now.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{CasSettings, NodeGroup};
use crate::model::{Pod, ResourceName};
use crate::scheduling::{ExistingNode, Packing, SchedulingInput, solve_with};

/// A pod on a node scale-down looks at.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The pod.
    pub pod: Pod,
    /// It may not be evicted (`karpenter.sh/do-not-disrupt` or
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`).
    pub do_not_disrupt: bool,
    /// The PodDisruptionBudgets that select it (`namespace/name`).
    pub pdbs: Vec<String>,
}

/// A node as scale-down sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    /// The node, with everything bound to it counted as requested (DaemonSets too).
    pub node: Arc<ExistingNode>,
    /// Its group's position; `None` for nodes of no group, which are never removed.
    pub group: Option<usize>,
    /// Its pods other than DaemonSet pods.
    pub pods: Vec<Candidate>,
    /// Ready.
    pub ready: bool,
    /// Being drained or deleted already.
    pub deleting: bool,
}

impl NodeFacts {
    /// Cluster Autoscaler's utilization: requested over allocatable, the larger of CPU and
    /// memory (of GPUs on a GPU node), with the threshold that applies to it.
    fn utilization(&self, settings: &CasSettings) -> (f64, f64) {
        let (requested, allocatable) = (&self.node.requested, &self.node.allocatable);
        let share = |r: ResourceName| {
            let a = allocatable.get(r);
            if a > 0 {
                requested.get(r) as f64 / a as f64
            } else {
                0.0
            }
        };
        if allocatable.get(ResourceName::NvidiaGpu) > 0 {
            (
                share(ResourceName::NvidiaGpu),
                settings.gpu_utilization_threshold,
            )
        } else {
            (
                share(ResourceName::Cpu).max(share(ResourceName::Memory)),
                settings.utilization_threshold,
            )
        }
    }
}

/// What one scan's scale-down looks at.
#[derive(Debug, Clone)]
pub struct ScaleDownInput<'a> {
    /// Every node.
    pub nodes: &'a [NodeFacts],
    /// The node groups.
    pub groups: &'a [NodeGroup],
    /// Each group's target size now.
    pub sizes: &'a [usize],
    /// Evictions each PodDisruptionBudget allows now (`namespace/name`).
    pub pdbs: &'a BTreeMap<String, i32>,
    /// DaemonSet pod templates.
    pub daemonsets: &'a [Pod],
    /// Non-empty nodes being drained now.
    pub draining: usize,
    /// In a cool-down (after a scale-up or a failed removal): nodes are found unneeded and
    /// their time counts, but none is removed.
    pub cooling: bool,
    /// Now, ms.
    pub now_ms: i64,
}

/// A node to remove now.
#[derive(Debug, Clone, PartialEq)]
pub struct Removal {
    /// Node name.
    pub node: String,
    /// Its group's position.
    pub group: usize,
    /// It has no pods but DaemonSet pods (removed at once; the others are drained).
    pub empty: bool,
    /// Its utilization when found unneeded.
    pub utilization: f64,
}

/// Scale-down's memory between scans: since when each node has been unneeded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScaleDown {
    unneeded_since: BTreeMap<String, i64>,
}

impl ScaleDown {
    /// Nodes unneeded now.
    pub fn unneeded(&self) -> usize {
        self.unneeded_since.len()
    }

    /// Forgets every node's unneeded time (a scale-up happened, or the scan was skipped).
    pub fn reset(&mut self) {
        self.unneeded_since.clear();
    }

    /// One scan: finds the unneeded nodes (under the utilization threshold, every pod
    /// evictable and fitting on the nodes left, the group above its minimum; each node's
    /// pods are placed in the simulation before the next node is judged, so two nodes never
    /// count on the same room), and returns those unneeded long enough to go now: empty ones
    /// up to `max_empty_bulk_delete`, non-empty ones while fewer than
    /// `max_drain_parallelism` drain.
    pub fn scan(&mut self, input: &ScaleDownInput<'_>, settings: &CasSettings) -> Vec<Removal> {
        let unneeded = find_unneeded(input, settings);
        let now = input.now_ms;
        let before = std::mem::take(&mut self.unneeded_since);
        for (facts, _, _) in &unneeded {
            let name = &facts.node.name;
            let since = before.get(name).copied().unwrap_or(now);
            self.unneeded_since.insert(name.clone(), since);
        }
        let long_enough = i64::try_from(settings.unneeded_time.as_millis()).unwrap_or(i64::MAX);
        let mut out = Vec::new();
        if input.cooling {
            return out;
        }
        let mut drains = input.draining;
        for (facts, group, utilization) in unneeded {
            if out.len() >= settings.max_empty_bulk_delete {
                break;
            }
            let since = self
                .unneeded_since
                .get(&facts.node.name)
                .copied()
                .unwrap_or(now);
            if now - since < long_enough {
                continue;
            }
            let empty = facts.pods.is_empty();
            if !empty {
                if drains >= settings.max_drain_parallelism {
                    continue;
                }
                drains += 1;
            }
            self.unneeded_since.remove(&facts.node.name);
            out.push(Removal {
                node: facts.node.name.clone(),
                group,
                empty,
                utilization,
            });
        }
        out
    }
}

/// The unneeded nodes of one scan, each with its group and utilization: under the threshold,
/// every pod evictable and fitting on the nodes left (placed there before the next node is
/// judged), its group above its minimum.
fn find_unneeded<'a>(
    input: &ScaleDownInput<'a>,
    settings: &CasSettings,
) -> Vec<(&'a NodeFacts, usize, f64)> {
    let mut candidates: Vec<(&NodeFacts, usize, f64)> = input
        .nodes
        .iter()
        .filter(|n| n.ready && !n.deleting)
        .filter_map(|n| {
            let group = n.group?;
            let (utilization, threshold) = n.utilization(settings);
            (utilization < threshold).then_some((n, group, utilization))
        })
        .collect();
    candidates.sort_by(|a, b| {
        (!a.0.pods.is_empty())
            .cmp(&!b.0.pods.is_empty())
            .then(a.2.total_cmp(&b.2))
            .then(a.0.node.name.cmp(&b.0.node.name))
    });
    let mut snapshot: BTreeMap<String, Arc<ExistingNode>> = input
        .nodes
        .iter()
        .filter(|n| n.ready && !n.deleting)
        .map(|n| (n.node.name.clone(), n.node.clone()))
        .collect();
    let mut sizes: Vec<usize> = input.sizes.to_vec();
    let mut pdbs = input.pdbs.clone();
    let mut received = BTreeSet::new();
    let mut unneeded: Vec<(&NodeFacts, usize, f64)> = Vec::new();
    for (facts, group, utilization) in candidates {
        let name = &facts.node.name;
        let min = input.groups.get(group).map_or(0, |g| g.min_size);
        let kept = if sizes.get(group).is_none_or(|s| *s <= min) {
            Some("its group is at its minimum size")
        } else if received.contains(name) {
            Some("it takes pods of another unneeded node")
        } else if facts.pods.iter().any(|p| p.do_not_disrupt) {
            Some("a pod may not be disrupted")
        } else {
            None
        };
        if let Some(reason) = kept {
            tracing::debug!(node = %name, reason, "Not removable.");
            continue;
        }
        let mut per_pdb: BTreeMap<&str, i32> = BTreeMap::new();
        for pdb in facts.pods.iter().flat_map(|p| &p.pdbs) {
            *per_pdb.entry(pdb).or_default() += 1;
        }
        if per_pdb
            .iter()
            .any(|(pdb, n)| pdbs.get(*pdb).is_some_and(|left| left < n))
        {
            tracing::debug!(node = %name, reason = "a PodDisruptionBudget allows too few evictions", "Not removable.");
            continue;
        }
        if !facts.pods.is_empty() {
            let others: Vec<Arc<ExistingNode>> = snapshot
                .values()
                .filter(|n| &n.name != name)
                .cloned()
                .collect();
            let result = solve_with(
                &SchedulingInput {
                    pods: facts.pods.iter().map(|p| p.pod.clone()).collect(),
                    existing: others,
                    daemonsets: input.daemonsets.to_vec(),
                    ..Default::default()
                },
                Packing::FirstFit,
            );
            if let Some(pod) = result.unschedulable.first() {
                tracing::debug!(node = %name, pod = %pod.pod, why = %pod.reason, "Not removable: a pod fits nowhere else.");
                continue;
            }
            let pods: BTreeMap<&str, &Pod> = facts
                .pods
                .iter()
                .map(|p| (p.pod.uid.as_str(), &p.pod))
                .collect();
            for binding in &result.bindings {
                if let (Some(target), Some(pod)) = (
                    snapshot.get_mut(&binding.node),
                    pods.get(binding.pod.as_str()),
                ) {
                    super::place(Arc::make_mut(target), pod);
                    received.insert(binding.node.clone());
                }
            }
        }
        for (pdb, n) in per_pdb {
            if let Some(left) = pdbs.get_mut(pdb) {
                *left -= n;
            }
        }
        snapshot.remove(name);
        if let Some(size) = sizes.get_mut(group) {
            *size -= 1;
        }
        unneeded.push((facts, group, utilization));
    }
    unneeded
}
