//! Node groups as Cluster Autoscaler clusters have them, made in the emulator: a launch
//! template (or, for old self-managed groups, a launch configuration) and the Auto Scaling
//! group that launches from it.

use aws_sdk_autoscaling::types as asg;
use aws_sdk_ec2::types as ec2;

use crate::config::{Clients, Connection, sdk_config};
use crate::error::AwsError;

/// One node group to create.
#[derive(Debug, Clone, Default)]
pub struct NodeGroupSpec<'a> {
    /// The Auto Scaling group's name (and its launch template's or configuration's).
    pub name: &'a str,
    /// AMI.
    pub image_id: &'a str,
    /// Instance types: the launch template's is the first; with more than one, all are a
    /// mixed instances policy's overrides.
    pub instance_types: &'a [&'a str],
    /// Spot: the launch template's market type, a launch configuration's spot price, or a
    /// mixed instances policy with no on-demand share.
    pub spot: bool,
    /// Subnets (`VPCZoneIdentifier`).
    pub subnets: &'a [String],
    /// Security groups.
    pub security_groups: &'a [String],
    /// Instance profile name (a launch template names it by ARN).
    pub instance_profile: &'a str,
    /// Root volume size in GiB (none when 0).
    pub volume_gib: i32,
    /// User data (base64), if any.
    pub user_data: Option<&'a str>,
    /// Desired capacity (instances launched now).
    pub desired: i32,
    /// Maximum size.
    pub max: i32,
    /// Tags of the group.
    pub tags: &'a [(&'a str, &'a str)],
    /// A launch configuration instead of a launch template.
    pub launch_configuration: bool,
}

/// Registers an AMI called `name` (for images moto does not have, e.g. Bottlerocket's);
/// returns its id.
pub async fn register_image(clients: &Clients, name: &str) -> Result<String, AwsError> {
    let out = clients
        .ec2
        .register_image()
        .name(name)
        .architecture(ec2::ArchitectureValues::X8664)
        .root_device_name("/dev/xvda")
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("RegisterImage", e))?;
    Ok(out.image_id().unwrap_or_default().to_owned())
}

/// Creates the group and what it launches from; returns the ids of the instances it started.
pub async fn create_node_group(
    connection: &Connection,
    clients: &Clients,
    spec: &NodeGroupSpec<'_>,
) -> Result<Vec<String>, AwsError> {
    let autoscaling = aws_sdk_autoscaling::Client::new(&sdk_config(connection).await);
    let first_type = spec.instance_types.first().copied().unwrap_or("m5.large");
    let mixed = spec.instance_types.len() > 1;
    let mut request = autoscaling
        .create_auto_scaling_group()
        .auto_scaling_group_name(spec.name)
        .min_size(0)
        .max_size(spec.max)
        .desired_capacity(spec.desired)
        .vpc_zone_identifier(spec.subnets.join(","));
    for (key, value) in spec.tags {
        request = request.tags(
            asg::Tag::builder()
                .key(*key)
                .value(*value)
                .propagate_at_launch(false)
                .build(),
        );
    }
    if spec.launch_configuration {
        create_launch_configuration(&autoscaling, spec, first_type).await?;
        request = request.launch_configuration_name(spec.name);
    } else {
        let id = create_launch_template(clients, spec, first_type, !mixed && spec.spot).await?;
        let template = asg::LaunchTemplateSpecification::builder()
            .launch_template_id(id)
            .version("$Latest")
            .build();
        request = if mixed {
            let mut overrides =
                asg::LaunchTemplate::builder().launch_template_specification(template);
            for t in spec.instance_types {
                overrides = overrides.overrides(
                    asg::LaunchTemplateOverrides::builder()
                        .instance_type(*t)
                        .build(),
                );
            }
            request.mixed_instances_policy(
                asg::MixedInstancesPolicy::builder()
                    .launch_template(overrides.build())
                    .instances_distribution(
                        asg::InstancesDistribution::builder()
                            .on_demand_base_capacity(0)
                            .on_demand_percentage_above_base_capacity(if spec.spot {
                                0
                            } else {
                                100
                            })
                            .build(),
                    )
                    .build(),
            )
        } else {
            request.launch_template(template)
        };
    }
    request
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateAutoScalingGroup", e))?;
    let described = autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(spec.name)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeAutoScalingGroups", e))?;
    Ok(described
        .auto_scaling_groups()
        .iter()
        .flat_map(|g| g.instances())
        .filter_map(|i| i.instance_id().map(str::to_owned))
        .collect())
}

async fn create_launch_template(
    clients: &Clients,
    spec: &NodeGroupSpec<'_>,
    instance_type: &str,
    spot: bool,
) -> Result<String, AwsError> {
    let mut data = ec2::RequestLaunchTemplateData::builder()
        .image_id(spec.image_id)
        .instance_type(ec2::InstanceType::from(instance_type))
        .set_security_group_ids(Some(spec.security_groups.to_vec()))
        .iam_instance_profile(
            ec2::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .arn(format!(
                    "arn:aws:iam::123456789012:instance-profile/{}",
                    spec.instance_profile
                ))
                .build(),
        )
        .set_user_data(spec.user_data.map(str::to_owned));
    if spot {
        data = data.instance_market_options(
            ec2::LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(ec2::MarketType::Spot)
                .build(),
        );
    }
    if spec.volume_gib > 0 {
        data = data.block_device_mappings(
            ec2::LaunchTemplateBlockDeviceMappingRequest::builder()
                .device_name("/dev/xvda")
                .ebs(
                    ec2::LaunchTemplateEbsBlockDeviceRequest::builder()
                        .volume_size(spec.volume_gib)
                        .volume_type(ec2::VolumeType::Gp3)
                        .encrypted(true)
                        .build(),
                )
                .build(),
        );
    }
    let out = clients
        .ec2
        .create_launch_template()
        .launch_template_name(spec.name)
        .launch_template_data(data.build())
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateLaunchTemplate", e))?;
    Ok(out
        .launch_template()
        .and_then(|t| t.launch_template_id())
        .unwrap_or_default()
        .to_owned())
}

async fn create_launch_configuration(
    autoscaling: &aws_sdk_autoscaling::Client,
    spec: &NodeGroupSpec<'_>,
    instance_type: &str,
) -> Result<(), AwsError> {
    let mut request = autoscaling
        .create_launch_configuration()
        .launch_configuration_name(spec.name)
        .image_id(spec.image_id)
        .instance_type(instance_type)
        .set_security_groups(Some(spec.security_groups.to_vec()))
        .iam_instance_profile(spec.instance_profile)
        .set_user_data(spec.user_data.map(str::to_owned));
    if spec.spot {
        request = request.spot_price("0.50");
    }
    if spec.volume_gib > 0 {
        request = request.block_device_mappings(
            asg::BlockDeviceMapping::builder()
                .device_name("/dev/xvda")
                .ebs(
                    asg::Ebs::builder()
                        .volume_size(spec.volume_gib)
                        .volume_type("gp3")
                        .build(),
                )
                .build(),
        );
    }
    request
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateLaunchConfiguration", e))?;
    Ok(())
}
