//! Auto Scaling groups as Cluster Autoscaler scales them: what `--cloud aws` reads of each
//! (its tags, sizes, subnets, instances and launch template or configuration) and what that
//! says about the nodes it would start, including groups at zero, which have no Node to read.
//! The AWS reader (`karpenter_aws::autoscaling`) fills these in; everything here is pure.

use std::collections::{BTreeMap, BTreeSet};

use super::GroupSource;
use crate::model::Taint;

/// One Auto Scaling group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AutoScalingGroup {
    /// Its name.
    pub name: String,
    /// Minimum size.
    pub min_size: i64,
    /// Maximum size: what Cluster Autoscaler never scales past.
    pub max_size: i64,
    /// Desired capacity.
    pub desired: i64,
    /// Instances it holds now.
    pub instance_ids: Vec<String>,
    /// Its zones.
    pub zones: BTreeSet<String>,
    /// Its subnets (`VPCZoneIdentifier`), in order.
    pub subnet_ids: Vec<String>,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
    /// The instance types of a mixed instances policy's overrides (empty without one).
    pub override_types: Vec<String>,
    /// Some override chooses types by attributes (`InstanceRequirements`) instead of naming one.
    pub attribute_based: bool,
    /// A mixed instances policy's split between on-demand and spot, if it has one.
    pub distribution: Option<Distribution>,
    /// What it launches from, if that could be read.
    pub launch: Option<LaunchSpec>,
}

/// A mixed instances policy's `InstancesDistribution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Distribution {
    /// `OnDemandBaseCapacity` (AWS's default 0).
    pub on_demand_base: i64,
    /// `OnDemandPercentageAboveBaseCapacity` (AWS's default 100).
    pub on_demand_percent: i64,
}

/// What a launch template version or launch configuration sets, as far as a node class can
/// carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Where it was read, e.g. `launch template lt-0abc (general) version 3`.
    pub source: String,
    /// The AMI.
    pub image_id: Option<String>,
    /// The AMI's name, when EC2 could describe it.
    pub image_name: Option<String>,
    /// Its instance type, if it names one.
    pub instance_type: Option<String>,
    /// Security groups (of the template, or of its first network interface).
    pub security_group_ids: Vec<String>,
    /// Instance profile, as a name or an ARN.
    pub instance_profile: Option<String>,
    /// It carries user data.
    pub has_user_data: bool,
    /// It asks for spot (`InstanceMarketOptions`, or a launch configuration's `SpotPrice`).
    pub spot: bool,
    /// Its EBS volumes.
    pub block_devices: Vec<BlockDevice>,
}

/// One EBS volume of a launch template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockDevice {
    /// `/dev/xvda`.
    pub device_name: String,
    /// Size in GiB.
    pub volume_size_gib: Option<i64>,
    /// `gp3`, `io2`, …
    pub volume_type: Option<String>,
    /// Provisioned IOPS.
    pub iops: Option<i64>,
    /// Throughput in MiB/s (gp3).
    pub throughput: Option<i64>,
    /// Encrypted.
    pub encrypted: Option<bool>,
    /// KMS key.
    pub kms_key_id: Option<String>,
    /// Deleted with the instance.
    pub delete_on_termination: Option<bool>,
    /// Snapshot it starts from.
    pub snapshot_id: Option<String>,
}

/// Cluster Autoscaler's tag prefix for the labels of nodes a group at zero would start.
pub const TEMPLATE_LABEL: &str = "k8s.io/cluster-autoscaler/node-template/label/";
/// Cluster Autoscaler's tag prefix for their taints (`value:Effect`).
pub const TEMPLATE_TAINT: &str = "k8s.io/cluster-autoscaler/node-template/taint/";
const EKS_NODEGROUP_TAG: &str = "eks:nodegroup-name";
const EKSCTL_NODEGROUP_TAG: &str = "alpha.eksctl.io/nodegroup-name";

/// The instance of an AWS providerID (`aws:///us-west-2a/i-0abc…`).
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let id = provider_id.strip_prefix("aws://")?.rsplit('/').next()?;
    id.starts_with("i-").then_some(id)
}

impl AutoScalingGroup {
    /// Whether its tags make it one of `cluster`'s: Cluster Autoscaler's auto-discovery tag,
    /// the cloud provider's ownership tag, or the EKS or eksctl cluster tag.
    pub fn tagged_for(&self, cluster: &str) -> bool {
        self.tags
            .contains_key(&format!("k8s.io/cluster-autoscaler/{cluster}"))
            || self
                .tags
                .contains_key(&format!("kubernetes.io/cluster/{cluster}"))
            || ["eks:cluster-name", "alpha.eksctl.io/cluster-name"]
                .iter()
                .any(|k| self.tags.get(*k).map(String::as_str) == Some(cluster))
    }

    /// The node group it is: the EKS or eksctl node group its tags name, else itself.
    pub fn group_key(&self) -> (String, GroupSource) {
        if let Some(name) = self.tags.get(EKS_NODEGROUP_TAG) {
            (name.clone(), GroupSource::EksManaged)
        } else if let Some(name) = self.tags.get(EKSCTL_NODEGROUP_TAG) {
            (name.clone(), GroupSource::Eksctl)
        } else {
            (self.name.clone(), GroupSource::AutoScalingGroup)
        }
    }

    /// The instance types it launches: its overrides', else its launch template's.
    pub fn instance_types(&self) -> BTreeSet<String> {
        if !self.override_types.is_empty() {
            return self.override_types.iter().cloned().collect();
        }
        self.launch
            .iter()
            .filter_map(|l| l.instance_type.clone())
            .collect()
    }

    /// `on-demand`, `spot` or both, as its policy or launch template asks.
    pub fn capacity_types(&self) -> BTreeSet<String> {
        let (on_demand, spot) = match self.distribution {
            Some(d) if d.on_demand_percent >= 100 => (true, false),
            Some(d) if d.on_demand_percent <= 0 && d.on_demand_base <= 0 => (false, true),
            Some(_) => (true, true),
            None if self.launch.as_ref().is_some_and(|l| l.spot) => (false, true),
            None => (true, false),
        };
        [(on_demand, "on-demand"), (spot, "spot")]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, name)| name.to_owned())
            .collect()
    }

    /// The labels Cluster Autoscaler's node-template tags give its nodes.
    pub fn template_labels(&self) -> BTreeMap<String, String> {
        self.tags
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(TEMPLATE_LABEL)?.to_owned(), v.clone())))
            .filter(|(k, _)| !k.is_empty())
            .collect()
    }

    /// The taints its node-template tags give its nodes, and a line naming each tag that is
    /// not `value:Effect` (Cluster Autoscaler ignores those without a word).
    pub fn template_taints(&self) -> (Vec<Taint>, Vec<String>) {
        let mut taints = Vec::new();
        let mut problems = Vec::new();
        for (tag, value) in &self.tags {
            let Some(key) = tag.strip_prefix(TEMPLATE_TAINT) else {
                continue;
            };
            match value.rsplit_once(':') {
                Some((v, effect))
                    if !key.is_empty()
                        && ["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) =>
                {
                    taints.push(Taint::new(key, v, effect));
                }
                _ => problems.push(format!(
                    "AutoScalingGroup/{}: tag {tag}={value:?} is not VALUE:EFFECT (EFFECT NoSchedule, PreferNoSchedule or NoExecute), so no taint was made of it: add the taint to the NodePool by hand if its nodes carry one",
                    self.name
                )),
            }
        }
        (taints, problems)
    }

    /// The v1 AMI alias family its launch image's name says, if it says one.
    pub fn ami_family(&self) -> Option<&'static str> {
        image_family(self.launch.as_ref()?.image_name.as_deref()?)
    }
}

/// The v1 AMI alias family of an AMI by its name, or by the SSM parameter a launch template
/// resolves it through (`resolve:ssm:/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/…`):
/// EKS-optimized Amazon Linux 2 and 2023, Bottlerocket and Windows images name themselves.
pub fn image_family(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    if name.contains("bottlerocket") {
        Some("bottlerocket")
    } else if name.contains("al2023") || name.contains("/amazon-linux-2023/") {
        Some("al2023")
    } else if name.starts_with("amazon-eks-") || name.contains("/amazon-linux-2/") {
        Some("al2")
    } else if name.contains("windows_server-2022") {
        Some("windows2022")
    } else if name.contains("windows_server-2019") {
        Some("windows2019")
    } else {
        None
    }
}

/// The `amiFamily` an EC2NodeClass names for an alias family.
pub fn ami_family_field(family: &str) -> &'static str {
    match family {
        "al2" => "AL2",
        "bottlerocket" => "Bottlerocket",
        "windows2019" => "Windows2019",
        "windows2022" => "Windows2022",
        _ => "AL2023",
    }
}

/// An instance profile's name from its name or ARN
/// (`arn:aws:iam::123456789012:instance-profile/path/name`).
pub fn profile_name(profile: &str) -> &str {
    if profile.starts_with("arn:") {
        profile.rsplit('/').next().unwrap_or(profile)
    } else {
        profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asg(tags: &[(&str, &str)]) -> AutoScalingGroup {
        AutoScalingGroup {
            name: "nodes-a".into(),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn provider_ids_name_their_instance() {
        assert_eq!(
            instance_id("aws:///us-west-2a/i-0123456789abcdef0"),
            Some("i-0123456789abcdef0")
        );
        assert_eq!(instance_id("aws:///us-west-2a/fargate-ip-10"), None);
        assert_eq!(instance_id("kind://docker/kind/node"), None);
    }

    #[test]
    fn a_group_is_the_clusters_by_any_tag_cluster_autoscaler_or_eks_uses() {
        for tags in [
            [("k8s.io/cluster-autoscaler/prod", "owned")],
            [("kubernetes.io/cluster/prod", "shared")],
            [("eks:cluster-name", "prod")],
            [("alpha.eksctl.io/cluster-name", "prod")],
        ] {
            assert!(asg(&tags).tagged_for("prod"), "{tags:?}");
            assert!(!asg(&tags).tagged_for("staging"), "{tags:?}");
        }
        assert!(!asg(&[("k8s.io/cluster-autoscaler/enabled", "true")]).tagged_for("prod"));
    }

    #[test]
    fn node_template_tags_give_labels_and_taints_and_bad_ones_are_named() {
        let group = asg(&[
            ("k8s.io/cluster-autoscaler/node-template/label/team", "ml"),
            (
                "k8s.io/cluster-autoscaler/node-template/label/kubernetes.io/arch",
                "arm64",
            ),
            (
                "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu",
                "true:NoSchedule",
            ),
            (
                "k8s.io/cluster-autoscaler/node-template/taint/dedicated",
                ":NoExecute",
            ),
            (
                "k8s.io/cluster-autoscaler/node-template/taint/broken",
                "true",
            ),
        ]);
        assert_eq!(
            group.template_labels(),
            [("kubernetes.io/arch", "arm64"), ("team", "ml")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into()
        );
        let (taints, problems) = group.template_taints();
        assert_eq!(
            taints,
            [
                Taint::new("dedicated", "", "NoExecute"),
                Taint::new("nvidia.com/gpu", "true", "NoSchedule")
            ]
        );
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with(
                "AutoScalingGroup/nodes-a: tag k8s.io/cluster-autoscaler/node-template/taint/broken=\"true\" is not VALUE:EFFECT"
            ),
            "{problems:?}"
        );
    }

    #[test]
    fn capacity_follows_the_mixed_instances_policy_else_the_launch_template() {
        let mut group = asg(&[]);
        assert_eq!(group.capacity_types(), ["on-demand".to_owned()].into());
        group.launch = Some(LaunchSpec {
            spot: true,
            ..Default::default()
        });
        assert_eq!(group.capacity_types(), ["spot".to_owned()].into());
        let split = |base, percent| {
            let mut g = group.clone();
            g.distribution = Some(Distribution {
                on_demand_base: base,
                on_demand_percent: percent,
            });
            g.capacity_types().into_iter().collect::<Vec<_>>()
        };
        assert_eq!(split(0, 0), ["spot"]);
        assert_eq!(split(2, 0), ["on-demand", "spot"]);
        assert_eq!(split(0, 30), ["on-demand", "spot"]);
        assert_eq!(split(0, 100), ["on-demand"]);
    }

    #[test]
    fn eks_images_name_their_family() {
        for (name, family) in [
            (
                "amazon-eks-node-al2023-x86_64-standard-1.31-v20241115",
                Some("al2023"),
            ),
            ("amazon-eks-node-1.29-v20240117", Some("al2")),
            ("amazon-eks-gpu-node-1.29-v20240117", Some("al2")),
            ("amazon-eks-arm64-node-1.29-v20240117", Some("al2")),
            (
                "bottlerocket-aws-k8s-1.31-x86_64-v1.26.1-943d9a41",
                Some("bottlerocket"),
            ),
            (
                "Windows_Server-2022-English-Core-EKS_Optimized-1.31-2024.11.13",
                Some("windows2022"),
            ),
            (
                "resolve:ssm:/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id",
                Some("al2023"),
            ),
            (
                "resolve:ssm:/aws/service/eks/optimized-ami/1.29/amazon-linux-2/recommended/image_id",
                Some("al2"),
            ),
            (
                "ubuntu-eks/k8s_1.31/images/hvm-ssd/ubuntu-jammy-22.04",
                None,
            ),
        ] {
            assert_eq!(image_family(name), family, "{name}");
        }
        assert_eq!(ami_family_field("bottlerocket"), "Bottlerocket");
        assert_eq!(
            profile_name("arn:aws:iam::123456789012:instance-profile/nodes/eks-node"),
            "eks-node"
        );
        assert_eq!(profile_name("eks-node"), "eks-node");
    }
}
