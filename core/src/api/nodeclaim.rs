//! `karpenter.sh/v1` NodeClaim: one requested node, from launch to termination.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::nodepool::{NodeClassReference, default_expire_after};
use super::requirements::NodeSelectorRequirementWithMinValues;
use crate::vocab::duration::{KDuration, NillableDuration};

/// The desired state of a NodeClaim. Immutable once created.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    category = "karpenter",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"ImageID","type":"string","jsonPath":".status.imageID","priority":1}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.providerID","priority":1}"#,
    printcolumn = r#"{"name":"NodePool","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/nodepool","priority":1}"#,
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.nodeClassRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Drifted","type":"string","jsonPath":".status.conditions[?(@.type==\"Drifted\")].status","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    /// Taints the node carries for its whole life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::taints)]
    pub taints: Vec<Taint>,
    /// Taints present at start-up that something else removes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::taints)]
    pub startup_taints: Vec<Taint>,
    /// The narrowed requirements: instance types (price-ordered), zones, capacity types, ….
    #[schemars(length(max = 100), transform = super::schema::atomic_list)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The resources the scheduled pods (and daemonsets) request of this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The node class to launch with.
    pub node_class_ref: NodeClassReference,
    /// How long Karpenter waits for a node to drain before forcefully deleting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KDuration>,
    /// How long the node lives before it is replaced, or `Never`.
    #[serde(default = "default_expire_after")]
    #[schemars(default = "default_expire_after")]
    pub expire_after: NillableDuration,
}

/// Resource requests of a NodeClaim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// Requested quantities by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

/// The observed state of a NodeClaim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node that registered for this NodeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The cloud provider's id of the instance (`aws:///us-west-2a/i-0123…`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    /// The image the instance booted.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "imageID")]
    pub image_id: Option<String>,
    /// Estimated capacity of the instance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    /// Estimated allocatable of the instance (capacity minus overhead).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Last time a pod was bound to or removed from the node; drives `consolidateAfter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
    /// `Launched`, `Registered`, `Initialized`, `Ready`, `Drifted`, `Consolidatable`, ….
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::nodeclaim_conditions)]
    pub conditions: Vec<Condition>,
}

/// Instance types a NodeClaim's requirements list at most (cheapest first), as upstream caps
/// them: enough to fall back on, small enough for the API object.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// Version stamped beside [`nodepool_hash`]. Upstream's hashes (version `v3`) are computed
/// differently; a different version makes NodeClaims created by upstream get re-stamped rather
/// than counted as drifted when this controller takes over.
pub const NODEPOOL_HASH_VERSION: &str = "rs-v1";

/// The version of the NodePool hash stamped on `claim`, when it is not ours: another
/// controller's (upstream's `v3`) or none at all. Such a hash says nothing about this
/// controller's templates, so it is re-stamped, never compared.
pub fn foreign_pool_hash(claim: &NodeClaim) -> Option<String> {
    use crate::vocab::labels;
    let version = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::NODEPOOL_HASH_VERSION));
    match version {
        Some(v) if v == NODEPOOL_HASH_VERSION => None,
        Some(v) => Some(v.clone()),
        None => Some("none".into()),
    }
}

/// Stamps `hash` (of the pool's template as it is now) under this controller's version.
pub fn stamp_pool_hash(claim: &mut NodeClaim, hash: &str) {
    use crate::vocab::labels;
    let annotations = claim
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(labels::NODEPOOL_HASH.into(), hash.to_owned());
    annotations.insert(
        labels::NODEPOOL_HASH_VERSION.into(),
        NODEPOOL_HASH_VERSION.into(),
    );
}

/// Drops what the hash must not see: empty and null values (unset equals empty), with lists
/// sorted (they are sets: taints in another order are the same template).
fn canonical(value: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Object(m) => {
            let kept: serde_json::Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| canonical(v).map(|v| (k.clone(), v)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        Value::Array(items) => {
            let mut kept: Vec<Value> = items.iter().filter_map(canonical).collect();
            kept.sort_by_key(|v| v.to_string());
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        other => Some(other.clone()),
    }
}

/// The NodePool's static drift hash: FNV-1a (64-bit) of its template without requirements
/// (requirements drift is judged on the NodeClaim's labels instead), with lists as sets and
/// empty values ignored, in decimal. Changing labels, annotations, taints, startup taints,
/// the node class, `expireAfter` or `terminationGracePeriod` changes it; weight, limits and
/// disruption settings are not in the template and never drift a node.
pub fn nodepool_hash(template: &super::nodepool::NodeClaimTemplate) -> String {
    let mut value = serde_json::to_value(template).unwrap_or(serde_json::Value::Null);
    if let Some(spec) = value
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    {
        spec.remove("requirements");
    }
    static_hash(&value)
}

/// FNV-1a (64-bit) of a value with lists as sets and empty values ignored, in decimal: the
/// static drift hashes of NodePools and node classes.
pub fn static_hash(value: &serde_json::Value) -> String {
    let text = canonical(value).map(|v| v.to_string()).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash.to_string()
}

/// Condition types a NodeClaim's status carries, as upstream names them.
pub mod condition {
    /// The instance exists.
    pub const LAUNCHED: &str = "Launched";
    /// Its Node joined and was synced.
    pub const REGISTERED: &str = "Registered";
    /// Its Node is Ready with startup taints gone and extended resources present.
    pub const INITIALIZED: &str = "Initialized";
    /// The root condition: launched, registered and initialized.
    pub const READY: &str = "Ready";
    /// Its Node has been drained.
    pub const DRAINED: &str = "Drained";
    /// The instance is being terminated.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// It no longer matches its NodePool (present only while it does not).
    pub const DRIFTED: &str = "Drifted";
    /// `consolidateAfter` has passed since a pod last came or went (present only then).
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// A disruption command holds it, for the reason its `reason` names.
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
}

/// Why a NodeClaim no longer matches its NodePool, as upstream's static drift decides:
/// `NodePoolDrifted` when the pool's template hash (same hash version) differs from the one
/// the NodeClaim was created with, `RequirementsDrifted` when one of its labels is no longer
/// allowed by the pool's requirements. `None` while it matches.
pub fn drift(claim: &NodeClaim, pool: &super::NodePool) -> Option<(&'static str, String)> {
    use crate::vocab::labels;
    let annotations = &claim.metadata.annotations;
    let annotation = |key: &str| annotations.as_ref().and_then(|a| a.get(key));
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    if annotation(labels::NODEPOOL_HASH_VERSION).map(String::as_str) == Some(NODEPOOL_HASH_VERSION)
        && let Some(hash) = annotation(labels::NODEPOOL_HASH)
        && *hash != nodepool_hash(&pool.spec.template)
    {
        return Some((
            "NodePoolDrifted",
            format!("NodePool {pool_name}'s template changed since this NodeClaim was created"),
        ));
    }
    let requirements = crate::model::Requirements::from_api(&pool.spec.template.spec.requirements);
    for (key, value) in claim.metadata.labels.iter().flatten() {
        if let Some(requirement) = requirements.get(key)
            && !requirement.has(value)
        {
            return Some((
                "RequirementsDrifted",
                format!(
                    "{key}={value} is no longer allowed by NodePool {pool_name}'s requirements"
                ),
            ));
        }
    }
    None
}

impl NodeClaim {
    /// Sets a status condition, keeping its transition time when the status does not change,
    /// and recomputes the root `Ready` condition from `Launched`, `Registered` and
    /// `Initialized` as upstream does.
    pub fn set_condition(
        &mut self,
        type_: &str,
        status: bool,
        reason: &str,
        message: &str,
        now: Time,
    ) {
        let generation = self.metadata.generation.unwrap_or(0);
        let conditions = &mut self.status.get_or_insert_with(Default::default).conditions;
        put_condition(
            conditions,
            type_,
            status,
            reason,
            message,
            now.clone(),
            generation,
        );
        if type_ == condition::READY {
            return;
        }
        let of = |t: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status == "True")
        };
        let missing = [
            condition::LAUNCHED,
            condition::REGISTERED,
            condition::INITIALIZED,
        ]
        .into_iter()
        .find(|t| of(t) != Some(true));
        match missing {
            None => put_condition(
                conditions,
                condition::READY,
                true,
                condition::READY,
                "",
                now,
                generation,
            ),
            Some(t) => {
                let reason = format!("{t}NotTrue");
                let message = format!("{t} is not yet True");
                put_condition(
                    conditions,
                    condition::READY,
                    false,
                    &reason,
                    &message,
                    now,
                    generation,
                )
            }
        }
    }

    /// This object as the controller writes it back: without the metadata the API server
    /// keeps (resource version, uid, timestamps, managed fields), which an apply must not
    /// carry (a stale resource version would be a failed precondition).
    pub fn without_server_fields(mut self) -> NodeClaim {
        let meta = &mut self.metadata;
        meta.resource_version = None;
        meta.uid = None;
        meta.creation_timestamp = None;
        meta.deletion_timestamp = None;
        meta.deletion_grace_period_seconds = None;
        meta.managed_fields = None;
        meta.self_link = None;
        self
    }

    /// Removes a status condition (a condition that is only present while it holds).
    pub fn remove_condition(&mut self, type_: &str) -> bool {
        let Some(status) = self.status.as_mut() else {
            return false;
        };
        let before = status.conditions.len();
        status.conditions.retain(|c| c.type_ != type_);
        status.conditions.len() != before
    }

    /// Whether a condition is `True`.
    pub fn condition_is_true(&self, type_: &str) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
    }
}

/// Sets condition `type_` in `conditions`, keeping its transition time while its status
/// holds (shared by every status this project writes).
pub fn put_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: Time,
    generation: i64,
) {
    let status = if status { "True" } else { "False" }.to_owned();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status;
            c.reason = reason.to_owned();
            c.message = message.to_owned();
            c.observed_generation = Some(generation);
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: now,
            observed_generation: Some(generation),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::api::NodePool;
    use crate::model::{CapacityType, Requirement, Requirements, ResourceName, Resources};
    use crate::scheduling::{InstanceTypeOption, PlannedNodeClaim};
    use crate::vocab::labels;

    fn pool(extra: serde_json::Value) -> NodePool {
        let mut value = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "general", "uid": "pool-uid"},
            "spec": {"template": {
                "metadata": {"labels": {"team": "web"}, "annotations": {"note": "x"}},
                "spec": {
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}],
                    "expireAfter": "720h",
                }
            }}
        });
        if let (Some(spec), Some(extra)) = (
            value["spec"]["template"]["spec"].as_object_mut(),
            extra.as_object(),
        ) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap()
    }

    fn option(name: &str, price: f64, capacity_type: CapacityType) -> InstanceTypeOption {
        InstanceTypeOption {
            name: name.into(),
            price,
            zone: "us-west-2a".into(),
            capacity_type,
        }
    }

    #[test]
    fn the_hash_follows_the_template_but_not_requirements_or_list_order() {
        let base = nodepool_hash(&pool(json!({})).spec.template);
        assert_eq!(base, nodepool_hash(&pool(json!({})).spec.template));
        let reordered = pool(
            json!({"taints": [{"key": "b", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}]}),
        );
        assert_eq!(base, nodepool_hash(&reordered.spec.template));
        let other_requirements = pool(
            json!({"requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}),
        );
        assert_eq!(base, nodepool_hash(&other_requirements.spec.template));
        let other_taints = pool(json!({"taints": [{"key": "a", "effect": "NoExecute"}]}));
        assert_ne!(base, nodepool_hash(&other_taints.spec.template));
        let other_lifetime = pool(json!({"expireAfter": "24h"}));
        assert_ne!(base, nodepool_hash(&other_lifetime.spec.template));
        // Unset and empty are the same template.
        let empty_startup = pool(json!({"startupTaints": []}));
        assert_eq!(base, nodepool_hash(&empty_startup.spec.template));
    }

    #[test]
    fn a_planned_claim_becomes_an_owned_finalized_labelled_nodeclaim() {
        let pool = pool(json!({}));
        let mut requirements = Requirements::new();
        requirements.add(labels::ZONE, Requirement::is_in(["us-west-2a"]));
        requirements.add(
            labels::CAPACITY_TYPE,
            Requirement::is_in(["spot", "on-demand"]),
        );
        // Custom keys the cloud does not settle get a value satisfying them, so a pod
        // selecting one can land on the node.
        requirements.add("test-key-3", Requirement::not_in(["x"]));
        requirements.add("test-key-4", Requirement::exists());
        requirements.add(
            "test-key-5",
            Requirement::new(crate::vocab::Operator::Gt, &["5".to_owned()]),
        );
        requirements.add("test-key-6", Requirement::does_not_exist());
        let plan = PlannedNodeClaim {
            nodepool: "general".into(),
            requirements,
            instance_types: vec![
                option("m5.xlarge", 0.08, CapacityType::Spot),
                option("c5.xlarge", 0.09, CapacityType::Spot),
                option("m5.xlarge", 0.19, CapacityType::OnDemand),
            ],
            pods: vec!["p1".into()],
            requests: Resources::cpu_memory(1500, 2 << 30).with(ResourceName::Pods, 1),
            min_values_relaxed: true,
        };
        let claim = NodeClaim::planned("general-x7k2p", &pool, &plan);
        let meta = &claim.metadata;
        assert_eq!(meta.name.as_deref(), Some("general-x7k2p"));
        assert_eq!(
            meta.finalizers.as_ref().unwrap(),
            &vec![labels::TERMINATION_FINALIZER.to_owned()]
        );
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.uid.as_str(),
                owner.block_owner_deletion
            ),
            ("NodePool", "pool-uid", Some(true))
        );
        let node_labels = meta.labels.as_ref().unwrap();
        assert_eq!(node_labels[labels::NODEPOOL], "general");
        assert_eq!(node_labels[labels::EC2NODECLASS], "default");
        assert_eq!(node_labels["team"], "web");
        assert_eq!(node_labels[labels::ZONE], "us-west-2a");
        assert!(!node_labels.contains_key(labels::INSTANCE_TYPE));
        assert!(!node_labels.contains_key(labels::CAPACITY_TYPE));
        assert_eq!(node_labels["test-key-3"], "0");
        assert_eq!(node_labels["test-key-4"], "0");
        assert_eq!(node_labels["test-key-5"], "6");
        assert!(!node_labels.contains_key("test-key-6"));
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(
            annotations[labels::NODEPOOL_HASH],
            nodepool_hash(&pool.spec.template)
        );
        assert_eq!(
            annotations[labels::NODEPOOL_HASH_VERSION],
            NODEPOOL_HASH_VERSION
        );
        assert_eq!(annotations[labels::MIN_VALUES_RELAXED], "true");
        assert_eq!(annotations["note"], "x");
        let listed = |key: &str| {
            claim
                .spec
                .requirements
                .iter()
                .find(|r| r.key == key)
                .map(|r| r.values.clone())
                .unwrap()
        };
        // Cheapest first, each once.
        assert_eq!(
            listed(labels::INSTANCE_TYPE),
            vec!["m5.xlarge", "c5.xlarge"]
        );
        assert_eq!(listed(labels::CAPACITY_TYPE), vec!["on-demand", "spot"]);
        let requests = &claim.spec.resources.as_ref().unwrap().requests;
        assert_eq!(requests["cpu"].0, "1500m");
        assert_eq!(requests["pods"].0, "1");
        assert_eq!(claim.spec.taints.len(), 2);
        assert_eq!(claim.spec.node_class_ref.name, "default");
        // It is a valid manifest for the API server.
        let value = serde_json::to_value(&claim).unwrap();
        assert_eq!(value["apiVersion"], "karpenter.sh/v1");
        assert_eq!(value["kind"], "NodeClaim");
    }

    #[test]
    fn drift_is_a_changed_template_or_a_label_no_longer_allowed() {
        let original = pool(json!({}));
        let mut requirements = Requirements::new();
        requirements.add(labels::ZONE, Requirement::is_in(["us-west-2a"]));
        let plan = PlannedNodeClaim {
            nodepool: "general".into(),
            requirements,
            instance_types: vec![option("m5.xlarge", 0.08, CapacityType::Spot)],
            pods: vec!["p1".into()],
            requests: Resources::cpu_memory(1500, 2 << 30),
            min_values_relaxed: false,
        };
        let mut claim = NodeClaim::planned("general-x7k2p", &original, &plan);
        claim
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(labels::CAPACITY_TYPE.into(), "spot".into());
        assert_eq!(drift(&claim, &original), None);
        // Requirements are not in the hash: widening them drifts nothing.
        let wider = pool(json!({"requirements": []}));
        assert_eq!(drift(&claim, &wider), None);
        let tainted = pool(json!({"taints": [{"key": "c", "effect": "NoSchedule"}]}));
        assert_eq!(
            drift(&claim, &tainted).map(|d| d.0),
            Some("NodePoolDrifted")
        );
        let on_demand_only = pool(
            json!({"requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}),
        );
        let (reason, message) = drift(&claim, &on_demand_only).unwrap();
        assert_eq!(reason, "RequirementsDrifted");
        assert!(
            message.contains("karpenter.sh/capacity-type=spot"),
            "{message}"
        );
        // A hash of another version says nothing about this one's templates.
        claim
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(labels::NODEPOOL_HASH_VERSION.into(), "v3".into());
        assert_eq!(drift(&claim, &tainted), None);
    }

    #[test]
    fn instance_types_are_capped() {
        let plan = PlannedNodeClaim {
            nodepool: "general".into(),
            requirements: Requirements::new(),
            instance_types: (0..700)
                .map(|i| option(&format!("t{i}"), f64::from(i), CapacityType::OnDemand))
                .collect(),
            pods: Vec::new(),
            requests: Resources::ZERO,
            min_values_relaxed: false,
        };
        let claim = NodeClaim::planned("default-b4q9z", &pool(json!({})), &plan);
        let types = claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == labels::INSTANCE_TYPE)
            .unwrap();
        assert_eq!(types.values.len(), MAX_INSTANCE_TYPES);
        assert_eq!(types.values[0], "t0");
        assert!(
            !claim
                .metadata
                .annotations
                .unwrap()
                .contains_key(labels::MIN_VALUES_RELAXED)
        );
    }
}
