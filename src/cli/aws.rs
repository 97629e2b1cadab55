//! AWS settings shared by the commands that can run against EC2, with upstream's flag and
//! environment names.

use std::time::Duration;

use anyhow::{Context as _, bail};
use karpenter_aws::bootstrap::ClusterInfo;
use karpenter_aws::cluster::KnownCluster;
use karpenter_aws::config::Connection;
use karpenter_aws::nodeclass::AmiLookup;
use karpenter_aws::provider::AwsSettings;

/// Where nodes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CloudKind {
    /// The embedded in-memory EC2.
    Sim,
    /// EC2 (AWS, or an emulator with --aws-endpoint).
    Aws,
}

/// AWS flags.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsArgs {
    /// Where nodes come from.
    #[arg(long, value_enum, default_value_t = CloudKind::Sim)]
    pub cloud: CloudKind,
    /// Cluster name: tags every instance (`kubernetes.io/cluster/<name>`) and joins nodes.
    #[arg(long, env = "CLUSTER_NAME", default_value = "karpenter-sim")]
    pub cluster_name: String,
    /// API server endpoint nodes join; default: the EKS cluster's (`eks:DescribeCluster`).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// Base64 cluster CA bundle for the nodes' bootstrap; default: the ServiceAccount's CA
    /// in a pod, else the EKS cluster's.
    #[arg(long, env = "CLUSTER_CA_BUNDLE")]
    pub cluster_ca_bundle: Option<String>,
    /// The cluster's service CIDR (nodeadm needs it); default: the EKS cluster's.
    #[arg(long, env = "CLUSTER_CIDR", value_name = "CIDR")]
    pub cluster_cidr: Option<String>,
    /// SQS queue of EventBridge interruption events; interruption handling is off without it.
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// The VPC has no route to the Pricing API: on-demand prices come from the embedded table
    /// for the region only.
    #[arg(long, env = "ISOLATED_VPC")]
    pub isolated_vpc: bool,
    /// Fraction of an instance's memory the hypervisor keeps.
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = 0.075)]
    pub vm_memory_overhead_percent: f64,
    /// How often EC2NodeClasses are re-resolved (subnets, security groups, AMIs).
    #[arg(long, env = "AMI_REFRESH_INTERVAL", default_value = "1m", value_parser = super::parse_duration)]
    pub ami_refresh_interval: Duration,
    /// AWS region.
    #[arg(long = "aws-region", env = "AWS_REGION", value_name = "REGION")]
    pub region: Option<String>,
    /// Endpoint for every AWS service, for emulators such as moto (loopback only; credentials
    /// default to static test keys when none are configured).
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub aws_endpoint: Option<String>,
    /// Kubernetes minor version of the cluster, for AMI aliases (`al2023@latest`); default:
    /// the API server's (`controller`), else the EKS cluster's.
    #[arg(long, env = "KUBERNETES_VERSION", value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
    /// Prefix of the public SSM parameters AMI aliases resolve through.
    #[arg(long, env = "SSM_PARAMETER_PREFIX", default_value = "/aws/service")]
    pub ssm_parameter_prefix: String,
    /// Before starting, create in the (empty) emulator a VPC with subnets and a security
    /// group tagged `karpenter.sh/discovery: <cluster-name>`, the node role
    /// `KarpenterNodeRole-<cluster-name>`, AL2023 AMI parameters and the interruption queue.
    /// Needs --aws-endpoint on loopback.
    #[arg(long)]
    pub prepare_emulator: bool,
}

/// A setting given as an empty string (an unset Helm value becomes an empty environment
/// variable) counts as not given.
pub(super) fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}

/// How to reach AWS in `region`, or the emulator at `endpoint` (loopback only; credentials
/// default to static test keys when none are configured).
pub fn connection(region: &str, endpoint: Option<&str>) -> anyhow::Result<Connection> {
    connection_with(region, endpoint, "--aws-endpoint")
}

/// As [`connection`], the endpoint given by `setting`.
pub fn connection_with(
    region: &str,
    endpoint: Option<&str>,
    setting: &str,
) -> anyhow::Result<Connection> {
    let mut connection = Connection::new(region);
    if let Some(endpoint) = endpoint {
        let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
            .iter()
            .any(|p| endpoint.starts_with(p));
        if !loopback {
            bail!(
                "{setting} {endpoint}: only emulators on loopback (http://127.0.0.1:PORT) are supported"
            );
        }
        connection.endpoint = Some(endpoint.to_owned());
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
            connection.static_credentials = Some(("testing".into(), "testing".into()));
        }
    }
    Ok(connection)
}

impl AwsArgs {
    /// `--cluster-endpoint`, if given.
    pub fn cluster_endpoint(&self) -> Option<String> {
        given(&self.cluster_endpoint)
    }

    /// `--aws-endpoint`, if given.
    pub fn aws_endpoint(&self) -> Option<String> {
        given(&self.aws_endpoint)
    }

    /// `--aws-region`, if given.
    pub fn region(&self) -> Option<String> {
        given(&self.region)
    }

    /// The run settings, or `None` for the in-memory cloud.
    pub fn run(&self) -> anyhow::Result<Option<karpenter_rs::system::aws::AwsSetup>> {
        self.run_with(false)
    }

    /// [`AwsArgs::run`]; `endpoint_used` when something else reaches AWS through
    /// `--aws-endpoint` on the in-memory cloud (the controller's `--journal-bucket`).
    pub fn run_with(
        &self,
        endpoint_used: bool,
    ) -> anyhow::Result<Option<karpenter_rs::system::aws::AwsSetup>> {
        let interruption_queue = given(&self.interruption_queue);
        if self.cloud == CloudKind::Sim {
            if (self.aws_endpoint().is_some() && !endpoint_used)
                || self.prepare_emulator
                || interruption_queue.is_some()
            {
                bail!(
                    "--aws-endpoint, --prepare-emulator and --interruption-queue need --cloud aws"
                );
            }
            return Ok(None);
        }
        if !(0.0..1.0).contains(&self.vm_memory_overhead_percent) {
            bail!(
                "--vm-memory-overhead-percent {}: give a fraction between 0 and 1, e.g. 0.075",
                self.vm_memory_overhead_percent
            );
        }
        let region = self
            .region()
            .context("--cloud aws needs a region: set AWS_REGION or --aws-region")?;
        if self.cluster_name.trim().is_empty() {
            bail!("--cloud aws needs the cluster's name: set CLUSTER_NAME or --cluster-name");
        }
        let connection = connection(&region, self.aws_endpoint().as_deref())?;
        if connection.endpoint.is_none() && self.prepare_emulator {
            bail!(
                "--prepare-emulator needs --aws-endpoint (it creates resources; never on real AWS)"
            );
        }
        let cluster = self.known_cluster()?;
        let mut ssm_prefix = self.ssm_parameter_prefix.clone();
        if self.prepare_emulator && ssm_prefix == "/aws/service" {
            // Emulators refuse writes under /aws/service.
            ssm_prefix = karpenter_aws::emulator::SSM_PREFIX.to_owned();
        }
        Ok(Some(karpenter_rs::system::aws::AwsSetup {
            connection,
            settings: AwsSettings {
                // Completed from `cluster` when the clients connect.
                cluster: ClusterInfo {
                    name: self.cluster_name.clone(),
                    ..ClusterInfo::default()
                },
                region,
                vm_memory_overhead_permille: (self.vm_memory_overhead_percent * 1000.0).round()
                    as i64,
                nodeclass_refresh: self.ami_refresh_interval.max(Duration::from_secs(60)),
                catalog_refresh: Duration::from_secs(12 * 3600),
                ami_lookup: AmiLookup {
                    ssm_prefix,
                    kubernetes_version: String::new(),
                },
                // The `ReservedCapacity` gate's default; commands with gates set it.
                reserved_capacity: true,
            },
            cluster,
            interruption_queue,
            prepare_emulator: self.prepare_emulator,
            isolated_vpc: self.isolated_vpc,
        }))
    }

    /// The cluster settings the flags give, each checked; the rest is asked of EKS later.
    fn known_cluster(&self) -> anyhow::Result<KnownCluster> {
        let known = KnownCluster {
            name: self.cluster_name.clone(),
            endpoint: self.cluster_endpoint(),
            ca_bundle: given(&self.cluster_ca_bundle),
            service_cidr: given(&self.cluster_cidr),
            kubernetes_version: given(&self.kubernetes_version)
                .map(|v| karpenter_aws::cluster::minor_version(&v))
                .transpose()?,
        };
        known.check()?;
        Ok(known)
    }
}
