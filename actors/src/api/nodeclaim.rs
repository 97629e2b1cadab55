//! `karpenter.sh/v1` NodeClaim: one requested node, from launch to termination.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::duration::{KDuration, NillableDuration};
use super::nodepool::{NodeClassReference, default_expire_after};
use super::requirements::NodeSelectorRequirementWithMinValues;

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
    pub taints: Vec<Taint>,
    /// Taints present at start-up that something else removes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// The narrowed requirements: instance types (price-ordered), zones, capacity types, ….
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
    pub conditions: Vec<Condition>,
}
