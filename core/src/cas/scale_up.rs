//! Scale-up: which node group grows, and by how many nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::NodeGroup;
use crate::model::taints::untolerated;
use crate::model::{Pod, ResourceName, Resources};
use crate::ports::Instance;
use crate::scheduling::{
    ExistingNode, Packing, PlannedNodeClaim, SchedulingInput, parse_choice, solve_with,
};
use crate::vocab::labels;

/// How Cluster Autoscaler picks among the groups that would help (`--expander`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Expander {
    /// Any of them, at random (Cluster Autoscaler's default).
    #[default]
    Random,
    /// The one leaving the least CPU and memory idle on its new nodes (ties at random).
    LeastWaste,
    /// The one placing the most pods (ties at random).
    MostPods,
}

impl std::str::FromStr for Expander {
    type Err = crate::scheduling::UnknownChoice;

    fn from_str(s: &str) -> Result<Self, crate::scheduling::UnknownChoice> {
        parse_choice(
            s,
            "expander",
            &[
                ("random", Expander::Random),
                ("least-waste", Expander::LeastWaste),
                ("most-pods", Expander::MostPods),
            ],
        )
    }
}

/// What one scan's scale-up looks at.
#[derive(Debug, Clone)]
pub struct ScaleUpInput<'a> {
    /// Pods kube-scheduler left unschedulable.
    pub pending: &'a [Pod],
    /// The node groups.
    pub groups: &'a [NodeGroup],
    /// Each group's target size now.
    pub sizes: &'a [usize],
    /// Groups backed off after a failed launch.
    pub backed_off: &'a [bool],
    /// The nodes there are and the ones on the way (launched, not Ready yet), with what is
    /// bound to them: pods that fit there wait for them.
    pub existing: Vec<Arc<ExistingNode>>,
    /// DaemonSet pod templates (overhead on every new node that tolerates them).
    pub daemonsets: &'a [Pod],
    /// How the group is picked.
    pub expander: Expander,
    /// Seed of the random choice (the scan's number, say), so a run can be repeated.
    pub seed: u64,
}

/// A group that would help, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupOption {
    /// The group's position in [`ScaleUpInput::groups`].
    pub group: usize,
    /// The new nodes, with the pods planned onto each.
    pub claims: Vec<PlannedNodeClaim>,
    /// Pods they would take.
    pub pods: usize,
    /// Idle fraction of the new nodes' CPU plus that of their memory (least-waste's score).
    pub waste: f64,
}

/// What a scan's scale-up decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScaleUp {
    /// Pods that fit on nodes there are or on the way.
    pub waiting: usize,
    /// Groups that would have helped.
    pub options: usize,
    /// The group to grow and its new nodes; `None` when no group helps.
    pub chosen: Option<GroupOption>,
    /// Pods no group can help, with why (UID, reason).
    pub helpless: Vec<(String, String)>,
}

/// One scan's scale-up: pods fitting on existing or upcoming nodes wait for them; the rest
/// are packed first-fit decreasing (Cluster Autoscaler's binpacking estimator) onto new nodes
/// of each group alone that is below its maximum and not backed off; the expander picks one.
pub fn scale_up(input: &ScaleUpInput<'_>) -> ScaleUp {
    let first = solve_with(
        &SchedulingInput {
            pods: input.pending.to_vec(),
            existing: input.existing.clone(),
            daemonsets: input.daemonsets.to_vec(),
            ..Default::default()
        },
        Packing::FirstFit,
    );
    let fits: BTreeSet<&str> = first.bindings.iter().map(|b| b.pod.as_str()).collect();
    // The nodes with the waiting pods on them: the rest must not count on that room.
    let pending: BTreeMap<&str, &Pod> = input.pending.iter().map(|p| (p.uid.as_str(), p)).collect();
    let mut changed: BTreeMap<&str, ExistingNode> = BTreeMap::new();
    for binding in &first.bindings {
        if let (Some(node), Some(pod)) = (
            input.existing.iter().find(|n| n.name == binding.node),
            pending.get(binding.pod.as_str()),
        ) {
            let node = changed
                .entry(node.name.as_str())
                .or_insert_with(|| (**node).clone());
            super::place(node, pod);
        }
    }
    let existing: Vec<Arc<ExistingNode>> = input
        .existing
        .iter()
        .map(|n| match changed.remove(n.name.as_str()) {
            Some(node) => Arc::new(node),
            None => n.clone(),
        })
        .collect();
    let round = |pods: Vec<Pod>, nodepools| SchedulingInput {
        pods,
        nodepools,
        existing: existing.clone(),
        daemonsets: input.daemonsets.to_vec(),
        ..Default::default()
    };
    let left: Vec<Pod> = input
        .pending
        .iter()
        .filter(|p| !fits.contains(p.uid.as_str()))
        .cloned()
        .collect();
    let mut out = ScaleUp {
        waiting: fits.len(),
        ..ScaleUp::default()
    };
    if left.is_empty() {
        return out;
    }
    let by_uid: BTreeMap<&str, &Pod> = left.iter().map(|p| (p.uid.as_str(), p)).collect();
    let mut options = Vec::new();
    let mut helped = BTreeSet::new();
    for (index, group) in input.groups.iter().enumerate() {
        let size = input.sizes.get(index).copied().unwrap_or(0);
        if input.backed_off.get(index).copied().unwrap_or(false) || size >= group.max_size {
            continue;
        }
        let result = solve_with(
            &round(left.clone(), vec![group.template(size)]),
            Packing::FirstFit,
        );
        if result.new_claims.is_empty() {
            continue;
        }
        let requested = result
            .new_claims
            .iter()
            .flat_map(|c| &c.pods)
            .filter_map(|uid| by_uid.get(uid.as_str()))
            .fold(Resources::ZERO, |acc, p| acc.add(&p.requests));
        let pods = result.new_claims.iter().map(|c| c.pods.len()).sum();
        helped.extend(result.new_claims.iter().flat_map(|c| c.pods.clone()));
        let nodes = result.new_claims.len() as f64;
        let idle = |r: ResourceName| {
            let capacity = group.instance_type.capacity.get(r) as f64 * nodes;
            if capacity > 0.0 {
                (capacity - requested.get(r) as f64) / capacity
            } else {
                0.0
            }
        };
        options.push(GroupOption {
            group: index,
            claims: result.new_claims,
            pods,
            waste: idle(ResourceName::Cpu) + idle(ResourceName::Memory),
        });
    }
    out.helpless = left
        .iter()
        .filter(|p| !helped.contains(&p.uid))
        .map(|p| (p.uid.clone(), helpless_reason(p, input)))
        .collect();
    out.options = options.len();
    out.chosen = expand(options, input.expander, input.seed);
    out
}

/// The expander's pick.
fn expand(options: Vec<GroupOption>, expander: Expander, seed: u64) -> Option<GroupOption> {
    let best: Vec<GroupOption> = match expander {
        Expander::Random => options,
        Expander::LeastWaste => {
            let least = options.iter().map(|o| o.waste).min_by(f64::total_cmp)?;
            options
                .into_iter()
                .filter(|o| (o.waste - least).abs() < 1e-9)
                .collect()
        }
        Expander::MostPods => {
            let most = options.iter().map(|o| o.pods).max()?;
            options.into_iter().filter(|o| o.pods == most).collect()
        }
    };
    if best.is_empty() {
        return None;
    }
    let pick = fastrand::Rng::with_seed(seed).usize(..best.len());
    best.into_iter().nth(pick)
}

/// Why no group can take `pod` (Cluster Autoscaler's `NotTriggerScaleUp`).
fn helpless_reason(pod: &Pod, input: &ScaleUpInput<'_>) -> String {
    let mut reasons = Vec::new();
    for (index, group) in input.groups.iter().enumerate() {
        let why = if input.backed_off.get(index).copied().unwrap_or(false) {
            "backed off after a failed launch".to_owned()
        } else if input.sizes.get(index).copied().unwrap_or(0) >= group.max_size {
            format!("at its maximum size {}", group.max_size)
        } else if let Some(t) = untolerated(&group.taints, &pod.tolerations) {
            format!("taint {}={}:{} not tolerated", t.key, t.value, t.effect)
        } else if !pod.requirement_alternatives().iter().any(|alt| {
            alt.compatible_with_template(&group.template(0).requirements)
                .is_ok()
        }) {
            "node selector or affinity not met".to_owned()
        } else {
            "does not fit its nodes".to_owned()
        };
        reasons.push(format!("{}: {why}", group.name));
    }
    format!(
        "pod didn't trigger scale-up: {}",
        if reasons.is_empty() {
            "no node groups".to_owned()
        } else {
            reasons.join("; ")
        }
    )
}

/// An instance of `group` that has not joined yet, as the node it will be: its type's
/// allocatable less the DaemonSets that tolerate the group's taints, its type's and the
/// group's labels, named `node`.
pub fn upcoming_node(
    node: &str,
    instance: &Instance,
    group: &NodeGroup,
    daemonsets: &[Pod],
) -> ExistingNode {
    let mut node_labels = instance.node_labels(Some(&group.instance_type));
    node_labels.extend(group.labels.clone());
    node_labels.insert(labels::HOSTNAME.into(), node.to_owned());
    let requested = daemonsets
        .iter()
        .filter(|ds| untolerated(&group.taints, &ds.tolerations).is_none())
        .fold(Resources::ZERO, |acc, ds| acc.add(&ds.requests));
    ExistingNode {
        name: node.to_owned(),
        labels: node_labels,
        taints: group.taints.clone(),
        allocatable: group.instance_type.allocatable(),
        requested,
        pods: Vec::new(),
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
    }
}
