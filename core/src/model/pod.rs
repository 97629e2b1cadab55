//! The scheduler's view of a pod, built from a Kubernetes Pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod as KubePod, Toleration as KubeToleration};

use super::quantity::QuantityError;
use super::requirements::{Requirement, Requirements};
use super::resources::{ResourceName, Resources};
use super::taints::Toleration;
use crate::vocab::Operator;
use crate::vocab::labels::normalize_label;

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
    /// Why no node can take it whatever the round decides (its volumes cannot be used), as
    /// found before scheduling.
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
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
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
        }
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

/// A host port a container binds (`hostPort`, with its protocol and host IP).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct HostPort {
    /// Host IP; `0.0.0.0` (every address) when unset.
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// Port number.
    pub port: i32,
}

impl HostPort {
    const EVERY_ADDRESS: &str = "0.0.0.0";

    /// Whether two pods binding these could not share a node: same port and protocol, and
    /// the same address or either on every address (kube-scheduler's NodePorts check).
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip
                || self.ip == Self::EVERY_ADDRESS
                || other.ip == Self::EVERY_ADDRESS)
    }
}

/// Whether any port of `a` conflicts with any of `b`.
pub fn ports_conflict(a: &[HostPort], b: &[HostPort]) -> bool {
    a.iter().any(|p| b.iter().any(|q| p.conflicts_with(q)))
}

/// The host ports a pod's containers and init containers bind.
fn host_ports(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Vec<HostPort> {
    let Some(spec) = spec else {
        return Vec::new();
    };
    let mut out: Vec<HostPort> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|port| *port > 0)?;
            Some(HostPort {
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| HostPort::EVERY_ADDRESS.to_owned()),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                port,
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A `matchExpressions` entry of a pod label selector.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct SelectorExpression {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: SelectorOperator,
    /// Values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The operators of a pod label selector expression.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum SelectorOperator {
    /// The label is set to one of the values.
    In,
    /// The label is absent or set to none of the values.
    NotIn,
    /// The label is set.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl SelectorExpression {
    fn from_kube(
        e: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement,
    ) -> Result<Self, String> {
        let operator = match e.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => return Err(format!("label selector operator {other:?}")),
        };
        Ok(SelectorExpression {
            key: e.key.clone(),
            operator,
            values: e.values.clone().unwrap_or_default(),
        })
    }

    /// Whether pod labels satisfy it.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// Whether pod labels satisfy a selector: every `matchLabels` pair and every expression.
pub fn selector_matches(
    match_labels: &BTreeMap<String, String>,
    expressions: &[SelectorExpression],
    labels: &BTreeMap<String, String>,
) -> bool {
    match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && expressions.iter().all(|e| e.matches(labels))
}

/// Whether `labels` satisfy a Kubernetes label selector (`matchLabels` and
/// `matchExpressions`); `Err` names an expression that cannot be read.
pub fn label_selector_matches(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let (match_labels, expressions) = selector_parts(Some(selector))?;
    Ok(selector_matches(&match_labels, &expressions, labels))
}

/// A label selector's two parts, or the part that cannot be read.
type SelectorParts = (BTreeMap<String, String>, Vec<SelectorExpression>);

fn selector_parts(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> Result<SelectorParts, String> {
    let Some(selector) = selector else {
        return Ok(Default::default());
    };
    let expressions = selector
        .match_expressions
        .iter()
        .flatten()
        .map(SelectorExpression::from_kube)
        .collect::<Result<_, _>>()?;
    Ok((
        selector.match_labels.clone().unwrap_or_default(),
        expressions,
    ))
}

/// A topology spread constraint.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct TopologySpread {
    /// The node label whose values are the domains (zone, hostname, capacity type, any).
    pub topology_key: String,
    /// Largest allowed difference between the fullest and the emptiest domain.
    pub max_skew: i64,
    /// Pods counted: those in the same namespace whose labels include all of these…
    pub selector: BTreeMap<String, String>,
    /// …and satisfy all of these (`matchExpressions`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
    /// `ScheduleAnyway`: a preference, relaxed when it cannot be met.
    pub schedule_anyway: bool,
    /// `minDomains`: while fewer eligible domains exist, the emptiest counts as holding none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<i64>,
    /// `nodeAffinityPolicy: Ignore`: domains of nodes the pod's node affinity excludes count
    /// too (by default they do not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only domains of nodes whose taints the pod tolerates count
    /// (by default all do).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub honor_node_taints: bool,
}

impl TopologySpread {
    fn from_kube(
        c: &k8s_openapi::api::core::v1::TopologySpreadConstraint,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let key = normalize_label(&c.topology_key).to_owned();
        let (selector, mut expressions) = selector_parts(c.label_selector.as_ref())
            .map_err(|what| format!("topology spread {what}"))?;
        expressions.extend(label_key_expressions(
            c.match_label_keys.as_deref(),
            SelectorOperator::In,
            pod_labels,
        ));
        let policy = |value: Option<&str>, field: &str| match value {
            None | Some("Honor") => Ok(true),
            Some("Ignore") => Ok(false),
            Some(other) => Err(format!(
                "topology spread {field} {other:?} (expected Honor or Ignore)"
            )),
        };
        let honor_affinity = policy(c.node_affinity_policy.as_deref(), "nodeAffinityPolicy")?;
        let honor_taints = c.node_taints_policy.is_some()
            && policy(c.node_taints_policy.as_deref(), "nodeTaintsPolicy")?;
        Ok(TopologySpread {
            topology_key: key,
            max_skew: i64::from(c.max_skew.max(1)),
            selector,
            expressions,
            schedule_anyway: c.when_unsatisfiable == "ScheduleAnyway",
            min_domains: c.min_domains.filter(|n| *n > 1).map(i64::from),
            ignore_node_affinity: !honor_affinity,
            honor_node_taints: honor_taints,
        })
    }

    /// Whether a pod with `labels` in `namespace` counts for this constraint of a pod in
    /// `own_namespace`.
    pub fn counts(
        &self,
        own_namespace: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        own_namespace == namespace && selector_matches(&self.selector, &self.expressions, labels)
    }
}

/// A pod affinity or anti-affinity term.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct PodAffinityTerm {
    /// The node label whose values are the domains (zone, hostname, capacity type, any).
    pub topology_key: String,
    /// Labels the other pods must have…
    pub selector: BTreeMap<String, String>,
    /// …and expressions their labels must satisfy (`matchExpressions`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
    /// Namespaces of the other pods; empty means the pod's own.
    pub namespaces: Vec<String>,
    /// Every namespace (an empty `namespaceSelector`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_namespaces: bool,
    /// A `namespaceSelector` on namespace labels: the namespaces it selects count besides
    /// `namespaces` (resolved against the cluster's namespaces before a round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Anti-affinity: no matching pod may share the domain. Affinity: one must.
    pub anti: bool,
}

impl PodAffinityTerm {
    fn from_kube(
        term: &k8s_openapi::api::core::v1::PodAffinityTerm,
        anti: bool,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let kind = if anti {
            "pod anti-affinity"
        } else {
            "pod affinity"
        };
        let key = normalize_label(&term.topology_key).to_owned();
        if key.is_empty() {
            return Err(format!("{kind} without a topologyKey"));
        }
        // An empty namespace selector means every namespace; one on namespace labels is
        // resolved against the cluster's namespaces when a round starts.
        let (all_namespaces, namespace_selector) = match &term.namespace_selector {
            None => (false, None),
            Some(s)
                if s.match_labels.as_ref().is_none_or(|l| l.is_empty())
                    && s.match_expressions.as_ref().is_none_or(|e| e.is_empty()) =>
            {
                (true, None)
            }
            Some(s) => {
                let (match_labels, expressions) = selector_parts(Some(s))
                    .map_err(|what| format!("{kind} namespaceSelector {what}"))?;
                (
                    false,
                    Some(NamespaceSelector {
                        match_labels,
                        expressions,
                    }),
                )
            }
        };
        let (selector, mut expressions) = selector_parts(term.label_selector.as_ref())
            .map_err(|what| format!("{kind} {what}"))?;
        expressions.extend(label_key_expressions(
            term.match_label_keys.as_deref(),
            SelectorOperator::In,
            pod_labels,
        ));
        expressions.extend(label_key_expressions(
            term.mismatch_label_keys.as_deref(),
            SelectorOperator::NotIn,
            pod_labels,
        ));
        Ok(PodAffinityTerm {
            topology_key: key,
            selector,
            expressions,
            namespaces: term.namespaces.clone().unwrap_or_default(),
            all_namespaces,
            namespace_selector,
            anti,
        })
    }
}

/// `matchLabelKeys` (`In`) or `mismatchLabelKeys` (`NotIn`) as selector expressions on the
/// pod's own values; keys the pod does not carry are skipped, as kube-scheduler does.
fn label_key_expressions(
    keys: Option<&[String]>,
    operator: SelectorOperator,
    pod_labels: &BTreeMap<String, String>,
) -> Vec<SelectorExpression> {
    keys.into_iter()
        .flatten()
        .filter_map(|key| {
            pod_labels.get(key).map(|value| SelectorExpression {
                key: key.clone(),
                operator,
                values: vec![value.clone()],
            })
        })
        .collect()
}

/// A label selector over namespaces.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct NamespaceSelector {
    /// Labels the namespace must have…
    pub match_labels: BTreeMap<String, String>,
    /// …and expressions its labels must satisfy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expressions: Vec<SelectorExpression>,
}

impl NamespaceSelector {
    /// Whether a namespace with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        selector_matches(&self.match_labels, &self.expressions, labels)
    }
}

/// Why a Kubernetes pod could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// A resource quantity is malformed.
    #[error("pod {pod}: {source}")]
    Quantity {
        /// `namespace/name`.
        pod: String,
        /// The parse error.
        source: QuantityError,
    },
}

fn container_requests(c: &Container) -> Result<(Resources, Vec<String>), QuantityError> {
    let Some(resources) = &c.resources else {
        return Ok((Resources::ZERO, Vec::new()));
    };
    // Kubernetes defaults a missing request to the limit.
    let mut list: BTreeMap<&str, &str> = BTreeMap::new();
    for source in [&resources.limits, &resources.requests]
        .into_iter()
        .flatten()
    {
        for (name, q) in source {
            list.insert(name.as_str(), q.0.as_str());
        }
    }
    Resources::from_quantities(list)
}

/// Effective requests as kube-scheduler computes them: the larger of the running containers
/// (plus restartable init "sidecar" containers) and each init container's peak (with the
/// sidecars started before it), plus pod overhead and one `pods`.
pub fn pod_requests(pod: &KubePod) -> Result<(Resources, Vec<String>), QuantityError> {
    let Some(spec) = &pod.spec else {
        return Ok((Resources::ZERO.with(ResourceName::Pods, 1), Vec::new()));
    };
    let mut unknown = Vec::new();
    let mut running = Resources::ZERO;
    for c in &spec.containers {
        let (r, u) = container_requests(c)?;
        running = running.add(&r);
        unknown.extend(u);
    }
    let mut sidecars = Resources::ZERO;
    let mut init_peak = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        let (r, u) = container_requests(c)?;
        unknown.extend(u);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.add(&r);
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&sidecars.add(&r));
        }
    }
    let mut total = running.add(&sidecars).max(&init_peak);
    if let Some(overhead) = &spec.overhead {
        let (o, u) =
            Resources::from_quantities(overhead.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))?;
        total = total.add(&o);
        unknown.extend(u);
    }
    total.set(ResourceName::Pods, 1);
    unknown.sort();
    unknown.dedup();
    Ok((total, unknown))
}

/// Why a pod is not one the autoscaler provisions capacity for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotProvisionable {
    /// Already bound to a node (`spec.nodeName`).
    #[error("bound to a node")]
    Bound,
    /// kube-scheduler has not reported it unschedulable (`PodScheduled=False`, reason
    /// `Unschedulable`): it may still fit existing nodes.
    #[error("kube-scheduler has not marked it Unschedulable")]
    NotUnschedulable,
    /// Nominated to a node (`status.nominatedNodeName`): it is preempting pods there.
    #[error("nominated to a node, preempting pods there")]
    Preempting,
    /// Owned by a DaemonSet, which places it on nodes itself.
    #[error("owned by a DaemonSet")]
    DaemonSet,
    /// Owned by a Node (a static pod's mirror).
    #[error("owned by a Node")]
    NodeOwned,
    /// Being deleted, or already finished (`Succeeded`/`Failed`).
    #[error("terminating or finished")]
    Terminating,
    /// Its node affinity asks for nodes without `karpenter.sh/nodepool`: not ours to serve.
    #[error("opted out (requires karpenter.sh/nodepool DoesNotExist)")]
    OptedOut,
}

/// Whether the autoscaler provisions for this pod, as upstream decides it: kube-scheduler
/// found no node for it, it is unbound and not preempting, not a DaemonSet's or a node's, not
/// terminating, and not opted out by a `karpenter.sh/nodepool DoesNotExist` requirement.
pub fn provisionable(pod: &KubePod) -> Result<(), NotProvisionable> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    if spec
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return Err(NotProvisionable::Bound);
    }
    if pod.metadata.deletion_timestamp.is_some()
        || status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
    {
        return Err(NotProvisionable::Terminating);
    }
    if status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return Err(NotProvisionable::Preempting);
    }
    for owner in pod.metadata.owner_references.iter().flatten() {
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("apps/v1", "DaemonSet") => return Err(NotProvisionable::DaemonSet),
            ("v1", "Node") => return Err(NotProvisionable::NodeOwned),
            _ => {}
        }
    }
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    if !unschedulable {
        return Err(NotProvisionable::NotUnschedulable);
    }
    let opted_out = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|required| {
            // Opted out when every alternative term excludes NodePool nodes.
            !required.node_selector_terms.is_empty()
                && required.node_selector_terms.iter().all(|term| {
                    term.match_expressions.iter().flatten().any(|e| {
                        e.key == crate::vocab::labels::NODEPOOL && e.operator == "DoesNotExist"
                    })
                })
        });
    if opted_out {
        return Err(NotProvisionable::OptedOut);
    }
    Ok(())
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
        Ok(out)
    }
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
mod tests {
    use super::*;

    fn pending(extra: serde_json::Value) -> KubePod {
        let mut pod = serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]},
        });
        crate::test_support::overlay(&mut pod, &extra);
        serde_json::from_value(pod).unwrap()
    }

    #[test]
    fn provisionable_pods_are_unschedulable_unbound_and_ours() {
        use serde_json::json;
        assert_eq!(provisionable(&pending(json!({}))), Ok(()));
        let cases = [
            (json!({"spec": {"nodeName": "n1"}}), NotProvisionable::Bound),
            (
                json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}]}}),
                NotProvisionable::NotUnschedulable,
            ),
            (
                json!({"status": {"nominatedNodeName": "n1"}}),
                NotProvisionable::Preempting,
            ),
            (
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}}),
                NotProvisionable::DaemonSet,
            ),
            (
                json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}]}}),
                NotProvisionable::NodeOwned,
            ),
            (
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                NotProvisionable::Terminating,
            ),
            (
                json!({"status": {"phase": "Failed"}}),
                NotProvisionable::Terminating,
            ),
            (
                json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]
                }}}}}),
                NotProvisionable::OptedOut,
            ),
        ];
        for (patch, why) in cases {
            assert_eq!(provisionable(&pending(patch.clone())), Err(why), "{patch}");
        }
        // One alternative term that allows NodePool nodes keeps it ours.
        let either = json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
            ]
        }}}}});
        assert_eq!(provisionable(&pending(either)), Ok(()));
    }

    fn pod(yaml: &str) -> KubePod {
        serde_yaml_ng::from_str(yaml).expect("pod yaml")
    }

    #[test]
    fn requests_follow_kube_scheduler() {
        // Containers 300m; a sidecar 100m; an init container 500m started after the sidecar;
        // overhead 50m. Running = 300 + 100, init peak = 100 + 500 → 600 + 50 overhead.
        let p = pod(r#"
metadata: {name: p, namespace: ns, uid: u1}
spec:
  overhead: {cpu: 50m}
  initContainers:
    - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: 100m}}}
    - {name: init, resources: {requests: {cpu: 500m, memory: 1Gi}}}
  containers:
    - {name: a, resources: {requests: {cpu: 200m, memory: 256Mi}}}
    - {name: b, resources: {limits: {cpu: 100m, memory: 128Mi, example.com/dongle: "1"}}}
"#);
        let converted = Pod::try_from(&p).unwrap();
        assert_eq!(converted.requests.get(ResourceName::Cpu), 650);
        assert_eq!(converted.requests.get(ResourceName::Memory), 1 << 30);
        assert_eq!(converted.requests.get(ResourceName::Pods), 1);
        assert_eq!(
            converted.unknown_resources,
            vec!["example.com/dongle".to_owned()]
        );
    }

    #[test]
    fn required_pod_affinity_is_read_and_bad_selectors_are_named() {
        let p = pod(r#"
metadata: {name: p, uid: u3, labels: {app: nginx}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: nginx}}}
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchExpressions: [{key: app, operator: In, values: [db]}]}}
        - topologyKey: topology.kubernetes.io/zone
          namespaceSelector: {}
          labelSelector: {matchExpressions: [{key: tier, operator: Exists}, {key: app, operator: NotIn, values: [nginx]}]}
        - {topologyKey: topology.kubernetes.io/zone, namespaceSelector: {matchLabels: {team: a}}}
        - {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchExpressions: [{key: app, operator: Near}]}}
  containers: [{name: c}]
"#);
        let converted = Pod::try_from(&p).unwrap();
        assert_eq!(converted.pod_affinity.len(), 4);
        assert!(converted.pod_affinity[3].anti);
        let team_a = converted.pod_affinity[2]
            .namespace_selector
            .as_ref()
            .unwrap();
        assert!(team_a.matches(&[("team".to_owned(), "a".to_owned())].into()));
        assert!(!team_a.matches(&[("team".to_owned(), "b".to_owned())].into()));
        let db = &converted.pod_affinity[0];
        let db_pod: BTreeMap<String, String> = [("app".to_owned(), "db".to_owned())].into();
        assert!(selector_matches(&db.selector, &db.expressions, &db_pod));
        let any_namespace = &converted.pod_affinity[1];
        assert!(any_namespace.all_namespaces);
        let tiered: BTreeMap<String, String> = [("tier".to_owned(), "web".to_owned())].into();
        assert!(selector_matches(
            &any_namespace.selector,
            &any_namespace.expressions,
            &tiered
        ));
        assert!(!selector_matches(
            &any_namespace.selector,
            &any_namespace.expressions,
            &db_pod
        ));
        assert_eq!(
            converted.unsupported,
            vec!["pod affinity label selector operator \"Near\"".to_owned()]
        );
    }

    #[test]
    fn selectors_affinity_and_unsupported_constraints() {
        let p = pod(r#"
metadata: {name: p, uid: u2}
spec:
  nodeSelector: {failure-domain.beta.kubernetes.io/zone: us-east-1a}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
          - matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
  topologySpreadConstraints:
    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
  containers: [{name: c}]
"#);
        let converted = Pod::try_from(&p).unwrap();
        assert!(
            converted
                .node_selector
                .has_key("topology.kubernetes.io/zone")
        );
        assert_eq!(converted.requirement_alternatives().len(), 2);
        assert_eq!(converted.tolerations.len(), 1);
        assert!(
            converted.unsupported.is_empty(),
            "{:?}",
            converted.unsupported
        );
        assert_eq!(converted.spread.len(), 1);
        assert_eq!(
            converted.spread[0].topology_key,
            "topology.kubernetes.io/zone"
        );
    }

    #[test]
    fn preferences_are_read_with_their_weights() {
        let p = pod(r#"
metadata: {name: p, uid: u4, labels: {app: nginx}}
spec:
  affinity:
    nodeAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 20
          preference: {matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}]}
        - weight: 5
          preference: {matchFields: [{key: metadata.name, operator: In, values: [n1]}]}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 10
          podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: nginx}}}
    podAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 3
          podAffinityTerm: {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: db}}}
  containers: [{name: c}]
"#);
        let converted = Pod::try_from(&p).unwrap();
        // The matchFields preference cannot be modelled and is dropped, as relaxing would.
        assert_eq!(converted.preferred_node_affinity.len(), 1);
        assert_eq!(converted.preferred_node_affinity[0].0, 20);
        assert_eq!(converted.preferred_pod_affinity.len(), 2);
        assert!(
            converted
                .preferred_pod_affinity
                .iter()
                .any(|(w, t)| *w == 10 && t.anti && t.topology_key == "kubernetes.io/hostname")
        );
        assert!(
            converted.unsupported.is_empty(),
            "{:?}",
            converted.unsupported
        );
        assert!(converted.has_preferences());
        assert!(!converted.without_preferences().has_preferences());
    }

    #[test]
    fn label_keys_policies_min_domains_any_key_and_host_ports_are_read() {
        let p = pod(r#"
metadata: {name: p, uid: u5, labels: {app: web, pod-template-hash: abc, tenant: t1}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: example.com/rack
          labelSelector: {matchLabels: {app: web}}
          matchLabelKeys: [pod-template-hash, missing]
          mismatchLabelKeys: [tenant]
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: DoNotSchedule
      labelSelector: {matchLabels: {app: web}}
      matchLabelKeys: [pod-template-hash]
      minDomains: 3
      nodeAffinityPolicy: Ignore
      nodeTaintsPolicy: Honor
    - {maxSkew: 1, topologyKey: example.com/rack, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Sometimes}
  initContainers:
    - {name: init, ports: [{containerPort: 53, hostPort: 53, protocol: UDP}]}
  containers:
    - name: c
      ports:
        - {containerPort: 8080, hostPort: 8080}
        - {containerPort: 9090}
        - {containerPort: 8443, hostPort: 8443, hostIP: 10.0.0.1}
"#);
        let converted = Pod::try_from(&p).unwrap();
        let spread = &converted.spread[0];
        assert_eq!(spread.min_domains, Some(3));
        assert!(spread.ignore_node_affinity && spread.honor_node_taints);
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let same_revision = labels(&[("app", "web"), ("pod-template-hash", "abc")]);
        let other_revision = labels(&[("app", "web"), ("pod-template-hash", "def")]);
        assert!(spread.counts("default", "default", &same_revision));
        assert!(!spread.counts("default", "default", &other_revision));
        // The anti-affinity on a custom key selects the same revision of other tenants;
        // `missing` is not a label of the pod and is skipped.
        let anti = &converted.pod_affinity[0];
        assert_eq!(anti.topology_key, "example.com/rack");
        let mut other_tenant = same_revision.clone();
        other_tenant.insert("tenant".into(), "t2".into());
        let mut same_tenant = same_revision.clone();
        same_tenant.insert("tenant".into(), "t1".into());
        assert!(selector_matches(
            &anti.selector,
            &anti.expressions,
            &other_tenant
        ));
        assert!(!selector_matches(
            &anti.selector,
            &anti.expressions,
            &same_tenant
        ));
        assert!(!selector_matches(
            &anti.selector,
            &anti.expressions,
            &other_revision
        ));
        // A policy value the API would reject is named.
        assert_eq!(
            converted.unsupported,
            vec![
                "topology spread nodeTaintsPolicy \"Sometimes\" (expected Honor or Ignore)"
                    .to_owned()
            ]
        );
        let port = |ip: &str, protocol: &str, port: i32| HostPort {
            ip: ip.into(),
            protocol: protocol.into(),
            port,
        };
        assert_eq!(
            converted.host_ports,
            vec![
                port("0.0.0.0", "TCP", 8080),
                port("0.0.0.0", "UDP", 53),
                port("10.0.0.1", "TCP", 8443),
            ]
        );
        assert!(port("0.0.0.0", "TCP", 8443).conflicts_with(&port("10.0.0.1", "TCP", 8443)));
        assert!(!port("10.0.0.2", "TCP", 8443).conflicts_with(&port("10.0.0.1", "TCP", 8443)));
        assert!(!port("0.0.0.0", "UDP", 8080).conflicts_with(&port("0.0.0.0", "TCP", 8080)));
    }
}
