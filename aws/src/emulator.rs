//! Preparing an empty EC2 API emulator (moto, LocalStack) for a run, as
//! `simulate --cloud aws --prepare-emulator` does: a VPC with tagged subnets and a security
//! group, AL2023 AMI parameters in SSM, the node role, the EKS cluster nodes join (its
//! endpoint, CA, service CIDR and version, read back through `eks:DescribeCluster`), and the
//! interruption queue.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, ResourceType};
use karpenter_core::api::EC2NodeClass;

use crate::config::Clients;
use crate::ec2::tag_specifications;
use crate::error::AwsError;
use crate::nodeclass::AmiLookup;

/// SSM prefix a prepared emulator publishes AMI parameters under (moto refuses `/aws/service`).
pub const SSM_PREFIX: &str = "/test/service";
/// Kubernetes version a prepared emulator publishes AMIs for.
pub const KUBERNETES_VERSION: &str = "1.33";
/// Service CIDR of a prepared emulator's EKS cluster.
pub const SERVICE_CIDR: &str = "10.100.0.0/16";

/// A VPC with two tagged subnets and a tagged security group, and AL2023 AMI parameters
/// under [`SSM_PREFIX`].
#[derive(Debug, Clone)]
pub struct Fixture {
    /// Cluster name (the discovery tag's value).
    pub cluster: String,
    /// Subnet ids by zone.
    pub subnets: BTreeMap<String, String>,
    /// Security group id.
    pub security_group: String,
    /// AMI per architecture (`x86_64`, `arm64`).
    pub amis: BTreeMap<String, String>,
    /// Node IAM role name.
    pub role: String,
}

impl Fixture {
    /// Creates it under the test AMI lookup ([`SSM_PREFIX`], [`KUBERNETES_VERSION`]).
    pub async fn create(clients: &Clients, cluster: &str) -> Result<Fixture, AwsError> {
        Fixture::create_with(
            clients,
            cluster,
            &AmiLookup {
                ssm_prefix: SSM_PREFIX.into(),
                kubernetes_version: KUBERNETES_VERSION.into(),
            },
        )
        .await
    }

    /// Creates it: a VPC with subnets and a security group tagged for `cluster` (those an
    /// earlier run tagged, when there are some, so a resumed run selects what it launched
    /// into); AMI parameters under `lookup` (overwritten, with the same images each time), and
    /// the node role `KarpenterNodeRole-<cluster>` (kept if it exists).
    pub async fn create_with(
        clients: &Clients,
        cluster: &str,
        lookup: &AmiLookup,
    ) -> Result<Fixture, AwsError> {
        let (subnets, security_group) = match existing_network(clients, cluster).await? {
            Some(found) => found,
            None => create_network(clients, cluster).await?,
        };
        let amis = publish_amis(clients, lookup).await?;
        create_cluster(clients, cluster, &lookup.kubernetes_version, &subnets).await?;
        let role = format!("KarpenterNodeRole-{cluster}");
        if let Err(e) = clients
            .iam
            .create_role()
            .role_name(&role)
            .assume_role_policy_document(
                r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
            )
            .send()
            .await
        {
            let error = AwsError::from_sdk("CreateRole", e);
            if error.code != "EntityAlreadyExists" {
                return Err(error);
            }
        }
        Ok(Fixture {
            role,
            cluster: cluster.to_owned(),
            subnets,
            security_group,
            amis,
        })
    }

    /// An EC2NodeClass selecting the fixture by its discovery tag.
    pub fn node_class(&self, name: &str) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": name},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": self.cluster}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": self.cluster}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "instanceProfile": "KarpenterNodeInstanceProfile",
                "tags": {"team": "platform"}
            }
        }))
        .expect("a valid EC2NodeClass")
    }
}

/// Subnets (by zone) and the security group an earlier run tagged for `cluster`, if any.
async fn existing_network(
    clients: &Clients,
    cluster: &str,
) -> Result<Option<(BTreeMap<String, String>, String)>, AwsError> {
    let tagged = || {
        Filter::builder()
            .name("tag:karpenter.sh/discovery")
            .values(cluster)
            .build()
    };
    let found = clients
        .ec2
        .describe_subnets()
        .filters(tagged())
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeSubnets", e))?;
    let subnets: BTreeMap<String, String> = found
        .subnets()
        .iter()
        .filter_map(|s| Some((s.availability_zone()?.to_owned(), s.subnet_id()?.to_owned())))
        .collect();
    let groups = clients
        .ec2
        .describe_security_groups()
        .filters(tagged())
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeSecurityGroups", e))?;
    let group = groups
        .security_groups()
        .iter()
        .find_map(|g| g.group_id())
        .map(str::to_owned);
    Ok(match group {
        Some(group) if !subnets.is_empty() => Some((subnets, group)),
        _ => None,
    })
}

/// The EKS cluster `name` on Kubernetes `version` in `subnets` (kept if it exists).
async fn create_cluster(
    clients: &Clients,
    name: &str,
    version: &str,
    subnets: &BTreeMap<String, String>,
) -> Result<(), AwsError> {
    let network = aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
        .service_ipv4_cidr(SERVICE_CIDR)
        .build();
    let vpc = aws_sdk_eks::types::VpcConfigRequest::builder()
        .set_subnet_ids(Some(subnets.values().cloned().collect()))
        .build();
    let created = clients
        .eks
        .create_cluster()
        .name(name)
        .version(version)
        .role_arn(format!("arn:aws:iam::123456789012:role/eks-{name}"))
        .resources_vpc_config(vpc)
        .kubernetes_network_config(network)
        .send()
        .await;
    match created {
        Ok(_) => Ok(()),
        Err(e) => {
            let error = AwsError::from_sdk("CreateCluster", e);
            if error.code == "ResourceInUseException" {
                Ok(())
            } else {
                Err(error)
            }
        }
    }
}

/// A new VPC with two subnets and a security group tagged for `cluster`.
async fn create_network(
    clients: &Clients,
    cluster: &str,
) -> Result<(BTreeMap<String, String>, String), AwsError> {
    let ec2 = &clients.ec2;
    let discovery: BTreeMap<String, String> =
        [("karpenter.sh/discovery".to_owned(), cluster.to_owned())].into();
    let missing = |op: &'static str, what: &str| AwsError::new(op, "MissingField", what);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateVpc", e))?
        .vpc()
        .and_then(|v| v.vpc_id())
        .ok_or_else(|| missing("CreateVpc", "no VPC id"))?
        .to_owned();
    let mut subnets = BTreeMap::new();
    let zones: Vec<String> = ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("DescribeAvailabilityZones", e))?
        .availability_zones()
        .iter()
        .filter_map(|z| z.zone_name().map(str::to_owned))
        .take(2)
        .collect();
    for (i, zone) in zones.iter().enumerate() {
        let id = ec2
            .create_subnet()
            .vpc_id(&vpc)
            .cidr_block(format!("10.0.{}.0/24", i + 1))
            .availability_zone(zone)
            .set_tag_specifications(Some(tag_specifications(
                &[ResourceType::Subnet],
                &discovery,
            )))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("CreateSubnet", e))?
            .subnet()
            .and_then(|s| s.subnet_id())
            .ok_or_else(|| missing("CreateSubnet", "no subnet id"))?
            .to_owned();
        subnets.insert(zone.clone(), id);
    }
    let security_group = ec2
        .create_security_group()
        .vpc_id(&vpc)
        .group_name(format!("{cluster}-nodes-{vpc}"))
        .description("nodes")
        .set_tag_specifications(Some(tag_specifications(
            &[ResourceType::SecurityGroup],
            &discovery,
        )))
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateSecurityGroup", e))?
        .group_id()
        .ok_or_else(|| missing("CreateSecurityGroup", "no group id"))?
        .to_owned();
    Ok((subnets, security_group))
}

/// Publishes the lowest-numbered AL2023 image of each architecture as the recommended AMI
/// under `lookup`; returns them by architecture.
async fn publish_amis(
    clients: &Clients,
    lookup: &AmiLookup,
) -> Result<BTreeMap<String, String>, AwsError> {
    let ec2 = &clients.ec2;
    let missing = |op: &'static str, what: &str| AwsError::new(op, "MissingField", what);
    let mut amis = BTreeMap::new();
    for arch in ["x86_64", "arm64"] {
        let images = ec2
            .describe_images()
            .owners("amazon")
            .filters(Filter::builder().name("architecture").values(arch).build())
            .filters(
                Filter::builder()
                    .name("name")
                    .values("al2023-ami-*")
                    .build(),
            )
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("DescribeImages", e))?;
        let id = images
            .images()
            .iter()
            .filter_map(|i| i.image_id())
            .min()
            .ok_or_else(|| missing("DescribeImages", "no al2023 image to publish"))?
            .to_owned();
        clients
            .ssm
            .put_parameter()
            .name(format!(
                "{}/eks/optimized-ami/{}/amazon-linux-2023/{arch}/standard/recommended/image_id",
                lookup.ssm_prefix.trim_end_matches('/'),
                lookup.kubernetes_version
            ))
            .value(&id)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("PutParameter", e))?;
        amis.insert(arch.to_owned(), id);
    }
    Ok(amis)
}

/// Creates an SQS queue; returns its URL.
pub async fn create_queue(clients: &Clients, name: &str) -> Result<String, AwsError> {
    clients
        .sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk("CreateQueue", e))?
        .queue_url()
        .map(str::to_owned)
        .ok_or_else(|| AwsError::new("CreateQueue", "NoQueueUrl", "no queue URL in the answer"))
}
