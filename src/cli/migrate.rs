//! `migrate`: taking over from another autoscaler.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// What to migrate from.
#[derive(Debug, clap::Subcommand)]
pub enum MigrateCommand {
    /// Say what taking over a cluster upstream Karpenter (v1) runs would do: each NodeClaim
    /// adopted in place with its instance and node (upstream's template hashes re-stamped,
    /// so the switch drifts nothing), NodePools and EC2NodeClasses used as they are or with
    /// the fields not acted on named, pending pods served. Only reads the cluster.
    FromKarpenter {
        /// Required: this command changes nothing; the switch is stopping upstream and
        /// starting `karpenter controller`, as the report's last lines say.
        #[arg(long)]
        dry_run: bool,
        /// Kubeconfig (default: KUBECONFIG, ~/.kube/config, or in-cluster).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context (default: the current one).
        #[arg(long)]
        context: Option<String>,
    },
    /// Propose NodePools and EC2NodeClasses that cover a cluster's node groups, read from
    /// its Nodes and, with `--cloud aws`, its Auto Scaling groups: each group's instance
    /// families (any size), zones, capacity type, architecture and OS, keeping its custom
    /// labels and taints. Prints them as YAML on stdout, the groups and what to check on
    /// stderr. Only reads the cluster (and AWS).
    FromClusterAutoscaler(FromClusterAutoscaler),
}

/// Which cloud's node groups to read besides the Nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cloud {
    /// EC2 Auto Scaling (AWS, or an emulator with --aws-endpoint).
    Aws,
}

/// `migrate from-cluster-autoscaler`'s flags.
#[derive(Debug, clap::Args)]
pub struct FromClusterAutoscaler {
    /// The EKS cluster's name: which Auto Scaling groups are its (their
    /// `k8s.io/cluster-autoscaler/NAME`, `kubernetes.io/cluster/NAME`, `eks:cluster-name`
    /// or `alpha.eksctl.io/cluster-name` tag), and the selector tags and node role the
    /// EC2NodeClasses name when the groups' own are not known.
    #[arg(long, env = "CLUSTER_NAME", value_name = "NAME")]
    cluster_name: String,
    /// Kubeconfig (default: KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current one).
    #[arg(long)]
    context: Option<String>,
    /// `aws` also reads the region's Auto Scaling groups and their launch templates (or
    /// launch configurations): the node classes then take the groups' exact subnets,
    /// security groups, instance profile, AMI and volumes, the NodePools their maximum size
    /// as a CPU limit, and groups at zero are covered from Cluster Autoscaler's node-template
    /// tags. Needs autoscaling:DescribeAutoScalingGroups, autoscaling:DescribeLaunchConfigurations,
    /// ec2:DescribeLaunchTemplateVersions and ec2:DescribeImages.
    #[arg(long, value_enum, value_name = "CLOUD")]
    cloud: Option<Cloud>,
    /// AWS region (with --cloud aws).
    #[arg(long = "aws-region", env = "AWS_REGION", value_name = "REGION")]
    region: Option<String>,
    /// Endpoint for every AWS service, for emulators such as moto (loopback only).
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    aws_endpoint: Option<String>,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

/// Runs a `migrate` subcommand.
pub fn run(command: MigrateCommand) -> anyhow::Result<ExitCode> {
    match command {
        MigrateCommand::FromKarpenter {
            dry_run,
            kubeconfig,
            context,
        } => {
            if !dry_run {
                anyhow::bail!(
                    "migrate from-karpenter changes nothing itself: add --dry-run to see what taking over would do; the switch is scaling upstream's deployment to 0 and starting `karpenter controller`"
                );
            }
            let plan = runtime()?.block_on(async {
                let client = karpenter_rs::kube::controller::connect(
                    kubeconfig.as_deref(),
                    context.as_deref(),
                    Default::default(),
                )
                .await?;
                karpenter_rs::kube::migrate::plan_from_karpenter(&client).await
            })?;
            print!("{}", plan.render());
            Ok(ExitCode::SUCCESS)
        }
        MigrateCommand::FromClusterAutoscaler(args) => from_cluster_autoscaler(args),
    }
}

/// Reads the cluster (and its Auto Scaling groups), prints the proposal.
fn from_cluster_autoscaler(args: FromClusterAutoscaler) -> anyhow::Result<ExitCode> {
    use super::aws::given;
    use karpenter_core::migration::cluster_autoscaler::{
        ProposeContext, node_groups_with, propose,
    };
    let connection = match args.cloud {
        Some(Cloud::Aws) => {
            let region = given(&args.region)
                .context("--cloud aws needs a region: set AWS_REGION or --aws-region")?;
            Some(super::aws::connection(
                &region,
                given(&args.aws_endpoint).as_deref(),
            )?)
        }
        None => {
            if given(&args.aws_endpoint).is_some() {
                anyhow::bail!("--aws-endpoint needs --cloud aws");
            }
            None
        }
    };
    let (nodes, asgs) = runtime()?.block_on(async {
        let client = karpenter_rs::kube::controller::connect(
            args.kubeconfig.as_deref(),
            args.context.as_deref(),
            Default::default(),
        )
        .await?;
        let nodes = karpenter_rs::kube::migrate::nodes(&client).await?;
        let asgs = match &connection {
            Some(connection) => karpenter_aws::autoscaling::AutoScalingReader::connect(connection)
                .await
                .groups()
                .await
                .with_context(|| {
                    format!(
                        "cannot read the Auto Scaling groups of {} (the reader needs {})",
                        connection.region,
                        karpenter_aws::autoscaling::READ_PERMISSIONS.join(", ")
                    )
                })?,
            None => Vec::new(),
        };
        anyhow::Ok((nodes, asgs))
    })?;
    let found = node_groups_with(&nodes, &asgs, &args.cluster_name);
    if connection.is_some() {
        eprintln!(
            "read {} Auto Scaling group(s); {} of them neither tagged for cluster {} nor holding one of its nodes{}",
            asgs.len(),
            found.other_asgs.len(),
            args.cluster_name,
            if found.other_asgs.is_empty() {
                String::new()
            } else {
                format!(", left out: {}", found.other_asgs.join(", "))
            }
        );
    }
    if found.groups.is_empty() {
        anyhow::bail!(
            "no node group found among {} Node(s){}: nothing to cover",
            nodes.len(),
            if connection.is_some() {
                format!(
                    " and the Auto Scaling groups of cluster {}",
                    args.cluster_name
                )
            } else {
                String::new()
            }
        );
    }
    let catalog = karpenter_core::model::catalog::Catalog::embedded()
        .context("embedded instance-type catalog")?;
    let proposal = propose(
        &found.groups,
        &ProposeContext {
            cluster: &args.cluster_name,
            instance_types: catalog.infos(),
        },
    );
    for group in &proposal.groups {
        eprintln!("{}", group_line(group));
    }
    for line in &proposal.manual {
        eprintln!("CHECK: {line}");
    }
    eprintln!(
        "then: apply these, scale Cluster Autoscaler to 0, and drain the groups' nodes a few at a time (their pods move to karpenter-rs's nodes); set each group's minimum size to 0 once drained"
    );
    for doc in &proposal.documents {
        print!(
            "---\n{}",
            serde_yaml_ng::to_string(doc).context("cannot render YAML")?
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One node group, as the summary on stderr shows it.
fn group_line(group: &karpenter_core::migration::cluster_autoscaler::NodeGroup) -> String {
    let join = |set: &std::collections::BTreeSet<String>| {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    };
    let mut line = format!(
        "node group {} ({:?}): {} node(s), {} in {}",
        group.name,
        group.source,
        group.nodes.len(),
        join(&group.instance_types),
        join(&group.zones),
    );
    if !group.asgs.is_empty() {
        let names: Vec<&str> = group.asgs.iter().map(|a| a.name.as_str()).collect();
        let max: i64 = group.asgs.iter().map(|a| a.max_size).sum();
        line.push_str(&format!(
            "; Auto Scaling group {} (max {max})",
            names.join(", ")
        ));
    }
    line
}
