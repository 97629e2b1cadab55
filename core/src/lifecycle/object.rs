//! The NodeClaim object where the lifecycle writes it from what lies above the API types: the
//! round's plan ([`NodeClaim::planned`]) and the launched instance ([`NodeClaim::launched`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::nodeclaim::{
    MAX_INSTANCE_TYPES, NODEPOOL_HASH_VERSION, ResourceRequirements, condition, nodepool_hash,
};
use crate::api::{NodeClaim, NodeClaimSpec, NodePool, NodeSelectorRequirementWithMinValues};
use crate::model::{InstanceType, Requirements, Resources};
use crate::ports::Instance;
use crate::scheduling::PlannedNodeClaim;
use crate::vocab::Operator;

impl NodeClaim {
    /// The NodeClaim object for a NodeClaim the round planned in `pool`: named `name` (the
    /// scheduler names claims `<nodepool>-<random>`, as upstream's `generateName` does, so the
    /// journal and the API object agree from the start), owned by the NodePool (so deleting the pool
    /// collects it) and held by the termination finalizer; labelled with the pool, its node
    /// class and a value for each requirement the cloud does not settle
    /// ([`Requirements::node_labels`]; the template's own labels win); annotated with the pool's hash (and
    /// whether minValues was relaxed); the template's taints, node class and lifetimes; the
    /// planned requirements with the instance types it may launch as, cheapest first (at
    /// most [`MAX_INSTANCE_TYPES`]) and the capacity types among them; and the pods'
    /// requests.
    pub fn planned(name: &str, pool: &NodePool, plan: &PlannedNodeClaim) -> NodeClaim {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

        use crate::vocab::labels;

        let template = &pool.spec.template;
        let pool_name = pool.metadata.name.clone().unwrap_or_default();
        let (requirements, listed) = launch_requirements(plan);
        let metadata = template.metadata.clone().unwrap_or_default();
        let mut node_labels = metadata.labels.clone();
        for (key, value) in requirements.node_labels() {
            node_labels.entry(key).or_insert(value);
        }
        node_labels.insert(labels::NODEPOOL.to_owned(), pool_name.clone());
        let class = &template.spec.node_class_ref;
        node_labels.insert(
            format!("{}/{}", class.group, class.kind.to_lowercase()),
            class.name.clone(),
        );
        let mut annotations = metadata.annotations.clone();
        annotations.insert(labels::NODEPOOL_HASH.to_owned(), nodepool_hash(template));
        annotations.insert(
            labels::NODEPOOL_HASH_VERSION.to_owned(),
            NODEPOOL_HASH_VERSION.to_owned(),
        );
        if plan.min_values_relaxed {
            annotations.insert(labels::MIN_VALUES_RELAXED.to_owned(), "true".to_owned());
        }
        let requests = plan
            .requests
            .to_quantities()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), Quantity(value)))
            .collect();
        NodeClaim {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(node_labels),
                annotations: Some(annotations),
                finalizers: Some(vec![labels::TERMINATION_FINALIZER.to_owned()]),
                owner_references: Some(vec![OwnerReference {
                    api_version: "karpenter.sh/v1".to_owned(),
                    kind: "NodePool".to_owned(),
                    name: pool_name,
                    uid: pool.metadata.uid.clone().unwrap_or_default(),
                    block_owner_deletion: Some(true),
                    controller: None,
                }]),
                ..ObjectMeta::default()
            },
            spec: NodeClaimSpec {
                taints: template.spec.taints.clone(),
                startup_taints: template.spec.startup_taints.clone(),
                requirements: listed,
                resources: Some(ResourceRequirements { requests }),
                node_class_ref: class.clone(),
                termination_grace_period: template.spec.termination_grace_period,
                expire_after: template.spec.expire_after,
            },
            status: None,
        }
    }

    /// What launching tells the NodeClaim: the instance's provider id and image, the capacity
    /// and allocatable of its type, and the labels the instance settled (its type's labels,
    /// zone, capacity type) so the Node registers with them; `Launched` becomes True.
    pub fn launched(
        &mut self,
        instance: &Instance,
        instance_type: Option<&InstanceType>,
        now: Time,
    ) {
        let quantities = |r: Resources| -> BTreeMap<String, Quantity> {
            r.to_quantities()
                .into_iter()
                .map(|(name, value)| (name.to_owned(), Quantity(value)))
                .collect()
        };
        self.metadata
            .labels
            .get_or_insert_with(Default::default)
            .extend(instance.node_labels(instance_type));
        let status = self.status.get_or_insert_with(Default::default);
        status.provider_id = Some(instance.provider_id.clone());
        status.image_id = Some(instance.image_id.clone()).filter(|i| !i.is_empty());
        if let Some(t) = instance_type {
            status.capacity = quantities(t.capacity);
            status.allocatable = quantities(t.allocatable());
        }
        self.set_condition(condition::LAUNCHED, true, condition::LAUNCHED, "", now);
    }
}

/// The planned requirements narrowed to the instance types the NodeClaim may launch as
/// (cheapest first, at most [`MAX_INSTANCE_TYPES`]) and the capacity types among them; and
/// the same in the API's form, the instance types kept in price order as the launch tries
/// them.
fn launch_requirements(
    plan: &PlannedNodeClaim,
) -> (Requirements, Vec<NodeSelectorRequirementWithMinValues>) {
    use crate::model::Requirement;
    use crate::vocab::labels;

    let mut requirements = plan.requirements.clone();
    let mut instance_types: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for option in &plan.instance_types {
        if instance_types.len() == MAX_INSTANCE_TYPES {
            break;
        }
        if seen.insert(&*option.name) {
            instance_types.push(option.name.to_string());
        }
    }
    let mut capacity_types: Vec<String> = plan
        .instance_types
        .iter()
        .map(|o| o.capacity_type.as_str().to_owned())
        .collect();
    capacity_types.sort();
    capacity_types.dedup();
    let narrowed = |key: &str, values: &[String]| {
        let mut r = Requirement::is_in(values.iter().cloned());
        if let Some(current) = plan.requirements.get(key) {
            r = current.intersect(&r);
            r.min_values = current.min_values;
        }
        r
    };
    if !instance_types.is_empty() {
        requirements.add(
            labels::INSTANCE_TYPE,
            narrowed(labels::INSTANCE_TYPE, &instance_types),
        );
    }
    if !capacity_types.is_empty() {
        requirements.add(
            labels::CAPACITY_TYPE,
            narrowed(labels::CAPACITY_TYPE, &capacity_types),
        );
    }
    let mut listed = requirements.to_api();
    // Keep the instance types in price order, as the launch tries them.
    for r in &mut listed {
        if r.key == labels::INSTANCE_TYPE && r.operator == Operator::In {
            let allowed: std::collections::HashSet<&String> = r.values.iter().collect();
            let ordered = instance_types
                .iter()
                .filter(|n| allowed.contains(n))
                .cloned()
                .collect();
            r.values = ordered;
        }
    }
    (requirements, listed)
}
