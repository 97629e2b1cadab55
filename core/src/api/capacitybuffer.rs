//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer (SIG Autoscaling's headroom API, upstream's
//! `CapacityBuffer` feature gate): spare capacity kept ready without balloon pods. A buffer
//! names the shape of one chunk, a PodTemplate (`podTemplateRef`) or a workload's pod
//! template (`scalableRef`: a Deployment, StatefulSet or ReplicaSet), and how many chunks to
//! keep: `replicas`, a `percentage` of the workload's replicas, or as many as fit in
//! `limits`. What a buffer resolves to and how its chunks take part in rounds is
//! [`crate::scheduling::buffers`]' to say.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validation::{FieldPath, Problems, Validate};

/// The only provisioning strategy: chunks scale the cluster up as pending pods would.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// The desired state of a CapacityBuffer.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    singular = "capacitybuffer",
    shortname = "cb",
    category = "autoscaling",
    namespaced,
    status = "CapacityBufferStatus",
    derive = "PartialEq",
    doc = "CapacityBuffer is the configuration that an autoscaler can use to provision buffer capacity within a cluster",
    printcolumn = r#"{"name":"Strategy","type":"string","jsonPath":".spec.provisioningStrategy","description":"The strategy to be used."}"#,
    printcolumn = r#"{"name":"PodTemplate","type":"string","jsonPath":".status.podTemplateRef.name","description":"The name of the PodTemplate used."}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas","description":"The actual number of buffer chunks."}"#,
    printcolumn = r#"{"name":"ConditionsType","type":"string","jsonPath":".status.conditions[*].type","description":"List of all condition types."}"#,
    printcolumn = r#"{"name":"ConditionsStatus","type":"string","jsonPath":".status.conditions[*].status","description":"List of all condition statuses."}"#,
    printcolumn = r#"{"name":"ConditionsReason","type":"string","jsonPath":".status.conditions[*].reason","description":"List of all condition reasons."}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"The age of the CapacityBuffer."}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    /// A PodTemplate in the buffer's namespace declaring the shape of one chunk. Exactly one
    /// of `podTemplateRef` and `scalableRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A workload with a scale subresource whose pod template is the shape of one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// How the buffer is used; only `buffer.x-k8s.io/active-capacity` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "strategy")]
    pub provisioning_strategy: Option<String>,
    /// How many chunks to keep. With `percentage`, the larger of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Chunks as a percentage of the `scalableRef` workload's replicas, rounded up (at least
    /// one when the workload runs any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// Resource totals the chunks may not exceed; alone, as many chunks as fit in them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
}

fn strategy(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "default": ACTIVE_CAPACITY,
        "description": "How the buffer is used; only buffer.x-k8s.io/active-capacity (the default).",
    })
}

/// A reference to an object in the same namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectRef {
    /// The referent's name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A reference to a workload with a scale subresource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// The referent's API group (empty for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// The referent's kind.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// The referent's name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The observed state of a CapacityBuffer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// `ReadyForProvisioning` (its template resolved) and `Provisioning` (its chunks fit on
    /// capacity the cluster has).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::conditions)]
    pub conditions: Vec<Condition>,
    /// The generation of the PodTemplate last resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// The PodTemplate last resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// The strategy in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// How many chunks are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// What admission checks (the CRD's CEL rules); what a buffer's references resolve to is
/// its status' to say.
impl Validate for CapacityBuffer {
    fn validate(&self) -> Problems {
        let mut problems = Problems::default();
        let spec = FieldPath::new("spec");
        let s = &self.spec;
        if s.pod_template_ref.is_some() && s.scalable_ref.is_some() {
            problems.push(&spec, MSG_BOTH_REFS);
        }
        if s.pod_template_ref.is_some() && s.replicas.is_none() && s.limits.is_none() {
            problems.push(&spec, MSG_TEMPLATE_NEEDS_SIZE);
        }
        problems
    }
}

/// Upstream's message for a buffer naming both a PodTemplate and a workload.
pub const MSG_BOTH_REFS: &str =
    "You must define either PodTemplateRef or ScalableRef, but not both";
/// Upstream's message for a PodTemplate buffer with neither replicas nor limits.
pub const MSG_TEMPLATE_NEEDS_SIZE: &str =
    "If podTemplateRef is set, replicas or limits must also be set";
