//! The proposal: a NodePool per node group and the EC2NodeClasses they name. With the
//! group's Auto Scaling groups read, a node class takes their exact subnets, security groups,
//! instance profile, AMI and volumes, and the NodePool their maximum size as a CPU limit;
//! without, it selects by the `karpenter.sh/discovery` tag and says what to check.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::asg::{BlockDevice, LaunchSpec, ami_family_field, profile_name};
use super::{NodeGroup, object_name};
use crate::model::catalog::InstanceTypeInfo;
use crate::vocab::labels;

/// What a proposal is made for.
#[derive(Debug, Clone, Copy)]
pub struct ProposeContext<'a> {
    /// The EKS cluster's name: discovery tags and the default node role name it.
    pub cluster: &'a str,
    /// The region's instance types, for the vCPUs behind a group's maximum size.
    pub instance_types: &'a [InstanceTypeInfo],
}

/// The proposal: documents and what a person has to check.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The node groups found.
    pub groups: Vec<NodeGroup>,
    /// NodePools, then EC2NodeClasses.
    pub documents: Vec<Value>,
    /// Things to check or do by hand, each naming the object and field.
    pub manual: Vec<String>,
}

/// One EC2NodeClass of the proposal.
struct Class {
    name: String,
    spec: Value,
    /// What to check, each a field and why.
    notes: Vec<String>,
}

/// NodePools and EC2NodeClasses covering `groups`.
pub fn propose(groups: &[NodeGroup], ctx: &ProposeContext<'_>) -> Proposal {
    let mut manual = Vec::new();
    let mut pools = Vec::new();
    let mut classes: Vec<Class> = Vec::new();
    for group in groups {
        manual.extend(group.notes.iter().cloned());
        let pool = object_name(&group.name);
        let (family, spec, notes) = class_spec(group, ctx.cluster);
        let class = match classes.iter().find(|c| c.spec == spec) {
            Some(class) => class.name.clone(),
            None => {
                let taken = |name: &str| classes.iter().any(|c| c.name == name);
                let mut name = if taken(family) {
                    pool.clone()
                } else {
                    family.to_owned()
                };
                let mut n = 1;
                while taken(&name) {
                    n += 1;
                    name = format!("{pool}-{n}");
                }
                classes.push(Class {
                    name: name.clone(),
                    spec,
                    notes,
                });
                name
            }
        };
        if group.ami_family.is_none() {
            manual.push(format!(
                "NodePool/{pool}: the nodes' OS image names no AMI family karpenter-rs has an alias for; it uses EC2NodeClass/{class} ({family}): check it boots what your workloads need"
            ));
        }
        pools.push(node_pool(group, &pool, &class, ctx, &mut manual));
    }
    classes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut documents = pools;
    for class in classes {
        manual.extend(
            class
                .notes
                .iter()
                .map(|n| format!("EC2NodeClass/{}: {n}", class.name)),
        );
        documents.push(json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": class.name},
            "spec": class.spec,
        }));
    }
    Proposal {
        groups: groups.to_vec(),
        documents,
        manual,
    }
}

fn node_pool(
    group: &NodeGroup,
    pool: &str,
    class: &str,
    ctx: &ProposeContext<'_>,
    manual: &mut Vec<String>,
) -> Value {
    let families: BTreeSet<String> = group
        .instance_types
        .iter()
        .filter_map(|t| t.split_once('.').map(|(f, _)| f.to_owned()))
        .collect();
    let mut requirements = Vec::new();
    if !families.is_empty() {
        requirements.push(json!({
            "key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": families
        }));
    }
    for (key, values) in [
        (labels::CAPACITY_TYPE, &group.capacity_types),
        (labels::ZONE, &group.zones),
        (labels::ARCH, &group.archs),
        (labels::OS, &group.oses),
    ] {
        if !values.is_empty() {
            requirements.push(json!({"key": key, "operator": "In", "values": values}));
        }
    }
    let mut template = json!({
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class},
            "requirements": requirements,
        }
    });
    if !group.labels.is_empty() {
        template["metadata"] = json!({ "labels": group.labels });
    }
    if !group.taints.is_empty() {
        template["spec"]["taints"] = Value::Array(
            group
                .taints
                .iter()
                .map(|t| {
                    let mut taint = json!({"key": t.key, "effect": t.effect});
                    if !t.value.is_empty() {
                        taint["value"] = json!(t.value);
                    }
                    taint
                })
                .collect(),
        );
    }
    let mut spec = json!({
        "template": template,
        // Cluster Autoscaler removes a node under 50 % for 10 minutes; consolidation
        // waits as long before it acts.
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10m"},
    });
    if let Some(cpu) = cpu_limit(group, pool, ctx, manual) {
        spec["limits"] = json!({ "cpu": cpu.to_string() });
    }
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": pool},
        "spec": spec,
    })
}

/// The vCPUs the group's Auto Scaling groups could reach at their maximum size, with their
/// largest instance type: as far as Cluster Autoscaler could grow them.
fn cpu_limit(
    group: &NodeGroup,
    pool: &str,
    ctx: &ProposeContext<'_>,
    manual: &mut Vec<String>,
) -> Option<i64> {
    if group.asgs.is_empty() {
        return None;
    }
    let max_nodes: i64 = group.asgs.iter().map(|a| a.max_size).sum();
    let vcpus = |t: &String| {
        ctx.instance_types
            .iter()
            .find(|i| i.name == *t)
            .map(|i| i.vcpus)
    };
    let unknown: Vec<&str> = group
        .instance_types
        .iter()
        .filter(|t| vcpus(t).is_none())
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() || group.instance_types.is_empty() {
        let why = if unknown.is_empty() {
            "no instance type of the group is known".to_owned()
        } else {
            format!("the catalog does not know {}", unknown.join(", "))
        };
        manual.push(format!(
            "NodePool/{pool}: spec.limits is left out: {why}, so the groups' maximum size of {max_nodes} could not be turned into vCPUs: set spec.limits.cpu by hand"
        ));
        return None;
    }
    let largest = group.instance_types.iter().filter_map(vcpus).max()?;
    if max_nodes == 0 {
        manual.push(format!(
            "NodePool/{pool}: spec.limits.cpu is 0 because the Auto Scaling groups' maximum size is 0: the NodePool launches nothing until you raise it"
        ));
    }
    Some(max_nodes * largest)
}

/// The EC2NodeClass spec a group needs, the alias family it boots, and what to check.
fn class_spec(group: &NodeGroup, cluster: &str) -> (&'static str, Value, Vec<String>) {
    let family = group.ami_family.unwrap_or("al2023");
    let launches: Vec<&LaunchSpec> = group
        .asgs
        .iter()
        .filter_map(|a| a.launch.as_ref())
        .collect();
    let mut notes = Vec::new();
    let mut spec = Map::new();
    let images: BTreeSet<&str> = launches
        .iter()
        .filter_map(|l| l.image_id.as_deref())
        .collect();
    if group.ami_family.is_some() && !images.is_empty() {
        spec.insert("amiFamily".into(), json!(ami_family_field(family)));
        spec.insert(
            "amiSelectorTerms".into(),
            Value::Array(images.iter().map(|id| json!({ "id": id })).collect()),
        );
        notes.push(format!(
            "spec.amiSelectorTerms pins {}, the image the node groups launch: replace it with [{{alias: {family}@latest}}] and drop spec.amiFamily to take each new EKS image (nodes are then replaced as drifted)",
            images.into_iter().collect::<Vec<_>>().join(", ")
        ));
    } else {
        spec.insert(
            "amiSelectorTerms".into(),
            json!([{ "alias": format!("{family}@latest") }]),
        );
    }
    let subnets = distinct(group.asgs.iter().flat_map(|a| a.subnet_ids.iter()));
    let groups = distinct(launches.iter().flat_map(|l| l.security_group_ids.iter()));
    for (field, ids, what) in [
        ("subnetSelectorTerms", subnets, "subnets"),
        ("securityGroupSelectorTerms", groups, "security groups"),
    ] {
        let terms = if ids.is_empty() {
            notes.push(format!(
                "spec.{field} selects what is tagged karpenter.sh/discovery={cluster}: tag the {what} your node groups use, or select them by id"
            ));
            json!([{"tags": {"karpenter.sh/discovery": cluster}}])
        } else {
            Value::Array(ids.iter().map(|id| json!({ "id": id })).collect())
        };
        spec.insert(field.into(), terms);
    }
    let profiles = distinct(
        launches
            .iter()
            .filter_map(|l| l.instance_profile.as_deref())
            .map(profile_name),
    );
    if let [profile] = profiles.as_slice() {
        spec.insert("instanceProfile".into(), json!(profile));
    } else {
        spec.insert("role".into(), json!(format!("KarpenterNodeRole-{cluster}")));
        notes.push(if profiles.is_empty() {
            format!(
                "spec.role KarpenterNodeRole-{cluster} must be the IAM role your nodes use (the node groups' instance role will do)"
            )
        } else {
            format!(
                "spec.role KarpenterNodeRole-{cluster} stands in for the node groups' instance profiles {}: set spec.instanceProfile to one of them, or spec.role to their role",
                profiles.join(", ")
            )
        });
    }
    let volumes = distinct(
        launches
            .iter()
            .filter(|l| !l.block_devices.is_empty())
            .map(|l| &l.block_devices),
    );
    if let Some(first) = volumes.first() {
        spec.insert(
            "blockDeviceMappings".into(),
            Value::Array(first.iter().map(block_device).collect()),
        );
        if volumes.len() > 1 {
            notes.push(
                "spec.blockDeviceMappings takes the first node group's volumes; the others ask for different ones: check the sizes".to_owned(),
            );
        }
    }
    for launch in launches.iter().filter(|l| l.has_user_data) {
        notes.push(format!(
            "{} carries user data; karpenter-rs writes the {family} bootstrap itself: move any extra node set-up into spec.userData",
            launch.source
        ));
    }
    (family, Value::Object(spec), notes)
}

/// Each value once, in the order first seen.
fn distinct<T: PartialEq + Clone>(values: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for value in values {
        if !out.contains(&value) {
            out.push(value);
        }
    }
    out
}

fn block_device(device: &BlockDevice) -> Value {
    let mut ebs = Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            ebs.insert(key.into(), value);
        }
    };
    put(
        "volumeSize",
        device.volume_size_gib.map(|g| json!(format!("{g}Gi"))),
    );
    put("volumeType", device.volume_type.clone().map(Value::from));
    put("iops", device.iops.map(Value::from));
    put("throughput", device.throughput.map(Value::from));
    put("encrypted", device.encrypted.map(Value::from));
    put("kmsKeyID", device.kms_key_id.clone().map(Value::from));
    put(
        "deleteOnTermination",
        device.delete_on_termination.map(Value::from),
    );
    put("snapshotID", device.snapshot_id.clone().map(Value::from));
    json!({"deviceName": device.device_name, "ebs": ebs})
}
