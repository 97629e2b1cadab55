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
    /// its Nodes: each group's instance families (any size), zones, capacity type,
    /// architecture and OS, keeping its custom labels and taints. Prints them as YAML on
    /// stdout, the groups and what to check on stderr. Only reads the cluster.
    FromClusterAutoscaler {
        /// The EKS cluster's name, for the selector tags and node role the EC2NodeClasses name.
        #[arg(long, value_name = "NAME")]
        cluster_name: String,
        /// Kubeconfig (default: KUBECONFIG, ~/.kube/config, or in-cluster).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context (default: the current one).
        #[arg(long)]
        context: Option<String>,
    },
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
                )
                .await?;
                karpenter_rs::kube::migrate::plan_from_karpenter(&client).await
            })?;
            print!("{}", plan.render());
            Ok(ExitCode::SUCCESS)
        }
        MigrateCommand::FromClusterAutoscaler {
            cluster_name,
            kubeconfig,
            context,
        } => {
            use karpenter_core::migration::cluster_autoscaler::{node_groups, propose};
            let nodes = runtime()?.block_on(async {
                let client = karpenter_rs::kube::controller::connect(
                    kubeconfig.as_deref(),
                    context.as_deref(),
                )
                .await?;
                karpenter_rs::kube::migrate::nodes(&client).await
            })?;
            let groups = node_groups(&nodes);
            if groups.is_empty() {
                anyhow::bail!(
                    "no node group found among {} Node(s): nothing to cover",
                    nodes.len()
                );
            }
            let proposal = propose(&groups, &cluster_name);
            for group in &proposal.groups {
                eprintln!(
                    "node group {} ({:?}): {} node(s), {} in {}",
                    group.name,
                    group.source,
                    group.nodes.len(),
                    group
                        .instance_types
                        .iter()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                    group.zones.iter().cloned().collect::<Vec<_>>().join(", ")
                );
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
    }
}
