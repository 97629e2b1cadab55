//! `karpenter migrate from-cluster-autoscaler`: NodePools and EC2NodeClasses that cover what
//! a cluster's node groups offer, proposed from its Nodes.
//!
//! A node group is found by the label its manager puts on every node
//! (`eks.amazonaws.com/nodegroup`, `alpha.eksctl.io/nodegroup-name`), or, for a self-managed
//! group, by what its nodes share (instance type, capacity type, custom labels, taints). Each
//! becomes a NodePool that keeps the group's custom labels and taints (so the pods that
//! select or tolerate them still land there) and allows the group's instance families, zones,
//! capacity type, architecture and OS, with any size: the binpacking a fixed instance type
//! prevented is where the saving comes from. Its nodes are left to the group; karpenter-rs
//! only adds nodes of its own, so both can run until the groups are drained.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::model::Taint;
use crate::vocab::labels;

/// What a proposal reads of one Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// `status.nodeInfo.osImage` (`Amazon Linux 2023.6.20241031`, `Bottlerocket OS 1.26.1 …`).
    pub os_image: Option<String>,
}

/// How a group was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSource {
    /// An EKS managed node group's label.
    EksManaged,
    /// An eksctl node group's label.
    Eksctl,
    /// Inferred from what the nodes share (a self-managed Auto Scaling group).
    Inferred,
}

/// One node group as its nodes show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroup {
    /// Its name (from its label), or a name made from what its nodes share.
    pub name: String,
    /// How it was found.
    pub source: GroupSource,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// Instance types seen.
    pub instance_types: BTreeSet<String>,
    /// Zones seen.
    pub zones: BTreeSet<String>,
    /// `on-demand` / `spot`.
    pub capacity_types: BTreeSet<String>,
    /// Architectures seen.
    pub archs: BTreeSet<String>,
    /// Operating systems seen.
    pub oses: BTreeSet<String>,
    /// Custom labels every node has with the same value.
    pub labels: BTreeMap<String, String>,
    /// Taints every node has.
    pub taints: Vec<Taint>,
    /// The v1 AMI alias family its OS image names, if any.
    pub ami_family: Option<&'static str>,
}

/// Label keys set per node or by the group's manager: not the group's own labels.
const MANAGED_PREFIXES: &[&str] = &[
    "kubernetes.io/",
    "beta.kubernetes.io/",
    "node.kubernetes.io/",
    "failure-domain.beta.kubernetes.io/",
    "topology.kubernetes.io/",
    "topology.k8s.aws/",
    "topology.ebs.csi.aws.com/",
    "eks.amazonaws.com/",
    "alpha.eksctl.io/",
    "k8s.io/cloud-provider-aws",
    "node-role.kubernetes.io/",
    "karpenter.sh/",
    "karpenter.k8s.aws/",
];

const EKS_NODEGROUP: &str = "eks.amazonaws.com/nodegroup";
const EKS_CAPACITY_TYPE: &str = "eks.amazonaws.com/capacityType";
const EKSCTL_NODEGROUP: &str = "alpha.eksctl.io/nodegroup-name";
const LIFECYCLE: &str = "node.kubernetes.io/lifecycle";

fn custom(key: &str) -> bool {
    !MANAGED_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Taints a node carries for a while or that its managers set: not the group's.
fn lasting(taint: &Taint) -> bool {
    !(taint.key.starts_with("node.kubernetes.io/")
        || taint.key.starts_with("node.cloudprovider.kubernetes.io/")
        || taint.key.starts_with("karpenter.sh/")
        || taint.key == "ToBeDeletedByClusterAutoscaler"
        || taint.key == "DeletionCandidateOfClusterAutoscaler")
}

fn capacity_type(node: &NodeFacts) -> String {
    let spot = node.labels.get(EKS_CAPACITY_TYPE).map(String::as_str) == Some("SPOT")
        || node.labels.get(LIFECYCLE).map(String::as_str) == Some("spot")
        || node.labels.get(labels::CAPACITY_TYPE).map(String::as_str) == Some("spot");
    if spot { "spot" } else { "on-demand" }.to_owned()
}

fn ami_family(os_image: Option<&str>) -> Option<&'static str> {
    let image = os_image?.to_ascii_lowercase();
    if image.contains("bottlerocket") {
        Some("bottlerocket")
    } else if image.starts_with("amazon linux 2023") {
        Some("al2023")
    } else if image.starts_with("amazon linux 2") {
        Some("al2")
    } else if image.contains("windows server 2022") {
        Some("windows2022")
    } else if image.contains("windows server 2019") {
        Some("windows2019")
    } else {
        None
    }
}

/// What identifies a node's group, and how.
fn group_key(node: &NodeFacts) -> (String, GroupSource) {
    if let Some(group) = node.labels.get(EKS_NODEGROUP) {
        return (group.clone(), GroupSource::EksManaged);
    }
    if let Some(group) = node.labels.get(EKSCTL_NODEGROUP) {
        return (group.clone(), GroupSource::Eksctl);
    }
    let mut key = format!(
        "{} {}",
        node.labels
            .get(labels::INSTANCE_TYPE)
            .map_or("", String::as_str),
        capacity_type(node)
    );
    for (k, v) in node.labels.iter().filter(|(k, _)| custom(k)) {
        key.push_str(&format!(" {k}={v}"));
    }
    for taint in node.taints.iter().filter(|t| lasting(t)) {
        key.push_str(&format!(" {}={}:{}", taint.key, taint.value, taint.effect));
    }
    (key, GroupSource::Inferred)
}

/// The node groups of a cluster, from its Nodes. Nodes Karpenter launched (they carry
/// `karpenter.sh/nodepool`) are not a node group's and are left out.
pub fn node_groups(nodes: &[NodeFacts]) -> Vec<NodeGroup> {
    let mut found: BTreeMap<(String, u8), Vec<&NodeFacts>> = BTreeMap::new();
    for node in nodes
        .iter()
        .filter(|n| !n.labels.contains_key(labels::NODEPOOL))
    {
        let (key, source) = group_key(node);
        found.entry((key, source as u8)).or_default().push(node);
    }
    let mut inferred = 0;
    found
        .into_iter()
        .map(|((key, _), members)| {
            let (_, source) = group_key(members[0]);
            let name = match source {
                GroupSource::Inferred => {
                    inferred += 1;
                    let instance_type = members[0]
                        .labels
                        .get(labels::INSTANCE_TYPE)
                        .cloned()
                        .unwrap_or_else(|| "unknown".into());
                    format!("{}-{inferred}", instance_type.replace('.', "-"))
                }
                _ => key,
            };
            group_of(name, source, &members)
        })
        .collect()
}

fn group_of(name: String, source: GroupSource, members: &[&NodeFacts]) -> NodeGroup {
    let seen = |key: &str| -> BTreeSet<String> {
        members
            .iter()
            .filter_map(|n| n.labels.get(key).cloned())
            .collect()
    };
    let mut common: BTreeMap<String, String> = members[0]
        .labels
        .iter()
        .filter(|(k, _)| custom(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut taints: Vec<Taint> = members[0]
        .taints
        .iter()
        .filter(|t| lasting(t))
        .cloned()
        .collect();
    for node in &members[1..] {
        common.retain(|k, v| node.labels.get(k) == Some(v));
        taints.retain(|t| node.taints.contains(t));
    }
    let families: BTreeSet<&'static str> = members
        .iter()
        .filter_map(|n| ami_family(n.os_image.as_deref()))
        .collect();
    NodeGroup {
        name,
        source,
        nodes: members.iter().map(|n| n.name.clone()).collect(),
        instance_types: seen(labels::INSTANCE_TYPE),
        zones: seen(labels::ZONE),
        capacity_types: members.iter().map(|n| capacity_type(n)).collect(),
        archs: seen(labels::ARCH),
        oses: seen(labels::OS),
        labels: common,
        taints,
        ami_family: (families.len() == 1)
            .then(|| families.into_iter().next())
            .flatten(),
    }
}

/// A name Kubernetes accepts for an object: lower case, `[a-z0-9-]`, at most 63 characters.
fn object_name(name: &str) -> String {
    let mut out: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    out.truncate(63);
    out.trim_matches('-').to_owned()
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

/// NodePools and EC2NodeClasses covering `groups`, for the cluster `cluster`.
pub fn propose(groups: &[NodeGroup], cluster: &str) -> Proposal {
    let mut documents = Vec::new();
    let mut manual = Vec::new();
    let mut classes: BTreeMap<&'static str, String> = BTreeMap::new();
    for group in groups {
        let family = group.ami_family.unwrap_or("al2023");
        if group.ami_family.is_none() {
            manual.push(format!(
                "NodePool/{}: the nodes' OS image names no AMI family karpenter-rs has an alias for; it uses EC2NodeClass/{} (al2023): check it boots what your workloads need",
                object_name(&group.name),
                family
            ));
        }
        let class = classes
            .entry(family)
            .or_insert_with(|| family.to_owned())
            .clone();
        let families: BTreeSet<String> = group
            .instance_types
            .iter()
            .filter_map(|t| t.split_once('.').map(|(f, _)| f.to_owned()))
            .collect();
        let mut requirements = vec![json!({
            "key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": families
        })];
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
        documents.push(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": object_name(&group.name)},
            "spec": {
                "template": template,
                // Cluster Autoscaler removes a node under 50 % for 10 minutes; consolidation
                // waits as long before it acts.
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10m"},
            }
        }));
    }
    for (family, name) in &classes {
        documents.push(json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": name},
            "spec": {
                "amiSelectorTerms": [{"alias": format!("{family}@latest")}],
                "role": format!("KarpenterNodeRole-{cluster}"),
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
            }
        }));
        manual.push(format!(
            "EC2NodeClass/{name}: spec.subnetSelectorTerms and spec.securityGroupSelectorTerms select what is tagged karpenter.sh/discovery={cluster}: tag the subnets and security groups your node groups use, or select them by id"
        ));
        manual.push(format!(
            "EC2NodeClass/{name}: spec.role KarpenterNodeRole-{cluster} must be the IAM role your nodes use (the node groups' instance role will do)"
        ));
    }
    Proposal {
        groups: groups.to_vec(),
        documents,
        manual,
    }
}

#[cfg(test)]
mod tests;
