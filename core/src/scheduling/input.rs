//! What a round is given: the pods, the NodePools with their instance types, the existing
//! nodes, the policies; and [`canonical`], the order the solver works in.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::pod::{HostPort, PodAffinityTerm};
use crate::model::volumes::VolumeAttachment;
use crate::model::{InstanceType, Pod, Requirements, ResourceName, Resources, Taint};

/// Limits of a NodePool; absent entries are unlimited.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Per-resource caps on the summed capacity of the pool's nodes.
    pub resources: BTreeMap<ResourceName, i64>,
    /// Cap on the number of nodes.
    pub nodes: Option<i64>,
}

/// A NodePool as one round sees it.
#[derive(Debug, Clone)]
pub struct NodePoolTemplate {
    /// Name.
    pub name: String,
    /// Higher is tried first.
    pub weight: i32,
    /// The pool's requirements intersected with its template labels.
    pub requirements: Requirements,
    /// Taints of its nodes (startup taints are not included: pods need not tolerate them).
    pub taints: Vec<Taint>,
    /// Taints its nodes start with and lose once initialized (`startupTaints`): a round
    /// ignores them on a node of the pool that has not been initialized yet.
    pub startup_taints: Vec<Taint>,
    /// Instance types the pool's node class can launch.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Limits.
    pub limits: Limits,
    /// Summed capacity of the pool's existing and in-flight nodes.
    pub usage: Resources,
    /// Number of existing and in-flight nodes.
    pub node_count: i64,
}

/// A pod's namespace and labels: what spread constraints count.
pub type PodLabels = (String, BTreeMap<String, String>);

/// A required pod anti-affinity term and the namespace of the pod that has it.
pub type AntiAffinityOf = (String, crate::model::pod::PodAffinityTerm);

/// The required anti-affinity terms of a pod, each with its namespace.
pub fn anti_affinity_of(pod: &Pod) -> impl Iterator<Item = AntiAffinityOf> + '_ {
    pod.pod_affinity
        .iter()
        .filter(|t| t.anti)
        .map(|t| (pod.namespace.clone(), t.clone()))
}

/// A node (or a launched NodeClaim not yet a node) pods can be bound to.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExistingNode {
    /// Node (or NodeClaim) name.
    pub name: String,
    /// Labels (for a launched NodeClaim: the labels its node will have).
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable.
    pub allocatable: Resources,
    /// Already requested by bound or nominated pods and daemonsets.
    pub requested: Resources,
    /// The pods on it (for topology spread).
    #[serde(default)]
    pub pods: Vec<PodLabels>,
    /// Required anti-affinity terms of the pods on it, which keep pods they select off it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anti_affinity: Vec<AntiAffinityOf>,
    /// Host ports its pods bind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// Per CSI driver, how many volumes it can have attached (CSINode `allocatable.count`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attach_limits: BTreeMap<String, i64>,
    /// Volumes its pods have attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached: Vec<VolumeAttachment>,
}

/// Whether pods' preferences (preferred node and pod affinity, `ScheduleAnyway` spreads)
/// are honoured where they can be (relaxed one at a time, in upstream's order, where they
/// cannot) or ignored (`--preference-policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PreferencePolicy {
    /// Honour them where possible.
    #[default]
    Respect,
    /// Ignore them.
    Ignore,
}

impl std::str::FromStr for PreferencePolicy {
    type Err = UnknownChoice;

    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        parse_choice(
            s,
            "preference policy",
            &[
                ("Respect", PreferencePolicy::Respect),
                ("Ignore", PreferencePolicy::Ignore),
            ],
        )
    }
}

/// A name that is none of a setting's choices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}; use {}", choices.join(" or "))]
pub struct UnknownChoice {
    /// What was being chosen (`preference policy`, `expander`, …).
    pub what: &'static str,
    /// The name given.
    pub given: String,
    /// The names it could have been.
    pub choices: Vec<&'static str>,
}

/// The choice named `s` (as written, or in lower case), or an error naming `what` and the
/// choices.
pub(crate) fn parse_choice<T: Copy>(
    s: &str,
    what: &'static str,
    choices: &[(&'static str, T)],
) -> Result<T, UnknownChoice> {
    choices
        .iter()
        .find(|(name, _)| *name == s || name.to_lowercase() == s)
        .map(|(_, value)| *value)
        .ok_or_else(|| UnknownChoice {
            what,
            given: s.to_owned(),
            choices: choices.iter().map(|(name, _)| *name).collect(),
        })
}

/// What to do when a NodeClaim cannot keep a requirement's `minValues` distinct values
/// (`--min-values-policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MinValuesPolicy {
    /// The pod stays unschedulable.
    #[default]
    Strict,
    /// As a pod's last attempt, the NodeClaim launches with what is left and is marked
    /// [`PlannedNodeClaim::min_values_relaxed`].
    BestEffort,
}

impl std::str::FromStr for MinValuesPolicy {
    type Err = UnknownChoice;

    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        parse_choice(
            s,
            "minValues policy",
            &[
                ("Strict", MinValuesPolicy::Strict),
                ("BestEffort", MinValuesPolicy::BestEffort),
            ],
        )
    }
}

/// A static NodePool (`spec.replicas`): a round launches the nodes it is short of, up to
/// its node limit, and plans no pod onto a new node of it (pods may use its nodes once
/// they exist, as any node).
#[derive(Debug, Clone)]
pub struct StaticPool {
    /// Its template; `node_count` counts every NodeClaim it has, deleting ones included.
    pub template: NodePoolTemplate,
    /// How many nodes it keeps.
    pub replicas: i64,
}

/// Everything one round needs.
#[derive(Debug, Clone, Default)]
pub struct SchedulingInput {
    /// Pods to place.
    pub pods: Vec<Pod>,
    /// NodePools that may create NodeClaims for pods.
    pub nodepools: Vec<NodePoolTemplate>,
    /// Static NodePools: never planned for pods.
    pub static_pools: Vec<StaticPool>,
    /// Nodes and launched NodeClaims with room.
    pub existing: Vec<Arc<ExistingNode>>,
    /// Pod templates of the DaemonSets, whose requests every compatible new node carries.
    pub daemonsets: Vec<Pod>,
    /// What to do with the pods' preferences.
    pub preference_policy: PreferencePolicy,
    /// What to do when minValues cannot be kept.
    pub min_values_policy: MinValuesPolicy,
    /// Labels of the cluster's namespaces, which pod affinity namespace selectors select.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// The input as the solver works on it: pods in UID order and existing nodes in name order,
/// so that no decision (every tie is broken by position) depends on the order the caller
/// listed them in; and every pod affinity `namespaceSelector` resolved, the namespaces it
/// selects added to the term's explicit list. Borrowed unchanged when already so.
pub(super) fn canonical(input: &SchedulingInput) -> Cow<'_, SchedulingInput> {
    fn has_selector<'a>(mut terms: impl Iterator<Item = &'a PodAffinityTerm>) -> bool {
        terms.any(|t| t.namespace_selector.is_some())
    }
    let needed = input.pods.iter().any(|p| {
        has_selector(
            p.pod_affinity
                .iter()
                .chain(p.preferred_pod_affinity.iter().map(|(_, t)| t)),
        )
    }) || input
        .existing
        .iter()
        .any(|n| has_selector(n.anti_affinity.iter().map(|(_, t)| t)));
    let in_order = input.pods.is_sorted_by(|a, b| a.uid <= b.uid)
        && input.existing.is_sorted_by(|a, b| a.name <= b.name);
    if !needed && in_order {
        return Cow::Borrowed(input);
    }
    let resolve = |term: &mut PodAffinityTerm| {
        if let Some(selector) = &term.namespace_selector {
            let selected = input
                .namespace_labels
                .iter()
                .filter(|(_, labels)| selector.matches(labels))
                .map(|(name, _)| name.clone());
            term.namespaces.extend(selected);
            term.namespaces.sort();
            term.namespaces.dedup();
        }
    };
    let mut resolved = input.clone();
    resolved.pods.sort_by(|a, b| a.uid.cmp(&b.uid));
    resolved.existing.sort_by(|a, b| a.name.cmp(&b.name));
    for pod in &mut resolved.pods {
        pod.pod_affinity.iter_mut().for_each(resolve);
        pod.preferred_pod_affinity
            .iter_mut()
            .for_each(|(_, t)| resolve(t));
    }
    for node in &mut resolved.existing {
        Arc::make_mut(node)
            .anti_affinity
            .iter_mut()
            .for_each(|(_, t)| resolve(t));
    }
    Cow::Owned(resolved)
}
