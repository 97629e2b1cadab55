//! Reads a region's Auto Scaling groups for `karpenter migrate from-cluster-autoscaler
//! --cloud aws`: each group's sizes, zones, subnets, tags, instances and mixed instances
//! policy, and what it launches from (the launch template version it names, or its launch
//! configuration) with the AMI's name. Only describes; changes nothing. Which groups are the
//! cluster's and what they mean is decided in
//! [`karpenter_core::migration::cluster_autoscaler`].

use std::collections::{BTreeMap, HashMap};

use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2;
use karpenter_core::migration::cluster_autoscaler::asg::{
    AutoScalingGroup, BlockDevice, Distribution, LaunchSpec,
};

use crate::config::{Connection, sdk_config};
use crate::error::AwsError;

/// The actions the reader calls, as IAM names them: what the person running the migration
/// needs (read-only).
pub const READ_PERMISSIONS: &[&str] = &[
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeLaunchConfigurations",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:DescribeImages",
];

/// Pages of a listing followed before giving up (100 groups a page).
const MAX_PAGES: usize = 1_000;

/// Reads Auto Scaling groups and what they launch from.
#[derive(Debug, Clone)]
pub struct AutoScalingReader {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
}

/// A launch template version as an Auto Scaling group names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct TemplateRef {
    id: Option<String>,
    name: Option<String>,
    /// `$Default` when the group names none.
    version: String,
}

impl TemplateRef {
    fn of(spec: &asg::LaunchTemplateSpecification) -> Self {
        TemplateRef {
            id: spec.launch_template_id().map(str::to_owned),
            name: spec.launch_template_name().map(str::to_owned),
            version: spec.version().unwrap_or("$Default").to_owned(),
        }
    }

    fn describe(&self) -> String {
        let what = match (&self.id, &self.name) {
            (Some(id), Some(name)) => format!("{id} ({name})"),
            (Some(one), None) | (None, Some(one)) => one.clone(),
            (None, None) => "(unnamed)".to_owned(),
        };
        format!("launch template {what} version {}", self.version)
    }
}

/// The launch template a group uses, directly or through its mixed instances policy.
fn template_of(group: &asg::AutoScalingGroup) -> Option<TemplateRef> {
    group
        .launch_template()
        .or_else(|| {
            group
                .mixed_instances_policy()?
                .launch_template()?
                .launch_template_specification()
        })
        .map(TemplateRef::of)
}

impl AutoScalingReader {
    /// Clients for the connection's region and endpoint.
    pub async fn connect(connection: &Connection) -> Self {
        let config = sdk_config(connection).await;
        AutoScalingReader {
            autoscaling: aws_sdk_autoscaling::Client::new(&config),
            ec2: aws_sdk_ec2::Client::new(&config),
        }
    }

    /// Every Auto Scaling group of the region, with what it launches from. A group whose
    /// launch template or configuration no longer exists has no [`LaunchSpec`]; any other
    /// failure (credentials, permissions, throttling past the retries) is an error.
    pub async fn groups(&self) -> Result<Vec<AutoScalingGroup>, AwsError> {
        let described = self.describe_groups().await?;
        let mut templates: HashMap<TemplateRef, Option<LaunchSpec>> = HashMap::new();
        for group in &described {
            if let Some(template) = template_of(group)
                && !templates.contains_key(&template)
            {
                let spec = self.template_version(&template).await?;
                templates.insert(template, spec);
            }
        }
        let names: Vec<String> = described
            .iter()
            .filter(|g| template_of(g).is_none())
            .filter_map(|g| g.launch_configuration_name().map(str::to_owned))
            .collect();
        let configurations = self.launch_configurations(&names).await?;
        let mut groups: Vec<AutoScalingGroup> = described
            .iter()
            .map(|g| {
                let launch = match template_of(g) {
                    Some(template) => templates.get(&template).cloned().flatten(),
                    None => g
                        .launch_configuration_name()
                        .and_then(|name| configurations.get(name).cloned()),
                };
                group_facts(g, launch)
            })
            .collect();
        let images: Vec<String> = groups
            .iter()
            .filter_map(|g| g.launch.as_ref()?.image_id.clone())
            .collect();
        let names = self.image_names(images).await?;
        for launch in groups.iter_mut().filter_map(|g| g.launch.as_mut()) {
            if launch.image_name.is_none() {
                launch.image_name = launch
                    .image_id
                    .as_ref()
                    .and_then(|id| names.get(id).cloned());
            }
        }
        Ok(groups)
    }

    async fn describe_groups(&self) -> Result<Vec<asg::AutoScalingGroup>, AwsError> {
        let mut groups = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .autoscaling
                .describe_auto_scaling_groups()
                .max_records(100)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("DescribeAutoScalingGroups", e))?;
            groups.extend(page.auto_scaling_groups().iter().cloned());
            match page.next_token() {
                Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                _ => return Ok(groups),
            }
        }
        Err(AwsError::new(
            "DescribeAutoScalingGroups",
            "TooManyPages",
            &format!("still more groups after {MAX_PAGES} pages"),
        ))
    }

    /// The launch template version, or `None` when the template or version is gone.
    async fn template_version(
        &self,
        template: &TemplateRef,
    ) -> Result<Option<LaunchSpec>, AwsError> {
        let answer = self
            .ec2
            .describe_launch_template_versions()
            .set_launch_template_id(template.id.clone())
            .set_launch_template_name(if template.id.is_some() {
                None
            } else {
                template.name.clone()
            })
            .versions(&template.version)
            .send()
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                let error = AwsError::from_sdk("DescribeLaunchTemplateVersions", e);
                // `InvalidLaunchTemplateId.NotFound`, `InvalidLaunchTemplateName.NotFoundException`,
                // `InvalidLaunchTemplateId.VersionNotFound`; anything else is an error.
                if error.is_not_found() || error.code.ends_with(".VersionNotFound") {
                    return Ok(None);
                }
                return Err(error);
            }
        };
        Ok(answer
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data())
            .map(|data| template_spec(&template.describe(), data)))
    }

    async fn launch_configurations(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, LaunchSpec>, AwsError> {
        let mut found = BTreeMap::new();
        let mut names: Vec<String> = names.to_vec();
        names.sort();
        names.dedup();
        for chunk in names.chunks(50) {
            let mut token: Option<String> = None;
            for _ in 0..MAX_PAGES {
                let page = self
                    .autoscaling
                    .describe_launch_configurations()
                    .set_launch_configuration_names(Some(chunk.to_vec()))
                    .set_next_token(token.take())
                    .send()
                    .await
                    .map_err(|e| AwsError::from_sdk("DescribeLaunchConfigurations", e))?;
                for configuration in page.launch_configurations() {
                    if let Some(name) = configuration.launch_configuration_name() {
                        found.insert(name.to_owned(), configuration_spec(configuration));
                    }
                }
                match page.next_token() {
                    Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                    _ => break,
                }
            }
        }
        Ok(found)
    }

    /// Names of the AMIs that still exist (deregistered ones are left out).
    async fn image_names(&self, mut ids: Vec<String>) -> Result<HashMap<String, String>, AwsError> {
        ids.retain(|id| id.starts_with("ami-"));
        ids.sort();
        ids.dedup();
        let mut names = HashMap::new();
        for chunk in ids.chunks(100) {
            match self.describe_images(chunk).await {
                Ok(images) => names.extend(images),
                // One missing AMI fails the whole call: ask for each alone.
                Err(e) if e.code.starts_with("InvalidAMIID") => {
                    for id in chunk {
                        match self.describe_images(std::slice::from_ref(id)).await {
                            Ok(images) => names.extend(images),
                            Err(e) if e.code.starts_with("InvalidAMIID") => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(names)
    }

    async fn describe_images(&self, ids: &[String]) -> Result<Vec<(String, String)>, AwsError> {
        let answer = self
            .ec2
            .describe_images()
            .set_image_ids(Some(ids.to_vec()))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("DescribeImages", e))?;
        Ok(answer
            .images()
            .iter()
            .filter_map(|i| Some((i.image_id()?.to_owned(), i.name()?.to_owned())))
            .collect())
    }
}

fn group_facts(group: &asg::AutoScalingGroup, launch: Option<LaunchSpec>) -> AutoScalingGroup {
    let policy = group.mixed_instances_policy();
    let overrides = policy
        .and_then(|p| p.launch_template())
        .map(|t| t.overrides())
        .unwrap_or_default();
    AutoScalingGroup {
        name: group
            .auto_scaling_group_name()
            .unwrap_or_default()
            .to_owned(),
        min_size: group.min_size().unwrap_or(0).into(),
        max_size: group.max_size().unwrap_or(0).into(),
        desired: group.desired_capacity().unwrap_or(0).into(),
        instance_ids: group
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_owned))
            .collect(),
        zones: group.availability_zones().iter().cloned().collect(),
        subnet_ids: group
            .vpc_zone_identifier()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        tags: group
            .tags()
            .iter()
            .filter_map(|t| {
                Some((
                    t.key()?.to_owned(),
                    t.value().unwrap_or_default().to_owned(),
                ))
            })
            .collect(),
        override_types: overrides
            .iter()
            .filter_map(|o| o.instance_type().map(str::to_owned))
            .collect(),
        attribute_based: overrides
            .iter()
            .any(|o| o.instance_requirements().is_some()),
        distribution: policy
            .and_then(|p| p.instances_distribution())
            .map(|d| Distribution {
                on_demand_base: d.on_demand_base_capacity().unwrap_or(0).into(),
                on_demand_percent: d
                    .on_demand_percentage_above_base_capacity()
                    .unwrap_or(100)
                    .into(),
            }),
        launch,
    }
}

/// A launch template version's settings. An AMI given as `resolve:ssm:PARAMETER` is kept as
/// its parameter's name (which names its family), not as an id to pin.
fn template_spec(source: &str, data: &ec2::ResponseLaunchTemplateData) -> LaunchSpec {
    let (image_id, image_name) = match data.image_id() {
        Some(ssm) if ssm.starts_with("resolve:ssm:") => (None, Some(ssm.to_owned())),
        other => (other.map(str::to_owned), None),
    };
    let mut security_group_ids = data.security_group_ids().to_vec();
    if security_group_ids.is_empty()
        && let Some(interface) = data.network_interfaces().first()
    {
        security_group_ids = interface.groups().to_vec();
    }
    LaunchSpec {
        source: source.to_owned(),
        image_id,
        image_name,
        instance_type: data.instance_type().map(|t| t.as_str().to_owned()),
        security_group_ids,
        instance_profile: data
            .iam_instance_profile()
            .and_then(|p| p.arn().or(p.name()))
            .map(str::to_owned),
        has_user_data: data.user_data().is_some_and(|u| !u.is_empty()),
        spot: data
            .instance_market_options()
            .and_then(|m| m.market_type())
            .is_some_and(|m| *m == ec2::MarketType::Spot),
        block_devices: data
            .block_device_mappings()
            .iter()
            .filter_map(|m| {
                let ebs = m.ebs()?;
                Some(BlockDevice {
                    device_name: m.device_name()?.to_owned(),
                    volume_size_gib: ebs.volume_size().map(i64::from),
                    volume_type: ebs.volume_type().map(|t| t.as_str().to_owned()),
                    iops: ebs.iops().map(i64::from),
                    throughput: ebs.throughput().map(i64::from),
                    encrypted: ebs.encrypted(),
                    kms_key_id: ebs.kms_key_id().map(str::to_owned),
                    delete_on_termination: ebs.delete_on_termination(),
                    snapshot_id: ebs.snapshot_id().map(str::to_owned),
                })
            })
            .collect(),
    }
}

fn configuration_spec(configuration: &asg::LaunchConfiguration) -> LaunchSpec {
    LaunchSpec {
        source: format!(
            "launch configuration {}",
            configuration
                .launch_configuration_name()
                .unwrap_or_default()
        ),
        image_id: configuration.image_id().map(str::to_owned),
        image_name: None,
        instance_type: configuration.instance_type().map(str::to_owned),
        security_group_ids: configuration
            .security_groups()
            .iter()
            .filter(|g| g.starts_with("sg-"))
            .cloned()
            .collect(),
        instance_profile: configuration.iam_instance_profile().map(str::to_owned),
        has_user_data: configuration.user_data().is_some_and(|u| !u.is_empty()),
        spot: configuration.spot_price().is_some_and(|p| !p.is_empty()),
        block_devices: configuration
            .block_device_mappings()
            .iter()
            .filter_map(|m| {
                let ebs = m.ebs()?;
                Some(BlockDevice {
                    device_name: m.device_name()?.to_owned(),
                    volume_size_gib: ebs.volume_size().map(i64::from),
                    volume_type: ebs.volume_type().map(str::to_owned),
                    iops: ebs.iops().map(i64::from),
                    throughput: ebs.throughput().map(i64::from),
                    encrypted: ebs.encrypted(),
                    kms_key_id: None,
                    delete_on_termination: ebs.delete_on_termination(),
                    snapshot_id: ebs.snapshot_id().map(str::to_owned),
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An EKS-made launch template: security groups on its network interface, the AMI
    /// through an SSM parameter, a profile by name, spot.
    #[test]
    fn an_eks_made_template_gives_its_interface_groups_and_ssm_image() {
        let data = ec2::ResponseLaunchTemplateData::builder()
            .image_id("resolve:ssm:/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id")
            .network_interfaces(
                ec2::LaunchTemplateInstanceNetworkInterfaceSpecification::builder()
                    .groups("sg-0node")
                    .groups("sg-0cluster")
                    .build(),
            )
            .iam_instance_profile(
                ec2::LaunchTemplateIamInstanceProfileSpecification::builder()
                    .name("eks-node")
                    .build(),
            )
            .instance_market_options(
                ec2::LaunchTemplateInstanceMarketOptions::builder()
                    .market_type(ec2::MarketType::Spot)
                    .build(),
            )
            .user_data("")
            .build();
        let spec = template_spec("launch template lt-0 version 1", &data);
        assert_eq!(spec.image_id, None, "an SSM parameter is not an id to pin");
        assert_eq!(
            karpenter_core::migration::cluster_autoscaler::asg::image_family(
                spec.image_name.as_deref().unwrap()
            ),
            Some("al2023")
        );
        assert_eq!(spec.security_group_ids, ["sg-0node", "sg-0cluster"]);
        assert_eq!(spec.instance_profile.as_deref(), Some("eks-node"));
        assert!(spec.spot);
        assert!(!spec.has_user_data, "empty user data is none");
    }

    /// A group's facts: subnets split from `VPCZoneIdentifier`, AWS's defaults for a mixed
    /// instances policy's split, override types, and attribute-based overrides noticed.
    #[test]
    fn a_group_is_read_with_aws_defaults_for_what_it_leaves_out() {
        let group = asg::AutoScalingGroup::builder()
            .auto_scaling_group_name("nodes")
            .min_size(1)
            .max_size(5)
            .desired_capacity(2)
            .vpc_zone_identifier("subnet-0a, subnet-0b,")
            .mixed_instances_policy(
                asg::MixedInstancesPolicy::builder()
                    .launch_template(
                        asg::LaunchTemplate::builder()
                            .overrides(
                                asg::LaunchTemplateOverrides::builder()
                                    .instance_type("m5.large")
                                    .build(),
                            )
                            .overrides(
                                asg::LaunchTemplateOverrides::builder()
                                    .instance_requirements(
                                        asg::InstanceRequirements::builder().build(),
                                    )
                                    .build(),
                            )
                            .build(),
                    )
                    .instances_distribution(asg::InstancesDistribution::builder().build())
                    .build(),
            )
            .tags(
                asg::TagDescription::builder()
                    .key("eks:cluster-name")
                    .value("prod")
                    .build(),
            )
            .build();
        let facts = group_facts(&group, None);
        assert_eq!(facts.subnet_ids, ["subnet-0a", "subnet-0b"]);
        assert_eq!((facts.min_size, facts.max_size, facts.desired), (1, 5, 2));
        assert_eq!(facts.override_types, ["m5.large"]);
        assert!(facts.attribute_based);
        assert_eq!(
            facts.distribution,
            Some(Distribution {
                on_demand_base: 0,
                on_demand_percent: 100
            })
        );
        assert!(facts.tagged_for("prod"));
    }
}
