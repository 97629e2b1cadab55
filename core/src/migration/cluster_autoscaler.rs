//! `karpenter migrate from-cluster-autoscaler`: NodePools and EC2NodeClasses that cover what
//! a cluster's node groups offer, proposed from its Nodes and, with `--cloud aws`, its Auto
//! Scaling groups.
//!
//! A node group is found by the Auto Scaling group its nodes' instances belong to, by the
//! label its manager puts on every node (`eks.amazonaws.com/nodegroup`,
//! `alpha.eksctl.io/nodegroup-name`), or, for a self-managed group, by what its nodes share
//! (instance type, capacity type, custom labels, taints). An Auto Scaling group of the
//! cluster's at zero is a group too, described by its launch template and Cluster
//! Autoscaler's node-template tags. Each becomes a NodePool ([`propose`]) that keeps the
//! group's custom labels and taints (so the pods that select or tolerate them still land
//! there) and allows the group's instance families, zones, capacity type, architecture and
//! OS, with any size: the binpacking a fixed instance type prevented is where the saving comes
//! from. Its nodes are left to the group; karpenter-rs only adds nodes of its own, so both can
//! run until the groups are drained.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::model::Taint;
use crate::vocab::labels;

pub mod asg;
mod propose;

pub use asg::AutoScalingGroup;
pub use propose::{Proposal, ProposeContext, propose};

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
    /// `spec.providerID` (`aws:///us-west-2a/i-0abc…`): which instance it is.
    pub provider_id: Option<String>,
}

/// How a group was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupSource {
    /// An EKS managed node group's label.
    EksManaged,
    /// An eksctl node group's label.
    Eksctl,
    /// A self-managed Auto Scaling group, named after it.
    AutoScalingGroup,
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
    /// The v1 AMI alias family its OS image (or launch image) names, if any.
    pub ami_family: Option<&'static str>,
    /// Its Auto Scaling groups, when they were read.
    pub asgs: Vec<AutoScalingGroup>,
    /// What a person has to check about it, naming the object and field.
    pub notes: Vec<String>,
}

/// The node groups found, and the Auto Scaling groups that are not the cluster's.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The node groups, by name.
    pub groups: Vec<NodeGroup>,
    /// Auto Scaling groups left out: no tag names the cluster and none of its nodes runs in them.
    pub other_asgs: Vec<String>,
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
    node_groups_with(nodes, &[], "").groups
}

/// Which nodes and Auto Scaling groups make up one node group.
#[derive(Default)]
struct Members<'a> {
    nodes: Vec<&'a NodeFacts>,
    asgs: BTreeSet<usize>,
}

/// The node groups of `cluster` from its Nodes and Auto Scaling groups. A node whose instance
/// an Auto Scaling group holds belongs to that group's node group; a group of the cluster's
/// that holds no Node (one at zero) is a node group of its own; Auto Scaling groups neither
/// tagged for the cluster nor holding one of its nodes are left out, by name.
pub fn node_groups_with(nodes: &[NodeFacts], asgs: &[AutoScalingGroup], cluster: &str) -> Found {
    let holder: HashMap<&str, usize> = asgs
        .iter()
        .enumerate()
        .flat_map(|(i, a)| a.instance_ids.iter().map(move |id| (id.as_str(), i)))
        .collect();
    let mut found: BTreeMap<(String, GroupSource), Members> = BTreeMap::new();
    let mut holds_a_node = vec![false; asgs.len()];
    for node in nodes
        .iter()
        .filter(|n| !n.labels.contains_key(labels::NODEPOOL))
    {
        let held = node
            .provider_id
            .as_deref()
            .and_then(asg::instance_id)
            .and_then(|id| holder.get(id).copied());
        let key = match held {
            Some(i) => asgs[i].group_key(),
            None => group_key(node),
        };
        let members = found.entry(key).or_default();
        members.nodes.push(node);
        if let Some(i) = held {
            members.asgs.insert(i);
            holds_a_node[i] = true;
        }
    }
    let mut other_asgs = Vec::new();
    for (i, group) in asgs.iter().enumerate() {
        if holds_a_node[i] {
            continue;
        }
        if group.tagged_for(cluster) {
            found.entry(group.group_key()).or_default().asgs.insert(i);
        } else {
            other_asgs.push(group.name.clone());
        }
    }
    let mut inferred = 0;
    let groups = found
        .into_iter()
        .map(|((key, source), members)| {
            let name = match (source, members.nodes.first()) {
                (GroupSource::Inferred, Some(first)) => {
                    inferred += 1;
                    let instance_type = first
                        .labels
                        .get(labels::INSTANCE_TYPE)
                        .map_or("unknown", String::as_str);
                    format!("{}-{inferred}", instance_type.replace('.', "-"))
                }
                _ => key,
            };
            let held: Vec<&AutoScalingGroup> = members.asgs.iter().map(|&i| &asgs[i]).collect();
            let mut group = group_of(name, source, &members.nodes, &held);
            if !asgs.is_empty() && held.is_empty() {
                group.notes.push(format!(
                    "NodePool/{}: no Auto Scaling group holds its nodes' instances (by their spec.providerID), so its node class and limits come from its Nodes alone",
                    object_name(&group.name)
                ));
            }
            group
        })
        .collect();
    Found { groups, other_asgs }
}

/// The values of `key` its nodes carry, or, for a group with no node, its Auto Scaling
/// groups' node-template tags give.
fn seen(members: &[&NodeFacts], asgs: &[&AutoScalingGroup], key: &str) -> BTreeSet<String> {
    if members.is_empty() {
        return asgs
            .iter()
            .filter_map(|a| a.template_labels().remove(key))
            .collect();
    }
    members
        .iter()
        .filter_map(|n| n.labels.get(key).cloned())
        .collect()
}

/// The labels and taints every member has: its nodes', or, with none, what its Auto Scaling
/// groups' node-template tags give them (and a note per tag that gives nothing).
fn shared_labels_and_taints(
    members: &[&NodeFacts],
    asgs: &[&AutoScalingGroup],
    notes: &mut Vec<String>,
) -> (BTreeMap<String, String>, Vec<Taint>) {
    let mut each: Vec<(BTreeMap<String, String>, Vec<Taint>)> = if members.is_empty() {
        asgs.iter()
            .map(|a| {
                let (taints, problems) = a.template_taints();
                notes.extend(problems);
                (a.template_labels(), taints)
            })
            .collect()
    } else {
        members
            .iter()
            .map(|n| (n.labels.clone(), n.taints.clone()))
            .collect()
    };
    let Some((mut common, taints)) = (!each.is_empty()).then(|| each.remove(0)) else {
        return Default::default();
    };
    common.retain(|k, _| custom(k));
    let mut taints: Vec<Taint> = taints.into_iter().filter(lasting).collect();
    for (labels, others) in &each {
        common.retain(|k, v| labels.get(k) == Some(v));
        taints.retain(|t| others.contains(t));
    }
    (common, taints)
}

fn group_of(
    name: String,
    source: GroupSource,
    members: &[&NodeFacts],
    asgs: &[&AutoScalingGroup],
) -> NodeGroup {
    let mut notes = Vec::new();
    let (common, taints) = shared_labels_and_taints(members, asgs, &mut notes);
    let mut families: BTreeSet<&'static str> = members
        .iter()
        .filter_map(|n| ami_family(n.os_image.as_deref()))
        .collect();
    if families.is_empty() {
        families = asgs.iter().filter_map(|a| a.ami_family()).collect();
    }
    let mut instance_types = seen(members, &[], labels::INSTANCE_TYPE);
    let mut zones = seen(members, &[], labels::ZONE);
    let mut capacity_types: BTreeSet<String> = members.iter().map(|n| capacity_type(n)).collect();
    for group in asgs {
        instance_types.extend(group.instance_types());
        zones.extend(group.zones.iter().cloned());
        capacity_types.extend(group.capacity_types());
        notes.extend(asg_notes(group, &object_name(&name)));
    }
    NodeGroup {
        source,
        nodes: members.iter().map(|n| n.name.clone()).collect(),
        instance_types,
        zones,
        capacity_types,
        archs: seen(members, asgs, labels::ARCH),
        oses: seen(members, asgs, labels::OS),
        labels: common,
        taints,
        ami_family: (families.len() == 1)
            .then(|| families.into_iter().next())
            .flatten(),
        asgs: asgs.iter().map(|a| (*a).clone()).collect(),
        notes,
        name,
    }
}

/// What a person has to decide about an Auto Scaling group a NodePool cannot say the same way.
fn asg_notes(group: &AutoScalingGroup, pool: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let name = &group.name;
    if group.attribute_based {
        notes.push(format!(
            "NodePool/{pool}: AutoScalingGroup/{name} picks instance types by attributes (InstanceRequirements); the NodePool allows only the families of the types named or seen: widen spec.template.spec.requirements (karpenter.k8s.aws/instance-cpu, karpenter.k8s.aws/instance-memory) to match"
        ));
    }
    if let Some(d) = group
        .distribution
        .filter(|_| group.capacity_types().len() == 2)
    {
        notes.push(format!(
            "NodePool/{pool}: AutoScalingGroup/{name} keeps {} on-demand instance(s) and {} % on-demand above them; the NodePool allows both and karpenter-rs launches spot wherever it is cheaper: for a fixed on-demand share, split it into an on-demand and a spot NodePool",
            d.on_demand_base, d.on_demand_percent
        ));
    }
    if group.launch.is_none() {
        notes.push(format!(
            "NodePool/{pool}: AutoScalingGroup/{name} has no launch template or launch configuration that could be read, so its node class takes only the group's subnets: its security groups, AMI and role are stand-ins to check"
        ));
    }
    if group.instance_types().is_empty() {
        notes.push(format!(
            "NodePool/{pool}: AutoScalingGroup/{name} names no instance type: set the karpenter.k8s.aws/instance-family requirement by hand"
        ));
    }
    notes
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

#[cfg(test)]
mod tests;
