//! CapacityBuffers in rounds (upstream's `CapacityBuffer` gate): headroom kept as virtual
//! pods.
//!
//! - **Resolution** ([`resolve`]), as upstream's buffer controller: a buffer's chunk is the
//!   pod of its PodTemplate (`podTemplateRef`) or of its workload's template (`scalableRef`:
//!   `apps` Deployment, StatefulSet or ReplicaSet). Its chunk count is the larger of
//!   `replicas` and `percentage` of the workload's replicas (rounded up, at least one when
//!   the workload runs any; a workload without `replicas` counts as one), capped by how many
//!   chunks fit in `limits` (per resource both name, the floor of limit over request; the
//!   least of them); with neither `replicas` nor `percentage`, `limits` alone say how many.
//!   `ReadyForProvisioning` is True (`Resolved`) or False (`PodTemplateNotFound`,
//!   `ScalableRefNotFound`, `ResolutionFailed`), its message naming the field to fix.
//! - **Virtual pods** ([`virtual_pods`]): one pod per chunk, named
//!   `capacity-buffer-<buffer>-<i>`, labelled with the buffer's name and namespace, at the
//!   lowest priority, without the template's persistent volumes. Every round takes them
//!   with the pending pods: those that fit on nodes or NodeClaims the cluster has keep that
//!   room free (kube-scheduler never sees them, so real pods take it first), the others
//!   make the round launch nodes ahead of demand. Nobody is nominated for them and no
//!   `FailedScheduling` is said of them.
//! - **Status** ([`provisioning`]): after a round, each buffer's `Provisioning` condition:
//!   True `FitsExistingCapacity`, or False `RequiresNewCapacity`, `Infeasible`,
//!   `NotReadyForProvisioning` or `BufferEmpty`, as upstream's provisioner writes it.
//! - **Protection** ([`hosts`]): nodes the last round found hosting virtual pods are left
//!   alone by Emptiness, as upstream's; consolidation's simulations carry the virtual pods as
//!   pending pods, so moved pods do not take their room.

use std::collections::{BTreeMap, BTreeSet};

use super::SchedulingResult;
use crate::api::capacitybuffer::{ACTIVE_CAPACITY, CapacityBufferSpec, ScalableRef};
use crate::model::quantity::Quantity;
use crate::model::{Pod, ResourceName};

/// Label naming the buffer a virtual pod stands for.
pub const BUFFER_NAME_LABEL: &str = "karpenter.sh/capacity-buffer-name";
/// Label naming the namespace of the buffer a virtual pod stands for.
pub const BUFFER_NAMESPACE_LABEL: &str = "karpenter.sh/capacity-buffer-namespace";
/// Virtual pods' priority: the lowest there is.
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;
/// How a virtual pod's UID begins: `capacity-buffer/<namespace>/<name>/<i>`.
pub const VIRTUAL_UID_PREFIX: &str = "capacity-buffer/";
/// The condition saying whether a buffer's chunk resolved.
pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// The condition saying whether a buffer's chunks fit on capacity the cluster has.
pub const PROVISIONING: &str = "Provisioning";

/// A workload kind a `scalableRef` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
}

/// The workload kind `reference` names, or why it names none this resolves (only `apps`
/// Deployments, StatefulSets and ReplicaSets; an empty group means `apps`, as upstream).
pub fn workload_kind(reference: &ScalableRef) -> Result<WorkloadKind, String> {
    let group = reference.api_group.as_deref().unwrap_or("");
    let kind = match reference.kind.as_str() {
        "Deployment" => Some(WorkloadKind::Deployment),
        "StatefulSet" => Some(WorkloadKind::StatefulSet),
        "ReplicaSet" => Some(WorkloadKind::ReplicaSet),
        _ => None,
    };
    match kind {
        Some(kind) if group.is_empty() || group == "apps" => Ok(kind),
        _ => Err(format!(
            "spec.scalableRef: unsupported scalableRef kind {group}/{}: name an apps Deployment, StatefulSet or ReplicaSet",
            reference.kind
        )),
    }
}

/// What a buffer's reference was found to be.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// A PodTemplate: its pod and its generation.
    PodTemplate {
        /// The template's pod.
        pod: Box<Pod>,
        /// `metadata.generation`.
        generation: i64,
    },
    /// A workload: its template's pod and `spec.replicas` (`None` when unset).
    Workload {
        /// The template's pod.
        pod: Box<Pod>,
        /// `spec.replicas`.
        replicas: Option<i32>,
    },
    /// Nothing of that name.
    NotFound,
    /// The reference cannot be resolved (a kind or group not supported): why.
    Failed(String),
}

/// A CapacityBuffer as the cluster has it, with what its reference was found to be.
#[derive(Debug, Clone, PartialEq)]
pub struct BufferSource {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// Its spec.
    pub spec: CapacityBufferSpec,
    /// What `spec.podTemplateRef` or `spec.scalableRef` was found to be.
    pub found: Found,
}

impl BufferSource {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A condition's state: status, reason, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionState {
    /// True or False.
    pub status: bool,
    /// Upstream's reason.
    pub reason: &'static str,
    /// What it means, naming the field to fix when False.
    pub message: String,
}

impl ConditionState {
    fn new(status: bool, reason: &'static str, message: impl Into<String>) -> Self {
        ConditionState {
            status,
            reason,
            message: message.into(),
        }
    }
}

/// A buffer resolved: its `ReadyForProvisioning` condition and status fields, and its
/// chunk's pod when it resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `ReadyForProvisioning`.
    pub ready: ConditionState,
    /// `status.replicas` (only when resolved).
    pub replicas: Option<i32>,
    /// `status.podTemplateRef.name` (only for a resolved PodTemplate).
    pub pod_template: Option<String>,
    /// `status.podTemplateGeneration`.
    pub pod_template_generation: Option<i64>,
    /// `status.provisioningStrategy`.
    pub strategy: String,
    /// The chunk's pod, when resolved.
    pub pod: Option<Pod>,
}

impl Resolved {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether rounds take its chunks: resolved, acting strategy, more than none.
    pub fn provisions(&self) -> bool {
        self.ready.status
            && self.strategy == ACTIVE_CAPACITY
            && self.replicas.is_some_and(|r| r > 0)
            && self.pod.is_some()
    }
}

/// Resolves a buffer, as upstream's buffer controller does.
pub fn resolve(source: &BufferSource) -> Resolved {
    let spec = &source.spec;
    let mut out = Resolved {
        namespace: source.namespace.clone(),
        name: source.name.clone(),
        generation: source.generation,
        ready: ConditionState::new(true, "Resolved", "Pod template resolved successfully"),
        replicas: None,
        pod_template: None,
        pod_template_generation: None,
        strategy: spec
            .provisioning_strategy
            .clone()
            .unwrap_or_else(|| ACTIVE_CAPACITY.to_owned()),
        pod: None,
    };
    let (pod, percentage) = match (&spec.pod_template_ref, &spec.scalable_ref, &source.found) {
        (None, None, _) => {
            out.ready = ConditionState::new(
                false,
                "ResolutionFailed",
                "Neither podTemplateRef nor scalableRef is set: set spec.podTemplateRef.name to a PodTemplate in the buffer's namespace, or spec.scalableRef to a Deployment, StatefulSet or ReplicaSet",
            );
            return out;
        }
        (_, _, Found::Failed(why)) => {
            out.ready = ConditionState::new(false, "ResolutionFailed", why.clone());
            return out;
        }
        (Some(reference), _, Found::NotFound) => {
            out.ready = ConditionState::new(
                false,
                "PodTemplateNotFound",
                format!(
                    "spec.podTemplateRef.name: PodTemplate {:?} not found in namespace {:?}: create it or name one that exists",
                    reference.name, source.namespace
                ),
            );
            return out;
        }
        (None, Some(reference), Found::NotFound) => {
            out.ready = ConditionState::new(
                false,
                "ScalableRefNotFound",
                format!(
                    "spec.scalableRef.name: {} {:?} not found in namespace {:?}: create it or name one that exists",
                    reference.kind, reference.name, source.namespace
                ),
            );
            return out;
        }
        (Some(reference), _, Found::PodTemplate { pod, generation }) => {
            out.pod_template = Some(reference.name.clone());
            out.pod_template_generation = Some(*generation);
            (pod, None)
        }
        (_, _, Found::Workload { pod, replicas }) => {
            // A workload without replicas runs one, as its controller defaults it.
            let running = replicas.unwrap_or(1);
            let percentage = spec
                .percentage
                .filter(|_| running > 0)
                .map(|p| percentage_replicas(running, p));
            (pod, percentage)
        }
        (None, Some(_), Found::PodTemplate { .. }) => {
            out.ready = ConditionState::new(
                false,
                "ResolutionFailed",
                "spec.scalableRef: resolved to a PodTemplate",
            );
            return out;
        }
    };
    out.replicas = Some(replicas(spec, pod, percentage));
    out.pod = Some((**pod).clone());
    out
}

/// `ceil(running × percentage / 100)`, at least one when both are positive.
pub fn percentage_replicas(running: i32, percentage: i32) -> i32 {
    let product = i64::from(running) * i64::from(percentage);
    let n = product / 100 + i64::from(product % 100 > 0);
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    if n < 1 && percentage > 0 && running > 0 {
        1
    } else {
        n
    }
}

/// The larger of `replicas` and the percentage's, capped by `limits` (which alone decide
/// when neither is set).
fn replicas(spec: &CapacityBufferSpec, pod: &Pod, percentage: Option<i32>) -> i32 {
    let sized: Vec<i32> = spec.replicas.into_iter().chain(percentage).collect();
    let desired = sized.iter().copied().max();
    match (limit_replicas(spec, pod), desired) {
        (Some(limit), Some(desired)) => desired.min(limit),
        (Some(limit), None) => limit,
        (None, desired) => desired.unwrap_or(0),
    }
}

/// How many chunks fit in `limits`: per resource both name (and the chunk requests), the
/// floor of limit over request; the least of them. `None` when no resource is in both.
fn limit_replicas(spec: &CapacityBufferSpec, pod: &Pod) -> Option<i32> {
    let limits = spec.limits.as_ref()?;
    let mut least: Option<i64> = None;
    for (name, limit) in limits {
        let Some(resource) = ResourceName::parse(name) else {
            continue;
        };
        let request = pod.requests.get(resource);
        let Ok(limit) = Quantity::parse(&limit.0) else {
            continue;
        };
        if request <= 0 {
            continue;
        }
        let limit = if resource.is_milli() {
            limit.milli_floor()
        } else {
            limit.units_floor()
        };
        let n = (limit / request).max(0);
        least = Some(least.map_or(n, |l| l.min(n)));
    }
    least.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// The virtual pods of a resolved buffer that provisions (none otherwise).
pub fn virtual_pods(buffer: &Resolved) -> Vec<Pod> {
    let (Some(template), Some(count)) = (&buffer.pod, buffer.replicas) else {
        return Vec::new();
    };
    if !buffer.provisions() {
        return Vec::new();
    }
    (1..=count)
        .map(|i| {
            let mut pod = template.clone();
            pod.uid = format!(
                "{VIRTUAL_UID_PREFIX}{}/{}/{i}",
                buffer.namespace, buffer.name
            );
            pod.name = format!("capacity-buffer-{}-{i}", buffer.name);
            pod.namespace = buffer.namespace.clone();
            pod.labels
                .insert(BUFFER_NAME_LABEL.to_owned(), buffer.name.clone());
            pod.labels
                .insert(BUFFER_NAMESPACE_LABEL.to_owned(), buffer.namespace.clone());
            pod.priority = VIRTUAL_POD_PRIORITY;
            // A virtual pod's claims would never be bound: its volumes are left out.
            pod.volume_requirements.clear();
            pod.volume_attachments.clear();
            pod
        })
        .collect()
}

/// Whether `pod` is a buffer's virtual pod.
pub fn is_virtual(pod: &Pod) -> bool {
    is_virtual_uid(&pod.uid) && pod.labels.contains_key(BUFFER_NAME_LABEL)
}

/// Whether `uid` is a virtual pod's.
pub fn is_virtual_uid(uid: &str) -> bool {
    uid.starts_with(VIRTUAL_UID_PREFIX)
}

/// The `namespace/name` of the buffer a virtual pod's UID stands for.
pub fn buffer_of(uid: &str) -> Option<String> {
    let rest = uid.strip_prefix(VIRTUAL_UID_PREFIX)?;
    let (key, _index) = rest.rsplit_once('/')?;
    Some(key.to_owned())
}

/// The nodes and NodeClaims a round placed virtual pods on.
pub fn hosts(result: &SchedulingResult) -> BTreeSet<String> {
    result
        .bindings
        .iter()
        .filter(|b| is_virtual_uid(&b.pod))
        .map(|b| b.node.clone())
        .collect()
}

/// Where a round put one buffer's virtual pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placed {
    /// On nodes and NodeClaims the cluster has.
    pub existing: usize,
    /// On NodeClaims the round plans.
    pub new: usize,
    /// Nowhere, and no instance type could take them.
    pub infeasible: usize,
    /// Nowhere for now (limits).
    pub transient: usize,
}

/// Per buffer, where a round put its virtual pods.
pub fn placed(result: &SchedulingResult) -> BTreeMap<String, Placed> {
    let mut out: BTreeMap<String, Placed> = BTreeMap::new();
    for b in &result.bindings {
        if let Some(key) = buffer_of(&b.pod) {
            out.entry(key).or_default().existing += 1;
        }
    }
    for claim in &result.new_claims {
        for key in claim.pods.iter().filter_map(|p| buffer_of(p)) {
            out.entry(key).or_default().new += 1;
        }
    }
    for u in &result.unschedulable {
        if let Some(key) = buffer_of(&u.pod) {
            let entry = out.entry(key).or_default();
            if u.reason.contains("limits") {
                entry.transient += 1;
            } else {
                entry.infeasible += 1;
            }
        }
    }
    out
}

/// A buffer's `Provisioning` condition after a round that put its virtual pods as `placed`
/// says; `None` leaves it as it is (a ready buffer none of whose pods the round saw).
pub fn provisioning(buffer: &Resolved, placed: Option<&Placed>) -> Option<ConditionState> {
    if !buffer.ready.status {
        return Some(ConditionState::new(
            false,
            "NotReadyForProvisioning",
            "Buffer is not ReadyForProvisioning",
        ));
    }
    let desired = buffer.replicas.unwrap_or(0);
    if desired <= 0 {
        return Some(ConditionState::new(
            false,
            "BufferEmpty",
            "Buffer has zero desired replicas",
        ));
    }
    if buffer.strategy != ACTIVE_CAPACITY {
        return Some(ConditionState::new(
            false,
            "UnsupportedStrategy",
            format!(
                "spec.provisioningStrategy: {:?} is not acted on; use {ACTIVE_CAPACITY:?}",
                buffer.strategy
            ),
        ));
    }
    let s = placed?;
    if s.infeasible > 0 {
        return Some(ConditionState::new(
            false,
            "Infeasible",
            format!(
                "{}/{desired} virtual pods are infeasible (no instance type can satisfy the requirements)",
                s.infeasible
            ),
        ));
    }
    if s.new > 0 || s.transient > 0 {
        let message = if s.transient > 0 {
            format!(
                "{}/{desired} virtual pods required new capacity, {} had failures",
                s.new, s.transient
            )
        } else {
            format!("{}/{desired} virtual pods required new capacity", s.new)
        };
        return Some(ConditionState::new(false, "RequiresNewCapacity", message));
    }
    (s.existing == desired as usize).then(|| {
        ConditionState::new(
            true,
            "FitsExistingCapacity",
            format!("All {desired} virtual pods fit on existing capacity"),
        )
    })
}

#[cfg(test)]
mod tests;
