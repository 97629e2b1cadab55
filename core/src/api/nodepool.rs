//! `karpenter.sh/v1` NodePool: a template for NodeClaims plus limits and disruption settings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::requirements::NodeSelectorRequirementWithMinValues;
use crate::vocab::duration::{KDuration, NillableDuration};

/// The desired state of a NodePool.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    category = "karpenter",
    status = "NodePoolStatus",
    derive = "PartialEq",
    doc = "NodePool is the Schema for the NodePools API",
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","jsonPath":".status.nodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#,
    printcolumn = r#"{"name":"CPU","type":"string","jsonPath":".status.resources.cpu","priority":1}"#,
    printcolumn = r#"{"name":"Memory","type":"string","jsonPath":".status.resources.memory","priority":1}"#,
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = nodepool_spec_schema)]
pub struct NodePoolSpec {
    /// Template for the NodeClaims this NodePool creates.
    pub template: NodeClaimTemplate,
    /// How and when Karpenter may disrupt nodes of this NodePool.
    #[serde(default)]
    pub disruption: Disruption,
    /// Caps on the total resources of this NodePool's nodes; Karpenter launches nothing beyond them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// Priority among NodePools: higher weights are tried first (1..100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// A static NodePool's fixed node count (upstream's alpha static provisioning): accepted as
    /// upstream's schema accepts it, not acted on yet (the controller reports it on the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// Upstream's defaulting of `disruption` when it is left out: `{consolidateAfter: 0s}`, the
/// rest filled in by the fields' own defaults.
fn nodepool_spec_schema(schema: &mut schemars::Schema) {
    if let Some(disruption) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("disruption"))
        .and_then(|d| d.as_object_mut())
    {
        disruption.insert(
            "default".into(),
            serde_json::json!({"consolidateAfter": "0s"}),
        );
    }
}

/// Labels and annotations put on every node of the pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels for the nodes; restricted domains are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::schema::node_labels)]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::schema::granular_map)]
    pub annotations: BTreeMap<String, String>,
}

/// The template of the NodeClaims a NodePool creates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations for the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The NodeClaim spec every node of this pool starts from.
    pub spec: NodeClaimTemplateSpec,
}

/// The NodeClaim fields a NodePool template sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints the nodes carry for their whole life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::taints)]
    pub taints: Vec<Taint>,
    /// Taints present at start-up that something else removes; pods need not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::taints)]
    pub startup_taints: Vec<Taint>,
    /// Constraints on the nodes' labels (instance types, zones, capacity types, …).
    #[schemars(length(max = 100), transform = super::schema::atomic_list)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The cloud-provider node class these nodes use.
    pub node_class_ref: NodeClassReference,
    /// How long Karpenter waits for a node to drain before forcefully deleting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KDuration>,
    /// How long a node lives before Karpenter replaces it, or `Never`.
    #[serde(default = "default_expire_after")]
    #[schemars(default = "default_expire_after")]
    pub expire_after: NillableDuration,
}

/// The default `expireAfter`: 720h (30 days).
pub fn default_expire_after() -> NillableDuration {
    NillableDuration::from_secs(720 * 3600)
}

/// A reference to a node class (e.g. an EC2NodeClass).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// Kind of the node class, e.g. `EC2NodeClass`.
    pub kind: String,
    /// Name of the node class.
    pub name: String,
    /// API group of the node class, e.g. `karpenter.k8s.aws`.
    #[schemars(regex(pattern = r"^[^/]*$"))]
    pub group: String,
}

/// When Karpenter may consolidate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only remove empty nodes.
    WhenEmpty,
    /// Remove empty nodes and replace or remove underutilized ones.
    #[default]
    WhenEmptyOrUnderutilized,
    /// Upstream's cost-versus-churn consolidation: a move goes ahead when the share of the
    /// pool's cost it saves is at least half the share of the pool's disruption it causes
    /// (`crate::disruption::balanced`).
    Balanced,
}

impl NodePool {
    /// `spec.limits.nodes`, rounded up (`None` when unset or not a quantity, which
    /// validation refuses).
    pub fn node_limit(&self) -> Option<i64> {
        let nodes = self.spec.limits.as_ref()?.get("nodes")?;
        crate::model::quantity::Quantity::parse(&nodes.0)
            .ok()
            .map(|q| q.units_ceil())
    }

    /// Whether it is a static NodePool (`spec.replicas` set): it keeps that many nodes
    /// whatever pods need, and is never provisioned for pending pods or consolidated.
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }
}

impl ConsolidationPolicy {
    /// The name the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsolidationPolicy::WhenEmpty => "WhenEmpty",
            ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
            ConsolidationPolicy::Balanced => "Balanced",
        }
    }
}

/// Why Karpenter disrupts a node, as budgets name them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum DisruptionReason {
    /// The node can be removed or replaced by something cheaper.
    Underutilized,
    /// The node runs no workload pods.
    Empty,
    /// The node no longer matches its NodePool or NodeClass.
    Drifted,
}

/// Disruption settings of a NodePool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long after a pod was added or removed a node may be consolidated, or `Never`.
    /// Required once `disruption` is given, as upstream has it.
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation may act on.
    #[serde(default)]
    #[schemars(default = "default_consolidation_policy")]
    pub consolidation_policy: ConsolidationPolicy,
    /// How many nodes may be voluntarily disrupted at once; the most restrictive active budget wins.
    #[serde(default = "default_budgets")]
    #[schemars(
        default = "default_budgets",
        length(max = 50),
        transform = super::schema::atomic_list
    )]
    pub budgets: Vec<Budget>,
}

fn default_consolidation_policy() -> ConsolidationPolicy {
    ConsolidationPolicy::WhenEmptyOrUnderutilized
}

/// The default `consolidateAfter`: 0s.
pub fn default_consolidate_after() -> NillableDuration {
    NillableDuration::from_secs(0)
}

/// The default budgets: `[{nodes: "10%"}]`.
pub fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: default_budget_nodes(),
        schedule: None,
        duration: None,
        reasons: Vec::new(),
    }]
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_budget_nodes() -> String {
    "10%".into()
}

/// A limit on concurrent voluntary disruptions, optionally active only in a cron window.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = budget_schema)]
pub struct Budget {
    /// A node count (`"5"`) or a percentage of the pool's nodes (`"10%"`).
    #[serde(default = "default_budget_nodes")]
    #[schemars(
        default = "default_budget_nodes",
        regex(pattern = r"^((100|[0-9]{1,2})%|[0-9]+)$")
    )]
    pub nodes: String,
    /// When the budget becomes active: a 5-field cron expression in UTC or `@daily`-style macro.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
    ))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (hours and minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<String>,
    /// The disruption reasons the budget applies to; all when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), transform = super::schema::set_list)]
    pub reasons: Vec<DisruptionReason>,
}

/// Upstream requires `nodes` although it has a default (the default fills it in first).
fn budget_schema(schema: &mut schemars::Schema) {
    schema.insert("required".into(), serde_json::json!(["nodes"]));
}

/// The observed state of a NodePool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Summed capacity of the pool's nodes (including `nodes`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    /// Number of nodes in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(default = "no_nodes")]
    pub nodes: Option<i64>,
    /// The NodeClass generation last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// `Ready`, `ValidationSucceeded`, `NodeClassReady`, `NodeRegistrationHealthy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::conditions)]
    pub conditions: Vec<Condition>,
}

fn no_nodes() -> Option<i64> {
    Some(0)
}
