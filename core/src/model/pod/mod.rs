//! The scheduler's view of a pod, built from a Kubernetes Pod: [`Pod`] and its reading.
//! Its parts: [`ports`] (host ports), [`selectors`] (label selectors, topology spread, pod
//! affinity terms), [`requests`] (what it asks for) and [`provisionable`] (whether it is ours
//! to provision for).

mod ports;
mod provisionable;
mod requests;
mod selectors;

use ports::host_ports;
pub use ports::{HostPort, ports_conflict};
pub use provisionable::{NotProvisionable, provisionable};
pub use requests::{PodError, pod_requests};
pub use selectors::{
    NamespaceSelector, PodAffinityTerm, SelectorExpression, SelectorOperator, TopologySpread,
    label_selector_matches, selector_matches,
};

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod as KubePod, Toleration as KubeToleration};

use super::requirements::{Requirement, Requirements};
use super::resources::{ResourceName, Resources};
use super::taints::{Taint, Toleration, untolerated};
use crate::vocab::Operator;
use crate::vocab::labels::{LabelUse, label_restriction, normalize_label};

/// A pending pod, reduced to what scheduling needs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pod {
    /// Unique id (the Kubernetes UID).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Effective requests, including pod overhead and one `pods`.
    pub requests: Resources,
    /// `nodeSelector` as requirements.
    pub node_selector: Requirements,
    /// Required node affinity terms, ORed; empty when there are none.
    pub affinity_terms: Vec<Requirements>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints.
    #[serde(default)]
    pub spread: Vec<TopologySpread>,
    /// Required pod affinity and anti-affinity terms.
    #[serde(default)]
    pub pod_affinity: Vec<PodAffinityTerm>,
    /// Preferred node affinity terms with their weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_affinity: Vec<(i32, Requirements)>,
    /// Preferred pod affinity and anti-affinity terms with their weights.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_pod_affinity: Vec<(i32, PodAffinityTerm)>,
    /// Node requirements its persistent volumes add, as alternatives (any one will do);
    /// empty when they add none (see [`super::volumes::volume_requirements`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_requirements: Vec<Requirements>,
    /// Volumes it needs attached to its node, which count against CSI attach limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_attachments: Vec<super::volumes::VolumeAttachment>,
    /// Why no node can take it whatever the round decides (it selects a restricted label, or
    /// its volumes cannot be used), as found before scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    /// Host ports its containers bind: no two pods binding the same one share a node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_ports: Vec<HostPort>,
    /// Constraints this scheduler does not model; a pod with any is reported unschedulable
    /// with these named rather than placed while ignoring them.
    pub unsupported: Vec<String>,
    /// Resources requested that no instance type provides.
    pub unknown_resources: Vec<String>,
    /// `spec.priority`, as the API server's priority admission resolved it from
    /// `priorityClassName` (0 when neither is set).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
    /// The `controller.kubernetes.io/pod-deletion-cost` annotation (0 when absent or not an
    /// int32, as the ReplicaSet controller reads it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deletion_cost: i32,
    /// Its controller (the owner reference marked `controller: true`) as `Kind/name`: pods
    /// with the same one in a namespace are siblings, replicas of one workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `namespace/Kind/name` of its controller, which its siblings share.
    pub fn owner_key(&self) -> Option<String> {
        (self.owner.as_ref()).map(|owner| format!("{}/{owner}", self.namespace))
    }

    /// A pod requesting `cpu_millis` and `memory_bytes`, with nothing else (for tests and
    /// generated workloads).
    pub fn simple(uid: &str, cpu_millis: i64, memory_bytes: i64) -> Self {
        Pod {
            uid: uid.to_owned(),
            namespace: "default".to_owned(),
            name: uid.to_owned(),
            labels: BTreeMap::new(),
            requests: Resources::cpu_memory(cpu_millis, memory_bytes).with(ResourceName::Pods, 1),
            node_selector: Requirements::new(),
            affinity_terms: Vec::new(),
            tolerations: Vec::new(),
            spread: Vec::new(),
            pod_affinity: Vec::new(),
            preferred_node_affinity: Vec::new(),
            preferred_pod_affinity: Vec::new(),
            host_ports: Vec::new(),
            volume_requirements: Vec::new(),
            volume_attachments: Vec::new(),
            blocked: None,
            unsupported: Vec::new(),
            unknown_resources: Vec::new(),
            priority: 0,
            deletion_cost: 0,
            owner: None,
        }
    }

    /// What evicting it costs, as upstream weighs it: 1, plus its deletion cost over 2^27,
    /// plus its priority over 2^25, clamped to [-10, 10] (so a `system-node-critical` pod
    /// weighs 10 default ones, and a pod at the lowest priority or deletion cost below 0).
    pub fn eviction_cost(&self) -> f64 {
        let cost = 1.0
            + f64::from(self.deletion_cost) / f64::from(1u32 << 27)
            + f64::from(self.priority) / f64::from(1u32 << 25);
        cost.clamp(-10.0, 10.0)
    }

    /// Whether it states any preference a round may relax.
    pub fn has_preferences(&self) -> bool {
        !self.preferred_node_affinity.is_empty()
            || !self.preferred_pod_affinity.is_empty()
            || self.spread.iter().any(|s| s.schedule_anyway)
    }

    /// The pod without its preferences (`--preference-policy Ignore`).
    pub fn without_preferences(&self) -> Pod {
        let mut pod = self.clone();
        pod.preferred_node_affinity.clear();
        pod.preferred_pod_affinity.clear();
        pod.spread.retain(|s| !s.schedule_anyway);
        pod
    }

    /// The requirement sets the pod accepts: node selector ∩ each affinity term ∩ each of
    /// its volumes' alternatives (combinations that cannot hold are left out).
    pub fn requirement_alternatives(&self) -> Vec<Requirements> {
        let affinity = self.node_affinity_alternatives();
        if self.volume_requirements.is_empty() {
            return affinity;
        }
        let mut out = Vec::new();
        for alt in &affinity {
            for volumes in &self.volume_requirements {
                if alt.compatible(volumes).is_ok() {
                    let mut both = alt.clone();
                    both.intersect_with(volumes);
                    out.push(both);
                }
            }
        }
        out
    }

    /// Whether this pod of a DaemonSet runs on a node with these labels and taints, as the
    /// DaemonSet controller places it: the taints tolerated (`PreferNoSchedule` and the
    /// ephemeral ones aside) and one of its node-affinity alternatives matching the labels.
    pub fn daemon_runs_on(&self, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
        untolerated(taints, &self.tolerations).is_none()
            && self
                .node_affinity_alternatives()
                .iter()
                .any(|alt| alt.admits(labels))
    }

    /// Why the pod is not provisioned for because of a label it selects, as upstream's pod
    /// validation leaves such pods out: its node selector or a node affinity term (required or
    /// preferred) names a restricted label (`kubernetes.io/hostname`, or one of Karpenter's
    /// domains other than its well-known labels), which no NodeClaim may require.
    pub fn restricted_selection(&self) -> Option<String> {
        let mut keys = self
            .node_selector
            .iter()
            .chain(self.affinity_terms.iter().flat_map(Requirements::iter))
            .chain(
                self.preferred_node_affinity
                    .iter()
                    .flat_map(|(_, term)| term.iter()),
            )
            .map(|(key, _)| key);
        keys.find_map(|key| label_restriction(key, LabelUse::NodeClaim))
            .map(|restricted| {
                format!(
                    "{restricted}: pods that select it are not provisioned for; select a \
                     well-known label or a custom one outside the restricted domains"
                )
            })
    }

    /// Node selector ∩ each required node affinity term, without the volumes' requirements:
    /// what a spread's nodeAffinityPolicy filters nodes by.
    pub fn node_affinity_alternatives(&self) -> Vec<Requirements> {
        if self.affinity_terms.is_empty() {
            return vec![self.node_selector.clone()];
        }
        self.affinity_terms
            .iter()
            .map(|term| {
                let mut r = self.node_selector.clone();
                r.intersect_with(term);
                r
            })
            .collect()
    }

    /// Adds what its volumes require, or why they block it, from the storage objects the
    /// cluster holds.
    pub fn with_volume_topology(
        mut self,
        pod: &KubePod,
        storage: &super::volumes::StorageView,
    ) -> Pod {
        match super::volumes::volume_requirements(pod, storage) {
            Ok(requirements) => self.volume_requirements = requirements,
            Err(e) => self.blocked = Some(e.to_string()),
        }
        if self.blocked.is_none() && self.requirement_alternatives().is_empty() {
            self.blocked = Some(
                "its node selector and required node affinity exclude every topology its volumes allow"
                    .into(),
            );
        }
        self.volume_attachments = super::volumes::volume_attachments(pod, storage);
        self
    }

    /// Whether the pod asks for GPUs or accelerators.
    pub fn needs_exotic(&self) -> bool {
        ResourceName::ALL
            .into_iter()
            .any(|r| r.is_exotic() && self.requests.get(r) > 0)
    }
}

impl TryFrom<&KubePod> for Pod {
    type Error = PodError;

    fn try_from(pod: &KubePod) -> Result<Self, PodError> {
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let (requests, unknown_resources) =
            pod_requests(pod).map_err(|source| PodError::Quantity {
                pod: format!("{namespace}/{name}"),
                source,
            })?;
        let mut out = Pod {
            uid: pod
                .metadata
                .uid
                .clone()
                .unwrap_or_else(|| format!("{namespace}/{name}")),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            requests,
            node_selector: Requirements::new(),
            affinity_terms: Vec::new(),
            tolerations: Vec::new(),
            spread: Vec::new(),
            pod_affinity: Vec::new(),
            preferred_node_affinity: Vec::new(),
            preferred_pod_affinity: Vec::new(),
            host_ports: host_ports(pod.spec.as_ref()),
            volume_requirements: Vec::new(),
            volume_attachments: Vec::new(),
            blocked: None,
            unsupported: Vec::new(),
            unknown_resources,
            priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            deletion_cost: deletion_cost(pod),
            owner: controller(pod),
            namespace,
            name,
        };
        let Some(spec) = &pod.spec else {
            return Ok(out);
        };
        for (key, value) in spec.node_selector.iter().flatten() {
            out.node_selector
                .add(normalize_label(key), Requirement::is_in([value.clone()]));
        }
        out.tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .map(Toleration::from)
            .collect();
        if let Some(affinity) = &spec.affinity {
            let required = affinity.node_affinity.as_ref().and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
            for term in required
                .map(|r| r.node_selector_terms.as_slice())
                .unwrap_or_default()
            {
                match node_selector_term(term) {
                    Ok(reqs) => out.affinity_terms.push(reqs),
                    Err(what) => out.unsupported.push(what),
                }
            }
            let preferred = affinity.node_affinity.as_ref().and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            });
            // A preference we cannot model is dropped, as a relaxation would drop it.
            for term in preferred.into_iter().flatten() {
                if let Ok(reqs) = node_selector_term(&term.preference) {
                    out.preferred_node_affinity.push((term.weight, reqs));
                }
            }
            let weighted =
                |terms: Option<&Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>,
                 anti: bool| {
                    terms
                        .into_iter()
                        .flatten()
                        .filter_map(|t| {
                            PodAffinityTerm::from_kube(&t.pod_affinity_term, anti, &out.labels)
                                .ok()
                                .map(|term| (t.weight, term))
                        })
                        .collect::<Vec<_>>()
                };
            out.preferred_pod_affinity.extend(weighted(
                affinity.pod_affinity.as_ref().and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
                false,
            ));
            out.preferred_pod_affinity.extend(weighted(
                affinity.pod_anti_affinity.as_ref().and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                }),
                true,
            ));
            let required = |terms: Option<&Vec<k8s_openapi::api::core::v1::PodAffinityTerm>>| {
                terms.cloned().unwrap_or_default()
            };
            let affinity_terms = required(affinity.pod_affinity.as_ref().and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }));
            let anti_terms = required(affinity.pod_anti_affinity.as_ref().and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }));
            for (anti, terms) in [(false, affinity_terms), (true, anti_terms)] {
                for term in &terms {
                    match PodAffinityTerm::from_kube(term, anti, &out.labels) {
                        Ok(t) => out.pod_affinity.push(t),
                        Err(what) => out.unsupported.push(what),
                    }
                }
            }
        }
        for c in spec.topology_spread_constraints.iter().flatten() {
            match TopologySpread::from_kube(c, &out.labels) {
                Ok(spread) => out.spread.push(spread),
                Err(what) if c.when_unsatisfiable == "DoNotSchedule" => out.unsupported.push(what),
                // A preference we cannot model is dropped, as a relaxation would drop it.
                Err(_) => {}
            }
        }
        // Validated before any round, as upstream validates pending pods: the hostname
        // requirement rounds add to keep a pod off a node that refused it is not the pod's.
        out.blocked = out.restricted_selection();
        Ok(out)
    }
}

/// Its controlling owner reference as `Kind/name`.
fn controller(pod: &KubePod) -> Option<String> {
    let owners = pod.metadata.owner_references.iter().flatten();
    owners
        .filter(|o| o.controller == Some(true))
        .map(|o| format!("{}/{}", o.kind, o.name))
        .next()
}

/// Its `controller.kubernetes.io/pod-deletion-cost`, read as the ReplicaSet controller
/// reads it: an int32, anything else counting as none.
fn deletion_cost(pod: &KubePod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::vocab::labels::POD_DELETION_COST))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A node selector term as requirements, or the part this scheduler cannot model.
fn node_selector_term(
    term: &k8s_openapi::api::core::v1::NodeSelectorTerm,
) -> Result<Requirements, String> {
    if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
        return Err("node affinity matchFields".into());
    }
    let mut reqs = Requirements::new();
    for expr in term.match_expressions.iter().flatten() {
        let Some(op) = Operator::from_node_selector(&expr.operator) else {
            return Err(format!("node affinity operator {:?}", expr.operator));
        };
        reqs.add(
            normalize_label(&expr.key),
            Requirement::new(op, expr.values.as_deref().unwrap_or_default()),
        );
    }
    Ok(reqs)
}

impl From<&KubeToleration> for Toleration {
    fn from(t: &KubeToleration) -> Self {
        Toleration {
            key: t.key.clone().unwrap_or_default(),
            exists: t.operator.as_deref() == Some("Exists"),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests;
